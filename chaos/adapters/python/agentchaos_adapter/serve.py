"""The serve loop: protocol versions 1 and 2 (chaos/PROTOCOL.md) over a `Store`.

One JSON request per stdin line, one JSON reply per stdout line, flushed
before the next request is read; nothing else ever goes to stdout (the
wire, `wire.py`: what the store prints goes to stderr). Every
request is checked against the schema first (`bad_request`, naming the
field). A `StoreError` a store raises is its `error` reply; any other
exception is a bug: one line on stderr naming it and where, exit code 2,
and the harness reports the adapter's death as a protocol error.

Version 2 adds the fork server (PROTOCOL.md, section 8): when stdin is a
Unix socket and the harness says `hello` 2, this process answers
`fork: true` and serves `fork` (a fresh adapter process per request, on the
three descriptors sent with it, forked from this process's memory: the
imports are done, no session was ever opened here) and `reap`. A process
that has opened a session never forks, and a forked process never forks
again: a child must start from a state no session has touched.

Either version takes pipelined batches (PROTOCOL.md, section 10): the
`append` and `start_tool` requests of a batch are held until its last one
is read, checked in order against the session as the earlier ones of the
batch leave it, and written with one `Store.write` call, so a store that
makes one call durable with one sync commits the whole group with it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import socket
import stat
import sys
import traceback
from datetime import datetime, timezone
from typing import Any, BinaryIO

from . import schema, wire
from .errors import NOTHING_WRITTEN, BadRequest, Damaged, Exists, Invalid, IoFailed, NotFound, StoreError, Unsupported
from .model import Broken, Model
from .store import Record, Store, unbacked_claims

PROTOCOL = 1
FORK_PROTOCOL = 2
PROTOCOLS = (PROTOCOL, FORK_PROTOCOL)
MAX_SESSION_ID = 128
PR_SET_PDEATHSIG = 1


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


class ForkedChild(BaseException):
    """Raised in a child `fork` made, to leave the server's loop: the child
    serves on `fds` (stdin, stdout, stderr) from a fresh `Server`."""

    def __init__(self, fds: list[int]) -> None:
        super().__init__("forked")
        self.fds = fds


def _die_with_parent() -> Any:
    """A function the forked child calls first: SIGKILL when the server dies
    (prctl through ctypes; loaded here, in the server, once)."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        prctl = None
    parent = os.getpid()

    def arm() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the server died before the prctl took effect
            os._exit(1)

    return arm


