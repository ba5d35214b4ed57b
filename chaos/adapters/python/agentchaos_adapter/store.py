"""`Store`: what an adapter author subclasses.

A store keeps one session's records durably; the kit does the rest of the
protocol (chaos/PROTOCOL.md): framing, validation against the schema, the
session rules, `session_created` and `workspace_rebound`, recovery marks,
`projection` and `context` (all from `Model`, the fold of the records).

A record is `{"seq": int, "ts": str | None, "event": dict}`; seq 0 is
`session_created`, then 1, 2, … without gaps. Two methods are required:

- `open(root, session, create)`: open (with `create`, create if missing)
  the session's storage and return its records in seq order, `[]` for a
  session that does not exist or whose creation a crash interrupted.
  Raise `Locked` if another writer holds it, `Damaged` if it does not load.
  The kit answers `exists`/`not_found` itself and calls `close` then.
- `write(records)`: make these records durable, in this order, after the
  ones before them, and only then return. One call may carry several
  records (recovery writes its marks in one call; a pipelined batch of the
  harness's parallel appends is one call too). Raise `IoFailed` (an
  `OSError` is mapped to it) if that is not certain: the kit then refuses
  every request until the session is opened again. A refusal before
  anything was written (`Invalid`, `RuleViolated`) keeps the session usable.

Everything else has a default that claims nothing: `checkpoint` and the
blobs answer `unsupported`, `read` serves the records from memory, and
`claims` is empty. Claim a capability only if the store keeps it; the kit
refuses to start when a claim needs a method that was not overridden.
"""

from __future__ import annotations

from typing import Any

from .errors import Unsupported
from .model import Call, Model

Record = dict[str, Any]


class Store:
    """One adapter process's store; at most one session open at a time."""

    name = "python-store"
    version: str | None = None
    # Capability names (chaos/PROTOCOL.md, section 2) this store keeps.
    claims: tuple[str, ...] = ()
    # Whether the kit may serve it as a fork server (protocol version 2):
    # False for a store whose imports or constructor start threads or open
    # handles a forked child must not share; it is then served as version 1
    # (a process per life and per observation).
    forkable = True
    # Whether `hello` says `pipeline` (chaos/PROTOCOL.md, section 10): the
    # requests of a parallel group then reach `write` as one call, which a
    # store that syncs once per call commits as one group.
    pipeline = True
    # The fold the kit keeps; subclass `Model` to relax or reword it.
    model_class: type[Model] = Model
    # The open session's fold, set by the kit: the records before the ones
    # being written.
    model: Model

    def capabilities(self) -> list[str]:
        """What `hello` claims; `claims` unless overridden."""
        return list(self.claims)

    def open(self, root: str, session: str, create: bool) -> list[Record]:
        raise NotImplementedError

    def write(self, records: list[Record]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Releases the session (and its lock). Also called after a refused `open`."""

    def read(self, after: int | None, limit: int | None) -> list[Record]:
        """The records after seq `after` (all if None), at most `limit`.
        Override to serve them from storage rather than from memory."""
        start = 0 if after is None else after + 1
        records = self.model.records[start:]
        return records if limit is None else records[:limit]

    def recovery_phase(self, call: Call) -> str:
        """The phase `recover` marks a call without a result with: how far
        it got by its durable events."""
        return call.phase()

    def checkpoint(self) -> None:
        """Writes whatever makes resuming faster (claim `checkpoint_projection`)."""
        raise Unsupported("checkpoint is not supported by this store")

    def put_blob(self, digest: str, data: bytes) -> None:
        """Stores `data` under its SHA-256 `digest`, durably (claim `blobs`)."""
        raise Unsupported("put_blob is not supported by this store")

    def get_blob(self, digest: str, size: int) -> bytes:
        """The bytes stored under `digest`; `NotFound` if there are none."""
        raise Unsupported("get_blob is not supported by this store")


# What a claim needs the store to have overridden.
NEEDS = {"checkpoint_projection": ("checkpoint",), "blobs": ("put_blob", "get_blob")}


def unbacked_claims(store: Store) -> list[str]:
    """Claims whose methods are still the defaults that refuse."""
    out = []
    for claim, methods in NEEDS.items():
        if claim in store.capabilities():
            missing = [m for m in methods if getattr(type(store), m) is getattr(Store, m)]
            if missing:
                out.append(f"{claim} (needs {', '.join(missing)})")
    return out
