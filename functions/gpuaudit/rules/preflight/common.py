"""What the pre-flight checks share: titles, the plan, GPU groups, what holds capacity, how parts combine."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuaudit.model.result import CHECK_SEVERITY, Check, CheckResult

if TYPE_CHECKING:
    pass


TITLES = {
    "P1": "Reserved capacity outlasts the run", "P2": "Extension possible", "P3": "A failed node can be replaced",
    "P4": "Automatic recovery on", "P5": "New nodes tested before work", "P6": "GPU faults will be visible",
    "P7": "EFA at full width", "P8": "Storage headroom", "P9": "Reserved GPUs used", "P10": "Capacity end alarmed",
    "P11": "Software meets instance minimums", "P12": "NCCL used EFA and NVLink last run",
    "P13": "Cluster management healthy", "P14": "Network headroom for one replacement",
    "P15": "EFA SG outbound rule", "P16": "Compute nodes can bootstrap",
}
CORE = ("P1", "P2", "P3", "P4", "P5", "P6")
EXTRA_MAY_FAIL = {"P7", "P11", "P12", "P16"}  # the only P7–P16 checks §10 lets FAIL
JOIN = " • "


@dataclass(frozen=True)
class Part:
    """One group's (or one resource's) share of a check."""

    result: CheckResult
    evidence: str
    action: str | None = None


def worst(results: Iterable[CheckResult]) -> CheckResult:
    found = set(results)
    return next((r for r in CHECK_SEVERITY if r in found), "PASS")


def combine(cid: str, parts: list[Part], prefix: str = "") -> Check:
    result = worst(p.result for p in parts)
    action = next((p.action for p in parts if p.result == result and p.action), None)
    text = JOIN.join(p.evidence for p in parts)
    return Check(id=cid, title=TITLES[cid], result=result, evidence=(prefix + text) if prefix else text,
                 action=action)


def make_check(cid: str, result: CheckResult, evidence: str, action: str | None = None) -> Check:
    return Check(id=cid, title=TITLES[cid], result=result, evidence=evidence, action=action)


