"""A session as a LangGraph thread, persisted through `SqliteSaver` only.

Layout: one database per root, `ROOT/checkpoints.sqlite`, one thread per
session (`thread_id` = session id, `checkpoint_ns` = ""), as an
application using `SqliteSaver.from_conn_string` would have it. The state
has one channel, `events`: the session's records (`{seq, ts, event}`).

- An event that ends a step (everything but a tool's progress) is a new
  checkpoint (`put`, its parent the thread's head) whose `events` value is
  the whole list so far: the head's records, the pending writes of the head
  applied in seq order (as LangGraph applies a step's writes), then the
  new record.
- A tool's progress (`tool_started`, `effect_committed`, and `tool_result`
  before its step closes) is a pending write (`put_writes`) on the head
  checkpoint, keyed by a task id derived from the head and the call id.
  `put_writes` keys rows by (task_id, idx) and silently ignores a row whose
  key exists, so every call passes the task's whole write list so far: the
  rows already stored are ignored, the new one lands at the next idx.
- Opening reads the head with `get_tuple`: its records plus its pending
  writes, which must number 0..n-1 without a gap.

Nothing is acknowledged before the saver's transaction committed. The
store never writes SQL itself and never changes the saver's PRAGMAs: what
survives a crash is what LangGraph persisted. It must never reply for a
write that failed; after one, the session is unusable until reopened.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import quote

from langgraph.checkpoint.base import LATEST_VERSION
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver

from .model import Broken, Call, Model
from .schema import BadEvent, check_event

DB_NAME = "checkpoints.sqlite"
CHANNEL = "events"
MAX_SESSION_ID = 128
# Events that are a running tool's writes rather than the end of a step.
TOOL_WRITES = frozenset(("tool_started", "effect_committed", "tool_result"))


class StoreError(Exception):
    """A refusal or failure, with its protocol error kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _sqlite_error(doing: str, e: Exception) -> StoreError:
    text = f"sqlite: {doing}: {e}"
    low = str(e).lower()
    if "locked" in low or "busy" in low:
        return StoreError("locked", f"{text} (another process holds the database)")
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return StoreError("damage", text)
    return StoreError("io", text)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def check_session_id(session: str) -> None:
    def bad(why: str) -> StoreError:
        return StoreError("invalid", f"invalid session id {session!r}: {why}")

    if not 1 <= len(session.encode()) <= MAX_SESSION_ID:
        raise bad("must be 1 to 128 bytes")
    if session.startswith("."):
        raise bad("must not start with '.'")
    if not all(c.isascii() and (c.isalnum() or c in "-_.") for c in session):
        raise bad("only ASCII letters, digits, '-', '_' and '.' are allowed")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs_durable(path: str) -> None:
    """Creates `path` and missing parents, each made durable in its parent.
    (The adapter's own directory; the database file is SQLite's business.)"""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    _make_dirs_durable(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        if os.path.isdir(path):
            return  # made by someone else meanwhile
        raise
    _fsync_dir(parent)


def wal_synchronous() -> int:
    """The `synchronous` level a WAL database gets by default from the
    sqlite library Python links (SqliteSaver never sets it): 0 OFF,
    1 NORMAL, 2 FULL, 3 EXTRA."""
    conn = sqlite3.connect(":memory:")
    try:
        options = [row[0] for row in conn.execute("PRAGMA compile_options")]
    finally:
        conn.close()
    for key in ("DEFAULT_WAL_SYNCHRONOUS=", "DEFAULT_SYNCHRONOUS="):
        for opt in options:
            if opt.startswith(key):
                return int(opt[len(key) :])
    return 2  # SQLite's documented default


def _task_id(thread: str, checkpoint_id: str, call_id: str) -> str:
    """Deterministic, like LangGraph's: the same call at the same checkpoint
    is the same task."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"langgraph-task:{thread}/{checkpoint_id}/tools/{call_id}"))


def _task_path(call_id: str) -> str:
    return f"tools|{call_id}"


class ThreadStore:
    """An open session: a connection, its saver, the head, the fold."""

    def __init__(self, conn: sqlite3.Connection, path: str, session: str) -> None:
        self.conn = conn
        self.path = path
        self.saver = SqliteSaver(conn)
        self.session = session
        self.model = Model()
        self.head: dict[str, Any] | None = None  # config of the head checkpoint
        self.step = -2
        self.version: str | None = None  # of the `events` channel at the head
        # The head's pending writes, by task id, in idx order.
        self.pending: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.broken: str | None = None

    # ---- opening -----------------------------------------------------------

    @staticmethod
    def _path(root: str, session: str) -> str:
        check_session_id(session)
        return os.path.join(root, DB_NAME)

    def _thread_config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.session, "checkpoint_ns": ""}}

    @classmethod
    def create(cls, root: str, session: str, workspace: str) -> ThreadStore:
        path = cls._path(root, session)
        try:
            _make_dirs_durable(root)
        except OSError as e:
            raise StoreError("io", f"create directory {root}: {e}") from e
        try:
            conn = sqlite3.connect(path, check_same_thread=False)
        except sqlite3.Error as e:
            raise _sqlite_error(f"open {path}", e) from e
        store = cls(conn, path, session)
        try:
            if store._load():
                raise StoreError("exists", f"session {session!r} already exists in {path}")
            store._step(
                [{"type": "session_created", "session_id": session, "schema_version": 1,
                  "workspace": os.path.abspath(workspace)}],
                source="input",
            )
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open(cls, root: str, session: str, workspace: str | None) -> ThreadStore:
        path = cls._path(root, session)
        missing = StoreError("not_found", f"no session {session!r} in {path}")
        if not os.path.isfile(path):
            raise missing
        try:
            # mode=rw: never create a database on a plain open.
            conn = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, check_same_thread=False)
        except sqlite3.Error as e:
            raise _sqlite_error(f"open {path}", e) from e
        store = cls(conn, path, session)
        try:
            if not store._load():
                raise missing
            store._bind(workspace)
        except BaseException:
            store.close()
            raise
        return store

    def _load(self) -> bool:
        """Reads the head with `get_tuple` and folds it; False if the thread
        has no checkpoint."""
        try:
            head = self.saver.get_tuple(self._thread_config())
        except sqlite3.Error as e:
            raise _sqlite_error(f"{self.path}: read the thread's head", e) from e
        except Exception as e:  # the serializer's errors have no common type
            raise StoreError("damage", f"thread {self.session!r}: head checkpoint does not load: {e}") from e
        if head is None:
            return False
        records, pending = _records_of(head)
        model = Model()
        try:
            for r in records:
                model.apply(r)
        except Broken as e:
            raise StoreError("damage", f"thread {self.session!r}: {e}") from e
        self.model = model
        self.head = head.config
        self.step = int(head.metadata.get("step", -1))
        self.version = head.checkpoint["channel_versions"].get(CHANNEL)
        self.pending = pending
        return True

    def _bind(self, workspace: str | None) -> None:
        recorded = self.model.workspace or ""
        if workspace is not None:
            to = os.path.abspath(workspace)
            if to != recorded:
                if not os.path.isdir(to):
                    raise StoreError("invalid", f"cannot rebind session {self.session!r} to {to}: not a directory")
                self._step([{"type": "workspace_rebound", "from": recorded, "to": to}], source="update")
        elif not os.path.isdir(recorded):
            raise StoreError(
                "invalid",
                f"the workspace of session {self.session!r} has moved: {recorded} no longer exists; "
                "open it with the new workspace",
            )

    # ---- writing -----------------------------------------------------------

    def _usable(self) -> None:
        if self.broken is not None:
            raise StoreError("io", f"the session is unusable after a failed write ({self.broken}); close and open it again")

    def _record(self, event: dict[str, Any], seq: int) -> dict[str, Any]:
        return {"seq": seq, "ts": _now(), "event": event}

    def _write(self, doing: str, write: Callable[[], Any]) -> Any:
        try:
            return write()
        except Exception as e:
            err = _sqlite_error(doing, e) if isinstance(e, sqlite3.Error) else StoreError("io", f"{doing}: {e}")
            # It may or may not be on disk: never go on from a guess.
            self.broken = err.message
            raise err from e

    def _serializable(self, ev: dict[str, Any]) -> None:
        try:
            self.saver.serde.dumps_typed(ev)
        except Exception as e:
            raise StoreError("invalid", f"{ev['type']}: LangGraph's serializer cannot store it: {e}") from e

    def _step(self, events: list[dict[str, Any]], source: str) -> list[int]:
        """Writes `events` (checked against the current state, so they must
        not depend on each other) as one new checkpoint, which also applies
        the head's pending writes; folds them once the saver committed.
        Returns their seqs."""
        self._usable()
        new = []
        for i, ev in enumerate(events):
            self.model.check(ev)
            self._serializable(ev)
            new.append(self._record(ev, self.model.next_seq + i))
        version = self.saver.get_next_version(self.version, None)
        checkpoint = {
            "v": LATEST_VERSION,
            "id": str(uuid6(clock_seq=self.step + 1)),
            "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {CHANNEL: self.model.records + new},
            "channel_versions": {CHANNEL: version},
            "versions_seen": {},
            "updated_channels": [CHANNEL],
        }
        metadata = {"source": source, "step": self.step + 1, "parents": {}}
        config = self.head or self._thread_config()
        config = self._write("put checkpoint", lambda: self.saver.put(config, checkpoint, metadata, {CHANNEL: version}))
        self.head, self.step, self.version, self.pending = config, self.step + 1, version, {}
        for rec in new:
            self.model.apply(rec)
        return [r["seq"] for r in new]

    def _tool_write(self, ev: dict[str, Any]) -> int:
        """Writes a running tool's event as a pending write of its task on
        the head checkpoint; folds it once the saver committed."""
        self._usable()
        self.model.check(ev)
        self._serializable(ev)
        assert self.head is not None
        rec = self._record(ev, self.model.next_seq)
        task = _task_id(self.session, self.head["configurable"]["checkpoint_id"], ev["call_id"])
        writes = self.pending.get(task, []) + [(CHANNEL, rec)]
        head = self.head
        self._write(
            "put_writes",
            lambda: self.saver.put_writes(head, writes, task, _task_path(ev["call_id"])),
        )
        self.pending[task] = writes
        self.model.apply(rec)
        return rec["seq"]

    def append(self, ev: dict[str, Any]) -> int:
        if ev["type"] in ("tool_started", "effect_committed"):
            return self._tool_write(ev)
        if ev["type"] == "tool_result":
            # A task's last write, then the checkpoint that closes its step,
            # in this order (LangGraph #8039 is about the two racing).
            seq = self._tool_write(ev)
            self._step([], source="loop")
            return seq
        return self._step([ev], source="loop")[0]

    def start_tool(self, call_id: str) -> tuple[int, str | None]:
        seq = self.append({"type": "tool_started", "call_id": call_id})
        return seq, self.model.calls[call_id].operation_id

    def recover(self, phase_of: Callable[[Call], str]) -> int:
        """Appends the recovery marks as one checkpoint (a state update);
        returns how many."""
        self._usable()
        marks = self.model.recovery_marks(phase_of)
        if marks:
            self._step(marks, source="update")
        return len(marks)

    def checkpoint(self) -> int:
        """Closes the step: applies the head's pending writes into a new
        checkpoint, if there are any."""
        self._usable()
        if self.pending:
            self._step([], source="loop")
        return self.model.next_seq

    # ---- reading -----------------------------------------------------------

    def read_records(self, after: int | None, limit: int | None) -> list[dict[str, Any]]:
        """Records after `after`, read back through the saver (not from the
        fold in memory), so what is served is what LangGraph returns."""
        self._usable()
        try:
            head = self.saver.get_tuple(self._thread_config())
        except sqlite3.Error as e:
            raise _sqlite_error(f"{self.path}: read the thread's head", e) from e
        except Exception as e:
            raise StoreError("damage", f"thread {self.session!r}: head checkpoint does not load: {e}") from e
        if head is None:
            raise StoreError("damage", f"thread {self.session!r} has no checkpoint any more")
        records, _ = _records_of(head)
        start = 0 if after is None else after + 1
        out = [r for r in records if r["seq"] >= start]
        return out if limit is None else out[:limit]

    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:
            pass


def _records_of(head: Any) -> tuple[list[dict[str, Any]], dict[str, list[tuple[str, dict[str, Any]]]]]:
    """The records of a checkpoint tuple (its channel value, then its
    pending writes, by seq) and its pending writes by task; `damage` if
    they do not number 0..n-1."""
    values = head.checkpoint.get("channel_values", {}).get(CHANNEL, [])
    if not isinstance(values, list):
        raise StoreError("damage", f"checkpoint {head.config['configurable']['checkpoint_id']}: `{CHANNEL}` is not a list")
    records = list(values)
    pending: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for task_id, channel, value in head.pending_writes or []:
        pending.setdefault(task_id, []).append((channel, value))
        if channel == CHANNEL:
            records.append(value)
    if not all(isinstance(r, dict) and isinstance(r.get("seq"), int) and isinstance(r.get("event"), dict) for r in records):
        raise StoreError("damage", f"thread head {head.config['configurable']['checkpoint_id']}: a record is not {{seq, ts, event}}")
    for r in records:
        try:
            check_event(r["event"])
        except BadEvent as e:
            raise StoreError("damage", f"thread head {head.config['configurable']['checkpoint_id']}: record {r['seq']}: {e}") from e
    records.sort(key=lambda r: r["seq"])
    for i, r in enumerate(records):
        if r["seq"] != i:
            raise StoreError(
                "damage",
                f"thread head {head.config['configurable']['checkpoint_id']}: records are not numbered "
                f"0..{len(records) - 1}: found seq {r['seq']} at position {i}",
            )
    return records, pending
