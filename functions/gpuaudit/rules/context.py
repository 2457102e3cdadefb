"""What every judging rule shares, at the bottom of `rules/` above the signal readers: the judge's configuration,
the intermediate facts of one audit (`Judged`), and the view of them the incident questions and the pre-flight
checks both read (`Context`: the planned run, the GPU groups, what holds their capacity). Pure: no AWS, no clock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from gpuaudit.domain.capability import is_accelerated
from gpuaudit.model.evidence import Evidence, GpuLine, InstanceGroup, NodeInfo
from gpuaudit.model.planned_reads import CapacityReservation, TrainingPlanInfo
from gpuaudit.model.result import NodeResult
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.xid_catalog import XID_CLASSES

if TYPE_CHECKING:
    from gpuaudit.model.evidence import AuditRequest
    from gpuaudit.rules.bootstrap import BootstrapFailure
    from gpuaudit.rules.control_plane import ControlLog
    from gpuaudit.rules.node_lines import ParsedLine
    from gpuaudit.rules.xid_routing import NodeRouting


class BadOverride(ValueError):
    pass


def parse_overrides(items: list[str]) -> dict[int, str]:
    """`CODE=CLASS` items (a deployment's configuration) → {code: class}; a bad item is bad input."""
    overrides: dict[int, str] = {}
    for item in items:
        code, _, klass = item.strip().partition("=")
        if not code.strip().isdigit() or klass.strip() not in XID_CLASSES:
            raise BadOverride(f"Xid class override {item!r}: expected CODE=CLASS with CLASS one of "
                              f"{', '.join(sorted(XID_CLASSES))}")
        overrides[int(code)] = klass.strip()
    return overrides


@dataclass(frozen=True)
class JudgeConfig:
    xid_overrides: Mapping[int, str] = field(default_factory=dict)
    run_hours: float | None = None
    run_start: datetime | None = None
    checkpoint_minutes: float | None = None

    def asked(self) -> dict[str, object]:
        """What the operator asked that changes the judgement (rules/history.audit_id keys on it)."""
        return {"run_hours": self.run_hours, "run_start": self.run_start.isoformat() if self.run_start else None,
                "checkpoint_minutes": self.checkpoint_minutes,
                "xid_overrides": {str(code): cls for code, cls in sorted(self.xid_overrides.items())}}

    @classmethod
    def from_request(cls, request: AuditRequest, xid_overrides: Mapping[int, str] | None = None) -> JudgeConfig:
        return cls(xid_overrides=dict(xid_overrides or {}), run_hours=request.run_hours,
                   run_start=request.run_start, checkpoint_minutes=request.checkpoint_minutes)


@dataclass
class Judged:
    """Intermediate facts shared by the mode-specific rules."""

    evidence: Evidence
    nodes: list[NodeResult]
    routings: dict[str, NodeRouting]
    lines_by_node: dict[str, list[ParsedLine]]
    unassigned_lines: list[ParsedLine]
    control: list[ControlLog] = field(default_factory=list)  # control-plane logs and their hourly state
    bootstrap: BootstrapFailure | None = None  # what ParallelCluster's clustermgtd said of bootstrap failures
    # boot-time lines (Fabric Manager start, driver banner) from before the window, per node (RULES §2)
    boot_lines_by_node: dict[str, list[GpuLine]] = field(default_factory=dict)


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


def id_list(items: Iterable[str]) -> str:
    return ", ".join(f"`{i}`" for i in items) or "none"
