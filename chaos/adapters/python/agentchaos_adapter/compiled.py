"""The protocol schema compiled once into Python predicates.

`jsonschema` walks a schema anew for every value it checks, which cost a
kit-based adapter most of each round trip. `compile_schema` turns a
schema into nested closures, once, that answer only "fits or not"; the
kit asks `jsonschema` for the reason only when a value does not fit
(`schema.py`), so the checks and their messages are `jsonschema`'s.

It compiles the keywords the protocol schema uses, with the meaning
JSON Schema 2020-12 gives them as `jsonschema`'s `Draft202012Validator`
applies them (no format assertion). A keyword it does not know raises
`Unsupported` when the schema is compiled, and the kit then validates
that schema with `jsonschema` alone: a new keyword in the schema can
make the kit slower, never lax. tests/test_kit.py compares the two on
valid values and on mutations of them.
"""

from __future__ import annotations

from typing import Any, Callable

Predicate = Callable[[Any], bool]

# Keywords that only annotate: they never change what fits.
ANNOTATIONS = frozenset(("description", "title", "default", "examples", "$schema", "$comment", "format", "deprecated", "readOnly", "writeOnly"))


class Unsupported(Exception):
    """The schema uses a keyword (or a form of one) this module does not compile."""


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_integer(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return isinstance(x, float) and x.is_integer()


TYPES: dict[str, Predicate] = {
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
}


def _const(value: Any) -> Predicate:
    # jsonschema's `equal`: a string equals only that string, a boolean
    # only itself (never 1 or 0), None only None; other constants (numbers,
    # containers) are not compiled.
    if isinstance(value, str):
        return lambda x: isinstance(x, str) and x == value
    if isinstance(value, bool) or value is None:
        return lambda x: x is value
    raise Unsupported(f"const/enum value {value!r}")


def _all(checks: list[Predicate]) -> Predicate:
    if not checks:
        return lambda x: True
    if len(checks) == 1:
        return checks[0]
    return lambda x: all(c(x) for c in checks)


def compile_schema(schema: Any, defs: dict[str, Any]) -> Predicate:
    """A predicate that is true exactly for the values `schema` accepts;
    `#/$defs/NAME` references resolve in `defs`."""
    compiled: dict[str, Predicate] = {}

    def ref(target: str) -> Predicate:
        prefix = "#/$defs/"
        if not target.startswith(prefix) or target[len(prefix):] not in defs:
            raise Unsupported(f"$ref {target!r}")
        name = target[len(prefix):]
        if name not in compiled:
            # A recursive reference finds the slot filled by the time it runs.
            slot: list[Predicate] = []
            compiled[name] = lambda x: slot[0](x)
            slot.append(build(defs[name]))
            compiled[name] = slot[0]
        return compiled[name]

    def build(s: Any) -> Predicate:
        if s is True:
            return lambda x: True
        if s is False:
            return lambda x: False
        if not isinstance(s, dict):
            raise Unsupported(f"schema {s!r}")
        checks: list[Predicate] = []
        object_checks: list[Predicate] = []
        for key, value in s.items():
            if key in ANNOTATIONS or key == "$defs":
                continue
            if key == "type":
                names = value if isinstance(value, list) else [value]
                if not names or any(n not in TYPES for n in names):
                    raise Unsupported(f"type {value!r}")
                preds = [TYPES[n] for n in names]
                checks.append(preds[0] if len(preds) == 1 else (lambda x, p=preds: any(q(x) for q in p)))
            elif key == "const":
                checks.append(_const(value))
            elif key == "enum":
                options = [_const(v) for v in value]
                checks.append(lambda x, o=options: any(p(x) for p in o))
            elif key == "minimum":
                if not _is_number(value):
                    raise Unsupported(f"minimum {value!r}")
                checks.append(lambda x, m=value: not _is_number(x) or x >= m)
            elif key == "$ref":
                checks.append(ref(value))
            elif key == "allOf":
                checks.append(_all([build(v) for v in value]))
            elif key == "anyOf":
                options = [build(v) for v in value]
                checks.append(lambda x, o=options: any(p(x) for p in o))
            elif key == "oneOf":
                options = [build(v) for v in value]
                checks.append(lambda x, o=options: sum(1 for p in o if p(x)) == 1)
            elif key == "not":
                inner = build(value)
                checks.append(lambda x, i=inner: not i(x))
            elif key == "items":
                each = build(value)
                checks.append(lambda x, e=each: not isinstance(x, list) or all(e(v) for v in x))
            elif key == "required":
                names = tuple(value)
                object_checks.append(lambda x, n=names: all(k in x for k in n))
            elif key == "properties":
                props = {k: build(v) for k, v in value.items()}
                object_checks.append(lambda x, p=props: all(p[k](v) for k, v in x.items() if k in p))
            elif key == "additionalProperties":
                known = frozenset(s.get("properties", {}))
                if "patternProperties" in s:
                    raise Unsupported("additionalProperties beside patternProperties")
                extra = build(value)
                object_checks.append(lambda x, k=known, e=extra: all(e(v) for n, v in x.items() if n not in k))
            else:
                raise Unsupported(f"keyword {key!r}")
        if object_checks:
            on_objects = _all(object_checks)
            checks.append(lambda x, o=on_objects: not isinstance(x, dict) or o(x))
        return _all(checks)

    return build(schema)
