"""What the lines of protocol version 1 look like, read from the committed
JSON Schema (protocol/schema/protocol.schema.json, generated from the Rust
types of the crate agentchaos-protocol; chaos/PROTOCOL.md says what the
fields mean).

`check_request` and `check_event` accept exactly what the schema accepts
and name the first part that does not fit; they never change what they
check: what is stored is what was sent. This module holds no shape of its
own, only the two facts about ids and history nodes the schema cannot say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

SCHEMA_PATH = Path(__file__).resolve().parents[4] / "protocol" / "schema" / "protocol.schema.json"

# Types whose events are nodes of the history tree (they carry `parent`).
MESSAGE_LIKE = frozenset(
    ("user_message", "assistant_message", "tool_call", "tool_result", "compaction")
)


class BadEvent(Exception):
    """The event does not fit its type; the message names the field."""


class BadShape(Exception):
    """A request does not fit the schema; the message names the field."""


def _load() -> dict[str, Any]:
    try:
        with open(SCHEMA_PATH, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RuntimeError(f"cannot read the protocol schema {SCHEMA_PATH}: {e}") from e


_DOCUMENT = _load()
_DEFS: dict[str, Any] = _DOCUMENT["$defs"]


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator({**schema, "$defs": _DEFS})


def _variants(union: dict[str, Any], tag: str) -> dict[str, Draft202012Validator]:
    """A validator for each variant of a tagged union, by its tag's value."""
    out = {}
    for variant in union["oneOf"]:
        own = {k: v for k, v in union.items() if k not in ("oneOf", "description")}
        out[variant["properties"][tag]["const"]] = _validator({"allOf": [own, variant]})
    return out


_REQUESTS = _variants(_DEFS["RequestLine"], "op")
_EVENTS = _variants(_DEFS["Event"], "type")
EVENT_TYPES = frozenset(_EVENTS)


def _problem(validator: Draft202012Validator, value: Any) -> str | None:
    """The most relevant way `value` does not fit, in one line, or None."""
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    message = " ".join(error.message.split())
    if len(message) > 200:
        message = message[:200] + "…"
    return f"at {where}: {message}" if where else message


def check_request(req: Any) -> dict[str, Any]:
    """Returns `req` if it fits $defs/RequestLine, else raises `BadShape`."""
    if not isinstance(req, dict):
        raise BadShape("a request is a JSON object")
    op = req.get("op")
    if not isinstance(op, str) or op not in _REQUESTS:
        raise BadShape(f"unknown op {op!r}")
    if op == "append" and "event" in req:
        try:
            check_event(req["event"])
        except BadEvent as e:
            raise BadShape(f"append: event does not fit: {e}") from e
    problem = _problem(_REQUESTS[op], req)
    if problem is not None:
        raise BadShape(f"{op}: {problem}")
    return req


def check_event(event: Any) -> dict[str, Any]:
    """Returns `event` if it fits $defs/Event, else raises `BadEvent`."""
    if not isinstance(event, dict):
        raise BadEvent("an event is a JSON object")
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in _EVENTS:
        raise BadEvent(f"unknown event type {kind!r}")
    problem = _problem(_EVENTS[kind], event)
    if problem is not None:
        raise BadEvent(f"{kind}: {problem}")
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
