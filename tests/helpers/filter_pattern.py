"""CloudWatch Logs filter patterns for unstructured log events, evaluated as AWS documents them ("Filter pattern
syntax for metric filters, subscription filters, filter log events, and Live Tail", Matching terms in unstructured
log events): terms separated by spaces must all occur; a term prefixed `?` is one of alternatives, any of which
occurs; a term prefixed `-` must not occur; a term in double quotes is an exact phrase, matched case-sensitively
anywhere in the event. A pattern is at most 1,024 characters (PutMetricFilter). Regular expressions (`%…%`) and
JSON or space-delimited patterns are refused here: the Xid watch's pattern uses none, so it takes none of the five
regex filter patterns a log group may hold."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PATTERN_CHARS = 1024
_TERM = re.compile(r'(?P<op>[?-]?)(?:"(?P<phrase>[^"]*)"|(?P<word>[^\s"]+))')


class BadPattern(ValueError):
    """A pattern CloudWatch Logs would refuse, or one this evaluator does not cover."""


@dataclass(frozen=True)
class Term:
    op: str  # "", "?" or "-"
    text: str


def parse(pattern: str) -> list[Term]:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise BadPattern(f"{len(pattern)} characters, past the {MAX_PATTERN_CHARS} a filter pattern may hold")
    if pattern.lstrip().startswith(("{", "[")) or "%" in pattern:
        raise BadPattern("JSON, space-delimited and regex patterns are not unstructured term patterns")
    terms, at = [], 0
    rest = pattern.strip()
    while at < len(rest):
        match = _TERM.match(rest, at)
        if match is None or not (match["phrase"] or match["word"]):
            raise BadPattern(f"unparsable at {rest[at:at + 20]!r}")
        terms.append(Term(match["op"], match["phrase"] if match["phrase"] is not None else match["word"]))
        at = match.end()
        while at < len(rest) and rest[at] == " ":
            at += 1
    alternatives = [t for t in terms if t.op == "?"]
    if alternatives and len(alternatives) != len(terms):
        raise BadPattern("`?` alternatives mixed with other terms: the documented syntax gives no meaning to it")
    return terms


def matches(pattern: str, event: str) -> bool:
    """Whether one log event (one message) matches."""
    terms = parse(pattern)
    if not terms:
        return True
    if terms[0].op == "?":
        return any(t.text in event for t in terms)
    return all((t.text in event) != (t.op == "-") for t in terms)
