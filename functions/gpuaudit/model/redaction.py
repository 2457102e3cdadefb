"""Account IDs never leave the auditor (RULES §0.7, OUTPUT-CONTRACT privacy), in any form: inside ARNs and
owner fields, inside bucket names (`sagemaker-us-west-2-444455556666`), next to letters, and the console's
dashed form `1111-2222-3333`.

Redact account IDs, not every 12-digit number: ParallelCluster log groups end in a 12-digit timestamp
(`/aws/parallelcluster/<cluster>-202608261551`) and are quoted intact, and resource IDs, UUIDs and digests
keep their digits (`i-0123456789012abcd`, query IDs, cache keys)."""

from __future__ import annotations

import re
from bisect import bisect_right
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


def _timestamp(digits: str) -> bool:
    """A ParallelCluster log-group suffix: YYYYMMDDhhmm."""
    try:
        datetime.strptime(digits, "%Y%m%d%H%M")
    except ValueError:
        return False
    return digits.startswith(("19", "20"))


def redact(text: str, account_ids: set[str] | frozenset[str] = frozenset()) -> str:
    text = DASHED.sub(MASK, text)
    # finditer's spans are ordered and disjoint: only the last one starting at or before a match can hold it
    # (a bisection, not a scan: a 10,000-node report holds tens of thousands of both)
    protected = [m.span() for m in PROTECTED.finditer(text)]
    starts = [a for a, _ in protected]
    out, last = [], 0
    for m in TWELVE.finditer(text):
        start, end = m.span()
        holder = bisect_right(starts, start) - 1
        if holder >= 0 and end <= protected[holder][1]:
            continue
        before = text[start - 1] if start else ""
        if before == "-" and _timestamp(m.group(0)) and m.group(0) not in account_ids:
            continue  # `<cluster>-202608261551`: a log group's creation timestamp, quoted intact
        out.append(text[last:start] + MASK)
        last = end
    out.append(text[last:])
    return "".join(out)


def redact_tree(value: Any, keep: frozenset[str] = frozenset({"cluster.arn"}), path: str = "") -> Any:
    """Every string of a JSON document redacted, except the dotted paths in `keep` (OUTPUT-CONTRACT: only
    `cluster.arn` may keep the account ID)."""
    if isinstance(value, str):
        return value if path in keep else redact(value)
    if isinstance(value, list):
        return [redact_tree(v, keep, path) for v in value]
    if isinstance(value, dict):
        return {k: redact_tree(v, keep, f"{path}.{k}" if path else k) for k, v in value.items()}
    return value