class Server:
    """Dispatches requests that fit the schema to one `Store`."""

    def __init__(self, store: Store, can_fork: bool = False) -> None:
        self.store = store
        self.open = False
        self.broken: str | None = None
        # A fork server: stdin is a Unix socket and no session was ever opened.
        self.can_fork = can_fork
        self.children: set[int] = set()
        self.fds: list[int] = []
        self.arm_child: Any = None
        # The pipelined batch read so far: (id, request) in request order.
        self.batch: list[tuple[Any, dict[str, Any]]] = []

    @property
    def model(self) -> Model:
        if not self.open:
            raise BadRequest("no session is open (send open first)")
        if self.broken is not None:
            raise IoFailed(f"the session is unusable after a failed write ({self.broken}); close and open it again")
        return self.store.model

    def handle(self, line: bytes, fds: list[int] | None = None) -> bytes:
        """The reply line (with its newline) to one request line; `fds` are
        the descriptors that came with it (only `fork` takes any)."""
        self.fds = list(fds or [])
        try:
            return self._handle(line)
        finally:
            for fd in self.fds:  # not taken by a fork
                os.close(fd)
            self.fds = []

    def _handle(self, line: bytes) -> bytes:
        """The reply lines owed once `line` is read: none inside a
        pipelined batch, all of the batch once its last request is read."""
        req_id: Any = None
        before = b""
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
            more = req.get("more", False)
            if req["op"] in ("append", "start_tool") and (more or self.batch):
                self.batch.append((req_id, req))
                return b"" if more else self.end_batch()
            before = self.end_batch()  # a batch the harness left open
            if more:
                raise BadRequest(f"{req['op']}: only append and start_tool are pipelined (\"more\"); not served")
            body = {"ok": self.dispatch(req)}
        except StoreError as e:
            body = _refusal(e)
        except OSError as e:
            body = {"error": {"kind": "io", "message": " ".join(str(e).split())}}
        return before + _reply(req_id, body)

    def end_batch(self) -> bytes:
        """Answers the pipelined batch read so far, in request order: each
        event checked against the session as the batch's earlier accepted
        ones leave it, the accepted ones written with one `Store.write`."""
        batch, self.batch = self.batch, []
        if not batch:
            return b""
        bodies: list[dict[str, Any] | None] = [None] * len(batch)
        try:
            model = self.model
            # The earlier events of the batch are not durable yet: each is
            # checked against a copy that has them, the session's own fold
            # takes them once the store has written them.
            ahead = copy.deepcopy(model) if len(batch) > 1 else model
            accepted: list[tuple[int, Record]] = []
            for i, (_, req) in enumerate(batch):
                try:
                    ev = _batched_event(req)
                    ahead.check(ev)
                except StoreError as e:
                    bodies[i] = _refusal(e)
                    continue
                record = {"seq": ahead.next_seq, "ts": _now(), "event": ev}
                if ahead is not model:
                    ahead.apply(record)
                accepted.append((i, record))
            if accepted:
                self.durable([r for _, r in accepted])
            for i, record in accepted:
                seq = record["seq"]
                ok: dict[str, Any] = {"seq": seq, "id": f"e{seq}"}
                if batch[i][1]["op"] == "start_tool":
                    ok["operation_id"] = self.model.calls[batch[i][1]["call_id"]].operation_id
                bodies[i] = {"ok": ok}
        except StoreError as e:
            bodies = [b if b is not None else _refusal(e) for b in bodies]
        except OSError as e:
            io = {"error": {"kind": "io", "message": " ".join(str(e).split())}}
            bodies = [b if b is not None else io for b in bodies]
        return b"".join(_reply(req_id, body) for (req_id, _), body in zip(batch, bodies) if body is not None)

    # ---- writing -----------------------------------------------------------

    def write(self, events: list[dict[str, Any]]) -> list[int]:
        """Checks `events` against the current state (they must not depend
        on each other), has the store make them durable, then folds them."""
        model = self.model
        records: list[Record] = []
        for i, ev in enumerate(events):
            model.check(ev)
            records.append({"seq": model.next_seq + i, "ts": _now(), "event": ev})
        self.durable(records)
        return [r["seq"] for r in records]

    def durable(self, records: list[Record]) -> None:
        """Has the store make `records` durable, then folds them; a failure
        that may have left some on disk makes the session unusable."""
        model = self.model
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

    # ---- operations --------------------------------------------------------

    def dispatch(self, req: dict[str, Any]) -> Any:
        """Serves a request that fits the schema."""
        op = req["op"]
        if op == "hello":
            version = req["protocol"]
            if version not in PROTOCOLS:
                raise Unsupported(f"this adapter speaks protocols {PROTOCOL} and {FORK_PROTOCOL}, not {version}")
            hello: dict[str, Any] = {"name": self.store.name}
            if self.store.version is not None:
                hello["version"] = self.store.version
            hello.update(protocol=version, capabilities=self.store.capabilities())
            if version == FORK_PROTOCOL and self.can_fork:
                hello["fork"] = True
            if self.store.pipeline:
                hello["pipeline"] = True
            return hello
        if op == "fork":
            return self.op_fork()
        if op == "reap":
            pid = req["pid"]
            if pid not in self.children:
                raise BadRequest(f"reap: pid {pid} is not a process this server forked and has not reaped")
            _, status = os.waitpid(pid, 0)
            self.children.discard(pid)
            return {"status": status}
        if op == "open":
            if req.get("lease") is not None:
                # The kit keeps no lease record (chaos/PROTOCOL.md, section 9).
                raise Unsupported("open with a lease: this store does not claim `lease`")
            return self.op_open(req["root"], req["session"], req.get("workspace"), req["create"])
        if op == "append":
            (seq,) = self.write([_batched_event(req)])
            return {"seq": seq, "id": f"e{seq}"}
        if op == "start_tool":
            (seq,) = self.write([_batched_event(req)])
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

    def op_fork(self) -> dict[str, Any]:
        if not self.can_fork:
            raise Unsupported(
                "fork: this process is not a fork server (its stdin is not a Unix socket, it was "
                "forked itself, or it has opened a session)"
            )
        if len(self.fds) != 3:
            raise BadRequest(f"fork needs 3 descriptors sent with it (stdin, stdout, stderr), got {len(self.fds)}")
        if self.arm_child is None:
            self.arm_child = _die_with_parent()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.arm_child()
            fds, self.fds = self.fds, []
            raise ForkedChild(fds)
        self.children.add(pid)
        # The child makes itself a group leader too; doing it here as well
        # means its group exists before the harness learns its pid.
        try:
            os.setpgid(pid, pid)
        except OSError:  # the child got there first (EACCES) or died
            pass
        return {"pid": pid}

    def kill_children(self) -> None:
        """SIGKILL and reap every forked process not reaped yet."""
        for pid in sorted(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.children.clear()

    def op_open(self, root: str, session: str, workspace: str | None, create: bool) -> dict[str, Any]:
        if self.open:
            raise BadRequest("a session is already open; close it first")
        self.can_fork = False  # a child must never start from a session's state
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


class _SocketLines:
    """Request lines from a Unix socket, each with the descriptors that came
    with it (one request at a time, so the descriptors read while a line
    arrives are that line's)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.fds: list[int] = []

    def __iter__(self) -> Any:
        while True:
            while b"\n" not in self.buf:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 8)
                self.fds.extend(fds)
                if not data:
                    if self.buf:
                        yield self.take(self.buf)
                    for fd in self.fds:
                        os.close(fd)
                    return
                self.buf += data
            line, _, self.buf = self.buf.partition(b"\n")
            yield self.take(line)

    def take(self, line: bytes) -> tuple[bytes, list[int]]:
        fds, self.fds = self.fds, []
        return line, fds


def _stdin_socket(stdin: BinaryIO) -> socket.socket | None:
    """The socket on fd 0 when `stdin` is the process's stdin and a Unix socket."""
    try:
        if stdin.fileno() != 0 or not stat.S_ISSOCK(os.fstat(0).st_mode):
            return None
        return socket.socket(fileno=0)
    except (OSError, ValueError, AttributeError):
        return None


def _become_child(fds: list[int], control: socket.socket | None) -> tuple[BinaryIO, BinaryIO]:
    """In a forked child: its own process group, the three descriptors as
    stdin, the wire and stderr (fd 1 too), the server's socket closed."""
    os.setpgid(0, 0)
    if control is not None:
        control.detach()
    in_fd, out_fd, err_fd = fds
    os.dup2(in_fd, 0)
    wire.rebind(out_fd, err_fd)
    for fd in fds:
        os.close(fd)
    return open(0, "rb", closefd=False), wire.out()


def serve(store: Store, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serves `store` until stdin ends; returns the exit code:
    `sys.exit(serve(MyStore()))`. On a Unix socket as stdin, it is also a
    fork server (protocol version 2)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or wire.out()
    wire.quiet_logging()
    unknown = [c for c in store.capabilities() if c not in schema.CAPABILITIES]
    unbacked = unbacked_claims(store)
    if unknown or unbacked:
        problems = [f"unknown capability {c!r}" for c in unknown] + [f"claims {c}" for c in unbacked]
        print(f"{store.name} adapter: {'; '.join(problems)}", file=sys.stderr)
        return 2
    control = _stdin_socket(stdin) if store.forkable else None
    lines: Any = _SocketLines(control) if control is not None else ((line, []) for line in stdin)
    server = Server(store, can_fork=control is not None)
    try:
        return _loop(server, lines, stdout)
    except ForkedChild as child:
        server.children.clear()  # the siblings are the server's, never this child's
        stdin, stdout = _become_child(child.fds, control)
        code = _loop(Server(store), ((line, []) for line in stdin), stdout)
        # The interpreter's finalization (and the author's atexit handlers)
        # belong to the server: a child ends here, its session closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    finally:
        if server.children:
            server.kill_children()


def _batched_event(req: dict[str, Any]) -> dict[str, Any]:
    """The event an `append` or `start_tool` request writes."""
    if req["op"] == "start_tool":
        return {"type": "tool_started", "call_id": req["call_id"]}
    if req["event"]["type"] == "tool_started":
        raise BadRequest("tool_started is the intent: send start_tool, not append")
    return req["event"]


def _refusal(e: StoreError) -> dict[str, Any]:
    return {"error": {"kind": e.kind, "message": e.message}}


def _reply(req_id: Any, body: dict[str, Any]) -> bytes:
    """One reply line, newline included."""
    head = json.dumps(req_id)
    rest = json.dumps(body, separators=(",", ":"))
    return f'{{"id":{head},{rest[1:]}\n'.encode("ascii")


def _loop(server: Server, lines: Any, stdout: BinaryIO) -> int:
    for line, fds in lines:
        try:
            reply = server.handle(line.rstrip(b"\r\n"), fds)
        except Exception as e:
            # A bug, not an answer: one line on stderr, and the harness sees
            # the adapter end (a protocol error quoting this line).
            frame = traceback.extract_tb(e.__traceback__)[-1]
            where = f"{frame.filename}:{frame.lineno}"
            print(f"{server.store.name} adapter: internal error ({type(e).__name__}: {e}) at {where}", file=sys.stderr)
            return 2
        if reply:
            stdout.write(reply)
            stdout.flush()
    if server.open:
        server.close()
    return 0
