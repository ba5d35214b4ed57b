"""The compiled schema checks (agentchaos_adapter/compiled.py) accept
exactly what jsonschema's Draft202012Validator accepts: every request op,
event type and reply of a corpus, and every mutation of them (a field
dropped, an unknown field added, a value replaced by one of another type
or a negative number), checked both ways; and a broken compiled check is
caught by the same comparison."""

from __future__ import annotations

import copy
import unittest
from typing import Any, Iterator

from jsonschema import Draft202012Validator

from agentchaos_adapter import compiled, schema

W = "/tmp/agentchaos/ws"

EVENTS: list[dict[str, Any]] = [
    {"type": "session_created", "session_id": "demo", "schema_version": 1, "workspace": W},
    {"type": "run_started", "run_id": "r1"},
    {"type": "request_header", "run_id": "r1", "model": "m", "system_prompt_hash": "h1", "tools_hash": "h2"},
    {"type": "user_message", "parent": None, "text": "deploy v2 to prod"},
    {"type": "assistant_message", "parent": "e2", "text": "on it"},
    {"type": "tool_call", "parent": "e2", "call_id": "c1", "tool": "deploy", "args": {"version": "v2", "n": [1, 2.5, None]},
     "effect": "side_effect", "operation_id": "op-c1", "target": "prod", "needs_approval": True},
    {"type": "approval", "call_id": "c1", "decision": "approved"},
    {"type": "tool_started", "call_id": "c1"},
    {"type": "effect_committed", "call_id": "c1", "operation_id": "op-c1", "external_ref": "deploy-7731"},
    {"type": "tool_result", "parent": "e3", "call_id": "c1", "status": "ok", "output": "deployed v2"},
    {"type": "tool_result", "parent": "e3", "call_id": "c2", "status": "ok", "blob": {"digest": "ab" * 32, "size": 3}},
    {"type": "tool_recovery", "call_id": "c1", "status": "uncertain", "phase": "committed"},
    {"type": "tool_reconciled", "call_id": "c1", "outcome": "not_applied", "evidence": "no deploy found"},
    {"type": "plan_updated", "goal": "ship", "steps": [{"id": "s1", "title": "t", "status": "blocked", "reason": "r"},
                                                        {"id": "s2", "title": "u", "status": "done"}]},
    {"type": "compaction", "parent": "e4", "summary": "so far", "first_kept_id": "e3", "tokens_before": 120},
    {"type": "leaf_moved", "leaf": "e3"},
    {"type": "run_finished", "run_id": "r1", "status": "completed"},
    {"type": "run_interrupted", "run_id": "r1"},
    {"type": "workspace_rebound", "from": "/a", "to": "/b"},
    {"type": "tail_quarantined", "file": "tail-0.bin", "offset": 10, "len": 5, "reason": "torn"},
]

REQUESTS: list[dict[str, Any]] = [
    {"id": 1, "op": "hello", "protocol": 1},
    {"id": 2, "op": "open", "root": "/r", "session": "demo", "workspace": W, "create": True},
    {"id": 2, "op": "open", "root": "/r", "session": "demo", "create": False, "lease": {"worker_id": "w1", "ttl_ms": 300}},
    {"id": 6, "op": "start_tool", "call_id": "c1"},
    {"id": 7, "op": "recover"},
    {"id": 8, "op": "events", "after": 4, "limit": None},
    {"id": 9, "op": "context", "budget": 100},
    {"id": 10, "op": "checkpoint"},
    {"id": 11, "op": "projection"},
    {"id": 12, "op": "put_blob", "hex": "00ff"},
    {"id": 13, "op": "get_blob", "digest": "ab" * 32, "size": 2},
    {"id": 14, "op": "close"},
    {"id": 15, "op": "renew_lease"},
    {"id": 16, "op": "fork"},
    {"id": 17, "op": "reap", "pid": 42},
] + [{"id": 3, "op": "append", "event": e} for e in EVENTS]

CALL = {"call_id": "c1", "tool": "deploy", "target": "prod", "phase": "committed", "effect": "side_effect",
        "operation_id": "op-c1", "args": {"version": "v2"}, "external_ref": "deploy-7731"}

REPLIES: list[tuple[str, dict[str, Any]]] = [
    ("hello", {"name": "s", "protocol": 2, "capabilities": ["durable_append", "lease"], "version": "1", "fork": True}),
    ("open", {"next_seq": 6, "repaired": {"offset": 1, "len": 2, "line": 3, "reason": "torn"}}),
    ("open", {"next_seq": 6, "lease": {"worker_id": "w", "epoch": 2, "granted_at_ms": 1, "expires_at_ms": 2},
              "recovery": {"appended": 0, "interrupted_runs": [], "uncertain": []}}),
    ("append", {"id": "e1", "seq": 1}),
    ("start_tool", {"id": "e4", "seq": 4, "operation_id": None}),
    ("recover", {"appended": 2, "interrupted_runs": ["r1"], "uncertain": [CALL]}),
    ("events", {"records": [{"seq": i, "id": f"e{i}", "ts": "2026-11-29T09:35:13.740Z", "event": e}
                            for i, e in enumerate(EVENTS[:2])]}),
    ("events", {"records": [{"seq": 0, "id": "e0", "event": {"type": "future", "ignorable": True, "x": 1}}]}),
    ("context", {"text": "[user] hi"}),
    ("checkpoint", {"next_seq": 6}),
    ("projection", {"next_seq": 8, "open_run": None, "interrupted_runs": ["r1"], "leaf": "e3", "branch": ["e2", "e3"],
                    "open_calls": [{**CALL, "needs_approval": False, "approval": None, "recovery": "committed",
                                    "reconciled": None}],
                    "committed_operations": ["op-c1"], "plan": {"goal": "g", "steps": []}}),
    ("put_blob", {"digest": "ab" * 32, "size": 2}),
    ("get_blob", {"hex": "00ff"}),
    ("close", {}),
    ("fork", {"pid": 7}),
    ("reap", {"status": 9}),
    ("renew_lease", {"worker_id": "w", "epoch": 3, "granted_at_ms": 5, "expires_at_ms": 9}),
]

