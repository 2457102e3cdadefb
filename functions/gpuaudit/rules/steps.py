"""How an incident finding shows one step it checked (RULES §8): the status, and the evidence quoted where it was
read. Shared by the concern readers (capacity, fabric) and the findings beside the branches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuaudit.model.result import FindingStep, FindingStepStatus
from gpuaudit.model.timeutil import iso

if TYPE_CHECKING:
    from gpuaudit.rules.context import Judged
    from gpuaudit.rules.node_lines import ParsedLine


def step(name: str, status: FindingStepStatus, evidence: str) -> FindingStep:
    return FindingStep(name=name, status=status, evidence=evidence)


def all_lines(j: Judged) -> list[ParsedLine]:
    return [p for v in j.lines_by_node.values() for p in v] + list(j.unassigned_lines)


def line_at(p: ParsedLine) -> str:
    return f"`{p.line.log_group}` / `{p.line.log_stream}` at {iso(p.line.time)}"


def quote(text: str) -> str:
    return '"' + " ".join(text.split())[:200] + '"'


def merge(name: str, parts: list[tuple[FindingStepStatus, str]]) -> FindingStep:
    order: tuple[FindingStepStatus, ...] = ("Blocked", "Not checked", "Not observable", "Measured", "Cleared",
                                            "Not applicable")
    status: FindingStepStatus = next((s for s in order if any(p[0] == s for p in parts)), "Not applicable")
    return step(name, status, "; ".join(text for _, text in parts) or "nothing to check")


