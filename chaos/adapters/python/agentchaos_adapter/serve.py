"""The serve loop: protocol version 1 (chaos/PROTOCOL.md) over a `Store`.

One JSON request per stdin line, one JSON reply per stdout line, flushed
before the next request is read; nothing else ever goes to stdout. Every
request is checked against the schema first (`bad_request`, naming the
field). A `StoreError` a store raises is its `error` reply; any other
exception is a bug: one line on stderr naming it and where, exit code 2,
and the harness reports the adapter's death as a protocol error.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import traceback
from datetime import datetime, timezone
from typing import Any, BinaryIO

from . import schema
from .errors import NOTHING_WRITTEN, BadRequest, Damaged, Exists, Invalid, IoFailed, NotFound, StoreError, Unsupported
from .model import Broken, Model
from .store import Record, Store, unbacked_claims

PROTOCOL = 1
MAX_SESSION_ID = 128


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def check_session_id(session: str) -> None:
    """`invalid` unless `session` is 1 to 128 bytes of ASCII letters,
    digits, '-', '_' and '.', not starting with '.'."""

    def bad(why: str) -> Invalid:
        return Invalid(f"invalid session id {session!r}: {why}")

    if not 1 <= len(session.encode()) <= MAX_SESSION_ID:
        raise bad("must be 1 to 128 bytes")
    if session.startswith("."):
        raise bad("must not start with '.'")
    if not all(c.isascii() and (c.isalnum() or c in "-_.") for c in session):
        raise bad("only ASCII letters, digits, '-', '_' and '.' are allowed")


def fold(records: list[Any], model: Model, where: str) -> None:
    """Folds loaded records into `model`; `Damaged` unless they are
    `{seq, ts, event}` numbered 0..n-1 with events that fit the schema."""
    for i, r in enumerate(records):
        if not (isinstance(r, dict) and isinstance(r.get("seq"), int) and isinstance(r.get("event"), dict)):
            raise Damaged(f"{where}: record {i} is not {{seq, ts, event}}")
        if r["seq"] != i:
            raise Damaged(f"{where}: records are not numbered 0..{len(records) - 1}: seq {r['seq']} at position {i}")
        try:
            schema.check_event(r["event"])
        except schema.BadShape as e:
            raise Damaged(f"{where}: record {i}: {e}") from e
        try:
            model.apply(r)
        except Broken as e:
            raise Damaged(f"{where}: {e}") from e
    if records and records[0]["event"]["type"] != "session_created":
        raise Damaged(f"{where}: record 0 is not session_created")


class Server:
    """Dispatches requests that fit the schema to one `Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.open = False
        self.broken: str | None = None

    @property
    def model(self) -> Model:
        if not self.open:
            raise BadRequest("no session is open (send open first)")
        if self.broken is not None:
            raise IoFailed(f"the session is unusable after a failed write ({self.broken}); close and open it again")
        return self.store.model

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
                schema.check_request(req)
            except schema.BadShape as e:
                raise BadRequest(str(e)) from e
            body = {"ok": self.dispatch(req)}
        except StoreError as e:
            body = {"error": {"kind": e.kind, "message": e.message}}
        except OSError as e:
            body = {"error": {"kind": "io", "message": " ".join(str(e).split())}}
        head = json.dumps(req_id)
        rest = json.dumps(body, separators=(",", ":"))
        return f'{{"id":{head},{rest[1:]}\n'.encode("ascii")

    # ---- writing -----------------------------------------------------------

    def write(self, events: list[dict[str, Any]]) -> list[int]:
        """Checks `events` against the current state (they must not depend
        on each other), has the store make them durable, then folds them."""
        model = self.model
        records: list[Record] = []
        for i, ev in enumerate(events):
            model.check(ev)
            records.append({"seq": model.next_seq + i, "ts": _now(), "event": ev})
        try:
            self.store.write(records)
        except StoreError as e:
            if e.kind not in NOTHING_WRITTEN:
                self.broken = e.message  # it may or may not be on disk: never go on from a guess
            raise
        except OSError as e:
            self.broken = " ".join(str(e).split())
            raise IoFailed(f"write: {self.broken}") from e
        for r in records:
            model.apply(r)
        return [r["seq"] for r in records]

    # ---- operations --------------------------------------------------------

    def dispatch(self, req: dict[str, Any]) -> Any:
        """Serves a request that fits the schema."""
        op = req["op"]
        if op == "hello":
            if req["protocol"] != PROTOCOL:
                raise Unsupported(f"this adapter speaks protocol {PROTOCOL}, not {req['protocol']}")
            hello: dict[str, Any] = {"name": self.store.name}
            if self.store.version is not None:
                hello["version"] = self.store.version
            return {**hello, "protocol": PROTOCOL, "capabilities": self.store.capabilities()}
        if op == "open":
            return self.op_open(req["root"], req["session"], req.get("workspace"), req["create"])
        if op == "append":
            if req["event"]["type"] == "tool_started":
                raise BadRequest("tool_started is the intent: send start_tool, not append")
            (seq,) = self.write([req["event"]])
            return {"seq": seq, "id": f"e{seq}"}
        if op == "start_tool":
            (seq,) = self.write([{"type": "tool_started", "call_id": req["call_id"]}])
            return {"seq": seq, "id": f"e{seq}", "operation_id": self.model.calls[req["call_id"]].operation_id}
        if op == "recover":
            marks = self.model.recovery_marks(self.store.recovery_phase)
            if marks:
                self.write(marks)
            model = self.model
            return {"interrupted_runs": list(model.interrupted), "uncertain": model.uncertain(), "appended": len(marks)}
        if op == "events":
            _ = self.model  # refuses without an open, usable session
            records = self.store.read(req.get("after"), req.get("limit"))
            return {"records": [{**r, "id": f"e{r['seq']}"} for r in records]}
        if op == "context":
            return {"text": self.model.context(req.get("budget"))}
        if op == "projection":
            return self.model.projection()
        if op == "checkpoint":
            _ = self.model
            self.store.checkpoint()
            return {"next_seq": self.model.next_seq}
        if op == "put_blob":
            _ = self.model
            try:
                data = bytes.fromhex(req["hex"])
            except ValueError as e:
                raise BadRequest(f"put_blob: hex: {e}") from e
            digest = hashlib.sha256(data).hexdigest()
            self.store.put_blob(digest, data)
            return {"digest": digest, "size": len(data)}
        if op == "get_blob":
            _ = self.model
            digest, size = req["digest"], req["size"]
            data = self.store.get_blob(digest, size)
            if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                raise Damaged(f"blob {digest}: the stored bytes do not match their reference")
            return {"hex": data.hex()}
        if op == "close":
            if not self.open:
                raise BadRequest("no session is open (send open first)")
            self.close()  # also after a failed write: that is how to recover from one
            return {}
        raise Unsupported(f"{op} is not supported by this adapter")

    def op_open(self, root: str, session: str, workspace: str | None, create: bool) -> dict[str, Any]:
        if self.open:
            raise BadRequest("a session is already open; close it first")
        if create and workspace is None:
            raise BadRequest("open with create needs a workspace")
        check_session_id(session)
        store = self.store
        store.model = store.model_class()
        try:
            records = store.open(root, session, create)
        except BaseException:
            store.close()
            raise
        self.open, self.broken = True, None
        try:
            if create:
                if records:
                    raise Exists(f"session {session!r} already exists in {root}")
                assert workspace is not None
                ws = os.path.abspath(workspace)
                self.write([{"type": "session_created", "session_id": session, "schema_version": 1, "workspace": ws}])
            else:
                if not records:
                    raise NotFound(f"no session {session!r} in {root}")
                fold(records, store.model, f"session {session!r}")
                self.bind(session, workspace)
        except BaseException:
            self.close()
            raise
        return {"next_seq": store.model.next_seq}

    def bind(self, session: str, workspace: str | None) -> None:
        recorded = self.model.workspace or ""
        if workspace is not None:
            to = os.path.abspath(workspace)
            if to != recorded:
                if not os.path.isdir(to):
                    raise Invalid(f"cannot rebind session {session!r} to {to}: not a directory")
                self.write([{"type": "workspace_rebound", "from": recorded, "to": to}])
        elif not os.path.isdir(recorded):
            raise Invalid(
                f"the workspace of session {session!r} has moved: {recorded} no longer exists; "
                "open it with the new workspace"
            )

    def close(self) -> None:
        self.open = False
        self.store.close()


def serve(store: Store, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serves `store` until stdin ends; returns the exit code:
    `sys.exit(serve(MyStore()))`."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    unknown = [c for c in store.capabilities() if c not in schema.CAPABILITIES]
    unbacked = unbacked_claims(store)
    if unknown or unbacked:
        problems = [f"unknown capability {c!r}" for c in unknown] + [f"claims {c}" for c in unbacked]
        print(f"{store.name} adapter: {'; '.join(problems)}", file=sys.stderr)
        return 2
    server = Server(store)
    for line in stdin:
        try:
            reply = server.handle(line.rstrip(b"\r\n"))
        except Exception as e:
            # A bug, not an answer: one line on stderr, and the harness sees
            # the adapter end (a protocol error quoting this line).
            frame = traceback.extract_tb(e.__traceback__)[-1]
            where = f"{frame.filename}:{frame.lineno}"
            print(f"{store.name} adapter: internal error ({type(e).__name__}: {e}) at {where}", file=sys.stderr)
            return 2
        stdout.write(reply)
        stdout.flush()
    if server.open:
        server.close()
    return 0
