"""Account IDs never leave the auditor (RULES §0.7, OUTPUT-CONTRACT privacy), in any form: inside ARNs and
owner fields, inside bucket names (`sagemaker-us-west-2-444455556666`), next to letters, and the console's
dashed form `1111-2222-3333`.

Redact account IDs, not every 12-digit number: ParallelCluster log groups end in a 12-digit timestamp
(`/aws/parallelcluster/<cluster>-202608261551`) and are quoted intact, and resource IDs, UUIDs and digests
keep their digits (`i-0123456789012abcd`, query IDs, cache keys)."""

from __future__ import annotations

import functools
import re
from bisect import bisect_right
from collections.abc import Iterable
from datetime import datetime
from typing import Any

MASK = "<account>"
DASHED = re.compile(r"(?<![\d-])\d{4}-\d{4}-\d{4}(?![\d-])")
TWELVE = re.compile(r"(?<!\d)\d{12}(?!\d)")
# Spans whose digits are not account IDs: AWS resource IDs (prefix-hex), UUIDs, long hex digests.
PROTECTED = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|(?<![\w])(?:i|sg|subnet|vpc|eni|vol|snap|ami|cr|fs|rtb|igw|nat|tgw|lt|fc|acl|pcx|dopt|eipalloc)-[0-9a-f]{8,17}\b"
    r"|(?<![0-9a-fA-F])[0-9a-fA-F]{16,}(?![0-9a-fA-F])")


@functools.lru_cache(maxsize=4096)
def _timestamp(digits: str) -> bool:
    """A ParallelCluster log-group suffix: YYYYMMDDhhmm."""
    try:
        datetime.strptime(digits, "%Y%m%d%H%M")
    except ValueError:
        return False
    return digits.startswith(("19", "20"))


# What any account ID in either form holds: most strings of a result (names, times, verdicts, sentences) hold no such
# run, and one search lets them through untouched instead of three scans (a 10,000-node result has ~300,000 strings).
MAY_HOLD = re.compile(r"\d{4}-?\d{4}-?\d{4}")


def redact(text: str, account_ids: set[str] | frozenset[str] = frozenset()) -> str:
    """`text` with every account ID masked. Only the lines holding a MAY_HOLD run are redacted: no form of an account
    ID, a protected span or a timestamp crosses a newline, and each pattern sees a newline as it sees the text's edge
    (a non-digit, non-word, non-dash), so each line redacts as it would inside the whole text (a 10,000-node report's
    2 MB hold ~3,000 such lines; tests/test_redact.py shows the two agree on any text)."""
    found = MAY_HOLD.search(text)
    if found is None:
        return text
    out, done = [], 0
    while found is not None:
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.end())
        end = len(text) if end < 0 else end
        out += [text[done:start], redact_every_form(text[start:end], account_ids)]
        done = end
        found = MAY_HOLD.search(text, end)
    out.append(text[done:])
    return "".join(out)


def redact_every_form(text: str, account_ids: set[str] | frozenset[str] = frozenset()) -> str:
    """`redact` without the MAY_HOLD shortcut, on the whole text (tests/report/test_redact.py: the two agree)."""
    text = DASHED.sub(MASK, text)
    masked = [m for m in TWELVE.finditer(text) if not _quoted_timestamp(text, m, account_ids)]
    if not masked:
        return text  # every 12-digit run is a log group's timestamp: no protected span needs finding
    # finditer's spans are ordered and disjoint: only the last one starting at or before a match can hold it
    # (a bisection, not a scan: a 10,000-node report holds tens of thousands of both)
    protected = [m.span() for m in PROTECTED.finditer(text)]
    starts = [a for a, _ in protected]
    out, last = [], 0
    for m in masked:
        start, end = m.span()
        holder = bisect_right(starts, start) - 1
        if holder >= 0 and end <= protected[holder][1]:
            continue
        out.append(text[last:start] + MASK)
        last = end
    out.append(text[last:])
    return "".join(out)


def _quoted_timestamp(text: str, match: re.Match[str], account_ids: set[str] | frozenset[str]) -> bool:
    """`<cluster>-202608261551`: a log group's creation timestamp, quoted intact (unless it is a known account)."""
    start = match.start()
    return start > 0 and text[start - 1] == "-" and _timestamp(match.group(0)) and match.group(0) not in account_ids


def redact_tree(value: Any, keep: frozenset[str] = frozenset({"cluster.arn"}),
                account_ids: frozenset[str] = frozenset()) -> Any:
    """Every string of a JSON document redacted, except the dotted paths in `keep` (OUTPUT-CONTRACT: only
    `cluster.arn` may keep the account ID); `account_ids` are the audit's known accounts (masked even where one
    reads as a log group's timestamp)."""
    return redact_trees([value], keep, account_ids)[0]


def redact_trees(values: Iterable[Any], keep: frozenset[str] = frozenset({"cluster.arn"}),
                 account_ids: frozenset[str] = frozenset()) -> list[Any]:
    """`redact_tree` of each value, a string met in several redacted once for all (a grouped action naming every node
    is on each node's record: 10,000 records redacted it 10,000 times)."""
    prefixes = frozenset(".".join(p.split(".")[:depth]) for p in keep for depth in range(1, p.count(".") + 2))
    redactor = _Redactor(keep, prefixes, account_ids)
    return [redactor.tree(value, "") for value in values]


class _Redactor:
    """One document's walk. `path` is the dotted path only while it may still lead to a kept one (None below that:
    no path is built for the ~100,000 dicts a fleet's result holds); a string met again (a log group on every
    coverage row) is redacted once."""

    def __init__(self, keep: frozenset[str], prefixes: frozenset[str], account_ids: frozenset[str]) -> None:
        self.keep, self.prefixes, self.account_ids = keep, prefixes, account_ids
        self.seen: dict[str, str] = {}

    def text(self, value: str) -> str:
        done = self.seen.get(value)
        if done is None:
            done = self.seen[value] = redact(value, self.account_ids)
        return done

    def tree(self, value: Any, path: str | None) -> Any:
        if isinstance(value, str):
            return value if path in self.keep else self.text(value)
        if isinstance(value, list):
            return [self.tree(v, path) for v in value]
        if isinstance(value, dict):
            if path is None:
                return {k: self.tree(v, None) for k, v in value.items()}
            out = {}
            for k, v in value.items():
                child = f"{path}.{k}" if path else k
                out[k] = self.tree(v, child if child in self.prefixes else None)
            return out
        return value
