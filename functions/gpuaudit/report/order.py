"""The one order of node verdicts, worst first, for every human output (terminal, Markdown, HTML, history).

REPLACE needs a new node; NOT OBSERVABLE means nothing proves the node healthy (it ranks above REBOOT because a
node that cannot be seen may hide anything); REBOOT, MONITOR, then LEAVE ALONE. A node with no verdict (no GPU
signal: a head node, a controller) comes last.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from gpuaudit.model.result import NodeResult, Verdict

VERDICT_SEVERITY: tuple[Verdict, ...] = ("REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR", "LEAVE ALONE")
# Verdicts that ask the operator to do or look at something (`--only-exceptions` keeps these).
EXCEPTIONS: frozenset[Verdict] = frozenset(("REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR"))

N = TypeVar("N", bound=NodeResult)


def verdict_rank(verdict: str | None) -> int:
    """Position of a verdict in VERDICT_SEVERITY, worst first; no verdict (or an unknown word) ranks last."""
    return VERDICT_SEVERITY.index(verdict) if verdict in VERDICT_SEVERITY else len(VERDICT_SEVERITY)  # type: ignore[arg-type]


def worst_first(nodes: Iterable[N]) -> list[N]:
    """Nodes by verdict severity, then instance ID (stable, so two runs print the same order)."""
    return sorted(nodes, key=lambda n: (verdict_rank(n.verdict), n.instance_id))


def verdict_counts(nodes: Sequence[NodeResult]) -> list[tuple[Verdict, int]]:
    """How many nodes carry each verdict, worst first, verdicts no node carries left out."""
    counts = {v: sum(n.verdict == v for n in nodes) for v in VERDICT_SEVERITY}
    return [(v, c) for v, c in counts.items() if c]
