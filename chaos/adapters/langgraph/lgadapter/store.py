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
survives a crash is what LangGraph persisted. The protocol, the session
rules, the projection, the context and the recovery marks are the kit's
(agentchaos_adapter, chaos/adapters/python); `GraphModel` relaxes the
rules LangGraph has no basis for.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from datetime import datetime, timezone
from importlib import metadata
from typing import Any, Callable
from urllib.parse import quote

from agentchaos_adapter import Call, Damaged, Invalid, IoFailed, Locked, Model, Record, Store, StoreError
from langgraph.checkpoint.base import LATEST_VERSION
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver

DB_NAME = "checkpoints.sqlite"
CHANNEL = "events"
# Events that are a running tool's writes rather than the end of a step.
TOOL_WRITES = frozenset(("tool_started", "effect_committed", "tool_result"))
# Events a state update writes (`update_state`), not a step of the loop.
UPDATES = frozenset(("run_interrupted", "tool_recovery", "workspace_rebound"))

# How `recover` gives each call without a result its phase.
RECOVERY_MODES: dict[str, Callable[[Call], str]] = {
    # From what LangGraph persisted: the commit write, else the intent
    # write, else nothing.
    "phases": lambda call: call.phase(),
    # What a stock LangGraph graph acts on: a node without its result runs
    # again, whatever it wrote; there is no other phase.
    "rerun": lambda call: "requested",
}


class GraphModel(Model):
    """The session rules a graph enforces by its shape (a tool node runs
    for a call the model made, results go to open calls, one invocation at
    a time, an approval gate before a gated tool), without the ones that
    need durable knowledge of side effects: LangGraph has none, and re-runs
    an unfinished node without asking."""

    effect_rules = False

    def advice(self, call: Call) -> str:
        if call.recovery == "requested":
            return "LangGraph runs this node again on resume."
        return super().advice(call)


def _sqlite_error(doing: str, e: Exception) -> StoreError:
    text = f"sqlite: {doing}: {e}"
    low = str(e).lower()
    if "locked" in low or "busy" in low:
        return Locked(f"{text} (another process holds the database)")
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return Damaged(text)
    return IoFailed(text)


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


def _versions() -> str:
    names = ("langgraph-checkpoint-sqlite", "langgraph-checkpoint")
    parts = [f"{n} {metadata.version(n)}" for n in names]
    return ", ".join(parts + [f"sqlite {sqlite3.sqlite_version}"])


