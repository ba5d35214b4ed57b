"""The fold of a session's events: rules, projection, recovery marks, context.

`Model` folds records (`{seq, ts, event}`) in seq order as chaos/PROTOCOL.md
says (section 3's session rules, section 4's `projection`, `recover` and
`context`), the same fold as agentstore's `projection::fold`, so the
harness can compare the two field by field. The kit keeps one per open
session; a store persists records and never has to interpret them.

`Model.check` enforces every session rule. A store that cannot keep the
rules about side effects (no ledger: a second `effect_committed` of an
operation id, a call reusing a committed operation id, restarting a call
that started or committed) subclasses it with `effect_rules = False` and
does not claim `effect_ledger`; `advice` words the recovery notice.
Nothing here does I/O.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any, Callable

from .errors import RuleViolated
from .schema import MESSAGE_LIKE, seq_of_id


class Broken(Exception):
    """Stored events do not fold (a parent that is not an entry)."""


def event_id(seq: int) -> str:
    return f"e{seq}"


@dataclass
class Call:
    """A tool call without a result."""

    call_id: str
    seq: int
    tool: str
    args: Any
    effect: str
    operation_id: str | None
    target: str | None
    needs_approval: bool
    approval: str | None = None
    started: bool = False
    committed: str | None = None  # external_ref of its effect_committed
    recovery: str | None = None  # phase of its tool_recovery since it last started
    reconciled: str | None = None

    def phase(self) -> str:
        """How far it got: a commit, else a durable intent, else nothing."""
        if self.committed is not None:
            return "committed"
        if self.started:
            return "started"
        return "requested"

    def uncertain(self) -> bool:
        return self.recovery is not None and self.reconciled is None

    def view(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "args": self.args,
            "effect": self.effect,
            "operation_id": self.operation_id,
            "target": self.target,
            "needs_approval": self.needs_approval,
            "approval": self.approval,
            "phase": self.phase(),
            "external_ref": self.committed,
            "recovery": self.recovery,
            "reconciled": self.reconciled,
        }


@dataclass(frozen=True)
class Compaction:
    seq: int
    summary: str
    first_kept: int
    tokens_before: int


@dataclass(frozen=True)
class Node:
    parent: int | None
    compaction: Compaction | None


class Model:
    """A session's state, folded from its records in seq order."""

    # Whether `check` keeps the rules about side effects (the ledger).
    effect_rules = True

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.workspace: str | None = None
        self.open_run: str | None = None
        self.runs: set[str] = set()
        self.interrupted: list[str] = []
        self.calls: dict[str, Call] = {}
        self.committed_ops: set[str] = set()
        self.branch: list[int] = []  # seqs, oldest first (sorted: seqs grow along a path)
        self.compaction: Compaction | None = None
        self.plan: dict[str, Any] | None = None
        self.nodes: dict[int, Node] = {}

    @property
    def next_seq(self) -> int:
        return len(self.records)

    # ---- rules -------------------------------------------------------------

    def _open_call(self, call_id: str, what: str) -> Call:
        call = self.calls.get(call_id)
        if call is None:
            raise RuleViolated(f"{what} for call {call_id!r}, which is unknown or already has a result")
        return call

    def _check_parent(self, parent: Any) -> None:
        if parent is None:
            return
        seq = seq_of_id(parent)
        if seq is None or seq >= self.next_seq:
            raise RuleViolated(f"parent {parent!r} does not exist")
        if seq not in self.nodes:
            raise RuleViolated(f"parent {parent!r} is not a message-like entry")

    def check(self, ev: dict[str, Any]) -> None:
        """Raises `RuleViolated` if `ev` may not be appended now."""
        kind = ev["type"]
        if kind == "session_created":
            if self.next_seq != 0:
                raise RuleViolated("session_created must be the first event")
        elif kind == "run_started":
            run_id = ev["run_id"]
            if self.open_run is not None:
                raise RuleViolated(f"run {run_id!r} started while run {self.open_run!r} is open")
            if run_id in self.runs:
                raise RuleViolated(f"run id {run_id!r} was already used")
        elif kind in ("run_finished", "run_interrupted", "request_header"):
            if self.open_run != ev["run_id"]:
                raise RuleViolated(f"{kind} for run {ev['run_id']!r}, which is not the open run")
        elif kind in ("user_message", "assistant_message"):
            self._check_parent(ev.get("parent"))
        elif kind == "tool_call":
            self._check_parent(ev.get("parent"))
            if ev["call_id"] in self.calls:
                raise RuleViolated(f"call id {ev['call_id']!r} is already open")
            if ev["effect"] == "side_effect" and ev.get("operation_id") is None:
                raise RuleViolated(f"side-effecting call {ev['call_id']!r} needs an operation_id")
            op = ev.get("operation_id")
            if self.effect_rules and op is not None and op in self.committed_ops:
                raise RuleViolated(f"operation {op!r} is already committed (call {ev['call_id']!r} reuses it)")
        elif kind == "approval":
            call = self._open_call(ev["call_id"], "approval")
            if not call.needs_approval:
                raise RuleViolated(f"call {call.call_id!r} does not need approval")
            if call.approval is not None:
                raise RuleViolated(f"call {call.call_id!r} already has an approval decision")
        elif kind == "tool_started":
            call = self._open_call(ev["call_id"], "tool_started")
            if call.needs_approval and call.approval != "approved":
                raise RuleViolated(f"call {call.call_id!r} needs a durable approval before it starts")
            if self.effect_rules:
                self._check_restart(call)
        elif kind == "effect_committed":
            call = self._open_call(ev["call_id"], "effect_committed")
            if call.operation_id != ev["operation_id"]:
                raise RuleViolated(
                    f"effect_committed for call {call.call_id!r} names operation "
                    f"{ev['operation_id']!r}, the call has {call.operation_id!r}"
                )
            if not call.started:
                raise RuleViolated(f"effect_committed for call {call.call_id!r} before its tool_started")
            if self.effect_rules and ev["operation_id"] in self.committed_ops:
                raise RuleViolated(f"operation {ev['operation_id']!r} is already committed (second commit)")
        elif kind == "tool_result":
            self._check_parent(ev.get("parent"))
            self._open_call(ev["call_id"], "tool_result")
        elif kind == "tool_recovery":
            if self._open_call(ev["call_id"], "tool_recovery").uncertain():
                raise RuleViolated(f"call {ev['call_id']!r} is already marked uncertain")
        elif kind == "tool_reconciled":
            call = self._open_call(ev["call_id"], "tool_reconciled")
            if call.recovery is None:
                raise RuleViolated(f"call {call.call_id!r} was never marked uncertain")
            if call.reconciled is not None:
                raise RuleViolated(f"call {call.call_id!r} is already reconciled")
        elif kind == "compaction":
            parent = ev.get("parent")
            self._check_parent(parent)
            kept = seq_of_id(ev["first_kept_id"])
            on_branch = kept is not None and self._on_branch(kept)
            leaf = self.branch[-1] if self.branch else None
            if not on_branch or parent is None or seq_of_id(parent) != leaf:
                raise RuleViolated(
                    "compaction must extend the active leaf and keep an entry of the "
                    f"active branch ({ev['first_kept_id']!r} is not on it)"
                )
        elif kind == "leaf_moved":
            self._check_parent(ev["leaf"])

    @staticmethod
    def _check_restart(call: Call) -> None:
        """A committed call never starts again; a started one only after a
        recovery mark and, for a side effect marked started or committed,
        only after it was reconciled `not_applied`."""
        if call.committed is not None:
            raise RuleViolated(f"call {call.call_id!r} committed its effect; it never starts again")
        if not call.started:
            return
        if call.recovery is None:
            raise RuleViolated(f"call {call.call_id!r} already started; it starts again only after recovery")
        risky = call.effect == "side_effect" and call.recovery in ("started", "committed")
        if risky and call.reconciled != "not_applied":
            raise RuleViolated(
                f"side effect {call.call_id!r} is uncertain (phase {call.recovery}); "
                "it starts again only after tool_reconciled not_applied"
            )

    # ---- fold --------------------------------------------------------------

    def _on_branch(self, seq: int) -> bool:
        i = bisect.bisect_left(self.branch, seq)
        return i < len(self.branch) and self.branch[i] == seq

    def apply(self, record: dict[str, Any]) -> None:
        """Folds the next record (its seq must be `next_seq`)."""
        seq, ev = record["seq"], record["event"]
        assert seq == self.next_seq, f"record {seq} folded at {self.next_seq}"
        self.records.append(record)
        kind = ev["type"]
        if kind in MESSAGE_LIKE:
            parent = ev.get("parent")
            compaction = None
            if kind == "compaction":
                kept = seq_of_id(ev["first_kept_id"])
                compaction = Compaction(
                    seq, ev["summary"], seq if kept is None else kept, ev["tokens_before"]
                )
            parent_seq = None if parent is None else seq_of_id(parent)
            self.nodes[seq] = Node(parent_seq, compaction)
            self._attach(seq, parent_seq)
        if kind == "session_created":
            self.workspace = ev["workspace"]
        elif kind == "workspace_rebound":
            self.workspace = ev["to"]
        elif kind == "run_started":
            self.open_run = ev["run_id"]
            self.runs.add(ev["run_id"])
            self.interrupted.clear()
        elif kind == "run_finished":
            self.open_run = None
        elif kind == "run_interrupted":
            self.open_run = None
            self.interrupted.append(ev["run_id"])
        elif kind == "tool_call":
            self.calls[ev["call_id"]] = Call(
                call_id=ev["call_id"],
                seq=seq,
                tool=ev["tool"],
                args=ev["args"],
                effect=ev["effect"],
                operation_id=ev.get("operation_id"),
                target=ev.get("target"),
                needs_approval=bool(ev.get("needs_approval") or False),
            )
        elif kind == "approval":
            if call := self.calls.get(ev["call_id"]):
                call.approval = ev["decision"]
        elif kind == "tool_started":
            if call := self.calls.get(ev["call_id"]):
                call.started = True
                call.recovery = None
                call.reconciled = None
        elif kind == "effect_committed":
            self.committed_ops.add(ev["operation_id"])
            if call := self.calls.get(ev["call_id"]):
                call.committed = ev["external_ref"]
        elif kind == "tool_result":
            self.calls.pop(ev["call_id"], None)
        elif kind == "tool_recovery":
            if call := self.calls.get(ev["call_id"]):
                call.recovery = ev["phase"]
                call.reconciled = None
        elif kind == "tool_reconciled":
            if call := self.calls.get(ev["call_id"]):
                call.reconciled = ev["outcome"]
        elif kind == "plan_updated":
            self.plan = {"goal": ev["goal"], "steps": ev["steps"]}
        elif kind == "leaf_moved":
            leaf = seq_of_id(ev["leaf"])
            if leaf is not None:
                self._switch_to(leaf)
        if kind == "compaction":
            self.compaction = self.nodes[seq].compaction
            cut = bisect.bisect_left(self.branch, self.compaction.first_kept)
            del self.branch[:cut]

    def _attach(self, seq: int, parent: int | None) -> None:
        if parent is None:
            self.branch.clear()
            self.compaction = None
        elif not (self.branch and self.branch[-1] == parent):
            self._switch_to(parent)
        self.branch.append(seq)

    def _switch_to(self, leaf: int) -> None:
        if self._on_branch(leaf):
            c = self.compaction
            if c is None or c.seq <= leaf:
                del self.branch[bisect.bisect_right(self.branch, leaf) :]
                return
        # Walk up to the root, or to the first kept entry of the nearest
        # compaction on the path.
        path: list[int] = []
        compaction: Compaction | None = None
        cursor: int | None = leaf
        while cursor is not None:
            if compaction is not None and cursor < compaction.first_kept:
                break
            node = self.nodes.get(cursor)
            if node is None:
                raise Broken(f"history tree refers to {event_id(cursor)}, which is not an entry")
            if compaction is None:
                compaction = node.compaction
            path.append(cursor)
            cursor = node.parent
        path.reverse()
        self.branch = path
        self.compaction = compaction

    # ---- views -------------------------------------------------------------

    def open_calls(self) -> list[Call]:
        return sorted(self.calls.values(), key=lambda c: c.seq)

    def uncertain(self) -> list[dict[str, Any]]:
        return [
            {
                "call_id": c.call_id,
                "tool": c.tool,
                "target": c.target,
                "phase": c.recovery,
                "effect": c.effect,
                "operation_id": c.operation_id,
                "args": c.args,
                "external_ref": c.committed,
            }
            for c in self.open_calls()
            if c.uncertain()
        ]

    def recovery_marks(self, phase_of: Callable[[Call], str]) -> list[dict[str, Any]]:
        """What recovery appends now: `run_interrupted` for the open run and
        one `tool_recovery` per call without a result and without a mark
        since it last started, with the phase `phase_of` gives it."""
        marks: list[dict[str, Any]] = []
        if self.open_run is not None:
            marks.append({"type": "run_interrupted", "run_id": self.open_run})
        for call in self.open_calls():
            if call.recovery is None:
                marks.append(
                    {
                        "type": "tool_recovery",
                        "call_id": call.call_id,
                        "status": "uncertain",
                        "phase": phase_of(call),
                    }
                )
        return marks

    def projection(self) -> dict[str, Any]:
        return {
            "next_seq": self.next_seq,
            "open_run": self.open_run,
            "interrupted_runs": list(self.interrupted),
            "leaf": event_id(self.branch[-1]) if self.branch else None,
            "branch": [event_id(s) for s in self.branch],
            "open_calls": [c.view() for c in self.open_calls()],
            # Code point order is UTF-8 byte order.
            "committed_operations": sorted(self.committed_ops),
            "plan": self.plan,
        }

    def context(self, budget: int | None) -> str:
        """The model's view of the active branch: summary, plan, entries
        (oldest dropped first to fit `budget` tokens of 4 bytes) and the
        recovery notice, which no budget trims."""
        head = ""
        if self.compaction is not None:
            c = self.compaction
            head += f"Summary of the earlier conversation ({c.tokens_before} tokens):\n{c.summary}\n"
        if self.plan is not None:
            head += f"Plan: {self.plan['goal']}\n"
            for s in self.plan["steps"]:
                status = s["status"].replace("_", " ")
                if s["status"] == "blocked":
                    status = f"blocked: {s['reason']}"
                head += f"  {s['id']} {s['title']} ({status})\n"
        entries = [t for seq in self.branch if (t := _entry(self.records[seq]["event"]))]
        notice = self._notice()
        skip = 0
        if budget is not None:
            total = _tokens(head) + _tokens(notice) + sum(_tokens(e) for e in entries)
            while total > budget and skip < len(entries):
                total -= _tokens(entries[skip])
                skip += 1
        out = head
        if skip:
            out += f"({skip} earlier entries left out to fit the budget)\n"
        return out + "".join(entries[skip:]) + notice

    def _notice(self) -> str:
        calls = [c for c in self.open_calls() if c.uncertain()]
        if not self.interrupted and not calls:
            return ""
        out = "RECOVERY: the previous process was killed. Check these before relying on them:\n"
        for run in self.interrupted:
            out += f"  run {run} was interrupted before it finished.\n"
        for c in calls:
            what = f"call {c.call_id} ({c.tool}"
            if c.target is not None:
                what += f" on {c.target}"
            if c.operation_id is not None:
                what += f", operation {c.operation_id}"
            out += f"  {what}) is uncertain, phase {c.recovery}: {self.advice(c)}\n"
        return out

    def advice(self, call: Call) -> str:
        """What the recovery notice tells the model to do about an uncertain call."""
        if call.recovery == "requested":
            return "it never started; run it if it is still wanted."
        if call.recovery == "started":
            return "it may have run; ask the tool about it before running it again."
        return f"its effect happened (ref {call.committed}); do not run it again."


def _tokens(text: str) -> int:
    return -(-len(text.encode()) // 4)


def _entry(ev: dict[str, Any]) -> str | None:
    kind = ev["type"]
    if kind == "user_message":
        return f"user: {ev['text']}\n"
    if kind == "assistant_message":
        return f"assistant: {ev['text']}\n"
    if kind == "tool_call":
        on = f" on {ev['target']}" if ev.get("target") is not None else ""
        return f"tool call {ev['call_id']}: {ev['tool']}{on} {json.dumps(ev['args'])}\n"
    if kind == "tool_result":
        blob, output = ev.get("blob"), ev.get("output")
        if blob is not None:
            body = f"(blob {blob['digest']}, {blob['size']} bytes)"
        elif isinstance(output, str):
            body = output
        else:
            body = "" if output is None else json.dumps(output)
        return f"tool result {ev['call_id']} ({ev['status']}): {body}\n"
    return None