# Values that replace a field's: each of another JSON type, and the edges
# jsonschema treats specially (1.0 is an integer, True is not, -1 is below a minimum of 0).
REPLACEMENTS: list[Any] = [None, True, 1, -1, 1.0, 2.5, "x", [], {}]


def mutations(value: Any) -> Iterator[Any]:
    """`value` with one change at one place, for every place."""
    if isinstance(value, dict):
        for key in value:
            dropped = dict(value)
            del dropped[key]
            yield dropped
            for inner in mutations(value[key]):
                yield {**value, key: inner}
        yield {**value, "unknown_field": 1}
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for inner in mutations(item):
                yield value[:i] + [inner] + value[i + 1:]
        yield value + [copy.deepcopy(value[0]) if value else None]
    for other in REPLACEMENTS:
        if type(other) is not type(value) or other != value:
            yield other


_VALIDATORS: dict[int, Draft202012Validator] = {}


def jsonschema_fits(s: dict[str, Any], value: Any) -> bool:
    if id(s) not in _VALIDATORS:
        _VALIDATORS[id(s)] = Draft202012Validator(s)
    return _VALIDATORS[id(s)].is_valid(value)


def cases() -> Iterator[tuple[str, Any, Any]]:
    """(what, the kit's check, value) for every corpus value and mutation."""
    for req in REQUESTS:
        check = schema._REQUESTS[req["op"]]
        for v in [req, *mutations(req)]:
            yield f"request {req['op']}", check, v
    for ev in EVENTS:
        check = schema._EVENTS[ev["type"]]
        for v in [ev, *mutations(ev)]:
            yield f"event {ev['type']}", check, v
    for op, body in REPLIES:
        for v in [body, *mutations(body)]:
            yield f"reply {op}", schema._REPLIES[op], v
    for line in ({"id": 3, "ok": {}}, {"id": 3, "error": {"kind": "rule", "message": "m"}}):
        for v in [line, *mutations(line)]:
            yield "reply line", schema._REPLY_LINE, v


class Compiled(unittest.TestCase):
    def test_every_check_of_the_kit_is_compiled(self) -> None:
        checks = [*schema._REQUESTS.values(), *schema._EVENTS.values(), *schema._REPLIES.values(), schema._REPLY_LINE]
        self.assertEqual([c.schema for c in checks if c.fits is None], [])

    def test_the_corpus_covers_every_op_event_type_and_reply(self) -> None:
        self.assertEqual({r["op"] for r in REQUESTS}, set(schema.OPS))
        self.assertEqual({e["type"] for e in EVENTS}, set(schema.EVENT_TYPES))
        self.assertEqual({op for op, _ in REPLIES}, set(schema.DOCUMENT["replies"]))

    def test_compiled_checks_accept_exactly_what_jsonschema_accepts(self) -> None:
        fitting = not_fitting = 0
        for what, check, value in cases():
            expected = jsonschema_fits(check.schema, value)
            self.assertEqual(check.fits(value), expected, f"{what}: {value!r}")
            fitting += expected
            not_fitting += not expected
        # Both sides exercised: the corpus fits, most mutations do not.
        self.assertGreater(fitting, 100)
        self.assertGreater(not_fitting, 1000)

    def test_a_lax_compiled_check_is_caught(self) -> None:
        self.assertFalse(compiled.compile_schema({"type": "integer", "minimum": 0}, {})(-1))
        # An `integer` that lets booleans through, as a naive isinstance would.
        saved = dict(compiled.TYPES)
        try:
            compiled.TYPES["integer"] = lambda x: isinstance(x, int)
            hello = schema._variants(schema._without_events(schema._DEFS["RequestLine"]), "op")["hello"]
        finally:
            compiled.TYPES.clear()
            compiled.TYPES.update(saved)
        request = {"id": 1, "op": "hello", "protocol": 1}
        mismatches = [v for v in mutations(request) if hello.fits(v) != jsonschema_fits(hello.schema, v)]
        self.assertIn({"id": True, "op": "hello", "protocol": 1}, mismatches)

    def test_an_unknown_keyword_is_left_to_jsonschema(self) -> None:
        with self.assertRaises(compiled.Unsupported):
            compiled.compile_schema({"type": "string", "pattern": "^a"}, {})
        check = schema._Check({"type": "string", "pattern": "^a"})
        self.assertIsNone(check.fits)
        self.assertIsNone(check.problem("abc"))
        self.assertIn("does not match", check.problem("b") or "")


if __name__ == "__main__":
    unittest.main()
