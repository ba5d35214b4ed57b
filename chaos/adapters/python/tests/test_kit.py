"""Unit tests of the kit's serve loop over an in-memory store (stdlib
unittest, no pytest): python3 -m unittest discover -s tests. What a
store's failures and bad data turn into; chaos/tests/python_kit.rs runs it."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tempfile
import unittest

from agentchaos_adapter import IoFailed, Invalid, Store, serve
from agentchaos_adapter.serve import Server

sessions: dict[str, list] = {}


class MemoryStore(Store):
    name = "memory"
    claims = ("blobs",)

    def __init__(self) -> None:
        self.fail: Exception | None = None
        self.blobs: dict[str, bytes] = {}

    def open(self, root, session, create):
        self.key = f"{root}/{session}"
        return list(sessions.get(self.key, []))

    def write(self, records):
        if self.fail is not None:
            fail, self.fail = self.fail, None
            raise fail
        sessions.setdefault(self.key, []).extend(records)

    def put_blob(self, digest, data):
        self.blobs[digest] = data

    def get_blob(self, digest, size):
        return self.blobs[digest]


class Kit(unittest.TestCase):
    def setUp(self) -> None:
        sessions.clear()
        self.tmp = tempfile.mkdtemp()
        self.store = MemoryStore()
        self.server = Server(self.store)
        self.next_id = 1

    def req(self, op: str, **fields) -> dict:
        line = json.dumps({"id": self.next_id, "op": op, **fields}).encode()
        self.next_id += 1
        return json.loads(self.server.handle(line))

    def ok(self, op: str, **fields):
        reply = self.req(op, **fields)
        self.assertIn("ok", reply, reply)
        return reply["ok"]

    def kind(self, op: str, **fields) -> str:
        reply = self.req(op, **fields)
        self.assertIn("error", reply, reply)
        return reply["error"]["kind"]

    def create(self) -> None:
        self.ok("open", root=self.tmp, session="s", workspace=self.tmp, create=True)

    def msg(self, text: str) -> dict:
        return {"type": "user_message", "parent": None, "text": text}

    def test_a_failed_write_makes_the_session_unusable_until_it_is_reopened(self) -> None:
        self.create()
        self.store.fail = OSError(28, "No space left on device")
        reply = self.req("append", event=self.msg("one"))
        self.assertEqual(reply["error"], {"kind": "io", "message": "write: [Errno 28] No space left on device"})
        self.assertEqual(self.kind("append", event=self.msg("two")), "io")
        self.assertEqual(self.kind("events"), "io")
        self.ok("close")
        self.assertEqual(self.ok("open", root=self.tmp, session="s", workspace=None, create=False)["next_seq"], 1)
        self.assertEqual(self.ok("append", event=self.msg("two"))["seq"], 1)

    def test_a_refusal_before_writing_keeps_the_session_usable(self) -> None:
        self.create()
        self.store.fail = Invalid("cannot store it")
        self.assertEqual(self.kind("append", event=self.msg("one")), "invalid")
        self.assertEqual(self.ok("append", event=self.msg("one"))["seq"], 1)
        self.store.fail = IoFailed("disk said no")
        self.assertEqual(self.kind("append", event=self.msg("two")), "io")
        self.assertEqual(self.kind("projection"), "io")

    def send(self, op: str, **fields) -> list[dict]:
        """Every reply line `handle` gave for one request (pipelining: none
        until a batch's last request, then all of it)."""
        line = json.dumps({"id": self.next_id, "op": op, **fields}).encode()
        self.next_id += 1
        return [json.loads(r) for r in self.server.handle(line).splitlines()]

    def test_a_pipelined_batch_is_checked_in_order_and_written_in_one_call(self) -> None:
        self.assertTrue(self.ok("hello", protocol=1)["pipeline"])
        self.create()
        writes = []
        write = self.store.write
        self.store.write = lambda records: (writes.append(len(records)), write(records))
        call = {"type": "tool_call", "parent": "e1", "call_id": "c1", "tool": "t", "args": {}, "effect": "none"}
        self.assertEqual(self.send("append", more=True, event=self.msg("one")), [])
        # Names the batch's first event as its parent, which is not durable yet.
        self.assertEqual(self.send("append", more=True, event=call), [])
        # Refused: c2 is no call; the rest of the batch goes on.
        self.assertEqual(self.send("start_tool", more=True, call_id="c2"), [])
        replies = self.send("start_tool", call_id="c1")
        self.assertEqual([r["id"] for r in replies], [3, 4, 5, 6])
        self.assertEqual(replies[0]["ok"], {"seq": 1, "id": "e1"})
        self.assertEqual(replies[1]["ok"], {"seq": 2, "id": "e2"})
        self.assertEqual(replies[2]["error"]["kind"], "rule", replies)
        self.assertEqual(replies[3]["ok"], {"seq": 3, "id": "e3", "operation_id": None})
        self.assertEqual(writes, [3], "one write for the batch")
        # A request that is not pipelined ends an open batch, and is refused unserved with `more`.
        self.assertEqual(self.send("append", more=True, event=self.msg("two")), [])
        replies = self.send("close", more=True)
        self.assertEqual(replies[0]["ok"]["seq"], 4)
        self.assertEqual(replies[1]["error"]["kind"], "bad_request")
        self.assertEqual(self.ok("append", event=self.msg("three"))["seq"], 5)

    def test_a_failed_batch_write_refuses_every_request_it_carried(self) -> None:
        self.create()
        self.store.fail = OSError(5, "Input/output error")
        self.assertEqual(self.send("append", more=True, event=self.msg("one")), [])
        replies = self.send("append", event=self.msg("two"))
        self.assertEqual([r["error"]["kind"] for r in replies], ["io", "io"])
        self.assertEqual(self.kind("append", event=self.msg("three")), "io")

    def test_rules_are_refused_with_their_reason(self) -> None:
        self.create()
        reply = self.req("append", event={"type": "run_finished", "run_id": "r9", "status": "completed"})
        self.assertEqual(reply["error"]["kind"], "rule")
        self.assertTrue(reply["error"]["message"].startswith("rule violated: run_finished for run 'r9'"), reply)

    def test_loaded_records_that_do_not_fold_are_damage(self) -> None:
        self.create()
        self.ok("close")
        sessions[f"{self.tmp}/s"].append({"seq": 5, "ts": None, "event": self.msg("gap")})
        self.assertEqual(self.kind("open", root=self.tmp, session="s", workspace=None, create=False), "damage")
        sessions[f"{self.tmp}/s"][-1] = {"seq": 1, "event": {"type": "user_message", "text": 3}}
        self.assertEqual(self.kind("open", root=self.tmp, session="s", workspace=None, create=False), "damage")
        sessions[f"{self.tmp}/s"][-1] = {"seq": 1, "event": {"type": "leaf_moved", "leaf": "e0"}}
        self.assertEqual(self.kind("open", root=self.tmp, session="s", workspace=None, create=False), "damage")

    def test_blobs_are_checked_against_their_reference(self) -> None:
        self.create()
        ref = self.ok("put_blob", hex="c0ffee")
        self.assertEqual(ref, {"digest": hashlib.sha256(bytes.fromhex("c0ffee")).hexdigest(), "size": 3})
        self.assertEqual(self.ok("get_blob", **ref), {"hex": "c0ffee"})
        self.store.blobs[ref["digest"]] = b"\x00\x00\x00"
        self.assertEqual(self.kind("get_blob", **ref), "damage")

    def test_the_loop_answers_every_line_and_a_bug_ends_it_with_one_line(self) -> None:
        class Buggy(MemoryStore):
            def write(self, records):
                raise KeyError("oops")

        stdin = io.BytesIO(b'{"id":1,"op":"hello","protocol":1}\n[]\n{"id":3,"op":"open","root":"/r",'
                           b'"session":"s","workspace":"/w","create":true}\n{"id":4,"op":"close"}\n')
        stdout, stderr = io.BytesIO(), io.StringIO()
        with contextlib.redirect_stderr(stderr):
            self.assertEqual(serve(Buggy(), stdin, stdout), 2)
        self.assertRegex(stderr.getvalue(), r"^memory adapter: internal error \(KeyError: 'oops'\) at .*test_kit.py:\d+\n$")
        lines = stdout.getvalue().splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertEqual(json.loads(lines[1]), {"id": None, "error": {"kind": "bad_request",
                                                                        "message": "a request is a JSON object"}})


if __name__ == "__main__":
    unittest.main()
