"""Pre-flight checks P1–P16 (RULES §10): is the cluster ready for a long run?

Pure: no AWS, no clock — the planned start is `config.run_start`, else the audit's `now`. The core
(P1–P6) runs first and writes the readiness verdict; P7–P16 can only add to it (a FAIL only where
§10 allows one: P7, P11, P12, P16), never undo a core FAIL. Every check names the resources behind
it and gives one operator action; what could not be read is `Not checked` with the call that settles it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from gpuaudit.domain.capability import is_accelerated
from gpuaudit.domain.capacity import (
    DEFAULT_RUN_HOURS,
    RunFit,
    cluster_reservations,
    ec2_family_quota,
    extension_hours,
    holding_reservation,
    run_fit,
)
from gpuaudit.domain.timing import lookback
from gpuaudit.model.evidence import (
    CapacityReservation,
    Evidence,
    ExtensionOffering,
    InstanceGroup,
    NodeInfo,
    RouteTableInfo,
    SecurityGroupInfo,
    SgRule,
    TrainingPlanInfo,
)
from gpuaudit.model.result import Check, CheckResult, NodeResult, Readiness
from gpuaudit.model.timeutil import iso

if TYPE_CHECKING:
    from gpuaudit.rules.judge import JudgeConfig, Judged
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
# Worst first: how the results of several groups or parts combine into one check result.
SEVERITY: tuple[CheckResult, ...] = ("FAIL", "RISK", "Needs input", "Not checked", "UNVERIFIED", "PASS")
JOIN = " • "

EXPIRATION_WARNING = "Capacity Block Expiration Warning"
IDLE_MAJORITY = 0.5  # RISK when most reserved GPU hours were idle
SATURATION_MINUTES = 5  # RULES §8 C: ≥ 90 % for 5+ min
# HyperPod IPs per P5 node (RULES §8 'Frequent non-GPU causes').
HYPERPOD_P5_IPS = {"hyperpod-slurm": 32, "hyperpod-eks": 81}
HYPERPOD_P5_TYPES = ("p5.48xlarge", "p5e.48xlarge")
# DLAMI P6 requirements (RULES §10): driver branch, and the rest as (CUDA, kernel, EFA installer, AWS OFI NCCL).
DRIVER_MINIMUM = {"p6-b200.48xlarge": 570, "p6-b300.48xlarge": 580, "p6e-gb200": 570}
OTHER_MINIMUMS = {"p6-b200.48xlarge": ("12.8", "6.1", "1.41.0", "1.15.0"),
                  "p6-b300.48xlarge": ("13.0", "6.1", "1.44.0", "1.17.1"),
                  "p6e-gb200": ("12.8", "6.12", "1.42.0", "1.15.0")}
DRIVER_LOADED = re.compile(r"NVRM: loading NVIDIA UNIX (?:Open Kernel Module for )?(?:x86_64|aarch64)"
                           r"(?: Kernel Module)?\s+(?P<version>(?P<major>\d+)\.\d+(?:\.\d+)?)")
NCCL_SOCKET = "via NET/Socket/"
NCCL_GOOD = ("NET/OFI Selected Provider is efa", "Using network AWS Libfabric", "via P2P/CUMEM", "NVLS Creating")
NCCL_SHM = "via SHM/direct/direct"
NCCL_IB = "Using network IB"
NCCL_COMMAND = ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,P2P,SHM,NVLS "
                "NCCL_DEBUG_FILE=/fsx/nccl_%h_%p.log")
FABRIC_MANAGER_FAILED = re.compile(r"(?i)(fabric ?manager|nvidia-fabricmanager)[^\n]*(fail|error|exited|"
                                   r"core-dump)|Failed to start[^\n]*fabric ?manager")
BOOTSTRAP_FAILED = re.compile(r"Found the following bootstrap failure nodes|Node bootstrap error|protected mode|"
                              r"bootstrap failure")


# -- what the checks share ---------------------------------------------------------------------------
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


def _worst(results: Iterable[CheckResult]) -> CheckResult:
    found = set(results)
    return next((r for r in SEVERITY if r in found), "PASS")


def _combine(cid: str, parts: list[Part], prefix: str = "") -> Check:
    result = _worst(p.result for p in parts)
    action = next((p.action for p in parts if p.result == result and p.action), None)
    text = JOIN.join(p.evidence for p in parts)
    return Check(id=cid, title=TITLES[cid], result=result, evidence=(prefix + text) if prefix else text,
                 action=action)


def _check(cid: str, result: CheckResult, evidence: str, action: str | None = None) -> Check:
    return Check(id=cid, title=TITLES[cid], result=result, evidence=evidence, action=action)


def _ids(items: Iterable[str]) -> str:
    return ", ".join(f"`{i}`" for i in items) or "none"


# -- capacity: P1, P2, P3 ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Unread:
    """Evidence a check needed and could not read, and the command that reads it."""

    what: str
    call: str

    @property
    def text(self) -> str:
        return f"{self.what} — {self.call}"


def holding_for(ctx: Context, grp: GpuGroup) -> tuple[Holding | None, Unread | None]:
    """(what holds the group's capacity, or the call that would say when it could not be read)."""
    ev = ctx.ev
    if grp.group is not None and grp.group.training_plan_arn:
        name = grp.group.training_plan_arn.rsplit("/", 1)[-1]
        plan = next((p for p in ev.training_plans or [] if p.arn == grp.group.training_plan_arn or p.name == name),
                    None)
        if plan is None:
            return None, Unread(f"training plan `{name}` of {grp.label} not read",
                                f"`aws sagemaker describe-training-plan --training-plan-name {name}`")
        return Holding("training plan", f"`{plan.name}`", grp.instance_type, plan.start_time, plan.end_time,
                       plan.status, plan=plan), None
    if ev.capacity_reservations is None:
        return None, Unread("capacity reservations not read", "`aws ec2 describe-capacity-reservations`")
    held = holding_reservation(cluster_reservations(ev, grp.instance_type, grp.node_ids), ctx.plan.start)
    if held is None:
        return None, None
    kind = "Capacity Block" if held.reservation_type == "capacity-block" else "Capacity Reservation"
    return Holding(kind, f"`{held.reservation_id}`", held.instance_type, held.start_date, held.end_date, held.state,
                   reservation=held), None


def _no_reservation(ctx: Context, grp: GpuGroup) -> str:
    read = len(ctx.ev.capacity_reservations or [])
    plan = "; the group has no TrainingPlanArn" if ctx.hyperpod else ""
    return (f"{grp.label}: No capacity reservation found — {read} reservation(s) read with "
            f"DescribeCapacityReservations, none live for {grp.instance_type} or named by the nodes{plan}. "
            "Nothing reserved ends the run, and nothing reserves the capacity either")


def _run_start(ctx: Context, h: Holding) -> datetime:
    """A block that starts after the planned start: nodes cannot launch before its StartDate."""
    return max(ctx.plan.start, h.start) if h.start else ctx.plan.start


def _fits(ctx: Context, h: Holding, hours: float) -> RunFit:
    end = h.end or ctx.plan.start  # callers handle an unlimited reservation before asking
    return run_fit(end, h.instance_type, _run_start(ctx, h), hours, ctx.ev.now)


def _fit_text(fit: RunFit) -> str:
    if fit.fits:
        return fit.describe() + " → fits"
    return fit.describe() + (f" → does NOT fit: run end {iso(fit.run_end)} is "
                             f"{fit.shortfall.total_seconds() / 3600:.2f} h after usable until {iso(fit.usable_until)}")


def p1_part(ctx: Context, grp: GpuGroup) -> Part:
    h, unread = holding_for(ctx, grp)
    if unread:
        return Part("Not checked", f"{grp.label}: {unread.text}", "Re-run with read access: " + unread.call)
    if h is None:
        return Part("UNVERIFIED", _no_reservation(ctx, grp),
                    f"Confirm how {grp.instance_type} capacity is held (Capacity Block, ODCR or training plan): "
                    f"`aws ec2 describe-capacity-reservations --filters Name=instance-type,Values={grp.instance_type}`")
    if h.plan is not None and (h.state or "") not in ("Active", "Scheduled", "Pending"):
        return Part("FAIL", f"{grp.label} on {h.text}: the training plan is not Active, Scheduled or Pending",
                    f"Buy or extend a training plan for {grp.instance_type} before the run")
    if h.end is None:
        return Part("PASS", f"{grp.label} on {h.text}: no end date (EndDateType unlimited)")
    head = f"{grp.label} on {h.text}"
    late_start = h.start if h.start and h.start > ctx.plan.start else None
    if late_start:
        head += (f"; the reservation starts {iso(late_start)}, after the planned start {iso(ctx.plan.start)}: nodes "
                 "cannot launch before then, so the run is evaluated from that start")
    fits = [_fits(ctx, h, hours) for hours in ctx.plan.lengths]
    text = head + ": " + "; ".join(_fit_text(f) for f in fits)
    resource = h.resource.strip("`")
    if not ctx.plan.given:
        return Part("Needs input", text, "Give the planned run length: `--run-hours N` (and `--run-start`, "
                                         "`--checkpoint-minutes`) so the fit can be decided")
    fit = fits[0]
    if not fit.fits:
        safe = (f"the latest safe start {iso(fit.latest_safe_start)} is already in the past" if fit.start_in_past
                else f"start by {iso(fit.latest_safe_start)}")
        return Part("FAIL", text,
                    f"Extend {resource} by at least {extension_hours(fit.shortfall)} h before the run (see P2), or "
                    f"shorten the run to ≤ {max(fit.hours_covered, 0):.2f} h ({safe}); either way checkpoint before "
                    f"{iso(fit.usable_until)}")
    cp = ctx.plan.checkpoint_minutes
    if cp and fit.checkpoint_in_lead(cp):
        return Part("RISK", text + f"; with a checkpoint every {cp:g} min the run's last checkpoint lands at "
                                   f"{iso(fit.final_checkpoint(cp))}, inside the lead time (after usable until "
                                   f"{iso(fit.usable_until)}): the instances are already terminated",
                    f"Schedule a final checkpoint before {iso(fit.usable_until)} or shorten the interval")
    if cp is None:
        text += "; checkpoint interval not given (`--checkpoint-minutes`): the last checkpoint was not placed"
    else:
        text += (f"; last checkpoint {iso(fit.final_checkpoint(cp))} lands before usable until "
                 f"{iso(fit.usable_until)}")
    if late_start:
        return Part("RISK", text, f"Plan the start at or after {iso(late_start)} (when {resource} starts)")
    return Part("PASS", text)


def p1(ctx: Context) -> Check:
    return _combine("P1", [p1_part(ctx, g) for g in ctx.groups], ctx.plan.text() + ". ")


def _offering_text(o: ExtensionOffering) -> str:
    span = f"{iso(o.start_date) if o.start_date else '—'} → {iso(o.end_date) if o.end_date else '—'}"
    return f"`{o.offering_id}` ({o.duration_hours} h, {span}, {o.instance_count}× {o.instance_type})"


def p2_part(ctx: Context, grp: GpuGroup) -> Part:
    h, unread = holding_for(ctx, grp)
    if unread:
        return Part("Not checked", f"{grp.label}: {unread.text}", "Re-run with read access: " + unread.call)
    if h is None:
        return Part("PASS", f"{grp.label}: nothing to extend — no Capacity Block or training plan holds "
                            f"{grp.instance_type} (see P1)")
    if h.end is None:
        return Part("PASS", f"{grp.label} on {h.text}: no end date, no extension needed")
    fits = [_fits(ctx, h, hours) for hours in ctx.plan.lengths]
    short = [f for f in fits if not f.fits]
    if h.plan is not None:
        if not short:
            return Part("PASS", f"{grp.label} on {h.text}: the run fits, no extension needed")
        call = "`aws sagemaker search-training-plan-offerings` (then `extend-training-plan`)"
        return Part("Not checked", f"{grp.label} on {h.text}: the run does not fit and training plan extension "
                                   f"offerings are not read by this audit — {call}",
                    f"Look for an extension of training plan {h.resource}: {call}")
    if h.reservation is None:
        return Part("UNVERIFIED", f"{grp.label} on {h.text}: no reservation detail", None)
    cr = h.reservation.reservation_id
    ext = next((e for e in ctx.ev.capacity_extensions or [] if e.reservation_id == cr), None)
    if h.reservation.reservation_type != "capacity-block":
        if not short:
            return Part("PASS", f"{grp.label} on {h.text}: the run fits, no extension needed")
        return Part("RISK", f"{grp.label} on {h.text}: an ODCR ends before the run; ODCRs are not extended by "
                            "Capacity Block offerings", f"Modify {cr}'s end date (`aws ec2 modify-capacity-reservation "
                                                        f"--capacity-reservation-id {cr} --end-date …`)")
    call = (f"`aws ec2 describe-capacity-block-extension-offerings --capacity-reservation-id {cr} "
            f"--capacity-block-extension-duration-hours {ext.requested_hours if ext else 24}`")
    if ext is None or ext.offerings is None:
        return Part("Not checked", f"{grp.label} on {h.text}: extension offerings not read — {call}",
                    f"Re-run with read access: {call}")
    offers = ext.offerings
    listed = (f"{len(offers)} extension offering(s) returned for a {ext.requested_hours} h request (prices not "
              "quoted): "
              + ", ".join(_offering_text(o) for o in offers)) if offers else \
        f"no extension offering for {ext.requested_hours} h (DescribeCapacityBlockExtensionOfferings)"
    head = f"{grp.label} on {h.text}: {listed}"
    if not ctx.plan.given:
        if offers:
            return Part("PASS", head + "; extension possible")
        need = ", ".join(f"{f.run_hours:g} h" for f in short) or "none of 24/48/72 h"
        return Part("Needs input", head + f"; runs that would need one: {need}",
                    "Give the planned run length (`--run-hours N`) to decide whether an extension is needed")
    fit = fits[0]
    if fit.fits:
        return Part("PASS", head + f"; not needed: the {fit.run_hours:g} h run fits")
    extended = [(o, run_fit(o.end_date, h.instance_type, fit.start, fit.run_hours, ctx.ev.now))
                for o in offers if o.end_date]
    covering = [(o, f) for o, f in extended if f.fits]
    if covering:
        o, ext_fit = covering[0]
        return Part("PASS", head + f"; extension possible: with `{o.offering_id}` usable until becomes "
                                   f"{iso(ext_fit.usable_until)}, after run end {iso(ext_fit.run_end)}",
                    f"Purchase extension `{o.offering_id}` for {cr} before the run (`aws ec2 "
                    f"purchase-capacity-block-extension --capacity-block-extension-offering-id {o.offering_id} "
                    f"--capacity-reservation-id {cr}`; price not quoted here)")
    if offers:
        return Part("RISK", head + f"; no offering reaches run end {iso(fit.run_end)} + lead time",
                    f"Buy the longest extension of {cr} and a follow-on Capacity Block, or shorten the run")
    return Part("FAIL", head + f"; P1 fails (run end {iso(fit.run_end)} after usable until {iso(fit.usable_until)}) "
                               "and no extension is offered",
                f"Buy a new Capacity Block starting by {iso(fit.usable_until)}, or shorten the run to ≤ "
                f"{max(fit.hours_covered, 0):.2f} h and checkpoint before {iso(fit.usable_until)}")


def p2(ctx: Context) -> Check:
    return _combine("P2", [p2_part(ctx, g) for g in ctx.groups])


def _quota_for(ctx: Context, grp: GpuGroup) -> tuple[str, str]:
    """(how the quota is named in the evidence, the call that reads it)."""
    if ctx.hyperpod:
        name = f"ml.{grp.instance_type} for cluster usage"
        return name, f"`aws service-quotas list-service-quotas --service-code sagemaker` ({name})"
    code, name = ec2_family_quota(grp.instance_type) or ("", "On-Demand instances of this family")
    return name, f"`aws service-quotas get-service-quota --service-code ec2 --quota-code {code or '<code>'}`"


def p3_part(ctx: Context, grp: GpuGroup) -> Part:
    h, unread = holding_for(ctx, grp)
    if unread:
        return Part("Not checked", f"{grp.label}: {unread.text}", "Re-run with read access: " + unread.call)
    spare_action = (f"Hold a spare {grp.instance_type} before the run: one more instance in the Capacity Block or "
                    "training plan than the cluster uses")
    if h is not None and h.plan is not None:
        p = h.plan
        spare = p.available_spare_instance_count if p.available_spare_instance_count is not None \
            else p.available_instance_count
        counts = (f"AvailableSpareInstanceCount {p.available_spare_instance_count}, AvailableInstanceCount "
                  f"{p.available_instance_count}, InUseInstanceCount {p.in_use_instance_count}, "
                  f"UnhealthyInstanceCount {p.unhealthy_instance_count}, TotalInstanceCount {p.total_instance_count}")
        if spare is None:
            return Part("UNVERIFIED", f"{grp.label} on {h.text}: the plan returned no spare count ({counts})",
                        spare_action)
        if spare > 0:
            return Part("PASS", f"{grp.label} on {h.text}: {spare} spare ({counts})")
        return Part("RISK", f"{grp.label} on {h.text}: no spare ({counts}); a failed node cannot be replaced "
                            "inside the plan", spare_action)
    if h is not None and h.reservation is not None:
        r = h.reservation
        counts = f"AvailableInstanceCount {r.available_instance_count} of TotalInstanceCount {r.total_instance_count}"
        if r.available_instance_count is None:
            return Part("UNVERIFIED", f"{grp.label} on {h.text}: {counts}", spare_action)
        if r.available_instance_count > 0:
            return Part("PASS", f"{grp.label} on {h.text}: {counts} — a replacement fits in the reservation")
        return Part("RISK", f"{grp.label} on {h.text}: {counts} — no spare: a failed node cannot be replaced "
                            "inside the reservation", spare_action)
    name, call = _quota_for(ctx, grp)
    quotas = ctx.ev.service_quotas
    quota = next((q for q in quotas or [] if q.quota_name == name), None)
    if quota is not None and quota.absent:
        # The read happened and the quota is not in it: a finding about the account, not a missing read.
        return Part("UNVERIFIED", f"{grp.label}: no reservation or training plan holds the capacity, and the quota "
                                  f"`{name}` is not among the quotas read — {call}: no headroom for a replacement "
                                  "is proven", spare_action)
    if quota is None or quota.value is None:
        why = f" ({quota.error})" if quota and quota.error else ""
        return Part("Not checked", f"{grp.label}: no reservation or training plan holds the capacity, and the "
                                   f"quota `{name}` was not read{why} — {call}", f"Re-run with read access: {call}")
    where = f"Service Quota `{name}` ({quota.service_code} {quota.quota_code or ''}) = {quota.value:g}"
    if ctx.hyperpod and quota.value <= grp.size:
        return Part("RISK", f"{grp.label}: only a {where}, and the cluster already runs {grp.size}: no headroom for "
                            "a replacement even by quota", spare_action)
    why = ("HyperPod can enforce less than the listed quota, and a quota reserves nothing" if ctx.hyperpod else
           "a quota reserves nothing: On-Demand launches can still fail with InsufficientInstanceCapacity")
    unit = "" if ctx.hyperpod else " vCPUs across the Region"
    return Part("UNVERIFIED", f"{grp.label}: no reservation or training plan holds the capacity; only a {where}"
                              f"{unit}. A quota alone is not proof of spare capacity ({why})", spare_action)


def p3(ctx: Context) -> Check:
    return _combine("P3", [p3_part(ctx, g) for g in ctx.groups])


# -- recovery and visibility: P4, P5, P6 -------------------------------------------------------------
def p4(ctx: Context) -> Check:
    c = ctx.ev.cluster
    resume = ("a job resumes only with checkpoints plus the orchestrator's auto-resume (`srun --auto-resume=1` on "
              "HyperPod Slurm) — ask the operator whether jobs are submitted that way")
    if ctx.hyperpod:
        if c.node_recovery == "None":
            return _check("P4", "FAIL", f"cluster `{c.name}`: setting `NodeRecovery` = None — HyperPod neither "
                                        f"reboots nor replaces a faulty node; {resume}",
                          f"`aws sagemaker update-cluster --cluster-name {c.name} --node-recovery Automatic`")
        if c.node_recovery == "Automatic":
            return _check("P4", "PASS", f"cluster `{c.name}`: setting `NodeRecovery` = Automatic — HyperPod "
                                        f"reboots or replaces a node it finds faulty; {resume}",
                          "Confirm jobs are submitted with `srun --auto-resume=1` and resume from checkpoints")
        return _check("P4", "UNVERIFIED", f"cluster `{c.name}`: `NodeRecovery` "
                                          f"{c.node_recovery or 'not returned by DescribeCluster'}; {resume}",
                      f"`aws sagemaker describe-cluster --cluster-name {c.name} --query NodeRecovery`")
    if c.kind == "parallelcluster":
        return _check("P4", "PASS", f"ParallelCluster `{c.name}` has no NodeRecovery setting: its clustermgtd "
                                    "always replaces nodes failing EC2 health checks or marked down by Slurm; GPU "
                                    "health checks (`HealthChecks/Gpu/Enabled`) live in the cluster config, which "
                                    "this audit does not read; jobs resume only with checkpoints and `--requeue`",
                      f"Confirm `HealthChecks: Gpu: Enabled: true` in the queues of `{c.name}` "
                      f"(`pcluster describe-cluster --cluster-name {c.name}`) and submit with checkpoints")
    return _check("P4", "UNVERIFIED", f"self-managed cluster `{c.name}`: no automatic node recovery setting to read",
                  "Confirm what replaces a failed node (ASG health checks, EKS node auto-repair) before the run")


def p5(ctx: Context) -> Check:
    if not ctx.hyperpod:
        return _check("P5", "UNVERIFIED", f"`OnStartDeepHealthChecks` is a HyperPod setting; {ctx.ev.cluster.kind} "
                                          "nodes are tested before work only if a custom boot script runs a DCGM "
                                          "diagnostic, which this audit cannot read",
                      "Run `dcgmi diag -r 3` from the compute nodes' boot script (ParallelCluster: OnNodeConfigured)")
    parts = []
    for grp in ctx.groups:
        checks = grp.group.on_start_deep_health_checks if grp.group else []
        if not checks:
            parts.append(Part("RISK", f"{grp.label}: setting `OnStartDeepHealthChecks` is empty — new and replaced "
                                      "nodes take work without InstanceStress or InstanceConnectivity tests",
                              f"Set `OnStartDeepHealthChecks: [\"InstanceStress\", \"InstanceConnectivity\"]` on "
                              f"group `{grp.name}` (`aws sagemaker update-cluster --cluster-name "
                              f"{ctx.ev.cluster.name} --instance-groups file://groups.json`)"))
        else:
            parts.append(Part("PASS", f"{grp.label}: `OnStartDeepHealthChecks` = {', '.join(checks)}"))
    return _combine("P5", parts)


def _coverage_text(n: NodeResult) -> str:
    rows = []
    for r in n.coverage:
        empty = (f", {len(r.empty_hours)} empty hour(s) from {iso(r.empty_hours[0])}" if r.empty_hours else "")
        rows.append(f"`{r.log_group}` / `{r.log_stream or 'no stream'}`: {r.status}{empty}")
    return "; ".join(rows) or "no log source found"


def p6(ctx: Context) -> Check:
    nodes = ctx.gpu_nodes()
    if not nodes:
        return _check("P6", "UNVERIFIED", "no GPU compute node to prove coverage on (none running): whether GPU "
                                          "faults reach the logs is Not observable until nodes launch",
                      "Re-run the pre-flight once the compute nodes are up")
    blind = [n for n in nodes if n.xid_status == "Not observable"]
    if blind:
        text = "; ".join(f"`{n.instance_id}` (group {n.instance_group or '—'}): Not observable — "
                         f"{_coverage_text(n)}" for n in blind)
        return _check("P6", "FAIL", f"GPU error coverage Not observable on {len(blind)} of {len(nodes)} GPU compute "
                                    f"node(s): {text}",
                      f"Fix GPU error log shipping for {_ids(n.instance_id for n in blind)} (kernel log to "
                      "CloudWatch; on HyperPod confirm `sagemaker-health-monitoring-agent.service` runs); meanwhile "
                      "check the node directly: `dmesg -T | grep -i nvrm`")
    text = "; ".join(f"`{n.instance_id}` (group {n.instance_group or '—'}): {n.xid_status} — {_coverage_text(n)}"
                     for n in nodes)
    return _check("P6", "PASS", f"coverage proven on all {len(nodes)} GPU compute node(s): {text}")


# -- fabric, storage, usage: P7–P12 -------------------------------------------------------------------
def _self_rule(sg: SecurityGroupInfo, rules: list[SgRule]) -> bool:
    """An all-traffic rule naming the group itself (EFA needs one inbound and one outbound)."""
    return any(r.protocol == "-1" and sg.group_id in r.group_ids for r in rules)


def _open_egress(sg: SecurityGroupInfo) -> bool:
    return any(r.protocol == "-1" and "0.0.0.0/0" in r.cidrs for r in sg.egress)


def _efa_types(ctx: Context) -> tuple[list[str], list[str]]:
    """(accelerated types that support EFA, types whose EFA support is unknown)."""
    efa, unknown = [], []
    for t in sorted({g.instance_type for g in ctx.groups if g.instance_type}):
        profile = ctx.ev.profiles.get(t)
        if profile is None or profile.efa_supported is None:
            unknown.append(t)
        elif profile.efa_supported:
            efa.append(t)
    return efa, unknown


def _sg_sets(ctx: Context) -> tuple[list[tuple[str, list[SecurityGroupInfo]]], str | None]:
    """Security groups per place (the cluster's VpcConfig, or each EC2 compute node), or the unread call."""
    ev = ctx.ev
    if ev.security_groups is None:
        return [], "security groups not read — `aws ec2 describe-security-groups`"
    by_id = {g.group_id: g for g in ev.security_groups}
    if ctx.hyperpod:
        ids = ev.cluster.security_group_ids
        if not ids:
            return [], "DescribeCluster returned no VpcConfig.SecurityGroupIds"
        return [(f"cluster `{ev.cluster.name}` VpcConfig", [by_id[i] for i in ids if i in by_id])], None
    if ev.instance_network is None:
        return [], "the nodes' network attachment not read — `aws ec2 describe-instances`"
    gpu_ids = {i for g in ctx.groups for i in g.node_ids}
    sets: dict[tuple[str, ...], list[str]] = {}
    for net in ev.instance_network:
        if net.instance_id in gpu_ids:
            sets.setdefault(tuple(net.security_group_ids), []).append(net.instance_id)
    if not sets:
        return [], "no running GPU compute node to read security groups from"
    return [(f"nodes {_ids(nodes)}", [by_id[i] for i in ids if i in by_id]) for ids, nodes in sets.items()], None


def _sg_names(sgs: list[SecurityGroupInfo]) -> str:
    return ", ".join(f"`{g.group_id}` ({g.group_name})" if g.group_name else f"`{g.group_id}`" for g in sgs) or "none"


def p7(ctx: Context) -> Check:
    efa, unknown = _efa_types(ctx)
    if not efa:
        if unknown:
            return _check("P7", "UNVERIFIED", f"EFA support of {', '.join(unknown)} unknown (DescribeInstanceTypes "
                                              "not read)", "`aws ec2 describe-instance-types --instance-types "
                                                           + " ".join(unknown) + "`")
        return _check("P7", "PASS", "not applicable: no accelerated type of the cluster supports EFA ("
                      + ", ".join(sorted({g.instance_type or '?' for g in ctx.groups})) + ")")
    sets, unread = _sg_sets(ctx)
    parts: list[Part] = []
    if unread:
        parts.append(Part("Not checked", f"EFA security group rules: {unread}", f"Re-run with read access: {unread}"))
    for where, sgs in sets:
        inbound = [g for g in sgs if _self_rule(g, g.ingress)]
        outbound = [g for g in sgs if _self_rule(g, g.egress)]
        opened = [g for g in sgs if _open_egress(g)]
        names = _sg_names(sgs)
        if not inbound:
            target = sgs[0].group_id if sgs else "<sg>"
            parts.append(Part("FAIL", f"{where}: security groups {names} — no self-referencing all-traffic inbound "
                                      "rule (EFA traffic between the nodes is dropped)",
                              f"Add an all-traffic inbound rule from {target} to itself: `aws ec2 "
                              f"authorize-security-group-ingress --group-id {target} --ip-permissions "
                              f"'IpProtocol=-1,UserIdGroupPairs=[{{GroupId={target}}}]'`"))
        elif not outbound and not opened:
            parts.append(Part("FAIL", f"{where}: security groups {names} — self-referencing inbound rule on "
                                      f"{_sg_names(inbound)}, but no outbound rule reaching the group",
                              f"Add an all-traffic outbound rule to the group itself on {inbound[0].group_id}: "
                              f"`aws ec2 authorize-security-group-egress --group-id {inbound[0].group_id} "
                              f"--ip-permissions 'IpProtocol=-1,UserIdGroupPairs=[{{GroupId={inbound[0].group_id}}}]'`"))
        elif not outbound:
            note = " (on HyperPod this is a RISK: see P15)" if ctx.hyperpod else ""
            parts.append(Part("PASS", f"{where}: self-referencing all-traffic inbound rule on {_sg_names(inbound)}; "
                                      f"outbound to the group only through all traffic to 0.0.0.0/0 on "
                                      f"{_sg_names(opened)}{note}"))
        else:
            parts.append(Part("PASS", f"{where}: self-referencing all-traffic rule inbound ({_sg_names(inbound)}) "
                                      f"and outbound ({_sg_names(outbound)})"))
    parts += _efa_width(ctx, efa)
    return _combine("P7", parts)


def _efa_width(ctx: Context, efa_types: list[str]) -> list[Part]:
    parts = []
    for grp in ctx.groups:
        if grp.instance_type not in efa_types:
            continue
        profile = ctx.ev.profiles[grp.instance_type]
        if ctx.hyperpod:
            parts.append(Part("UNVERIFIED", f"{grp.label}: EFA attached Not observable (HyperPod instances live in a "
                                            f"service account; DescribeInstances cannot see them) of "
                                            f"{profile.max_efa_interfaces} supported",
                              "On a node, `fi_info -p efa -t FI_EP_RDM` must list every EFA device; keep "
                              "`InstanceStress` and `InstanceConnectivity` deep health checks on"))
            continue
        short = [n for n in grp.nodes if n.efa_attached is not None and profile.max_efa_interfaces is not None
                 and n.efa_attached < profile.max_efa_interfaces]
        if short:
            parts.append(Part("RISK", f"{grp.label}: fewer EFA interfaces than supported — "
                              + ", ".join(f"`{n.instance_id}` {n.efa_attached} of {profile.max_efa_interfaces}"
                                          for n in short) + " (less inter-node bandwidth)",
                              f"Launch {grp.instance_type} with all {profile.max_efa_interfaces} EFA interfaces "
                              "(launch template NetworkInterfaces, InterfaceType efa or efa-only)"))
        elif grp.nodes:
            parts.append(Part("PASS", f"{grp.label}: " + ", ".join(
                f"`{n.instance_id}` {n.efa_attached} of {profile.max_efa_interfaces}" for n in grp.nodes)
                + " EFA interfaces attached"))
    return parts


def _dims(dimensions: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in dimensions.items())


def p8(ctx: Context) -> Check:
    ev = ctx.ev
    if ev.file_systems is None:
        return _check("P8", "Not checked", "FSx file systems not read — `aws fsx describe-file-systems`",
                      "Re-run with read access: `aws fsx describe-file-systems`")
    if not ev.file_systems:
        where = "attached to the cluster" if ev.cluster_file_system_ids is not None else "in the Region"
        return _check("P8", "PASS", f"not applicable: no FSx for Lustre file system {where}")
    scope = ("" if ev.cluster_file_system_ids is not None else
             "cluster mounts not resolved: every Lustre file system of the Region evaluated; ")
    ids = _ids(f.file_system_id for f in ev.file_systems)
    if ev.fsx_metrics is None:
        return _check("P8", "Not checked", f"{scope}{ids}: saturation metrics not read — `aws cloudwatch "
                                           "list-metrics --namespace AWS/FSx` and `get-metric-data`",
                      "Re-run with read access to CloudWatch metrics")
    start, end = lookback(ev.now, ctx.plan.lengths[0] if ctx.plan.given else None)
    span = f"{iso(start)} → {iso(end)}"
    # DiskIopsUtilization is not a saturation signal on Scratch or HDD file systems (RULES §8 C).
    no_iops = {f.file_system_id for f in ev.file_systems
               if (f.deployment_type or "").startswith("SCRATCH") or f.storage_type == "HDD"}
    usable = [m for m in ev.fsx_metrics if m.datapoints
              and not (m.metric == "DiskIopsUtilization" and m.file_system_id in no_iops)]
    if not usable:
        return _check("P8", "UNVERIFIED", f"{scope}{ids}: no AWS/FSx saturation datapoints over {span}: storage "
                                          "headroom Not observable from metrics",
                      "Time a `stat` or small-file open on the mount during a test run, or run a short load test")
    peaks = "; ".join(f"`{m.file_system_id}` {m.metric} ({_dims(m.dimensions)}) Maximum {m.peak:g} % "
                      f"({m.minutes_at_or_above_90} min ≥ 90 %)" for m in usable if m.peak is not None)
    saturated = [m for m in usable if m.minutes_at_or_above_90 >= SATURATION_MINUTES]
    if saturated:
        return _check("P8", "RISK", f"{scope}saturation ≥ 90 % for {SATURATION_MINUTES}+ min over {span} "
                                    "(values as reported, percent): " + "; ".join(
                                        f"`{m.file_system_id}` {m.metric} ({_dims(m.dimensions)}) Maximum "
                                        f"{m.peak:g} % for "
                                        f"{m.minutes_at_or_above_90} min" for m in saturated),
                      "Raise the throughput of " + _ids(sorted({m.file_system_id for m in saturated}))
                      + " or spread I/O before the run (metadata-bound: fewer, larger files)")
    return _check("P8", "PASS", f"{scope}storage not saturated over {span} (values as reported, percent): {peaks}")


def p9(ctx: Context) -> Check:
    ev = ctx.ev
    if ctx.hyperpod:
        ids = _ids(n.instance_id for n in ctx.gpu_nodes())
        return _check("P9", "UNVERIFIED", f"HyperPod exports no system metrics to CloudWatch: GPU activity of {ids} "
                                          "is Not observable there, so idle reserved GPU hours cannot be counted",
                      "Install the HyperPod observability add-on (Amazon Managed Service for Prometheus and "
                      "Grafana, DCGM exporter) to see GPU utilization per node")
    if ev.capacity_reservations is None:
        return _check("P9", "Not checked", "capacity reservations not read — `aws ec2 describe-capacity-reservations`",
                      "Re-run with read access")
    reserved = [n for g in ctx.groups for n in g.nodes if n.instance_type
                and cluster_reservations(ev, n.instance_type, [n.instance_id])]
    if not reserved:
        return _check("P9", "PASS", "not applicable: no GPU compute node runs on reserved capacity")
    if ev.gpu_activity is None:
        return _check("P9", "Not checked", "GPU activity not read — `aws cloudwatch list-metrics --namespace AWS/EC2 "
                                           "--metric-name GPUPowerUtilization` and `get-metric-data`",
                      "Re-run with read access to CloudWatch metrics")
    activity = {a.instance_id: a for a in ev.gpu_activity}
    seen = [activity[n.instance_id] for n in reserved if n.instance_id in activity
            and activity[n.instance_id].hours_observed]
    blind = [n.instance_id for n in reserved if n.instance_id not in activity
             or not activity[n.instance_id].hours_observed]
    blind_text = (f"; GPU activity Not observable on {_ids(blind)} (no GPUPowerUtilization datapoints)"
                  if blind else "")
    if not seen:
        return _check("P9", "UNVERIFIED", f"GPU activity Not observable: no `AWS/EC2` GPUPowerUtilization datapoints "
                                          f"for {_ids(blind)}",
                      "Publish GPU metrics (CloudWatch agent `nvidia_gpu` → `nvidia_smi_utilization_gpu`)")
    observed = sum(a.hours_observed for a in seen)
    idle = sum(a.idle_hours for a in seen)
    span = f"{iso(seen[0].start)} → {iso(seen[0].end)}"
    per = ", ".join(f"`{a.instance_id}` {a.idle_hours} of {a.hours_observed} h idle ({a.gpus} GPUs)" for a in seen)
    text = (f"{idle} of {observed} node-hours on reserved capacity idle (every GPU below 5 % {seen[0].metric}) over "
            f"{span}: {per}{blind_text}")
    if observed and idle / observed > IDLE_MAJORITY:
        return _check("P9", "RISK", text, "Start the workload as soon as the reservation is active, or release "
                                          "capacity that sits idle")
    return _check("P9", "UNVERIFIED" if blind else "PASS", text,
                  "Publish GPU metrics for every reserved node" if blind else None)


def p10(ctx: Context) -> Check:
    ev = ctx.ev
    ends = []
    for g in ctx.groups:
        h, _ = holding_for(ctx, g)
        if h is not None and h.end is not None:
            ends.append(h)
    unread = [call for call, missing in (("`aws ec2 describe-capacity-reservations`", ev.capacity_reservations is None),
                                         ("`aws sagemaker describe-training-plan`", ev.training_plans is None and any(
                                             g.training_plan_arn for g in ev.cluster.instance_groups))) if missing]
    if not ends and unread:
        return _check("P10", "Not checked", "whether a Capacity Block or training plan ends is unknown: the capacity "
                      "it would show was not read — " + ", ".join(unread),
                      "Re-run with read access: " + ", ".join(unread))
    if not ends:
        return _check("P10", "PASS", "not applicable: no Capacity Block or training plan with an end date holds "
                                     "the cluster's accelerated capacity (see P1)")
    held = ", ".join(sorted({h.resource for h in ends}))
    if ev.event_rules is None:
        return _check("P10", "Not checked", f"capacity {held} ends, but EventBridge rules were not read — "
                                            "`aws events list-rules`", "Re-run with read access: `aws events list-rules`")
    matching = [r for r in ev.event_rules if EXPIRATION_WARNING in (r.event_pattern or "")]
    enabled = [r for r in matching if (r.state or "").upper() == "ENABLED"]
    action = (f"Create an EventBridge rule on `{EXPIRATION_WARNING}` with an alert target: `aws events put-rule "
              f"--name {ev.cluster.name}-capacity-expiry --event-pattern "
              "'{\"source\":[\"aws.ec2\"],\"detail-type\":[\"Capacity Block Expiration Warning\"]}'` and "
              "`aws events put-targets` to an SNS topic")
    if enabled:
        return _check("P10", "PASS", f"capacity {held} ends; EventBridge rule(s) on `{EXPIRATION_WARNING}`: "
                      + _ids(r.name for r in enabled))
    if matching:
        return _check("P10", "RISK", f"capacity {held} ends; the rule(s) on `{EXPIRATION_WARNING}` are not enabled: "
                      + _ids(f"{r.name} ({r.state})" for r in matching), f"Enable {matching[0].name}")
    return _check("P10", "RISK", f"capacity {held} ends, and none of the {len(ev.event_rules)} EventBridge rule(s) "
                                 f"read on the default bus matches `{EXPIRATION_WARNING}` (emitted 40 min before "
                                 "EndDate)", action)


def _minimum_key(instance_type: str | None) -> str | None:
    if instance_type is None:
        return None
    if instance_type in DRIVER_MINIMUM:
        return instance_type
    return "p6e-gb200" if instance_type.startswith("p6e-gb200") else None


def p11(ctx: Context) -> Check:
    nodes = ctx.gpu_nodes()
    if not nodes:
        return _check("P11", "UNVERIFIED", "no GPU compute node to read a driver version from",
                      "Re-run once the compute nodes are up")
    parts = []
    for n in nodes:
        found = [(p.line, m) for p in ctx.lines([n.instance_id]) if (m := DRIVER_LOADED.search(p.line.message))]
        key = _minimum_key(n.instance_type)
        if not found:
            parts.append(Part("UNVERIFIED", f"`{n.instance_id}` ({n.instance_type}): driver version unreadable — no "
                                            "`NVRM: loading NVIDIA UNIX … Kernel Module <version>` line in the window "
                                            "(it is logged at boot)",
                              f"On `{n.instance_id}`: `nvidia-smi --query-gpu=driver_version --format=csv,noheader`"))
            continue
        line, m = found[-1]
        version, major = m.group("version"), int(m.group("major"))
        where = f"`{n.instance_id}` ({n.instance_type}): driver {version} (R{major}) from `{line.log_group}` / " \
                f"`{line.log_stream}` at {iso(line.time)}"
        if key is None:
            parts.append(Part("UNVERIFIED", where + f"; no published minimum for {n.instance_type} (RULES §10 lists P6 "
                                                    "types only): compare with the current DLAMI stack, not pass/fail",
                              "Compare the driver with the current Deep Learning AMI release notes for this type"))
            continue
        cuda, kernel, efa, ofi = OTHER_MINIMUMS[key]
        rest = (f"; CUDA ≥ {cuda}, kernel ≥ {kernel}, EFA installer ≥ {efa}, AWS OFI NCCL ≥ {ofi} are not readable "
                "from the logs")
        if major < DRIVER_MINIMUM[key]:
            parts.append(Part("FAIL", where + f" is below the minimum R{DRIVER_MINIMUM[key]}{rest}",
                              f"Move {n.instance_type} nodes to a DLAMI with driver R{DRIVER_MINIMUM[key]} or later"))
        else:
            parts.append(Part("PASS", where + f" meets the minimum R{DRIVER_MINIMUM[key]}{rest}"))
    return _combine("P11", parts)


def _where(p: ParsedLine) -> str:
    return f"`{p.line.log_group}` / `{p.line.log_stream}` at {iso(p.line.time)}"


def p12(ctx: Context) -> Check:
    nodes = ctx.gpu_nodes()
    if not nodes:
        return _check("P12", "UNVERIFIED", "no GPU compute node running: the transport of the last run is Not "
                                           "observable", f"Run the next job with `{NCCL_COMMAND}`")
    efa_types, _ = _efa_types(ctx)
    parts: list[Part] = []
    nccl_seen = False
    for n in nodes:
        lines = ctx.lines([n.instance_id])
        nccl = [p for p in lines if "NCCL INFO" in p.line.message or "NCCL WARN" in p.line.message]
        nccl_seen = nccl_seen or bool(nccl)
        fm_failed = [p for p in lines if FABRIC_MANAGER_FAILED.search(p.line.message)]
        socket = [p for p in nccl if NCCL_SOCKET in p.line.message]
        if fm_failed:
            parts.append(Part("FAIL", f"`{n.instance_id}`: Fabric Manager failure — \"{fm_failed[0].line.message[:160]}\""
                                      f" ({_where(fm_failed[0])})",
                              f"Reboot `{n.instance_id}` (REPLACE if Fabric Manager fails again)"))
        if socket and n.instance_type in efa_types:
            parts.append(Part("FAIL", f"`{n.instance_id}` ({n.instance_type}, EFA): NCCL fell back to TCP "
                                      f"(`{NCCL_SOCKET}`, {_where(socket[0])})",
                              "Fix the EFA path (aws-ofi-nccl plugin, `FI_PROVIDER=efa`, security group self rule) "
                              "and re-run an all_reduce test"))
        nvswitch = (n.nvswitch or "").startswith("NVSwitch")
        shm = [p for p in nccl if NCCL_SHM in p.line.message]
        if shm and nvswitch:
            parts.append(Part("RISK", f"`{n.instance_id}` ({n.nvswitch}): `{NCCL_SHM}` — GPU peer access unused "
                                      f"({_where(shm[0])})", "Check NCCL_P2P_DISABLE / container IPC settings"))
        ib = [p for p in nccl if NCCL_IB in p.line.message]
        if ib:
            parts.append(Part("RISK", f"`{n.instance_id}`: `{NCCL_IB}` on EC2 (unexpected; {_where(ib[0])})",
                              "Install and select the aws-ofi-nccl plugin"))
        if nccl and not (fm_failed or socket or shm or ib):
            good = sorted({g for p in nccl for g in NCCL_GOOD if g in p.line.message})
            fm = f"; Fabric Manager {n.signals.fabric_manager}" if nvswitch else ""
            parts.append(Part("PASS", f"`{n.instance_id}`: {len(nccl)} NCCL line(s), no socket fallback"
                                      + (f" ({', '.join(good)})" if good else "") + fm))
    if not nccl_seen and not any(p.result == "FAIL" for p in parts):
        ids = _ids(n.instance_id for n in nodes)
        return _check("P12", "UNVERIFIED", f"no `NCCL INFO`/`NCCL WARN` lines from {ids} in the window: the transport "
                                           "of the last run is Not observable",
                      f"Run the next job (or an all_reduce test) with `{NCCL_COMMAND}`")
    return _combine("P12", parts)


# -- operations: P13–P16 ------------------------------------------------------------------------------
def _names_cluster(text: str, names: Iterable[str]) -> bool:
    """The cluster's name as a whole token; a hyphen may follow only before a capitalised suffix
    (`<cluster>-HeadNode-…`), so cluster `llm` does not claim `llm-pretrain-…`'s alarms."""
    return any(re.search(rf"(?<![A-Za-z0-9-]){re.escape(n)}(?:$|[^A-Za-z0-9-]|-(?=[A-Z]))", text)
               for n in names if n)


def p13(ctx: Context) -> Check:
    ev = ctx.ev
    if ev.alarms_in_alarm is None:
        return _check("P13", "Not checked", "CloudWatch alarms not read — `aws cloudwatch describe-alarms "
                                            "--state-value ALARM`", "Re-run with read access")
    names = [ev.cluster.name, ev.cluster.cluster_id or ""]
    ids = {n.instance_id for n in ev.nodes}
    related = [a for a in ev.alarms_in_alarm
               if set(a.dimensions.values()) & (ids | {x for x in names if x})
               or any(i in a.name for i in ids) or _names_cluster(a.name, names)]
    if not related:
        return _check("P13", "PASS", f"no CloudWatch alarm in ALARM for cluster `{ev.cluster.name}`, its head node or "
                                     f"its instances ({len(ev.alarms_in_alarm)} alarm(s) in ALARM in the Region, "
                                     "none about this cluster)")
    items = []
    for a in related:
        since = (f" since {iso(a.state_since)} ({(ev.now - a.state_since).total_seconds() / 3600:.1f} h)"
                 if a.state_since else "")
        metric = f" — {a.namespace}/{a.metric} {a.dimensions}" if a.metric else ""
        items.append(f"`{a.name}` in ALARM{since}{metric}")
    return _check("P13", "RISK", "; ".join(items),
                  f"Resolve {related[0].name} before the run (for `ClustermgtdHeartbeat`: clustermgtd on the head "
                  "node stopped; check `/var/log/parallelcluster/clustermgtd`)")


def _need_per_node(ctx: Context, grp: GpuGroup) -> tuple[int, int, str]:
    """(IPs, network interfaces, how they were found) one replacement node of the group needs."""
    profile = ctx.ev.profiles.get(grp.instance_type or "")
    efa = (profile.max_efa_interfaces or 0) if profile and profile.efa_supported else 0
    if ctx.hyperpod:
        if grp.instance_type in HYPERPOD_P5_TYPES:
            ips = HYPERPOD_P5_IPS[ctx.ev.cluster.kind]
            return ips, max(1, efa), f"{ips} IPs (HyperPod P5 on {ctx.ev.cluster.kind.split('-')[1].title()})"
        if ctx.ev.cluster.kind == "hyperpod-eks":
            return 81, max(1, efa), "81 IPs (the HyperPod P5 EKS figure, used as an estimate for this type)"
        return max(1, efa), max(1, efa), f"{max(1, efa)} IP(s) (estimate: one per EFA interface, at least one)"
    nets = {n.instance_id: n for n in ctx.ev.instance_network or []}
    seen = [nets[i] for i in grp.node_ids if i in nets]
    if seen:
        top = max(seen, key=lambda n: n.private_ips)
        return top.private_ips, top.interfaces, (f"{top.private_ips} IPs on {top.interfaces} interface(s), as on "
                                                 f"`{top.instance_id}`")
    return max(1, efa), max(1, efa), f"{max(1, efa)} IP(s) (estimate: one per EFA interface, at least one)"


def p14(ctx: Context) -> Check:
    ev = ctx.ev
    if ev.subnets is None:
        return _check("P14", "Not checked", "subnets not read — `aws ec2 describe-subnets --subnet-ids "
                                            + " ".join(ev.cluster.subnet_ids) + "`", "Re-run with read access")
    nets = {n.instance_id: n for n in ev.instance_network or []}
    compute_subnets = {nets[i].subnet_id for g in ctx.groups for i in g.node_ids if i in nets and nets[i].subnet_id}
    wanted = compute_subnets or set(ev.cluster.subnet_ids)
    subnets = [s for s in ev.subnets if s.subnet_id in wanted]
    if not subnets:
        return _check("P14", "UNVERIFIED", "no subnet of the cluster's compute nodes is known",
                      "Name the compute subnets and check `AvailableIpAddressCount`")
    needs = [(g, *_need_per_node(ctx, g)) for g in ctx.groups]
    grp, ips, enis, how = max(needs, key=lambda x: x[1])
    free = ", ".join(f"`{s.subnet_id}` ({s.availability_zone}) {s.available_ips} free IPs" for s in subnets)
    parts = []
    best = max((s.available_ips or 0) for s in subnets)
    if best < ips:
        parts.append(Part("RISK", f"one replacement {grp.instance_type} needs {how}; {free}: no subnet can take it",
                          f"Free IPs or add a larger subnet in the capacity's Availability Zone (need ≥ {ips})"))
    else:
        parts.append(Part("PASS", f"one replacement {grp.instance_type} needs {how}; {free}"))
    quota = next((q for q in ev.service_quotas or [] if q.quota_code == "L-DF5E4CA3"), None)
    if quota is None or quota.value is None:
        why = f" ({quota.error})" if quota and quota.error else ""
        parts.append(Part("Not checked", f"ENI quota L-DF5E4CA3 not read{why} — `aws service-quotas get-service-quota "
                                         "--service-code vpc --quota-code L-DF5E4CA3`", "Re-run with read access"))
    else:
        per_group = [(g, _need_per_node(ctx, g)[1]) for g in ctx.groups]
        used = sum(e * max(g.size, 1) for g, e in per_group) + sum(
            1 for n in ev.nodes if not any(n.instance_id in g.node_ids for g in ctx.groups))
        need = used + enis
        text = (f"ENI quota L-DF5E4CA3 (Network interfaces per Region) = {quota.value:g}; this cluster at target "
                f"needs about {used} interfaces, {need} with one replacement ({enis} per {grp.instance_type}); other "
                "ENIs in the Region are not counted (`aws ec2 describe-network-interfaces` not read)")
        if quota.value < need:
            parts.append(Part("RISK", text, "Request a higher `Network interfaces per Region` quota (L-DF5E4CA3)"))
        else:
            parts.append(Part("PASS", text))
    return _combine("P14", parts)


def p15(ctx: Context) -> Check:
    if not ctx.hyperpod:
        return _check("P15", "PASS", f"not applicable: the outbound 0.0.0.0/0 rule is a HyperPod EFA finding; "
                                     f"cluster `{ctx.ev.cluster.name}` is {ctx.ev.cluster.kind} (EFA rules in P7)")
    efa, unknown = _efa_types(ctx)
    if not efa:
        if unknown:
            return _check("P15", "UNVERIFIED", f"EFA support of {', '.join(unknown)} unknown",
                          "`aws ec2 describe-instance-types`")
        return _check("P15", "PASS", "not applicable: no EFA instance type in the cluster")
    sets, unread = _sg_sets(ctx)
    if unread:
        return _check("P15", "Not checked", f"outbound rules: {unread}", f"Re-run with read access: {unread}")
    where, sgs = sets[0]
    outbound = [g for g in sgs if _self_rule(g, g.egress)]
    opened = [g for g in sgs if _open_egress(g)]
    if outbound:
        return _check("P15", "PASS", f"{where}: outbound self-referencing all-traffic rule on {_sg_names(outbound)}")
    target = (opened or sgs)[0].group_id if (opened or sgs) else "<sg>"
    action = (f"Add an all-traffic outbound rule from {target} to itself: `aws ec2 authorize-security-group-egress "
              f"--group-id {target} --ip-permissions 'IpProtocol=-1,UserIdGroupPairs=[{{GroupId={target}}}]'`")
    if opened:
        return _check("P15", "RISK", f"{where}: {_sg_names(opened)} allow(s) outbound all traffic to 0.0.0.0/0 instead "
                                     "of a self-referencing rule — documented to fail HyperPod EFA health checks",
                      action)
    return _check("P15", "RISK", f"{where}: no outbound rule reaching the group on {_sg_names(sgs)} (see P7)", action)


def _route_table(ctx: Context, subnet_id: str, vpc_id: str | None) -> RouteTableInfo | None:
    tables = ctx.ev.route_tables or []
    explicit = next((t for t in tables if subnet_id in t.subnet_ids), None)
    return explicit or next((t for t in tables if t.main and t.vpc_id == vpc_id), None)


def p16(ctx: Context) -> Check:
    ev = ctx.ev
    parts: list[Part] = []
    failures = [p for p in ctx.lines() if BOOTSTRAP_FAILED.search(p.line.message)]
    if failures:
        first, last = failures[0], failures[-1]
        parts.append(Part("RISK", f"{len(failures)} bootstrap failure / protected-mode line(s) from {iso(first.line.time)}"
                                  f" to {iso(last.line.time)}, e.g. `{first.line.log_stream}`: "
                                  f"\"{first.line.message[:160]}\"",
                          "Read the head node's `clustermgtd` and `slurm_resume` logs (HyperPod: the "
                          "`LifecycleConfig/<group>/<instance-id>` streams), fix the cause, then restart the fleet "
                          "(`pcluster update-compute-fleet --status START_REQUESTED`)"))
    if ev.cluster.kind == "parallelcluster":
        parts += _public_subnet_parts(ctx)
    if not parts:
        scope = ("" if ev.cluster.kind == "parallelcluster" else
                 "; the public-subnet rule applies to ParallelCluster")
        return _check("P16", "PASS", "no `bootstrap failure`, `Node bootstrap error` or protected-mode line in the "
                                     f"cluster's log sources over the window{scope}")
    return _combine("P16", parts)


def _public_subnet_parts(ctx: Context) -> list[Part]:
    ev = ctx.ev
    if ev.instance_network is None:
        return [Part("Not checked", "the compute nodes' interfaces not read — `aws ec2 describe-instances`",
                     "Re-run with read access")]
    if ev.route_tables is None:
        return [Part("Not checked", "route tables not read — `aws ec2 describe-route-tables`",
                     "Re-run with read access")]
    nets = {n.instance_id: n for n in ev.instance_network}
    compute = [(g, nets[i]) for g in ctx.groups for i in g.node_ids if i in nets and nets[i].subnet_id]
    if not compute:
        return [Part("UNVERIFIED", "no running compute node to read its subnet from; the queues' SubnetIds are in the "
                                   "cluster config", "Check the compute subnets' route tables for a NAT gateway")]
    parts = []
    for grp, net in compute:
        subnet = net.subnet_id or ""
        table = _route_table(ctx, subnet, net.vpc_id)
        if table is None:
            parts.append(Part("UNVERIFIED", f"`{net.instance_id}`: no route table found for `{net.subnet_id}`",
                              "`aws ec2 describe-route-tables --filters Name=association.subnet-id,Values="
                              f"{net.subnet_id}`"))
            continue
        default = next((r for r in table.routes if r.destination == "0.0.0.0/0"), None)
        route = f"`{table.route_table_id}` 0.0.0.0/0 → {default.target if default else 'none'}"
        multi = net.interfaces > 1
        if default and default.target.startswith("igw-") and multi and not net.public_ip:
            parts.append(Part("FAIL", f"`{net.instance_id}` ({grp.instance_type}) in `{net.subnet_id}`: {route}, no NAT; "
                                      f"{net.interfaces} interfaces ({net.efa_interfaces} EFA) and no public IP — it "
                                      "cannot reach the internet to bootstrap",
                              f"Move queue `{grp.name}` to a private subnet whose 0.0.0.0/0 route goes to a NAT "
                              "gateway (EFA nodes with several interfaces get no public IP)"))
        else:
            parts.append(Part("PASS", f"`{net.instance_id}` in `{net.subnet_id}`: {route}; {net.interfaces} "
                                      f"interface(s), public IP {'yes' if net.public_ip else 'no'}"))
    return parts


# -- the assessment -------------------------------------------------------------------------------------
CHECKS: dict[str, Callable[[Context], Check]] = {
    "P1": p1, "P2": p2, "P3": p3, "P4": p4, "P5": p5, "P6": p6, "P7": p7, "P8": p8, "P9": p9, "P10": p10,
    "P11": p11, "P12": p12, "P13": p13, "P14": p14, "P15": p15, "P16": p16,
}


# Checks about the accelerated compute capacity: without any such group or node there is nothing to judge.
NEEDS_GROUPS = {"P1", "P2", "P3", "P5", "P7", "P9", "P10", "P12", "P14", "P15"}


def _run(cid: str, ctx: Context) -> Check:
    """An exception is never the output of an audit (RULES §0.3): a check that cannot finish is Not checked."""
    if cid in NEEDS_GROUPS and not ctx.groups:
        prefix = ctx.plan.text() + ". " if cid == "P1" else ""
        return _check(cid, "UNVERIFIED", f"{prefix}no accelerated compute group or running GPU compute node found "
                                         f"in cluster `{ctx.ev.cluster.name}`: nothing to check this against",
                      "Re-run the pre-flight once the compute nodes are up (or name them with `--instances`)")
    try:
        check = CHECKS[cid](ctx)
    except Exception as exc:  # noqa: BLE001
        return _check(cid, "Not checked", f"the check could not be evaluated ({type(exc).__name__}: {exc})",
                      "Report this as a gpuaudit defect")
    if cid not in CORE and cid not in EXTRA_MAY_FAIL and check.result == "FAIL":
        check = check.model_copy(update={"result": "RISK"})  # §10: P7–P16 can only add RISK here
    return check


def readiness(checks: Iterable[Check]) -> Readiness:
    """`No` on any FAIL; `Yes with risks` on anything short of PASS (a check not made is not a pass)."""
    results = {c.result for c in checks}
    if "FAIL" in results:
        return "No"
    if results - {"PASS"}:
        return "Yes with risks"
    return "Yes"


def plan_for(ev: Evidence, config: JudgeConfig) -> Plan:
    start = config.run_start or ev.now
    if config.run_hours is not None:
        return Plan(start, (float(config.run_hours),), True, config.checkpoint_minutes)
    return Plan(start, DEFAULT_RUN_HOURS, False, config.checkpoint_minutes)


def assess(j: Judged, config: JudgeConfig) -> tuple[list[Check], Readiness | None]:
    ctx = Context(j, plan_for(j.evidence, config), tuple(gpu_groups(j.evidence)))
    core = [_run(cid, ctx) for cid in CORE]
    ready = readiness(core)  # written from the core first
    extra = [_run(cid, ctx) for cid in TITLES if cid not in CORE]
    if ready != "No":  # P7–P16 can add to the verdict, never undo a core FAIL
        ready = readiness(core + extra)
    return core + extra, ready
