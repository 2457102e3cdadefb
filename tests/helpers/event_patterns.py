"""Amazon EventBridge event-pattern matching, small, for testing what rules the emitted events fire (issue #38).

No maintained Python package implements EventBridge's matching (AWS's own is event-ruler, in Java; moto's covers a
subset), so this follows the EventBridge User Guide ("Amazon EventBridge event patterns", "Content filtering in
Amazon EventBridge event patterns", "Comparison operators") and is table-tested against its examples
(tests/embedded/test_event_patterns.py):

- A pattern is an object; every field it names must match (AND). A nested object matches the event's nested
  object field by field. A field's value is an array of matchers: any one matching suffices (OR).
- An event field whose value is an array matches when any of its elements matches (the arrays intersect).
- Matchers: an exact value (string, number compared numerically, true/false, null); `prefix`, `suffix` (strings;
  either may take `{"equals-ignore-case": …}`); `equals-ignore-case`; `wildcard` (`*` any run of characters);
  `numeric` (`[op, n, op, n]` with `<`, `<=`, `=`, `>=`, `>`; numbers only); `exists` (true: the field is present
  as a leaf; false: absent); `anything-but` (a value, a list of values, or `prefix`/`suffix`/`equals-ignore-case`/
  `wildcard`; the field must be present); `$or` (a list of patterns, any one matching).
- An empty matcher array or an unknown operator is an invalid pattern: PatternError, never "no match".
"""

from __future__ import annotations

import re
from typing import Any

_MISSING = object()
NUMERIC_OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, "=": lambda a, b: a == b,
               ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}


class PatternError(ValueError):
    """The pattern is not one EventBridge would accept (PutRule answers InvalidEventPatternException)."""


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    if not isinstance(pattern, dict) or not pattern:
        raise PatternError("a pattern is a non-empty JSON object")
    return _object(pattern, event)


def _object(pattern: dict[str, Any], value: Any) -> bool:
    for key, wanted in pattern.items():
        if key == "$or":
            if not isinstance(wanted, list) or len(wanted) < 2:
                raise PatternError("$or takes a list of at least two patterns")
            if not any(_object(p, value) for p in wanted):
                return False
            continue
        found = value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
        if isinstance(wanted, dict):
            if not wanted:
                raise PatternError(f"{key}: an empty object")
            if not isinstance(found, dict) or not _object(wanted, found):
                return False
        elif isinstance(wanted, list):
            if not wanted:
                raise PatternError(f"{key}: an empty array matches nothing; EventBridge refuses it")
            if not any(_leaf(m, found) for m in wanted):
                return False
        else:
            raise PatternError(f"{key}: a field's matchers are an array (or a nested object)")
    return True


def _values(found: Any) -> list[Any]:
    """An event field's values: its elements when it is an array."""
    if found is _MISSING:
        return []
    return list(found) if isinstance(found, list) else [found]


def _leaf(matcher: Any, found: Any) -> bool:
    if not isinstance(matcher, dict):
        return any(_equal(matcher, v) for v in _values(found))
    if len(matcher) != 1:
        raise PatternError(f"a matcher object names one operator: {matcher}")
    (op, arg), = matcher.items()
    if op == "exists":
        if not isinstance(arg, bool):
            raise PatternError("exists takes true or false")
        present = found is not _MISSING and not isinstance(found, dict)
        return present if arg else found is _MISSING
    values = _values(found)
    if op == "anything-but":
        return bool(values) and any(not _any_of(arg, v) for v in values)
    return any(_operator(op, arg, v) for v in values)


def _any_of(arg: Any, value: Any) -> bool:
    """Whether `value` is what an anything-but excludes."""
    if isinstance(arg, list):
        return any(_equal(a, value) for a in arg)
    if isinstance(arg, dict):
        (op, inner), = arg.items()
        if op not in ("prefix", "suffix", "equals-ignore-case", "wildcard"):
            raise PatternError(f"anything-but does not take {op}")
        return _operator(op, inner, value)
    return _equal(arg, value)


def _equal(wanted: Any, value: Any) -> bool:
    if isinstance(wanted, bool) or isinstance(value, bool) or wanted is None or value is None:
        return wanted is value or (wanted == value and type(wanted) is type(value))
    if isinstance(wanted, (int, float)) and isinstance(value, (int, float)):
        return float(wanted) == float(value)
    return isinstance(wanted, str) and isinstance(value, str) and wanted == value


def _operator(op: str, arg: Any, value: Any) -> bool:
    if op in ("prefix", "suffix"):
        ignore = isinstance(arg, dict)
        text = arg["equals-ignore-case"] if ignore else arg
        if not isinstance(text, str) or not isinstance(value, str):
            return False
        subject, text = (value.lower(), text.lower()) if ignore else (value, text)
        return subject.startswith(text) if op == "prefix" else subject.endswith(text)
    if op == "equals-ignore-case":
        return isinstance(value, str) and value.lower() == str(arg).lower()
    if op == "wildcard":
        return isinstance(value, str) and re.fullmatch(".*".join(map(re.escape, str(arg).split("*"))), value,
                                                       re.DOTALL) is not None
    if op == "numeric":
        if not isinstance(arg, list) or len(arg) not in (2, 4):
            raise PatternError("numeric takes [op, n] or [op, n, op, n]")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if any(arg[i] not in NUMERIC_OPS for i in range(0, len(arg), 2)):
            raise PatternError(f"numeric operators are {', '.join(NUMERIC_OPS)}: {arg}")
        return all(NUMERIC_OPS[arg[i]](value, arg[i + 1]) for i in range(0, len(arg), 2))
    raise PatternError(f"unknown operator {op!r}")
