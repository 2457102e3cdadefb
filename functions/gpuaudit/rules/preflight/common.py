"""What the pre-flight checks share: titles, the plan, GPU groups, what holds capacity, how parts combine."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from gpuaudit.domain.capability import is_accelerated
from gpuaudit.model.evidence import (
    CapacityReservation,
    Evidence,
    InstanceGroup,
    NodeInfo,
    TrainingPlanInfo,
)
from gpuaudit.model.result import CHECK_SEVERITY, Check, CheckResult, NodeResult
from gpuaudit.model.timeutil import iso

if TYPE_CHECKING:
    from gpuaudit.rules.judge import Judged
    from gpuaudit.rules.nodes import ParsedLine


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
class Plan:
    """The planned run: its start, the run lengths to evaluate, and whether the length was given."""

    start: datetime
    lengths: tuple[float, ...]
    given: bool
    checkpoint_minutes: float | None

    @property
    def longest(self) -> float:
        return max(self.lengths)

    def text(self) -> str:
        length = (f"{self.lengths[0]:g} h" if self.given else
                  "not given (evaluated at " + ", ".join(f"{h:g}" for h in self.lengths) + " h)")
        cp = f", checkpoint every {self.checkpoint_minutes:g} min" if self.checkpoint_minutes else ""
        return f"planned run: start {iso(self.start)}, length {length}{cp}"


@dataclass(frozen=True)
class GpuGroup:
    """Accelerated compute capacity of one kind: a HyperPod instance group, or a ParallelCluster queue/type."""

    name: str
    instance_type: str | None
    nodes: tuple[NodeInfo, ...]
    group: InstanceGroup | None

    @property
    def label(self) -> str:
        return f"group `{self.name}` ({self.instance_type or 'type unknown'})"

    @property
    def node_ids(self) -> list[str]:
        return [n.instance_id for n in self.nodes]

    @property
    def size(self) -> int:
        if self.group is not None and self.group.target_count is not None:
            return max(self.group.target_count, len(self.nodes))
        return len(self.nodes)


@dataclass(frozen=True)
class Holding:
    """What holds a group's capacity: a Capacity Block, an ODCR or a HyperPod training plan."""

    kind: str
    resource: str
    instance_type: str | None
    start: datetime | None
    end: datetime | None
    state: str | None
    reservation: CapacityReservation | None = None
    plan: TrainingPlanInfo | None = None

    @property
    def text(self) -> str:
        span = f"{iso(self.start) if self.start else 'start —'} → {iso(self.end) if self.end else 'no end date'}"
        return f"{self.kind} {self.resource} ({self.instance_type}, state {self.state}, {span})"


@dataclass(frozen=True)
class Part:
    """One group's (or one resource's) share of a check."""

    result: CheckResult
    evidence: str
    action: str | None = None


@dataclass(frozen=True)
class Context:
    j: Judged
    plan: Plan
    groups: tuple[GpuGroup, ...]

    @property
    def ev(self) -> Evidence:
        return self.j.evidence

    @property
    def hyperpod(self) -> bool:
        return self.ev.cluster.kind.startswith("hyperpod")

    def gpu_nodes(self) -> list[NodeResult]:
        return [n for n in self.j.nodes if n.role in ("compute", "unknown") and n.gpu_count != 0]

    def lines(self, instance_ids: Iterable[str] | None = None) -> list[ParsedLine]:
        if instance_ids is None:
            return [p for v in self.j.lines_by_node.values() for p in v] + list(self.j.unassigned_lines)
        return [p for iid in instance_ids for p in self.j.lines_by_node.get(iid, [])]


def _accelerated_type(instance_type: str | None, ev: Evidence) -> bool:
    if instance_type is None or instance_type.startswith(("trn", "inf")):
        return True
    profile = ev.profiles.get(instance_type)
    return profile is None or (profile.gpu_count or 0) > 0


def gpu_groups(ev: Evidence) -> list[GpuGroup]:
    if ev.cluster.kind.startswith("hyperpod"):
        return [GpuGroup(g.name, g.instance_type, tuple(n for n in ev.nodes if n.instance_group == g.name), g)
                for g in ev.cluster.instance_groups
                if g.node_role == "compute" and _accelerated_type(g.instance_type, ev)]
    by: dict[tuple[str, str | None], list[NodeInfo]] = {}
    for n in ev.nodes:
        if n.role in ("compute", "unknown") and is_accelerated(n, ev):
            by.setdefault((n.instance_group or "(no queue)", n.instance_type), []).append(n)
    return [GpuGroup(name, itype, tuple(nodes), None) for (name, itype), nodes in sorted(
        by.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]


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


def id_list(items: Iterable[str]) -> str:
    return ", ".join(f"`{i}`" for i in items) or "none"