def _task_id(thread: str, checkpoint_id: str, call_id: str) -> str:
    """Deterministic, like LangGraph's: the same call at the same checkpoint
    is the same task."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"langgraph-task:{thread}/{checkpoint_id}/tools/{call_id}"))


def _task_path(call_id: str) -> str:
    return f"tools|{call_id}"


class ThreadStore(Store):
    """Sessions as threads of one SqliteSaver database per root."""

    name = "langgraph-checkpoint-sqlite"
    model_class = GraphModel

    def __init__(self, recovery: str) -> None:
        self.version = f"{_versions()}; recovery {recovery}"
        self.phase_of = RECOVERY_MODES[recovery]
        self.conn: sqlite3.Connection | None = None
        self.saver: SqliteSaver
        self.path = ""
        self.session = ""
        self.head: dict[str, Any] | None = None  # config of the head checkpoint
        self.step = -2
        self.version_of_head: str | None = None  # of the `events` channel at the head
        # The head's pending writes, by task id, in idx order.
        self.pending: dict[str, list[tuple[str, Record]]] = {}

    def capabilities(self) -> list[str]:
        """What this store keeps. `durable_append` only if the sqlite library
        commits a WAL transaction with an fsync (synchronous FULL or EXTRA):
        SqliteSaver leaves `synchronous` at the library default. Never claimed:
        `torn_tail_repair` (SQLite discards a torn WAL frame itself; nothing
        reaches the store), `damage_refusal` (no checksums on rows),
        `effect_ledger` (LangGraph keeps no ledger of side effects),
        `writer_lock` (none) and `blobs`."""
        caps = ["durable_append"] if wal_synchronous() >= 2 else []
        return caps + ["orphan_marking", "checkpoint_projection", "branches", "compaction"]

    def recovery_phase(self, call: Call) -> str:
        return self.phase_of(call)

    # ---- opening -----------------------------------------------------------

    def _thread_config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.session, "checkpoint_ns": ""}}

    def open(self, root: str, session: str, create: bool) -> list[Record]:
        self.path, self.session = os.path.join(root, DB_NAME), session
        self.head, self.step, self.version_of_head, self.pending = None, -2, None, {}
        if create:
            try:
                _make_dirs_durable(root)
            except OSError as e:
                raise IoFailed(f"create directory {root}: {e}") from e
            target, uri = self.path, False
        elif not os.path.isfile(self.path):
            return []
        else:
            # mode=rw: never create a database on a plain open.
            target, uri = f"file:{quote(self.path)}?mode=rw", True
        try:
            self.conn = sqlite3.connect(target, uri=uri, check_same_thread=False)
        except sqlite3.Error as e:
            raise _sqlite_error(f"open {self.path}", e) from e
        self.saver = SqliteSaver(self.conn)
        head = self._head()
        if head is None:
            return []
        records, self.pending = _records_of(head)
        self.head = head.config
        self.step = int(head.metadata.get("step", -1))
        self.version_of_head = head.checkpoint["channel_versions"].get(CHANNEL)
        return records

    def _head(self) -> Any:
        """The thread's head checkpoint tuple (`get_tuple`), or None."""
        try:
            return self.saver.get_tuple(self._thread_config())
        except sqlite3.Error as e:
            raise _sqlite_error(f"{self.path}: read the thread's head", e) from e
        except Exception as e:  # the serializer's errors have no common type
            raise Damaged(f"thread {self.session!r}: head checkpoint does not load: {e}") from e

    # ---- writing -----------------------------------------------------------

    def write(self, records: list[Record]) -> None:
        for r in records:
            try:
                self.saver.serde.dumps_typed(r["event"])
            except Exception as e:
                raise Invalid(f"{r['event']['type']}: LangGraph's serializer cannot store it: {e}") from e
        kind = records[0]["event"]["type"]
        if len(records) == 1 and kind in TOOL_WRITES:
            self._tool_write(records[0])
            if kind == "tool_result":
                # A task's last write, then the checkpoint that closes its
                # step, in this order (LangGraph #8039 is about the two racing).
                self._step(records, "loop")
            return
        if kind == "session_created":
            self._step(records, "input")
        elif all(r["event"]["type"] in UPDATES for r in records):
            self._step(records, "update")
        else:
            self._step(records, "loop")

    def _write(self, doing: str, write: Callable[[], Any]) -> Any:
        try:
            return write()
        except sqlite3.Error as e:
            raise _sqlite_error(doing, e) from e
        except Exception as e:
            raise IoFailed(f"{doing}: {e}") from e

    def _step(self, records: list[Record], source: str) -> None:
        """Writes one new checkpoint whose `events` value is the whole list:
        the fold's records (the head's, with its pending writes applied in
        seq order, as LangGraph applies a finished step's writes), then
        `records`, not folded yet."""
        version = self.saver.get_next_version(self.version_of_head, None)
        checkpoint = {
            "v": LATEST_VERSION,
            "id": str(uuid6(clock_seq=self.step + 1)),
            "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {CHANNEL: self.model.records + records},
            "channel_versions": {CHANNEL: version},
            "versions_seen": {},
            "updated_channels": [CHANNEL],
        }
        metadata = {"source": source, "step": self.step + 1, "parents": {}}
        config = self.head or self._thread_config()
        config = self._write("put checkpoint", lambda: self.saver.put(config, checkpoint, metadata, {CHANNEL: version}))
        self.head, self.step, self.version_of_head, self.pending = config, self.step + 1, version, {}

    def _tool_write(self, rec: Record) -> None:
        """Writes a running tool's event as a pending write of its task on
        the head checkpoint."""
        assert self.head is not None
        call_id = rec["event"]["call_id"]
        task = _task_id(self.session, self.head["configurable"]["checkpoint_id"], call_id)
        writes = self.pending.get(task, []) + [(CHANNEL, rec)]
        head = self.head
        self._write("put_writes", lambda: self.saver.put_writes(head, writes, task, _task_path(call_id)))
        self.pending[task] = writes

    def checkpoint(self) -> None:
        """Closes the step: applies the head's pending writes into a new
        checkpoint, if there are any."""
        if self.pending:
            self._step([], "loop")

    # ---- reading -----------------------------------------------------------

    def read(self, after: int | None, limit: int | None) -> list[Record]:
        """Records after `after`, read back through the saver (not from the
        fold in memory), so what is served is what LangGraph returns."""
        head = self._head()
        if head is None:
            raise Damaged(f"thread {self.session!r} has no checkpoint any more")
        records, _ = _records_of(head)
        start = 0 if after is None else after + 1
        out = [r for r in records if r["seq"] >= start]
        return out if limit is None else out[:limit]

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass
        self.conn = None


def _records_of(head: Any) -> tuple[list[Record], dict[str, list[tuple[str, Record]]]]:
    """The records of a checkpoint tuple (its channel value, then its
    pending writes, in seq order) and its pending writes by task; the kit
    checks that they fit the schema and number 0..n-1."""
    checkpoint_id = head.config["configurable"]["checkpoint_id"]
    values = head.checkpoint.get("channel_values", {}).get(CHANNEL, [])
    if not isinstance(values, list):
        raise Damaged(f"checkpoint {checkpoint_id}: `{CHANNEL}` is not a list")
    records = list(values)
    pending: dict[str, list[tuple[str, Record]]] = {}
    for task_id, channel, value in head.pending_writes or []:
        pending.setdefault(task_id, []).append((channel, value))
        if channel == CHANNEL:
            records.append(value)
    if not all(isinstance(r, dict) and isinstance(r.get("seq"), int) for r in records):
        raise Damaged(f"thread head {checkpoint_id}: a record is not {{seq, ts, event}}")
    records.sort(key=lambda r: r["seq"])
    return records, pending
