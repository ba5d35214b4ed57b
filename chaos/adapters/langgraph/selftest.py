#!/usr/bin/env python3
"""Self-test of the LangGraph adapter at the checkpointer's level (no pytest).

Checks the facts about langgraph-checkpoint-sqlite the mapping relies on,
and what a SIGKILL leaves in its tables. Run: python3 selftest.py
Prints one line per check and `N passed, N failed`; exits 1 on a failure.
chaos/tests/langgraph_adapter.rs runs it too.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

from agentchaos_adapter import schema, wire  # noqa: E402
from lgadapter.store import DB_NAME, wal_synchronous  # noqa: E402

wire.release()  # the kit took stdout for an adapter's replies; this reports on it

THREAD = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _saver(path: str) -> SqliteSaver:
    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))


def _checkpoint(values: dict) -> dict:
    return {
        "v": 2,
        "id": str(uuid6(clock_seq=0)),
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }


def check_put_writes_ignores_a_second_write_at_the_same_key(tmp: str) -> None:
    """Writes are keyed by (task_id, idx): a task's second put_writes with
    one write lands on idx 0 again and is dropped without an error. This is
    why the adapter passes a task's whole write list every time."""
    saver = _saver(os.path.join(tmp, "c.sqlite"))
    head = saver.put(THREAD, _checkpoint({}), {"source": "input", "step": -1}, {})
    saver.put_writes(head, [("events", "intent")], "task-1")
    saver.put_writes(head, [("events", "commit")], "task-1")
    assert saver.get_tuple(THREAD).pending_writes == [("task-1", "events", "intent")]
    saver.put_writes(head, [("events", "intent"), ("events", "commit")], "task-1")
    assert saver.get_tuple(THREAD).pending_writes == [
        ("task-1", "events", "intent"),
        ("task-1", "events", "commit"),
    ]


def check_pending_writes_belong_to_one_checkpoint(tmp: str) -> None:
    """get_tuple returns the head and only the head's writes: a write on an
    older checkpoint is history, not pending."""
    saver = _saver(os.path.join(tmp, "c.sqlite"))
    first = saver.put(THREAD, _checkpoint({"n": 1}), {"source": "input", "step": -1}, {})
    saver.put_writes(first, [("events", "late")], "task-1")
    saver.put(first, _checkpoint({"n": 2}), {"source": "loop", "step": 0}, {})
    head = saver.get_tuple(THREAD)
    assert head.checkpoint["channel_values"] == {"n": 2}
    assert head.pending_writes == []


def check_the_saver_sets_wal_and_leaves_synchronous(tmp: str) -> None:
    saver = _saver(os.path.join(tmp, "c.sqlite"))
    saver.setup()
    (mode,) = saver.conn.execute("PRAGMA journal_mode").fetchone()
    (sync,) = saver.conn.execute("PRAGMA synchronous").fetchone()
    assert mode == "wal", mode
    assert sync == wal_synchronous(), (sync, wal_synchronous())
    print(f"  journal_mode={mode} synchronous={sync} (sqlite {sqlite3.sqlite_version})")


def _adapter(requests: list[dict], kill_after: int | None = None) -> list[dict]:
    """Runs the adapter on `requests`; with `kill_after`, SIGKILLs it once
    that many replies arrived."""
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "adapter.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    replies = []
    for i, req in enumerate(requests, start=1):
        proc.stdin.write((json.dumps({"id": i, **req}) + "\n").encode())
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == i and "ok" in reply, reply
        replies.append(reply["ok"])
        if kill_after is not None and len(replies) == kill_after:
            proc.send_signal(signal.SIGKILL)
            break
    else:
        proc.stdin.close()
    proc.wait(timeout=30)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if not stream.closed:
            stream.close()
    return replies


def check_a_killed_intent_is_a_pending_write_of_its_task(tmp: str) -> None:
    """SIGKILL after start_tool: the intent is only a pending write of the
    tool's task on the head checkpoint (which the adapter reads back as
    phase `started`; chaos/tests/langgraph_adapter.rs checks that)."""
    root, ws = os.path.join(tmp, "root"), tmp
    _adapter(
        [
            {"op": "hello", "protocol": 1},
            {"op": "open", "root": root, "session": "s", "workspace": ws, "create": True},
            {"op": "append", "event": {"type": "run_started", "run_id": "r1"}},
            {"op": "append", "event": {"type": "tool_call", "parent": None, "call_id": "c1",
                                       "tool": "deploy", "args": {}, "effect": "side_effect",
                                       "operation_id": "op1"}},
            {"op": "start_tool", "call_id": "c1"},
        ],
        kill_after=5,
    )
    saver = _saver(os.path.join(root, DB_NAME))
    head = saver.get_tuple({"configurable": {"thread_id": "s", "checkpoint_ns": ""}})
    types = [r["event"]["type"] for r in head.checkpoint["channel_values"]["events"]]
    assert types == ["session_created", "run_started", "tool_call"], types
    assert [(ch, v["event"]) for _, ch, v in head.pending_writes] == [
        ("events", {"type": "tool_started", "call_id": "c1"})
    ], head.pending_writes
    saver.conn.close()


def check_requests_are_validated_by_the_committed_schema(_tmp: str) -> None:
    """Every request of chaos/PROTOCOL.md's transcript fits the schema the
    adapter reads; requests that do not fit are refused naming the field."""
    doc = os.path.join(HERE, "..", "..", "PROTOCOL.md")
    with open(doc, encoding="utf-8") as f:
        requests = [json.loads(line[2:]) for line in f if line.startswith("> {")]
    assert len(requests) > 10, len(requests)
    for req in requests:
        schema.check_request(req)
    refused = {
        "unknown op 'fly'": {"id": 1, "op": "fly"},
        "open: at .create: 'yes' is not of type 'boolean'": {
            "id": 2, "op": "open", "root": "/r", "session": "s", "create": "yes"
        },
        "append: event does not fit: user_message: at .text: 1 is not of type 'string'": {
            "id": 3, "op": "append", "event": {"type": "user_message", "text": 1}
        },
        "hello: 'id' is a required property": {"op": "hello", "protocol": 1},
    }
    for message, req in refused.items():
        try:
            schema.check_request(req)
        except schema.BadShape as e:
            assert str(e) == message, (str(e), message)
        else:
            raise AssertionError(f"accepted {req}")


def main() -> int:
    checks = [(n, f) for n, f in sorted(globals().items()) if n.startswith("check_")]
    passed = failed = 0
    for name, check in checks:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                check(tmp)
            except Exception:
                failed += 1
                print(f"FAIL {name}:\n{traceback.format_exc()}")
            else:
                passed += 1
                print(f"ok   {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
