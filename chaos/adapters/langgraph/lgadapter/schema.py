"""What an event of protocol version 1 looks like (chaos/PROTOCOL.md, section 3).

`check_event` accepts exactly the shapes agentstore's `Event` accepts
(a known `type`, required fields present with the right JSON type,
optional fields absent or null) and names the first field that does not
fit. It never changes the event: what is stored is what was sent.
"""

from __future__ import annotations

from typing import Any, Callable

EFFECTS = ("none", "idempotent", "side_effect")
PHASES = ("requested", "started", "committed")
STEP_STATUSES = ("pending", "in_progress", "done", "blocked")

# Types whose events are nodes of the history tree (they carry `parent`).
MESSAGE_LIKE = frozenset(
    ("user_message", "assistant_message", "tool_call", "tool_result", "compaction")
)


class BadEvent(Exception):
    """The event does not fit its type; the message names the field."""


Check = Callable[[Any], bool]


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _uint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _any(_: Any) -> bool:
    return True


def _one_of(*words: str) -> Check:
    return lambda v: isinstance(v, str) and v in words


def _blob(v: Any) -> bool:
    return isinstance(v, dict) and _str(v.get("digest")) and _uint(v.get("size"))


def _steps(v: Any) -> bool:
    if not isinstance(v, list):
        return False
    for s in v:
        if not (isinstance(s, dict) and _str(s.get("id")) and _str(s.get("title"))):
            return False
        status = s.get("status")
        if status not in STEP_STATUSES:
            return False
        if status == "blocked" and not _str(s.get("reason")):
            return False
    return True


# type -> (required fields, optional fields); each field -> its check.
FIELDS: dict[str, tuple[dict[str, Check], dict[str, Check]]] = {
    "session_created": (
        {"session_id": _str, "schema_version": _uint, "workspace": _str},
        {},
    ),
    "run_started": ({"run_id": _str}, {}),
    "request_header": (
        {"run_id": _str, "model": _str, "system_prompt_hash": _str, "tools_hash": _str},
        {},
    ),
    "user_message": ({"text": _str}, {"parent": _str}),
    "assistant_message": ({"text": _str}, {"parent": _str}),
    "tool_call": (
        {"call_id": _str, "tool": _str, "args": _any, "effect": _one_of(*EFFECTS)},
        {"parent": _str, "operation_id": _str, "target": _str, "needs_approval": _bool},
    ),
    "approval": ({"call_id": _str, "decision": _one_of("approved", "denied")}, {}),
    "tool_started": ({"call_id": _str}, {}),
    "effect_committed": (
        {"call_id": _str, "operation_id": _str, "external_ref": _str},
        {},
    ),
    "tool_result": (
        {"call_id": _str, "status": _one_of("ok", "error")},
        {"parent": _str, "output": _any, "blob": _blob},
    ),
    "tool_recovery": (
        {"call_id": _str, "status": _one_of("uncertain"), "phase": _one_of(*PHASES)},
        {},
    ),
    "tool_reconciled": (
        {
            "call_id": _str,
            "outcome": _one_of("applied", "not_applied"),
            "evidence": _str,
        },
        {},
    ),
    "plan_updated": ({"goal": _str, "steps": _steps}, {}),
    "compaction": (
        {"summary": _str, "first_kept_id": _str, "tokens_before": _uint},
        {"parent": _str},
    ),
    "leaf_moved": ({"leaf": _str}, {}),
    "run_finished": (
        {"run_id": _str, "status": _one_of("completed", "failed", "cancelled")},
        {},
    ),
    "run_interrupted": ({"run_id": _str}, {}),
    "workspace_rebound": ({"from": _str, "to": _str}, {}),
}


def check_event(event: Any) -> dict[str, Any]:
    """Returns `event` if it fits its type, else raises `BadEvent`."""
    if not isinstance(event, dict):
        raise BadEvent("an event is a JSON object")
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in FIELDS:
        raise BadEvent(f"unknown event type {kind!r}")
    required, optional = FIELDS[kind]
    for name, ok in required.items():
        if name not in event:
            raise BadEvent(f"{kind}: missing field `{name}`")
        if not ok(event[name]):
            raise BadEvent(f"{kind}: field `{name}` has the wrong type or value")
    for name, ok in optional.items():
        value = event.get(name)
        if value is not None and not ok(value):
            raise BadEvent(f"{kind}: field `{name}` has the wrong type or value")
    return event


def seq_of_id(event_id: Any) -> int | None:
    """The seq an event id `e<seq>` names (canonical form only), else None."""
    if not isinstance(event_id, str) or not event_id.startswith("e"):
        return None
    digits = event_id[1:]
    if not digits.isascii() or not digits.isdigit():
        return None
    if len(digits) > 1 and digits.startswith("0"):
        return None
    return int(digits)
