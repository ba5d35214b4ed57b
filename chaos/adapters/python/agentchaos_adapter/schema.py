"""The shapes of protocol version 1, read from the protocol's JSON Schema.

`protocol.schema.json` beside this module is a copy of the committed
protocol/schema/protocol.schema.json (generated from the Rust types of
agentchaos-protocol); protocol/tests/schema.rs fails when the two differ,
and `UPDATE_SCHEMA=1 cargo test -p agentchaos-protocol` rewrites both. It
is package data, so the kit validates the same way wherever it is
installed, without the repository beside it.

The checks accept exactly what the schema accepts and name the first part
that does not fit; they never change what they check. Each schema is
compiled once into a predicate (`compiled.py`); `jsonschema` is imported
and asked only for the reason a value does not fit. This module holds
no shape of its own, only the two facts about ids and history nodes the
schema cannot say.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from .compiled import Predicate, Unsupported, compile_schema

SCHEMA_FILE = "protocol.schema.json"

# Types whose events are nodes of the history tree (they carry `parent`).
MESSAGE_LIKE = frozenset(("user_message", "assistant_message", "tool_call", "tool_result", "compaction"))


class BadShape(Exception):
    """A line, a body or an event does not fit the schema; the message names the field."""


def _load() -> dict[str, Any]:
    try:
        text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
        return json.loads(text)
    except (OSError, ValueError) as e:
        raise RuntimeError(f"cannot read the packaged protocol schema {SCHEMA_FILE}: {e}") from e


DOCUMENT = _load()
_DEFS: dict[str, Any] = DOCUMENT["$defs"]


class _Check:
    """One schema: its compiled predicate says whether a value fits;
    `jsonschema`, built on the first value that does not, says why (and
    has the last word: a value it accepts fits)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = {**schema, "$defs": _DEFS}
        self.fits: Predicate | None
        try:
            self.fits = compile_schema(schema, _DEFS)
        except Unsupported:
            self.fits = None
        self.validator: Any = None

    def problem(self, value: Any) -> str | None:
        """The most relevant way `value` does not fit, in one line, or None."""
        if self.fits is not None and self.fits(value):
            return None
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import best_match

        if self.validator is None:
            self.validator = Draft202012Validator(self.schema)
        error = best_match(self.validator.iter_errors(value))
        if error is None:
            return None
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        message = " ".join(error.message.split())
        if len(message) > 200:
            message = message[:200] + "…"
        return f"at {where}: {message}" if where else message


def _validator(schema: dict[str, Any]) -> _Check:
    return _Check(schema)


def _variants(union: dict[str, Any], tag: str) -> dict[str, _Check]:
    """A validator for each variant of a tagged union, by its tag's value."""
    out = {}
    for variant in union["oneOf"]:
        own = {k: v for k, v in union.items() if k not in ("oneOf", "description")}
        out[variant["properties"][tag]["const"]] = _validator({"allOf": [own, variant]})
    return out


_EVENT_REF = {"$ref": "#/$defs/Event"}


def _without_events(union: dict[str, Any]) -> dict[str, Any]:
    """`union` with each variant's event properties left unchecked: an
    event is checked against its own type's variant first (`check_event`),
    never again against all of them (`oneOf`, most of a request's cost)."""
    variants = []
    for variant in union["oneOf"]:
        props = {k: (True if v == _EVENT_REF else v) for k, v in variant.get("properties", {}).items()}
        variants.append({**variant, "properties": props})
    return {**union, "oneOf": variants}


_REQUESTS = _variants(_without_events(_DEFS["RequestLine"]), "op")
_EVENTS = _variants(_DEFS["Event"], "type")
_REPLY_LINE = _validator(_DEFS["ReplyLine"])
_REPLIES = {op: _validator(ref) for op, ref in DOCUMENT["replies"].items()}
# The fields of each op that hold an event (checked by `check_event`).
_REQUEST_EVENT_FIELDS = {
    v["properties"]["op"]["const"]: tuple(k for k, p in v["properties"].items() if p == _EVENT_REF)
    for v in _DEFS["RequestLine"]["oneOf"]
}
OPS = frozenset(_REQUESTS)
EVENT_TYPES = frozenset(_EVENTS)
CAPABILITIES = tuple(v["const"] for v in _DEFS["Capability"]["oneOf"])
ERROR_KINDS = frozenset(v["const"] for v in _DEFS["ErrorKind"]["oneOf"])


def _problem(check: _Check, value: Any) -> str | None:
    """The most relevant way `value` does not fit, in one line, or None."""
    return check.problem(value)


def check_request(req: Any) -> dict[str, Any]:
    """Returns `req` if it fits $defs/RequestLine, else raises `BadShape`."""
    if not isinstance(req, dict):
        raise BadShape("a request is a JSON object")
    op = req.get("op")
    if not isinstance(op, str) or op not in _REQUESTS:
        raise BadShape(f"unknown op {op!r}")
    for field in _REQUEST_EVENT_FIELDS.get(op, ()):
        if field in req:
            try:
                check_event(req[field])
            except BadShape as e:
                raise BadShape(f"{op}: {field} does not fit: {e}") from e
    problem = _problem(_REQUESTS[op], req)
    if problem is not None:
        raise BadShape(f"{op}: {problem}")
    return req


def check_event(event: Any) -> dict[str, Any]:
    """Returns `event` if it fits $defs/Event, else raises `BadShape`."""
    if not isinstance(event, dict):
        raise BadShape("an event is a JSON object")
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in _EVENTS:
        raise BadShape(f"unknown event type {kind!r}")
    problem = _problem(_EVENTS[kind], event)
    if problem is not None:
        raise BadShape(f"{kind}: {problem}")
    return event


def check_reply(op: str, reply: Any) -> dict[str, Any]:
    """Returns `reply` (a whole reply line, parsed) if it fits $defs/ReplyLine
    and, for `ok`, the body the schema names for `op`; else raises `BadShape`."""
    problem = _problem(_REPLY_LINE, reply)
    if problem is None and isinstance(reply, dict) and "ok" in reply:
        problem = _problem(_REPLIES[op], reply["ok"])
    if problem is not None:
        raise BadShape(f"{op} reply: {problem}")
    return reply


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
