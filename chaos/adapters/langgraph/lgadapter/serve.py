"""The agentchaos adapter protocol, version 1 (chaos/PROTOCOL.md), over a
`ThreadStore`: one JSON request per stdin line, one JSON reply per stdout
line, flushed before the next request is read.

Owns the wire shapes, the mapping of refusals to error kinds, and what is
claimed in `hello`. It must never reply to `append` or `start_tool` before
the saver committed, and never write anything but replies to stdout.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import traceback
from importlib import metadata
from typing import Any, BinaryIO, Callable

from .model import Call, Rule
from .schema import BadShape, check_request
from .store import StoreError, ThreadStore, wal_synchronous

PROTOCOL = 1

# How `recover` gives each call without a result its phase.
RECOVERY_MODES: dict[str, Callable[[Call], str]] = {
    # From what LangGraph persisted: the commit write, else the intent
    # write, else nothing.
    "phases": lambda call: call.phase(),
    # What a stock LangGraph graph acts on: a node without its result runs
    # again, whatever it wrote; there is no other phase.
    "rerun": lambda call: "requested",
}


class BadRequest(Exception):
    """The request does not fit the protocol."""


def capabilities() -> list[str]:
    """What this store keeps. `durable_append` only if the sqlite library
    commits a WAL transaction with an fsync (synchronous FULL or EXTRA):
    SqliteSaver leaves `synchronous` at the library default. Never claimed:
    `torn_tail_repair` (SQLite discards a torn WAL frame itself; nothing
    reaches the store), `damage_refusal` (no checksums on rows), and
    `effect_ledger` (LangGraph keeps no ledger of side effects)."""
    caps = ["durable_append"] if wal_synchronous() >= 2 else []
    return caps + ["orphan_marking", "checkpoint_projection", "branches", "compaction"]


def _versions() -> str:
    names = ("langgraph-checkpoint-sqlite", "langgraph-checkpoint")
    parts = [f"{n} {metadata.version(n)}" for n in names]
    return ", ".join(parts + [f"sqlite {sqlite3.sqlite_version}"])


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Server:
    def __init__(self, recovery: str) -> None:
        self.recovery = recovery
        self.store: ThreadStore | None = None

    def _open_store(self) -> ThreadStore:
        if self.store is None:
            raise BadRequest("no session is open (send open first)")
        return self.store

    def handle(self, line: bytes) -> bytes:
        """The reply line (with its newline) to one request line."""
        req_id: Any = None
        try:
            try:
                req = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
            except ValueError as e:  # UnicodeDecodeError is one too
                raise BadRequest(f"request is not JSON: {e}") from e
            if isinstance(req, dict):
                req_id = req.get("id")
            try:
                check_request(req)
            except BadShape as e:
                raise BadRequest(str(e)) from e
            body = {"ok": self.dispatch(req)}
        except BadRequest as e:
            body = {"error": {"kind": "bad_request", "message": str(e)}}
        except Rule as e:
            body = {"error": {"kind": "rule", "message": f"rule violated: {e}"}}
        except StoreError as e:
            body = {"error": {"kind": e.kind, "message": e.message}}
        head = json.dumps(req_id)
        rest = json.dumps(body, separators=(",", ":"))
        return f'{{"id":{head},{rest[1:]}\n'.encode("ascii")

    def dispatch(self, req: dict[str, Any]) -> Any:
        """Serves a request that fits the schema (`check_request`)."""
        op = req["op"]
        if op == "hello":
            protocol = req["protocol"]
            if protocol != PROTOCOL:
                raise StoreError("unsupported", f"this adapter speaks protocol {PROTOCOL}, not {protocol}")
            return {
                "name": "langgraph-checkpoint-sqlite",
                "version": f"{_versions()}; recovery {self.recovery}",
                "protocol": PROTOCOL,
                "capabilities": capabilities(),
            }
        if op == "open":
            root, session, create = req["root"], req["session"], req["create"]
            workspace = req.get("workspace")
            if self.store is not None:
                raise BadRequest("a session is already open; close it first")
            if create:
                if workspace is None:
                    raise BadRequest("open with create needs a workspace")
                self.store = ThreadStore.create(root, session, workspace)
            else:
                self.store = ThreadStore.open(root, session, workspace)
            return {"next_seq": self.store.model.next_seq}
        if op == "append":
            event = req["event"]
            if event["type"] == "tool_started":
                raise BadRequest("tool_started is the intent: send start_tool, not append")
            seq = self._open_store().append(event)
            return {"seq": seq, "id": f"e{seq}"}
        if op == "start_tool":
            call_id = req["call_id"]
            seq, operation_id = self._open_store().start_tool(call_id)
            return {"seq": seq, "id": f"e{seq}", "operation_id": operation_id}
        if op == "recover":
            store = self._open_store()
            appended = store.recover(RECOVERY_MODES[self.recovery])
            return {
                "interrupted_runs": list(store.model.interrupted),
                "uncertain": store.model.uncertain(),
                "appended": appended,
            }
        if op == "events":
            after, limit = req.get("after"), req.get("limit")
            records = self._open_store().read_records(after, limit)
            return {"records": [{**r, "id": f"e{r['seq']}"} for r in records]}
        if op == "context":
            budget = req.get("budget")
            return {"text": self._open_store().model.context(budget)}
        if op == "checkpoint":
            return {"next_seq": self._open_store().checkpoint()}
        if op == "projection":
            return self._open_store().model.projection()
        if op == "close":
            self._open_store().close()
            self.store = None
            return {}
        # put_blob and get_blob: `blobs` is not claimed.
        raise StoreError("unsupported", f"{op} is not supported by this store")


def serve(stdin: BinaryIO, stdout: BinaryIO, recovery: str) -> int:
    """Serves until stdin ends; returns the exit code."""
    server = Server(recovery)
    for line in stdin:
        try:
            reply = server.handle(line.rstrip(b"\r\n"))
        except Exception as e:
            # A bug, not an answer: one line on stderr, and the harness sees
            # the adapter end (a protocol error quoting this line).
            frame = traceback.extract_tb(e.__traceback__)[-1]
            where = f"{frame.filename}:{frame.lineno}"
            print(f"langgraph adapter: internal error ({type(e).__name__}: {e}) at {where}", file=sys.stderr)
            return 2
        stdout.write(reply)
        stdout.flush()
    if server.store is not None:
        server.store.close()
    return 0
