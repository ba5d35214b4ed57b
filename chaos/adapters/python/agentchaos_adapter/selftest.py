"""Conformance self-test of an adapter, before a campaign.

Usage: python3 -m agentchaos_adapter.selftest [--] CMD [ARGS…]

Starts the adapter (CMD ARGS…, or one quoted command line) as the harness
would, speaks protocol version 1 to it, and checks what chaos/PROTOCOL.md
requires of every store, plus the capabilities it claims: every reply fits
the schema, the error kinds, acknowledged events surviving SIGKILL,
recovery marks and their phases, the recovery lines of `context`, and,
when claimed, the projection, the ledger, the writer lock and blobs. Any
adapter, in any language. Prints one line per check and `N passed, N
failed, N skipped`; exits 0 if none failed, 1 if one did, 2 on bad usage.
It is no campaign: `agentchaos run --adapter CMD` is the real test.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from typing import Any, Callable

from . import schema, wire
from .model import Model

TIMEOUT = 30.0


class Refused(Exception):
    def __init__(self, op: str, kind: str, message: str) -> None:
        super().__init__(f"{op} refused with {kind}: {message}")
        self.kind = kind


class Skip(Exception):
    """The check does not apply to this adapter (says why)."""


class Adapter:
    """One adapter process; every reply is checked against the schema."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        self.next_id = 1
        self.buffer = b""

    def line(self, text: bytes) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + b"\n")
        self.proc.stdin.flush()
        return self._reply()

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([fd], [], [], TIMEOUT)
            if not ready:
                raise AssertionError(f"no reply within {TIMEOUT:.0f}s{self._stderr_tail()}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise AssertionError(f"stdout closed before the reply (exit {self.proc.wait()}){self._stderr_tail()}")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\n", 1)
        try:
            return json.loads(raw)
        except ValueError as e:
            raise AssertionError(f"stdout line is not JSON ({e}): {raw[:200]!r}") from e

    def _stderr_tail(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        lines = self.proc.stderr.read().decode(errors="replace").strip().splitlines()
        return f"; stderr ends: {lines[-1]}" if lines else ""

    def raw(self, op: str, **fields: Any) -> dict[str, Any]:
        """The reply line to one request, checked: its id and its shape."""
        req_id, self.next_id = self.next_id, self.next_id + 1
        reply = self.line(json.dumps({"id": req_id, "op": op, **fields}).encode())
        assert reply.get("id") == req_id, f"reply to {op} has id {reply.get('id')!r}, not {req_id}"
        try:
            schema.check_reply(op, reply)
        except schema.BadShape as e:
            raise AssertionError(f"{e}: {json.dumps(reply)[:300]}") from e
        return reply

    def call(self, op: str, **fields: Any) -> Any:
        reply = self.raw(op, **fields)
        if "error" in reply:
            raise Refused(op, reply["error"]["kind"], reply["error"]["message"])
        return reply["ok"]

    def refusal(self, op: str, **fields: Any) -> str:
        reply = self.raw(op, **fields)
        assert "error" in reply, f"{op} {fields} was accepted: {reply['ok']}"
        return reply["error"]["kind"]

    def hello(self) -> dict[str, Any]:
        return self.call("hello", protocol=1)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the adapter and its group are gone already (it died on its own)
        self.proc.wait()
        self.close_pipes()

    def shutdown(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=TIMEOUT)
        finally:
            self.close_pipes()

    def close_pipes(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def same_event(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal as the protocol reads them: an optional field that is null (or
    `needs_approval` false) is the same as one left out."""

    def norm(e: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in e.items() if v is not None and not (k == "needs_approval" and v is False)}

    return norm(a) == norm(b)


class Checks:
    """The checks, each `check_*` method in a fresh temporary directory."""

    def __init__(self, command: list[str], claims: list[str], tmp: str) -> None:
        self.command = command
        self.claims = claims
        self.root = os.path.join(tmp, "root")
        self.ws = os.path.join(tmp, "ws")
        os.makedirs(self.ws)
        self.adapters: list[Adapter] = []

    def spawn(self) -> Adapter:
        a = Adapter(self.command)
        self.adapters.append(a)
        a.hello()
        return a

    def finish(self) -> None:
        for a in self.adapters:
            if a.proc.poll() is None:
                a.kill()

    def needs(self, capability: str) -> None:
        if capability not in self.claims:
            raise Skip(f"{capability} is not claimed")

    def create(self, a: Adapter, session: str = "s") -> None:
        opened = a.call("open", root=self.root, session=session, workspace=self.ws, create=True)
        assert opened["next_seq"] == 1, f"a new session continues at {opened['next_seq']}, not 1"

    def reopen(self, a: Adapter, session: str = "s") -> int:
        return a.call("open", root=self.root, session=session, workspace=None, create=False)["next_seq"]

    def append(self, a: Adapter, event: dict[str, Any], acked: list[tuple[int, dict[str, Any]]]) -> str:
        ack = a.call("append", event=event)
        expected = acked[-1][0] + 1 if acked else 1
        assert ack["seq"] == expected and ack["id"] == f"e{expected}", f"{event['type']} acked as {ack}, not seq {expected}"
        acked.append((ack["seq"], event))
        return ack["id"]

    def start(self, a: Adapter, call_id: str, acked: list[tuple[int, dict[str, Any]]]) -> None:
        ack = a.call("start_tool", call_id=call_id)
        assert ack["seq"] == acked[-1][0] + 1, f"start_tool acked as {ack}"
        acked.append((ack["seq"], {"type": "tool_started", "call_id": call_id}))

    def crashed(self) -> tuple[Adapter, list[tuple[int, dict[str, Any]]]]:
        """A run with calls left committed (c2), started (c3) and requested
        (c4), c1 finished; SIGKILL between requests; a new process opened
        on the same root, every acknowledged event checked."""
        a = self.spawn()
        self.create(a)
        acked: list[tuple[int, dict[str, Any]]] = []
        self.append(a, {"type": "run_started", "run_id": "r1"}, acked)
        leaf = self.append(a, {"type": "user_message", "parent": None, "text": "deploy v2 to prod"}, acked)
        for call_id, effect, phase in (("c1", "side_effect", "done"), ("c2", "side_effect", "committed"),
                                       ("c3", "side_effect", "started"), ("c4", "idempotent", "requested")):
            op = f"op-{call_id}" if effect == "side_effect" else None
            leaf = self.append(a, {"type": "tool_call", "parent": leaf, "call_id": call_id, "tool": "deploy",
                                   "args": {"call": call_id}, "effect": effect, "operation_id": op,
                                   "target": "prod"}, acked)
            if phase == "requested":
                continue
            self.start(a, call_id, acked)
            if phase == "started":
                continue
            self.append(a, {"type": "effect_committed", "call_id": call_id, "operation_id": op,
                            "external_ref": f"ref-{call_id}"}, acked)
            if phase == "done":
                leaf = self.append(a, {"type": "tool_result", "parent": leaf, "call_id": call_id,
                                       "status": "ok", "output": "deployed"}, acked)
        a.kill()
        b = self.spawn()
        next_seq = self.reopen(b)
        assert next_seq == len(acked) + 1, f"{len(acked)} events acknowledged after session_created, next_seq {next_seq}"
        records = b.call("events")["records"]
        for seq, event in acked:
            found = [r["event"] for r in records if r["seq"] == seq]
            assert len(found) == 1 and same_event(found[0], event), f"acknowledged event e{seq} lost or changed after SIGKILL: {found} != {event}"
        return b, acked

    # ---- the checks ----------------------------------------------------------

    def check_hello_names_the_store_and_known_claims(self) -> None:
        a = self.spawn()
        hello = a.hello()
        assert hello["protocol"] == 1 and hello["name"], hello
        assert a.refusal("hello", protocol=3) == "unsupported", "an unknown protocol version must be refused with unsupported"
        assert a.shutdown() == 0, "the adapter must exit 0 when stdin ends"

    def check_open_answers_not_found_exists_and_invalid(self) -> None:
        a = self.spawn()
        missing = a.refusal("open", root=self.root, session="s", workspace=None, create=False)
        assert missing == "not_found", f"opening a missing session: {missing}"
        escape = a.refusal("open", root=self.root, session="../escape", workspace=self.ws, create=True)
        assert escape == "invalid", f"a session id that escapes the root: {escape}"
        self.create(a)
        assert a.refusal("open", root=self.root, session="t", workspace=self.ws, create=True) == "bad_request", \
            "a second open while a session is open must be bad_request"
        a.call("close")
        assert a.refusal("open", root=self.root, session="s", workspace=self.ws, create=True) == "exists"
        assert self.reopen(a) == 1

    def check_bad_requests_are_refused_and_write_nothing(self) -> None:
        a = self.spawn()
        assert a.refusal("events") == "bad_request", "events before open must be bad_request"
        reply = a.line(b"this is not json")
        assert reply.get("error", {}).get("kind") == "bad_request", f"a line that is not JSON: {reply}"
        assert a.refusal("fly") == "bad_request", "an unknown op"
        self.create(a)
        kinds = [
            a.refusal("append", event={"type": "tool_started", "call_id": "c1"}),
            a.refusal("append", event={"type": "user_message", "parent": None, "text": 1}),
            a.refusal("append", event={"type": "user_message", "parent": "e99", "text": "dangling"}),
            a.refusal("append", event={"type": "tool_result", "parent": None, "call_id": "c9", "status": "ok"}),
        ]
        assert kinds == ["bad_request", "bad_request", "rule", "rule"], kinds
        assert len(a.call("events")["records"]) == 1, "a refused event was written"

    def check_acked_events_survive_sigkill_and_read_back(self) -> None:
        b, acked = self.crashed()
        tail = b.call("events", after=acked[-3][0], limit=1)["records"]
        assert [r["seq"] for r in tail] == [acked[-2][0]], f"events after/limit: {tail}"

    def check_recovery_marks_calls_and_is_idempotent(self) -> None:
        b, _ = self.crashed()
        rec = b.call("recover")
        assert b.call("recover")["appended"] == 0, "a second recover appended events"
        if "orphan_marking" not in self.claims:
            return
        assert rec["interrupted_runs"] == ["r1"], rec
        phases = [(u["call_id"], u["phase"]) for u in rec["uncertain"]]
        assert phases == [("c2", "committed"), ("c3", "started"), ("c4", "requested")], phases
        assert rec["uncertain"][0]["external_ref"] == "ref-c2", rec["uncertain"][0]
        assert rec["appended"] == 4, f"recover appended {rec['appended']}, not 4"
        lines = b.call("context")["text"].splitlines()
        wanted = [("run r1", "interrupted"), ("call c2", "phase committed"), ("call c3", "phase started"),
                  ("call c4", "phase requested")]
        for x, y in wanted:
            assert any(x in line and y in line for line in lines), f"context has no line with {x!r} and {y!r}"

    def check_projection_is_the_fold_of_the_events(self) -> None:
        self.needs("checkpoint_projection")
        b, _ = self.crashed()
        b.call("recover")
        assert b.call("checkpoint")["next_seq"] == len(b.call("events")["records"])
        model = Model()
        for r in b.call("events")["records"]:
            if not r["event"].get("ignorable"):
                model.apply({"seq": len(model.records), **r})
        expected, found = model.projection(), b.call("projection")
        diff = [k for k in expected if expected[k] != found.get(k)]
        assert not diff, f"projection differs from the fold of the events in {diff}: {found}"

    def check_a_second_commit_is_refused(self) -> None:
        self.needs("effect_ledger")
        b, _ = self.crashed()
        before = len(b.call("events")["records"])
        kind = b.refusal("append", event={"type": "effect_committed", "call_id": "c2", "operation_id": "op-c2",
                                          "external_ref": "twice"})
        assert kind == "rule", f"a second commit of op-c2: {kind}"
        assert len(b.call("events")["records"]) == before, "the refused commit was written"

    def check_a_second_writer_is_locked_out(self) -> None:
        self.needs("writer_lock")
        a = self.spawn()
        self.create(a)
        b = self.spawn()
        kind = b.refusal("open", root=self.root, session="s", workspace=None, create=False)
        assert kind == "locked", f"a second writer: {kind}"
        a.call("close")
        assert self.reopen(b) == 1, "after close the lock is released"

    def check_blobs_round_trip_or_are_unsupported(self) -> None:
        a = self.spawn()
        self.create(a)
        if "blobs" not in self.claims:
            assert a.refusal("put_blob", hex="00ff") == "unsupported", "put_blob without claiming blobs"
            return
        ref = a.call("put_blob", hex="00ff10")
        a.kill()
        b = self.spawn()
        self.reopen(b)
        assert b.call("get_blob", **ref)["hex"] == "00ff10"
        assert b.refusal("get_blob", digest="0" * 64, size=1) == "not_found"


def main(argv: list[str] | None = None) -> int:
    wire.release()  # the self-test reports on stdout: it is no adapter
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if args in ([], ["-h"], ["--help"]):
        print(__doc__.strip(), file=sys.stderr if not args else sys.stdout)
        return 0 if args else 2
    command = shlex.split(args[0]) if len(args) == 1 else args
    if shutil.which(command[0]) is None:
        print(f"selftest: cannot run the adapter: {command[0]!r} is not an executable", file=sys.stderr)
        return 2
    probe = Adapter(command)
    try:
        claims = probe.hello()["capabilities"]
    except (AssertionError, Refused) as e:
        print(f"FAIL hello: {e}")
        return 1
    finally:
        probe.kill()
    print(f"adapter {shlex.join(command)} claims: {', '.join(claims) or 'nothing'}")
    names = sorted(n for n in dir(Checks) if n.startswith("check_"))
    passed = failed = skipped = 0
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            checks = Checks(command, claims, tmp)
            check: Callable[[], None] = getattr(checks, name)
            try:
                check()
            except Skip as e:
                skipped += 1
                print(f"skip {name}: {e}")
            except (AssertionError, Refused) as e:
                failed += 1
                print(f"FAIL {name}: {e}")
            except Exception:
                failed += 1
                print(f"FAIL {name}:\n{traceback.format_exc()}")
            else:
                passed += 1
                print(f"ok   {name}")
            finally:
                checks.finish()
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
