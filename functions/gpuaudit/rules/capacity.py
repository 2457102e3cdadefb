"""Capacity to run and to replace into (RULES §8 A recovery and B, §10 P1–P3, P14): what holds a GPU group's
capacity, the groups short of nodes, the capacity the group could replace into, capacity errors, and free IPs
against one replacement's need. Read by the incident branches, the incident findings and the pre-flight checks
alike; the arithmetic itself is in `domain/capacity.py`. Pure: no AWS, no clock."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from gpuaudit.domain.capacity import cluster_reservations, holding_reservation
from gpuaudit.domain.timing import CLOUDTRAIL_LOOKBACK, TIMELINE_MARGIN
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import CapacityReservation, CloudTrailEvent
from gpuaudit.model.result import FindingStep, FindingStepStatus
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.context import Context, GpuGroup, Holding, id_list
from gpuaudit.rules.steps import all_lines, line_at, merge, quote, step

if TYPE_CHECKING:
    from gpuaudit.rules.context import Judged


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


# HyperPod IPs per P5 node (RULES §8 'Frequent non-GPU causes').
HYPERPOD_P5_IPS = {"hyperpod-slurm": 32, "hyperpod-eks": 81}


HYPERPOD_P5_TYPES = ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge")  # RULES §2: the one P5 row


def need_per_node(ctx: Context, grp: GpuGroup) -> tuple[int, int, str]:
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


TROUBLED = ("Failure", "Pending", "NotFound", "ShuttingDown")


# -- why no replacement (RULES §8 A recovery, B, frequent non-GPU causes) ---------------------------------------
def affected_groups(ctx: Context) -> list[GpuGroup]:
    troubled = {n.instance_id for n in ctx.j.nodes if n.status in TROUBLED or n.verdict == "REPLACE"}
    out = []
    for g in ctx.groups:
        grp = g.group
        short = grp is not None and grp.current_count is not None and grp.target_count is not None \
            and grp.current_count < grp.target_count
        if short or troubled & set(g.node_ids):
            out.append(g)
    return out


def capacity_step(ctx: Context, groups: list[GpuGroup]) -> FindingStep:
    name = "capacity to replace into"
    parts: list[tuple[FindingStepStatus, str]] = []
    for g in groups:
        held, unread = holding_for(ctx, g)
        if unread is not None:
            parts.append(("Not checked", f"{g.label}: {unread.what} — {unread.call}"))
        elif held is not None and held.plan is not None:
            p = held.plan
            counts = (f"Status {p.status}, AvailableInstanceCount {p.available_instance_count}, "
                      f"AvailableSpareInstanceCount {p.available_spare_instance_count}, "
                      f"UnhealthyInstanceCount {p.unhealthy_instance_count}, TotalInstanceCount "
                      f"{p.total_instance_count} (DescribeTrainingPlan)")
            free = [c for c in (p.available_instance_count, p.available_spare_instance_count) if c is not None]
            if p.status in ("Expired", "Failed") or (free and not any(free)):
                parts.append(("Blocked", f"{g.label} runs on training plan `{p.name}`: {counts} — no instance "
                                         "left to replace into"))
            elif not free:
                parts.append(("Not checked", f"{g.label}, training plan `{p.name}`: {counts} — DescribeTrainingPlan "
                                             "returned no free or spare count"))
            else:
                parts.append(("Cleared", f"{g.label}, training plan `{p.name}`: {counts}"))
        elif held is not None and held.reservation is not None:
            r = held.reservation
            counts = (f"State {r.state}, AvailableInstanceCount {r.available_instance_count} of TotalInstanceCount "
                      f"{r.total_instance_count} (DescribeCapacityReservations)")
            if r.available_instance_count == 0:
                parts.append(("Blocked", f"{g.label} runs on {held.kind} `{r.reservation_id}`: {counts} — no "
                                         "instance left to replace into"))
            elif r.available_instance_count is None:
                parts.append(("Not checked", f"{g.label}, `{r.reservation_id}`: AvailableInstanceCount not returned"))
            else:
                parts.append(("Cleared", f"{g.label}, {held.kind} `{r.reservation_id}`: {counts}"))
        else:
            expired = [r for r in ctx.ev.capacity_reservations or [] if r.state == "expired"
                       and r.instance_type == (g.instance_type or "").removeprefix("ml.")]
            insufficient = [p for p in all_lines(ctx.j) if CAPACITY_ERROR.search(p.line.message)]
            insufficient_events = [e for e in ctx.ev.cluster_events or [] if CAPACITY_ERROR.search(e.description)]
            if expired:
                parts.append(("Blocked", f"{g.label}: " + ", ".join(
                    f"`{r.reservation_id}` State expired (EndDate {iso(r.end_date) if r.end_date else '—'})"
                    for r in expired) + " — the reservation the group ran on has ended"))
            elif insufficient or insufficient_events:
                where = (line_at(insufficient[0]) if insufficient
                         else f"cluster event at {iso(insufficient_events[0].time)}")
                parts.append(("Blocked", f"{g.label}: capacity-class error in {where}"))
            else:
                parts.append(("Not checked", f"{g.label}: no Capacity Block, capacity reservation or training plan "
                                             "holds it (on-demand capacity is not visible before a launch) and no "
                                             "InsufficientInstanceCapacity was read"))
    return merge(name, parts)


# RULES §8 B: a capacity-class launch error, in any text the run reads (a CloudTrail call's error, a clustermgtd /
# slurm_resume / HyperPod lifecycle line, a cluster event, a node's status message): no capacity in the pool or the
# reservation, no free address in the subnet, no network interface left in the Region's quota (ENI exhaustion), or a
# Capacity Reservation / Block that is not active.
CAPACITY_ERROR = re.compile(
    r"InsufficientInstanceCapacity|InsufficientCapacity\w*|InsufficientReservedInstanceCapacity"
    r"|ReservationCapacityExceeded|InsufficientFreeAddressesInSubnet|NetworkInterfaceLimitExceeded"
    r"|(?i:insufficient capacity|(?:do not|don't) have (?:sufficient|enough) [\w.-]+ capacity"
    r"|capacity (?:reservation|block)[^.]{0,80}?\bnot (?:yet )?active)")
RESERVATION_ID = re.compile(r"(?<![\w-])cr-[0-9a-f]{8,17}(?![\w-])")
# An EC2 instance type as a request or an error message names it (`p5.48xlarge`, `p6-b200.48xlarge`, `ml.g5.xlarge`).
INSTANCE_TYPE = re.compile(r"(?<![\w.-])((?:ml\.)?[a-z][a-z0-9-]*\d[a-z0-9-]*\.(?:\d*xlarge|large|medium|small|micro"
                           r"|nano|metal(?:-\d+xl)?))(?![\w-])")
LAUNCH_CALLS = ("RunInstances", "CreateFleet")
# Capacity Block states in which no instance can run on it (RULES §8 B: payment-pending, payment-failed,
# scheduled, active, expired); what each means for a launch.
NOT_ACTIVE: dict[str, str] = {
    "scheduled": "nodes cannot launch on it before its StartDate (expected)",
    "payment-pending": "it does not become active until the payment is processed",
    "payment-failed": "it will not become active: the payment failed",
    "expired": "it has ended: no instance runs or launches on it",
}


@dataclass(frozen=True)
class CapacityError:
    """One capacity-class error read, where it was read, and the reservations its text names."""

    time: datetime | None
    where: str
    text: str
    reservations: tuple[str, ...]
    launch: bool  # a launch call's own error (CloudTrail RunInstances / CreateFleet)

    def said(self) -> str:
        return f"{self.text} ({self.where})"


def capacity_errors(j: Judged) -> list[CapacityError]:
    """Every capacity-class error the run read, oldest first: log lines, cluster events, node status messages, and
    CloudTrail calls between 6 h before the window and its end — a failed RunInstances / CreateFleet counts too
    when its message names a reservation that is not active, whatever its wording."""
    ev = j.evidence
    start, end = ev.window.start - CLOUDTRAIL_LOOKBACK, ev.window.end + TIMELINE_MARGIN
    inactive = {r.reservation_id for r in ev.capacity_reservations or [] if r.state in NOT_ACTIVE}
    out: list[CapacityError] = []
    for p in all_lines(j):
        if CAPACITY_ERROR.search(p.line.message) and "Interruption Warning" not in p.line.message:
            out.append(CapacityError(p.line.time, line_at(p), quote(p.line.message),
                                     tuple(RESERVATION_ID.findall(p.line.message)), False))
    for e in ev.cluster_events or []:
        if CAPACITY_ERROR.search(e.description) and start <= e.time <= end:
            out.append(CapacityError(e.time, f"cluster event at {iso(e.time)}, ListClusterEvents", quote(e.description),
                                     tuple(RESERVATION_ID.findall(e.description)), False))
    for n in ev.nodes:
        if n.status_message and CAPACITY_ERROR.search(n.status_message):
            out.append(CapacityError(None, f"status of `{n.instance_id}`, DescribeClusterNode", quote(n.status_message),
                                     tuple(RESERVATION_ID.findall(n.status_message)), False))
    types = cluster_types(ev)
    for t in ev.cloudtrail or []:
        if not start <= t.time <= end:
            continue
        for how, code, message in call_errors(t):
            said = f"{code} {message}".strip()
            named = tuple(RESERVATION_ID.findall(said))
            if inactive & set(named):
                ours = True
            else:  # a launch of only other instance types is another workload of the account, not the cluster's
                asked = {m.removeprefix("ml.") for m in INSTANCE_TYPE.findall(f"{t.request_parameters} {said}")}
                ours = not asked or bool(asked & types)
            if ours and (CAPACITY_ERROR.search(said) or (t.event_name in LAUNCH_CALLS and inactive & set(named))):
                out.append(CapacityError(t.time, "CloudTrail", f"{t.event_name} at {iso(t.time)} {how}: "
                                         f"{code}: {quote(message)}", named, t.event_name in LAUNCH_CALLS))
    return sorted(out, key=lambda e: (e.time is None, e.time or ev.window.start))


def call_errors(t: CloudTrailEvent) -> list[tuple[str, str, str]]:
    """(how it is said, errorCode, errorMessage) of every error a CloudTrail call records: the call's own, and for a
    CreateFleet that succeeded, each launch it could not make — the API's `Errors` (CloudTrail keeps EC2 responses in
    their XML form: `CreateFleetResponse.errorSet.item`, one item or a list), each with its own code and message."""
    out = [("failed", t.error_code, t.error_message or "")] if t.error_code else []
    if t.event_name == "CreateFleet" and t.response_elements:
        out += [("could not launch an instance", code, message) for code, message in _fleet_errors(t.response_elements)]
    return out


def _fleet_errors(node: object) -> list[tuple[str, str]]:
    """Every object holding an errorCode below `node`, whatever the nesting (`errors`, `errorSet.item(s)`)."""
    if isinstance(node, list):
        return [e for x in node for e in _fleet_errors(x)]
    if not isinstance(node, dict):
        return []
    code = node.get("errorCode", node.get("ErrorCode"))
    if isinstance(code, str) and code:
        message = node.get("errorMessage", node.get("ErrorMessage"))
        return [(code, message if isinstance(message, str) else "")]
    return [e for x in node.values() for e in _fleet_errors(x)]


def cluster_types(ev: Evidence) -> set[str]:
    """The cluster's instance types, without HyperPod's `ml.` prefix: its nodes' and its groups'."""
    return {(t or "").removeprefix("ml.") for t in [*(n.instance_type for n in ev.nodes),
                                                    *(g.instance_type for g in ev.cluster.instance_groups)] if t}


def inactive_reservations(j: Judged, errors: Sequence[CapacityError]) -> list[CapacityReservation]:
    """The Capacity Blocks / Reservations no instance of the cluster can run on now (NOT_ACTIVE): those a capacity
    error names, and those of the cluster's instance types — an expired one only when it ended from 6 h before the
    window on (one that ended long before is history, not this incident)."""
    ev = j.evidence
    named = {r for e in errors for r in e.reservations}
    types = cluster_types(ev)
    out = []
    for r in ev.capacity_reservations or []:
        if r.state not in NOT_ACTIVE or not (r.reservation_id in named or r.instance_type in types):
            continue
        if r.state == "expired" and r.reservation_id not in named and not (
                r.end_date and ev.window.start - CLOUDTRAIL_LOOKBACK <= r.end_date <= ev.window.end + TIMELINE_MARGIN):
            continue
        out.append(r)
    return sorted(out, key=lambda r: (r.reservation_id not in named, r.reservation_id))


def reservation_said(r: CapacityReservation) -> str:
    """One reservation as read, with what its state means for a launch; no '; ' inside (a headline quotes it)."""
    kind = "Capacity Block" if r.reservation_type == "capacity-block" else "Capacity Reservation"
    return (f"{kind} `{r.reservation_id}` ({r.instance_type}) State {r.state}, StartDate "
            f"{iso(r.start_date) if r.start_date else 'not returned'}, EndDate "
            f"{iso(r.end_date) if r.end_date else 'not returned'} (DescribeCapacityReservations): "
            f"{NOT_ACTIVE.get(r.state, 'not active')}")


def after_onset(errors: Sequence[CapacityError], onset: datetime | None) -> list[CapacityError]:
    """The capacity errors read after the failure began (RULES §0.5, §8: a branch's evidence must precede the failure):
    a launch that failed later cannot have caused it — an effect (a replacement that could not launch) or another
    queue's workload. An error without a time is never placed after the onset."""
    return [e for e in errors if onset is not None and e.time is not None and e.time > onset]


def late_errors_said(late: Sequence[CapacityError], onset: datetime) -> str:
    shown = "; ".join(e.said() for e in late[:NAMED_ERRORS])
    more = f" (+{len(late) - NAMED_ERRORS} more)" if len(late) > NAMED_ERRORS else ""
    return (f"{len(late)} capacity-class error(s) read after the failure onset at {iso(onset)}, so not its cause "
            f"(an effect or another workload; each in the timeline): {shown}{more}")


def capacity_error_step(ctx: Context, onset: datetime | None = None) -> FindingStep:
    """RULES §8 B: every capacity-class error read (capacity_errors) blocks, except one read after the failure onset
    (`after_onset`), which is said and never blocks. Cleared only when CloudTrail was read whole: an EC2 launch error
    lives there, and logs alone cannot clear it."""
    name = "capacity errors"
    ev = ctx.ev
    every = capacity_errors(ctx.j)
    late = after_onset(every, onset)
    errors = [e for e in every if e not in late]
    later = f"; {late_errors_said(late, onset)}" if late and onset is not None else ""
    if errors:
        shown = "; ".join(e.said() for e in errors[:NAMED_ERRORS])
        more = f" (+{len(errors) - NAMED_ERRORS} more)" if len(errors) > NAMED_ERRORS else ""
        return step(name, "Blocked", f"{len(errors)} capacity-class error(s) read: {shown}{more}{later}")
    before = " before the failure onset" if later else ""
    if ev.cloudtrail is None or not ev.cloudtrail_complete:
        return step(name, "Not checked", f"no InsufficientInstanceCapacity or other capacity-class error (a "
                     f"reservation not active, no free address) in the log lines read{before}, but "
                     "CloudTrail was not read for every event name (see visibility gaps) — `aws "
                     "cloudtrail lookup-events --lookup-attributes AttributeKey=EventName,AttributeValue=RunInstances`"
                     f"{later}")
    return step(name, "Cleared", f"no InsufficientInstanceCapacity or other capacity-class error (a reservation not "
                 f"active, no free address) in CloudTrail ({len(ev.cloudtrail)} event(s) "
                 f"read by event name), the cluster events or the log lines read{before}{later}")


NAMED_ERRORS = 5


def subnet_step(ctx: Context, groups: list[GpuGroup]) -> FindingStep:
    name = "free IPs in the cluster's subnets"
    ev = ctx.ev
    ids = ev.cluster.subnet_ids or sorted({n.subnet_id for n in ev.instance_network or [] if n.subnet_id})
    if ev.subnets is None:
        return step(name, "Not checked", "subnets not read — `aws ec2 describe-subnets`")
    subnets = [s for s in ev.subnets if s.subnet_id in ids and s.available_ips is not None]
    if not subnets:
        return step(name, "Not checked", "no subnet with an AvailableIpAddressCount was read for the cluster "
                                          f"({id_list(ids)}) — `aws ec2 describe-subnets`")
    best = max(subnets, key=lambda s: s.available_ips or 0)
    free = ", ".join(f"`{s.subnet_id}` AvailableIpAddressCount {s.available_ips}" for s in subnets)
    parts: list[tuple[FindingStepStatus, str]] = []
    for g in groups:
        ips, _, how = need_per_node(ctx, g)
        status: FindingStepStatus = "Blocked" if (best.available_ips or 0) < ips else "Cleared"
        parts.append((status, f"{g.label}: one replacement needs {how}; {free} (DescribeSubnets)"))
    return merge(name, parts)
