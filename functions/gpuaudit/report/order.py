"""The one order of node verdicts, worst first, for every human output (terminal, Markdown, HTML, history).

REPLACE needs a new node; NOT OBSERVABLE means nothing proves the node healthy (it ranks above REBOOT because a
node that cannot be seen may hide anything); REBOOT, MONITOR, then LEAVE ALONE. A node with no verdict (no GPU
signal: a head node, a controller) comes last. A LEAVE ALONE node or one with no verdict whose evidence has a coverage
gap (an empty hour, or not observable) comes right after MONITOR: on-call reads it before the healthy rows (#49 item 6).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from typing import TypeVar

from gpuaudit.model.result import GpuError, NodeResult, Verdict

VERDICT_SEVERITY: tuple[Verdict, ...] = ("REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR", "LEAVE ALONE")
# Verdicts that ask the operator to do or look at something (`--only-exceptions` keeps these).
EXCEPTIONS: frozenset[Verdict] = frozenset(("REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR"))

N = TypeVar("N", bound=NodeResult)


def verdict_rank(verdict: str | None) -> int:
    """Position of a verdict in VERDICT_SEVERITY, worst first; no verdict (or an unknown word) ranks last."""
    return VERDICT_SEVERITY.index(verdict) if verdict in VERDICT_SEVERITY else len(VERDICT_SEVERITY)  # type: ignore[arg-type]


def coverage_gap(node: NodeResult) -> bool:
    """Whether a GPU node's error evidence was not proven arriving: Not observable, or an empty hour on a source. A
    head node or controller (no GPU) has no GPU evidence to miss: its row keeps its place."""
    return node.role in ("compute", "unknown") and (
        node.xid_status == "Not observable" or any(c.empty_hours for c in node.coverage))


# A GPU-evidence status as typed (any case; `_`, `-` or spaces between words) -> the status a node carries; `gap`:
# any coverage gap (coverage_gap), whatever the status. The CLI's --coverage and MCP audit_nodes' `coverage` read it.
COVERAGE_STATUSES = {
    "MEASURED": "Measured",
    "NOT OBSERVABLE": "Not observable",
    "NO HMA DETECTIONS": "No HMA detections",
    "GAP": "gap",
}
COVERAGE_WORDS = tuple(k.replace(" ", "_") for k in COVERAGE_STATUSES)  # how a status is spelled in a message


def coverage_status(word: str) -> str | None:
    """The status a typed word names (MEASURED, not_observable, No HMA detections, gap…), or None."""
    return COVERAGE_STATUSES.get(re.sub(r"[_\-\s]+", " ", word.strip()).upper())


def coverage_matches(node: NodeResult, statuses: Collection[str]) -> bool:
    """Whether a node passes a coverage filter (no filter: every node): its status is named, or `gap` is and it has
    a coverage gap."""
    return not statuses or node.xid_status in statuses or ("gap" in statuses and coverage_gap(node))


GAP_RANK = VERDICT_SEVERITY.index("LEAVE ALONE")  # gap rows without a worse verdict stand just above LEAVE ALONE


def node_rank(node: NodeResult) -> float:
    """Where a node stands in every human output: its verdict's rank, a coverage gap on a LEAVE ALONE node or on one
    with no verdict moved just above the LEAVE ALONE rows."""
    rank = verdict_rank(node.verdict)
    return GAP_RANK - 0.5 if rank >= GAP_RANK and coverage_gap(node) else rank


def worst_first(nodes: Iterable[N]) -> list[N]:
    """Nodes by `node_rank` (verdict severity, coverage gaps above LEAVE ALONE), then instance ID (stable, so two
    runs print the same order)."""
    return sorted(nodes, key=lambda n: (node_rank(n), n.instance_id))


def verdict_counts(nodes: Sequence[NodeResult]) -> list[tuple[Verdict, int]]:
    """How many nodes carry each verdict, worst first, verdicts no node carries left out."""
    counts = {v: sum(n.verdict == v for n in nodes) for v in VERDICT_SEVERITY}
    return [(v, c) for v, c in counts.items() if c]


# After the Xid the verdict rests on, which of a node's GPU errors lead: the class that can decide a verdict first,
# application last.
XID_CLASS_ORDER = ("hardware", "informational", "driver-config", "unverified", "sympathetic", "application")


def deciding_first(node: NodeResult, *, history: bool = True) -> list[GpuError]:
    """The node's GPU error rows, the signal that decided its verdict first (RULES §6: the candidate cause), then by
    class and time. Every output that names a node's Xids (terminal, NDJSON/CSV, events, MCP, alert) leads with it.
    `history`: keep rows seen only by earlier audits (fleet memory)."""
    rows = [e for e in node.gpu_errors if history or e.source != "history"]
    return sorted(rows, key=lambda e: (e.code is None or e.code != node.deciding_xid, e.source == "history",
                                       XID_CLASS_ORDER.index(e.class_) if e.class_ in XID_CLASS_ORDER
                                       else len(XID_CLASS_ORDER), e.time))


def xid_codes(node: NodeResult, *, history: bool = True) -> list[int]:
    """The node's Xid codes, each once, the deciding one first (see `deciding_first`)."""
    return list(dict.fromkeys(e.code for e in deciding_first(node, history=history) if e.code is not None))
