"""Incident mode (RULES §8): the six root-cause branches A–F (the timeline they read is rules/timeline.py).

Every branch gets a status. `Ruled out` needs evidence that was read and came back clean;
what could not be read is `Not assessed`. `Root cause` needs a Proven signal; the leading
unproven branch is `UNVERIFIED`, labelled Hypothesis, with the measurement that settles it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from gpuaudit.domain.capability import fabric_class
from gpuaudit.domain.capacity import DEFAULT_RUN_HOURS
from gpuaudit.domain.streams import INSTANCE_ID, message_host
from gpuaudit.domain.timing import CLOUDTRAIL_LOOKBACK, TIMELINE_MARGIN
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import CapacityReservation, CloudTrailEvent
from gpuaudit.model.result import (
    BRANCH_NAMES,
    Branch,
    BranchLetter,
    BranchStatus,
    CauseLabel,
    FindingStep,
    GpuError,
    NcclTransport,
    NodeResult,
)
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.actions import ACTION_ORDER, NAMED_UP_TO
from gpuaudit.rules.capacity import (
    CapacityError,
    affected_groups,
    after_onset,
    capacity_error_step,
    capacity_errors,
    capacity_step,
    inactive_reservations,
    reservation_said,
    subnet_step,
)
from gpuaudit.rules.context import Context, GpuGroup, Plan, gpu_groups
from gpuaudit.rules.control_plane import deciding_silence, not_observable_headline
from gpuaudit.rules.efa_counters import Layer3, layer3
from gpuaudit.rules.fabric import NCCL_COMMAND, deep_health_step, placement_step, sg_step
from gpuaudit.rules.fabric_manager import FabricManagerReading, fabric_manager_of
from gpuaudit.rules.host_events import HostEvent, a_signals, described, host_actions, host_events
from gpuaudit.rules.node_state import deep_health_checks
from gpuaudit.rules.onset import failure_onset, onset_text
from gpuaudit.rules.storage import file_systems_in_scope
from gpuaudit.rules.storage_decision import (
    MAINTENANCE_CHECK,
    STORAGE_CLIENT_CHECK,
    FileSystemDecision,
    decide,
)
from gpuaudit.rules.straggler import stragglers
from gpuaudit.rules.timeline import TERMINATION_MATCH, block_ends, is_capacity_block, relevant_trail
from gpuaudit.rules.xid_catalog import classify
from gpuaudit.rules.xid_routing import fleet_pattern

if TYPE_CHECKING:
    from gpuaudit.rules.bootstrap import BootstrapFailure
    from gpuaudit.rules.context import Judged
    from gpuaudit.rules.node_lines import ParsedLine

CHANGE_EVENTS = {"UpdateCluster", "UpdateClusterSoftware", "UpdateFileSystem", "BatchReplaceClusterNodes",
                 "BatchRebootClusterNodes", "BatchDeleteClusterNodes"}
NVLINK_CODES = {71, 74, 155, 156, *range(144, 151)}
RECOVERY_ACTION_XID = 154  # RULES §6 rule 154: states the recovery action other Xids need
HEADLINE_ORDER = ("A", "B", "E", "D", "C", "F")
# RULES §5.6's per-instance event (EC2's Spot Instance Interruption Warning is another event, not the block's)
BLOCK_WARNING = "Capacity Reservation Instance Interruption Warning"
BLOCK_END_UTC = datetime(2000, 1, 1, 11, 30)  # RULES §8 B: Capacity Blocks end at 11:30 UTC (time of day only)


def _branch(letter: BranchLetter, status: BranchStatus, evidence: str, label: CauseLabel | None = None,
            confirming: str | None = None) -> Branch:
    return Branch(branch=letter, status=status, label=label, evidence=evidence,
                  confirming_measurement=confirming)


def _accelerated(j: Judged) -> list[NodeResult]:
    """GPU nodes: by their type, or by their own GPU evidence (an Xid proves a GPU whatever the type's profile says)."""
    return [n for n in j.nodes if n.role in ("compute", "unknown")
            and (n.gpu_count != 0 or n.gpu_errors or n.instance_id in j.routings)]


def unread_fleet(j: Judged) -> str | None:
    """Why no branch may be ruled out fleet-wide: the node list was not read whole, or there is no GPU node to
    judge. `Ruled out` over an empty or partial list would be a claim on evidence that was never read."""
    partial = [g for g in j.evidence.gaps if g.scope == "node-list"]
    if partial:
        calls = ", ".join(sorted({f"{g.closing_call}" + (f" ({g.error_code})" if g.error_code else "")
                                  for g in partial}))
        return f"the node list is incomplete ({calls}): nodes it did not return cannot be ruled out"
    if not _accelerated(j):
        return "no GPU node was found to assess"
    return None


def _hardware_rows(n: NodeResult) -> list[GpuError]:
    """The node's hardware-class rows. A 154 restates the action of the Xid it summarizes (RULES §6 rule 154,
    decision 43): beside another Xid, that Xid's class decides (a GSP fault recurring is driver/firmware, not the
    GPU); alone, the 154 is the signal. rules/consistency.py::_hardware_signal reads the same."""
    others = any(e.code != RECOVERY_ACTION_XID for e in n.gpu_errors)
    return [e for e in n.gpu_errors if e.class_ == "hardware" and (e.code != RECOVERY_ACTION_XID or not others)]


def branch_a(j: Judged) -> Branch:
    nodes = _accelerated(j)
    hardware = [n for n in nodes if (r := j.routings.get(n.instance_id)) and r.hardware]
    failed = [n for n in nodes if n.status == "Failure"]
    host, host_read = _host_reads(j, nodes)
    if hardware:
        text = _per_node(hardware, lambda n: f"{n.instance_id}: {n.verdict} — {n.verdict_evidence}")
        text += f". Also read: {described(host)}" if host else ""
        onset = failure_onset(j)
        # the routed cause counts with the hardware-class rows: a first GSP fault (119/120) is routed on hardware
        # grounds (RULES §7) though its catalog row is driver-config, and its time decides Proven as any other's
        firsts = [min(times) for n in hardware if (times := [
            e.time for e in n.gpu_errors if e.class_ == "hardware" or e.code == j.routings[n.instance_id].cause_code])]
        if onset is not None and firsts and min(firsts) > onset.time:
            # RULES §0.5: Proven only before the failure; a hardware signal after it may be its effect
            return _branch("A", "Contributing", f"Hardware-class GPU signal on the node: {text}. Not Proven: the "
                           f"first hardware-class signal ({iso(min(firsts))}) is after {onset_text(onset)}",
                           "Hypothesis (to validate)", "the node's kernel log before the onset (`dmesg -T`, "
                           "`nvidia-smi -q`): a hardware fault that began earlier")
        return _branch("A", "Root cause", f"Hardware-class GPU signal on the node: {text}", "Proven")
    # The GPU errors table is the branch's source: a hardware-class row from any source (kernel line or HMA
    # detection) that did not meet a verdict's bar is a hypothesis, never a clean node.
    signalled = [n for n in nodes if _hardware_rows(n)]
    if signalled:
        text = _per_node(signalled, lambda n: f"{n.instance_id}: " + ", ".join(
            f"Xid {e.code} ({e.source})" for e in _hardware_rows(n))
            + f" — {n.verdict or 'no verdict'}: {n.verdict_evidence or 'bar not met'}")
        return _branch("A", "UNVERIFIED", f"Hardware-class GPU signal below the bar for a verdict: {text}",
                       "Hypothesis (to validate)", "the deciding check named in each node's verdict evidence")
    slow = [s for s in stragglers(j.evidence) if s.instance_id in {n.instance_id for n in nodes}]
    if failed or host or slow:
        said = "; ".join([f"{n.instance_id}: node status Failure" for n in failed] + ([described(host)] if host else [])
                         + [s.said() for s in slow])
        return _branch("A", "UNVERIFIED", f"Node or host signal with no hardware-class Xid read: {said}",
                       "Hypothesis (to validate)",
                       "DescribeClusterNode / DescribeInstanceStatus detail, the AWS Health event's detail "
                       "(DescribeEventDetails) and the node's kernel log (`dmesg -T`) before the failure")
    if overdue := [r for r in deep_health_checks(j.evidence) if r.flagged]:
        # A deep health check hanging well past 2 h is a node the service has not cleared: never Ruled out.
        return _branch("A", "UNVERIFIED", "Deep health check running long, with no hardware-class Xid read: "
                       + "; ".join(r.text() for r in overdue), "Hypothesis (to validate)",
                       "the node's `DeepHealthCheckResults/<instance-id>` stream and `aws sagemaker "
                       "describe-cluster-node`: which check runs, and whether it failed")
    if stray := unmatched_hardware(j):
        # read, so never cleared: the host may be a node the node list no longer returns (RULES §5.1, §0.4)
        said = "; ".join(f"Xid {p.xid.code} at {iso(p.line.time)} in {p.line.log_group} / {p.line.log_stream} "
                         f"(host {message_host(p.line.message) or 'not named'})" for p in stray[:NAMED_UP_TO]
                         if p.xid is not None)
        more = f"; and {len(stray) - NAMED_UP_TO} more" if len(stray) > NAMED_UP_TO else ""
        return _branch("A", "UNVERIFIED", f"Hardware-class Xid read on a host matched to no node of the cluster: "
                       f"{said}{more}; {host_read}", "Hypothesis (to validate)",
                       "which instance that host was at the time (its private DNS name in DescribeInstances, the "
                       "cluster's node list or CloudTrail RunInstances) and that node's kernel log (`dmesg -T`)")
    # RULES §6: a code NVIDIA does not list is neither blamed nor cleared (no guess either way, and it never outranks
    # an application reading): hardware is not ruled out on a line whose meaning was not read.
    # HMA's XidUserAppError on such a code is the service's own reading (application-caused): it counts as read.
    unlisted = [(n.instance_id, e.code) for n in nodes for e in n.gpu_errors
                if e.class_ == "unverified" and e.hma_reason != "XidUserAppError"]
    if unlisted:
        named = ", ".join(f"{iid} (Xid {code})" for iid, code in dict.fromkeys(unlisted))
        return _branch("A", "Not assessed", "Xid not classified (unverified: not in NVIDIA's catalog, or listed there "
                       f"without an immediate action) on {named}: hardware can be neither blamed nor ruled out from "
                       "it; look the code up in NVIDIA's catalog (https://docs.nvidia.com/deploy/xid-errors/); "
                       + host_read)
    blind = [n.instance_id for n in nodes if n.xid_status == "Not observable"]
    if blind:
        return _branch("A", "Not assessed", "GPU error evidence Not observable on " + ", ".join(blind)
                       + " for part of the window: hardware cannot be ruled out from the logs; no hardware-class "
                       f"Xid, HMA hardware detection, Failure status or impaired status check was read; {host_read}")
    if (why := unread_fleet(j)) is not None:
        return _branch("A", "Not assessed", f"No hardware-class signal read, but {why}; {host_read}")
    clean = ", ".join(f"{n.instance_id} ({n.xid_status}, status {n.status})" for n in nodes)
    return _branch("A", "Ruled out", f"No hardware-class Xid or HMA hardware detection on proven coverage: {clean}; "
                   f"{host_read}")


def unmatched_hardware(j: Judged) -> list[ParsedLine]:
    """Hardware-class Xid lines read in a stream that names no node, whose own host prefix names no node either
    (classed by the catalog alone: no node verdict weighs them)."""
    return [p for p in j.unassigned_lines
            if p.xid is not None and classify(p.xid.code, p.xid.raw).class_ == "hardware"]


def _host_reads(j: Judged, nodes: Sequence[NodeResult]) -> tuple[list[HostEvent], str]:
    """RULES §8 A's host signals on the GPU nodes (an impaired status check, failing hardware, AWS maintenance dated
    where the failure is: rules/host_events.py), and what the status-check and Health reads said, so a cleared row
    names what cleared it and what was not read (§0.4)."""
    ev = j.evidence
    ids = {n.instance_id for n in nodes}
    events = host_events(ev, ids)
    signals = a_signals(events, ev.window.start - TIMELINE_MARGIN, ev.window.end + TIMELINE_MARGIN)
    later = [e for e in events if e not in signals and not e.canceled and e.kind != "status"]
    if ev.cluster.kind.startswith("hyperpod"):
        status = "EC2 status checks not read (HyperPod nodes are not EC2 instances of the account)"
    elif ev.instance_status is None:
        status = "EC2 status checks and scheduled events not read (see visibility gaps)"
    else:
        seen = [s for s in ev.instance_status if s.instance_id in ids]
        missing = sorted(ids - {s.instance_id for s in seen})
        # a check neither ok nor impaired (insufficient-data, initializing) is no clean read: named, not "all ok"
        unsure = [e for e in events if e.kind == "status" and not e.impaired]
        status = (f"EC2 status checks read for {len(seen)} of {len(ids)} GPU node(s) (DescribeInstanceStatus)"
                  + ("" if any(e.source != "AWS Health" for e in events) or not seen
                     else ": all ok, no scheduled event")
                  + (f"; not conclusive: {described(unsure)}" if unsure else "")
                  + (f"; not returned for {', '.join(missing[:NAMED_UP_TO])}"
                     + (f" and {len(missing) - NAMED_UP_TO} more" if len(missing) > NAMED_UP_TO else "")
                     if missing else ""))
    health = ("AWS Health not read (see visibility gaps)" if ev.health_events is None else
              f"AWS Health: {len(ev.health_events)} EC2/SageMaker event(s) read (DescribeEvents)"
              + ("" if any(e.source == "AWS Health" for e in events) else ", none a hardware or maintenance event "
                 "on these nodes"))
    upcoming = f"; dated after the failure, not its cause: {described(later)}" if later else ""
    return signals, f"{status}; {health}{upcoming}"


def _per_node(nodes: Sequence[NodeResult], says: Callable[[NodeResult], str]) -> str:
    """Each node's evidence while few are named; past NAMED_UP_TO, the worst of them whole and the rest counted by
    verdict, so a branch row (and the headline quoting it) stays readable at fleet size; every node keeps its own
    evidence under its verdict in the result."""
    if len(nodes) <= NAMED_UP_TO:
        return "; ".join(says(n) for n in nodes)
    rank: dict[str, int] = {v: i for i, v in enumerate(ACTION_ORDER)}
    worst = sorted(nodes, key=lambda n: (rank.get(n.verdict, len(rank)) if n.verdict else len(rank), n.instance_id))
    rest = Counter(n.verdict or "no verdict" for n in worst[NAMED_UP_TO:])
    counts = ", ".join(f"{k} {v:,}" for k, v in sorted(rest.items(), key=lambda kv: rank.get(kv[0], len(rank))))
    return ("; ".join(says(n) for n in worst[:NAMED_UP_TO])
            + f"; and {len(worst) - NAMED_UP_TO:,} more of {len(nodes):,} nodes ({counts}), each with its evidence "
              "under its verdict")


def branch_b(j: Judged) -> Branch:
    ev = j.evidence
    if ev.capacity_reservations is None:
        return _branch("B", "Not assessed", "capacity reservations could not be read (see visibility gaps)")
    # a block of the cluster's type whose termination its nodes were read outliving ended none of them (RULES §0.5):
    # it cannot lead B, and is named in the reservations step instead
    ends = [b for b in block_ends(j) if not b.outlived]
    every = capacity_errors(j)
    errors = [e for e in every if e not in after_onset(every, _late_capacity_bound(j))]
    # nor does its ended state, unless a capacity error names it
    outlived = {b.reservation.reservation_id for b in block_ends(j) if b.outlived}
    named = {r for e in errors for r in e.reservations}
    inactive = [r for r in inactive_reservations(j, errors) if r.reservation_id not in outlived - named]
    if not ends:
        return _capacity_signals(j, errors, inactive) if errors or inactive else _capacity_reads(j)
    parts = []
    # RULES §5.6: the warning is per instance (detail instance-id); it proves the block ended the nodes it names,
    # so only a warning naming one of the cluster's nodes counts, wherever it was retained
    ours = {n.instance_id for n in j.nodes}
    warned = sorted({i for p in j.unassigned_lines + [x for v in j.lines_by_node.values() for x in v]
                     if BLOCK_WARNING in p.line.message
                     for i in INSTANCE_ID.findall(p.line.message) if i in ours})
    for b in ends:
        r = b.reservation
        parts.append(
            f"Capacity Block {r.reservation_id} ({r.instance_type}, state {r.state}) EndDate "
            f"{iso(r.end_date) if r.end_date else '—'}; instances are terminated "
            f"{int(b.lead.total_seconds() // 60)} min before the end (lead time {int(b.lead.total_seconds() // 60)} "
            f"min), i.e. at {iso(b.termination)} (Capacity Blocks end at 11:30 UTC, termination starts at "
            f"{(BLOCK_END_UTC - b.lead):%H:%M} UTC on the last day)")
        if b.nodes:
            parts.append(f"the log lines of {', '.join(b.nodes)} stop within "
                         f"{int(TERMINATION_MATCH.total_seconds() // 60)} min of {iso(b.termination)}")
        if b.failed_launches:
            first, last = b.failed_launches[0], b.failed_launches[-1]
            parts.append(f"{len(b.failed_launches)} RunInstances call(s) from {iso(first.time)} to {iso(last.time)} "
                         f"failed: {first.error_code}: {first.error_message}")
    ended = {b.reservation.reservation_id for b in ends}
    launched = {e.time for b in ends for e in b.failed_launches}  # already said with the block they name
    parts += [reservation_said(r) for r in inactive if r.reservation_id not in ended]
    parts += [e.said() for e in errors if not (e.launch and e.time in launched)][:NAMED_UP_TO]
    if warned:
        shown = ", ".join(warned[:NAMED_UP_TO]) + (f" and {len(warned) - NAMED_UP_TO} more"
                                                    if len(warned) > NAMED_UP_TO else "")
        parts.append(f"per-instance Capacity Reservation Instance Interruption Warning retained for {shown}")
        return _branch("B", "Root cause", "; ".join(parts) + ". Expected lifecycle, not a fault: the finding is the "
                       "missing plan (no extension, no checkpoint before the end, no alarm on the warning)", "Proven")
    parts.append("the per-instance Capacity Reservation Instance Interruption Warning event was not retained, so the "
                 "per-node link is inferred from the EndDate window")
    return _branch("B", "UNVERIFIED", "; ".join(parts) + ". Expected lifecycle, not a fault: the finding is the "
                   "missing plan (no extension, no checkpoint before the end, no alarm on the warning)",
                   "Hypothesis (to validate)",
                   "an EventBridge archive or rule target holding `Capacity Reservation Instance Interruption Warning` "
                   "events (source aws.ec2; detail instance-id, instance-termination-time) for these instances")


def _capacity_signals(j: Judged, errors: Sequence[CapacityError], inactive: Sequence[CapacityReservation]) -> Branch:
    """RULES §8 B with no block ending at the window but capacity read as unavailable: every capacity-class error
    read and every reservation of the cluster that is not active keeps B open, each named, the reservation first
    (its ID, State and StartDate lead the row, and so the headline). Proven when a launch failed naming a
    reservation whose state, read apart, is not active (two reads that agree), with no hardware signal competing;
    otherwise a hypothesis."""
    said = [reservation_said(r) for r in inactive] + [e.said() for e in errors[:NAMED_UP_TO]]
    if len(errors) > NAMED_UP_TO:
        said.append(f"and {len(errors) - NAMED_UP_TO} more capacity-class error(s), each in the timeline")
    ctx = _fabric_context(j)
    reads = [_ending_step(j), subnet_step(ctx, affected_groups(ctx) or list(ctx.groups))]
    others = "; ".join(f"{s.name} — {s.status}: {s.evidence}" for s in reads)
    states = {r.reservation_id: r for r in inactive}
    agree = [(e, states[r]) for e in errors for r in e.reservations if r in states and _before_start(e, states[r])]
    hardware = [i for i, r in j.routings.items() if r.hardware]
    text = "; ".join(said) + f"; other capacity reads: {others}"
    if agree and not hardware:
        e, r = agree[0]
        return _branch("B", "Root cause", f"{text}. Proven: the launch error ({e.where}) names `{r.reservation_id}`, "
                       f"whose State read apart is {r.state} — capacity lifecycle, not a node fault", "Proven")
    why = (f"; not Proven: hardware-class GPU signal on {', '.join(sorted(hardware))} competes" if agree else
           "; not Proven: no launch error read names a reservation whose state is not active")
    return _branch("B", "Contributing", text + why, "Hypothesis (to validate)",
                   "the failed launch's own error (CloudTrail RunInstances / "
                   "CreateFleet errorCode and errorMessage, or the clustermgtd / "
                   "slurm_resume line) naming the reservation, beside `aws ec2 describe-capacity-reservations` "
                   "State and StartDate of that reservation")


def _late_capacity_bound(j: Judged) -> datetime | None:
    """The onset past which a capacity error is not B's evidence (RULES §0.5, §8: a branch's evidence precedes the
    failure): a launch that failed after the failure began did not cause it, and is said in the capacity-errors step
    instead. None — every error counts — while a recovery is under way (a node troubled or vanished, a group below
    target): there a later capacity error is what blocks the replacement (RULES §8 A, check B)."""
    onset = failure_onset(j)
    if onset is None:
        return None
    vanished = any(n.discovered_by == "log-streams" and n.role != "head" for n in j.nodes)
    return None if vanished or affected_groups(_fabric_context(j)) else onset.time


def _before_start(error: CapacityError, r: CapacityReservation) -> bool:
    """A `scheduled` block explains a launch error only when the launch came before its StartDate."""
    start = r.start_date
    return r.state != "scheduled" or start is None or error.time is None or error.time < start


def _capacity_reads(j: Judged) -> Branch:
    """RULES §8 B with no block ending at the window: B is `Ruled out` only when each of its signals was read and
    came back clean — no reservation or training plan ending near the window, the short group's reservation or
    training plan with capacity available, enough free IPs for one node, no capacity error — and the row says
    which reads cleared it. A blocked read is evidence for B; an unread one leaves B `Not assessed`."""
    ctx = _fabric_context(j)
    groups = affected_groups(ctx)
    vanished = [n.instance_id for n in j.nodes if n.discovered_by == "log-streams" and n.role != "head"]
    steps = [_ending_step(j), _short_groups_step(ctx, groups, vanished), subnet_step(ctx, groups or list(ctx.groups)),
             capacity_error_step(ctx, _late_capacity_bound(j))]
    said = "; ".join(f"{s.name} — {s.status}: {s.evidence}" for s in steps)
    blocked = [s for s in steps if s.status == "Blocked"]
    if blocked:
        return _branch("B", "Contributing", f"Capacity signal read: {said}", "Hypothesis (to validate)",
                       "the cluster events or DescribeClusterNode of the node that was not replaced, naming the "
                       "capacity or IP error at the time of the launch")
    unread = [s.name for s in steps if s.status not in ("Cleared", "Not applicable")]
    if unread:
        return _branch("B", "Not assessed", f"not read: {', '.join(unread)}; {said}")
    return _branch("B", "Ruled out", f"Cleared by: {said}")


def _ending_step(j: Judged) -> FindingStep:
    """No Capacity Block, capacity reservation or training plan of the cluster ends within the window ± margin."""
    ev = j.evidence
    start, end = ev.window.start - TIMELINE_MARGIN, ev.window.end + TIMELINE_MARGIN
    read = ", ".join(f"`{r.reservation_id}` ({r.instance_type}, state {r.state}, EndDate "
                     f"{iso(r.end_date) if r.end_date else 'none'})" for r in ev.capacity_reservations or [])
    plans = list(ev.training_plans or [])
    ending = [p for p in plans if p.end_time is not None and start <= p.end_time <= end]
    # a reservation that is not a Capacity Block (block_ends took those) ending near the window terminates nothing,
    # but it is no clean "no reservation ending near the window" either (RULES §8 B): named, never cleared
    types = {n.instance_type for n in ev.nodes}
    reserved = [r for r in ev.capacity_reservations or [] if not is_capacity_block(r) and r.end_date is not None
                and start <= r.end_date <= end and r.instance_type in types]
    plan_text = "; ".join(f"training plan `{p.name}` Status {p.status}, EndTime "
                          f"{iso(p.end_time) if p.end_time else 'none'} (DescribeTrainingPlan)" for p in plans)
    text = (f"{len(ev.capacity_reservations or [])} capacity reservation(s) read (DescribeCapacityReservations)"
            + (f": {read}" if read else "") + (f"; {plan_text}" if plan_text else "")
            + f" — none holding the cluster's instance types ends between {iso(start)} and {iso(end)}")
    outlived = [b for b in block_ends(j) if b.outlived]
    if outlived:
        text = text.replace(" — none holding the cluster's instance types ends", " — none the cluster's nodes were "
                            "on ends")
    text += "".join(
        f"; Capacity Block `{b.reservation.reservation_id}` ({b.reservation.instance_type}, state {b.reservation.state}"
        f") ends {iso(b.reservation.end_date) if b.reservation.end_date else '—'}, termination at {iso(b.termination)}"
        f", but its end was outlived by the nodes of that type — "
        + ", ".join(f"{iid} (last kernel line {iso(t)})" for iid, t in b.outlived)
        + " — so they were not on it" for b in outlived)
    if ending or reserved:
        margin = int(TIMELINE_MARGIN.total_seconds() // 60)
        return FindingStep(name="reservations ending near the window", status="Blocked", evidence="; ".join(
            [f"training plan `{p.name}` ends {iso(p.end_time)} (EndTime, DescribeTrainingPlan), inside "
             f"the window ± {margin} min" for p in ending if p.end_time is not None]
            + [f"Capacity Reservation `{r.reservation_id}` ({r.instance_type}, type {r.reservation_type}, state "
               f"{r.state}) ends {iso(r.end_date)} (EndDate, DescribeCapacityReservations), inside the window ± "
               f"{margin} min: a launch into it after that fails, its running instances are not ended by it"
               for r in reserved if r.end_date is not None]))
    return FindingStep(name="reservations ending near the window", status="Cleared", evidence=text)


def _short_groups_step(ctx: Context, groups: Sequence[GpuGroup], vanished: Sequence[str]) -> FindingStep:
    """The capacity of every group below target (or holding a failed node): its reservation or training plan
    with an instance to replace into. With no such group, the counts read are what cleared it."""
    name = "capacity of the short groups"
    if groups:
        step = capacity_step(ctx, list(groups))
        return step.model_copy(update={"name": name})
    if vanished:
        return FindingStep(name=name, status="Not checked", evidence=(
            f"nodes {', '.join(vanished)} vanished (seen in the logs, not returned by the node list) and no capacity "
            "reservation ends near the window: what ended them is not shown by the capacity reads"))
    counts = [f"{g.label} CurrentCount {g.group.current_count}, TargetCount {g.group.target_count}"
              for g in ctx.groups if g.group is not None and g.group.current_count is not None]
    text = ("every group at target: " + "; ".join(counts) + " (DescribeCluster)" if counts else
            "no group below target and no node vanished (every node seen in the logs is in the node list)")
    return FindingStep(name=name, status="Cleared", evidence=text)


def branch_c(j: Judged, others: Sequence[Branch] = ()) -> Branch:
    """RULES §8 C as one decision table (rules/storage_decision.py): every row, per file system, Proven /
    Hypothesis / Ruled out / Not checked on one bar; the branch decided on one named file system, which leads
    its evidence (and so the headline quoting it)."""
    ev = j.evidence
    if ev.file_systems is None or ev.fsx_metrics is None:
        return _branch("C", "Not assessed", "FSx file systems or their metrics could not be read (see visibility gaps)")
    if not ev.file_systems:
        return _branch("C", "Not assessed", "no FSx for Lustre file system found in the region")
    decisions = decide(j, others)
    in_scope = file_systems_in_scope(ev)[0]
    if not any(d.reading.quoted for d in decisions):
        fs_ids = ", ".join(d.file_system_id for d in decisions)
        return _branch("C", "Not assessed", f"no AWS/FSx datapoints in the window for {fs_ids}: storage "
                       "cannot be assessed from metrics", None, STORAGE_CLIENT_CHECK)
    lead = decisions[0]
    if lead.outcome in ("Ruled out", "Not checked") and not in_scope and ev.cluster_file_system_ids is not None:
        # the mounts were read and name none of the file systems, and none of them holds a flagged row
        return _branch("C", "Ruled out", f"the cluster mounts none of the FSx for Lustre file systems read "
                       f"({', '.join(d.file_system_id for d in decisions)}); " + _rows(decisions))
    scoped = [d for d in decisions if d.in_scope]
    if lead.outcome == "Ruled out" and scoped and all(d.outcome == "Ruled out" for d in scoped):
        return _branch("C", "Ruled out", "every row of the storage table read and clean on "
                       + ", ".join(f"{d.file_system_id} ({d.scope})" for d in scoped) + ": " + _rows(decisions))
    text = _decided(lead, decisions)
    if lead.outcome == "Proven":
        return _branch("C", "Root cause", text, "Proven")
    if lead.outcome == "Hypothesis":
        confirming = MAINTENANCE_CHECK if all(r.name == "maintenance window" for r in lead.deciding) \
            else STORAGE_CLIENT_CHECK
        return _branch("C", "Contributing", text, "Hypothesis (to validate)", confirming)
    unread = sorted({r.name for d in (scoped or decisions) for r in d.rows if r.outcome == "Not checked"})
    return _branch("C", "UNVERIFIED", f"{text}. Not read: {', '.join(unread)} — storage is not ruled out (FSx "
                   "publishes no client latency)", "Hypothesis (to validate)", STORAGE_CLIENT_CHECK)


def _decided(lead: FileSystemDecision, decisions: Sequence[FileSystemDecision]) -> str:
    """The file system C decided on first (so the headline's first clause names it), its bound, its rows; then the
    other file systems read, each with its outcome; then every value as reported."""
    deciding = " ".join(r.text() for r in lead.deciding)
    said = f"Storage {lead.file_system_id} ({lead.scope}): {lead.reading.statement} — {deciding}"
    rest = [r.text() for r in lead.rows if r not in lead.deciding]
    # a root cause is about its own file system alone (the headline quotes it whole); short of one, the others read
    # are said with their outcome, so none is taken for cleared unsaid
    shown = [lead] if lead.outcome == "Proven" else list(decisions)
    also = [f"{d.file_system_id} ({d.scope}): {d.outcome}" for d in shown[1:]]
    quoted = "; ".join(d.reading.quoted for d in shown if d.reading.quoted)
    return (said + (f". Other rows: {'; '.join(rest)}" if rest else "")
            + (f". Other file systems: {'; '.join(also)}" if also else "") + f". Values as reported: {quoted}")


def _rows(decisions: Sequence[FileSystemDecision]) -> str:
    return (". ".join(f"{d.file_system_id} ({d.scope}): {d.reading.statement} — " + "; ".join(r.text() for r in d.rows)
                      for d in decisions)
            + ". Values as reported: " + "; ".join(d.reading.quoted for d in decisions if d.reading.quoted))


def branch_d(j: Judged) -> Branch:
    """RULES §8 D: layer 1 (NCCL transport per node), layer 2 (NVLink Xids, Fabric Manager), layer 3 (EFA counters
    against their own baseline, placed before or after the hang: rules/efa_counters.py), layer 4 (EFA preconditions).
    A socket fallback on an EFA-capable type is checked against its preconditions: EFA interfaces attached vs the
    type's maximum, and the security group's self-referencing all-traffic rules."""
    nodes = _accelerated(j)
    nvlink = [(n.instance_id, e.code) for n in nodes for e in n.gpu_errors if e.code in NVLINK_CODES]
    bad = [(n, t) for n in nodes for t in n.nccl_transports if t.assessment == "bad"]
    socket = [(n, t) for n, t in bad if t.transport == "Socket"]
    other = [(n, t) for n, t in bad if t.transport != "Socket"]
    unsure = [(n, t) for n in nodes for t in n.nccl_transports if t.assessment == "unverified"]
    hang = _hang(j)
    efa = layer3(j.evidence, nodes, hang[0] if hang is not None else None)
    if socket:
        return _with_layer3(_socket_fallback(j, socket, other, nvlink, hang), efa)
    if fm := _fabric_manager_faults(j, nodes):
        return _with_layer3(_fabric_manager_branch(fm, nvlink, hang), efa)
    if efa.before:
        return _efa_rise_branch(j, efa, nvlink, other, hang)
    if nvlink or other:
        text = "; ".join([f"{i}: Xid {c}" for i, c in nvlink] + [_bad_line(n, t) for n, t in other]
                         + ([efa.text] if efa.observable else []))
        # RULES §0.5, §8 D: a layer-1 bad transport read on the nodes before the hang, with nothing competing
        early = {n.instance_id for n, t in other if hang is not None and t.time <= hang[0]}
        competing = _competing(j, early | {i for i, _ in nvlink})
        if hang is not None and early and not competing:
            return _branch("D", "Root cause", f"NCCL used a transport wrong for the node before the hang at "
                           f"{iso(hang[0])} ({hang[1]}) (layer 1): {text}", "Proven")
        if early and competing:
            text += f"; a hardware verdict on the same node competes: {'; '.join(competing)}"
        return _branch("D", "Contributing", text, "Hypothesis (to validate)",
                       f"an all_reduce test (nccl-tests) on the nodes with `{NCCL_DEBUG}`, and EFA counters "
                       "(`efa_retrans_pkts`, `efa_unresponsive_remote_events`) before the hang")
    sg = sg_step(_fabric_context(j))
    place = placement_step(_fabric_context(j))
    layer4 = _layer4(sg, place)
    rivals = _competing(j, {n.instance_id for n in nodes})  # RULES §0.5: Proven only with nothing competing
    if hang is not None and sg.status == "Blocked" and not rivals:
        return _branch("D", "Root cause", f"NCCL hang at {iso(hang[0])} ({hang[1]}) on a cluster whose EFA security "
                       f"group rules fail: {sg.evidence}{_split(place)}. A missing self-referencing rule is a proven "
                       "precondition failure (RULES §8 D layer 4)", "Proven")
    if sg.status == "Blocked":
        why = (f"a hardware verdict on a node of the job competes: {'; '.join(rivals)}" if hang is not None else
               "no NCCL hang or failure onset was read, so it is not shown to have caused this failure")
        return _branch("D", "Contributing",
                       f"EFA precondition failure (proven): {sg.evidence}{_split(place)}; {why}",
                       "Hypothesis (to validate)",
                       f"an all_reduce test (nccl-tests) across the nodes with `{NCCL_DEBUG}`")
    if not any(n.signals.nccl == "Observable" for n in nodes):
        deep = deep_health_step(_fabric_context(j))
        defects = [f"{x.name}: {x.evidence}" for x in (place, deep) if x.status == "Blocked"]
        if defects:  # RULES §8 D: a layer-4 defect read (a split, a failed check) with layers 1–3 Not observable
            return _branch("D", "UNVERIFIED", f"EFA precondition defect read: {'; '.join(defects)}. Layers 1–2 Not "
                           f"observable: no NCCL INFO/WARN lines in any source, no NVLink Xid read; {efa.text}; "
                           f"{layer4}", "Hypothesis (to validate)",
                           f"NCCL's transport on the job's nodes, collected with `{NCCL_DEBUG}`")
        checks = "" if deep.status == "Not applicable" else f"; {deep.name} — {deep.status}: {deep.evidence}"
        return _branch("D", "Not assessed", "no NCCL INFO/WARN lines in any source (layer 1 Not observable); no NVLink "
                       f"Xid read; {efa.text}; {layer4}{checks}. Collect with `{NCCL_DEBUG}`")
    used = "; ".join(f"{n.instance_id}: " + ", ".join(sorted({f"{t.transport} ({t.assessment})"
                                                               for t in n.nccl_transports}))
                     for n in nodes if n.nccl_transports)
    if unsure:
        return _branch("D", "Not assessed", "NCCL transport lines read, but their fit could not be told: "
                       + "; ".join(f"{n.instance_id}: {t.transport} — {t.why}" for n, t in unsure)
                       + (f"; {used}" if used else "") + f"; {layer4}")
    unseen = [n.instance_id for n in nodes if n.signals.nccl != "Observable"]
    if unseen:  # RULES §8 D layer 1 is per node: a node with no NCCL line read is Not observable, never clean
        return _branch("D", "Not assessed", "NCCL transport lines read with no socket fallback, SHM on NVSwitch or IB"
                       + (f" ({used})" if used else "") + f", but layer 1 is Not observable on {len(unseen)} GPU "
                       f"node(s) ({', '.join(unseen[:NAMED_UP_TO])}{'…' if len(unseen) > NAMED_UP_TO else ''}: no "
                       f"NCCL INFO/WARN lines in any source), so D cannot be ruled out there; no NVLink Xid; "
                       f"{efa.text}; {layer4}. Collect with `{NCCL_DEBUG}`")
    return _branch("D", "Ruled out", "NCCL transport lines observable with no socket fallback, SHM on NVSwitch or IB"
                   + (f" ({used})" if used else "") + f"; no NVLink Xid; {efa.text}; {layer4}")


def _with_layer3(branch: Branch, efa: Layer3) -> Branch:
    """A branch decided on layers 1–2 still says what layer 3 read, when it was read (RULES §0.4)."""
    return branch if not efa.observable else branch.model_copy(update={"evidence": f"{branch.evidence}; {efa.text}"})


def _efa_rise_branch(j: Judged, efa: Layer3, nvlink: Sequence[tuple[str, int | None]],
                     other: Sequence[tuple[NodeResult, NcclTransport]], hang: tuple[datetime, str] | None) -> Branch:
    """RULES §8 D layer 3: EFA counters rising at or before the hang support D. Proven only when the rise is read on
    the nodes before the hang with nothing competing: no node of the rise with a hardware verdict of its own
    (REPLACE, REBOOT: branch A's signal could be what broke its links); else, or with no hang read, Hypothesis."""
    competing = _competing(j, {r.instance_id for r in efa.before})
    text = efa.text + "".join(f"; {i}: Xid {c}" for i, c in nvlink) + "".join(f"; {_bad_line(n, t)}" for n, t in other)
    confirm = (f"an all_reduce test (nccl-tests) across the nodes with `{NCCL_DEBUG}`, watching the CWAgent `efa_*` "
               "counters of each node while it runs")
    if hang is not None and not competing:
        return _branch("D", "Root cause", f"EFA error counters (layer 3) rose on the nodes before the hang at "
                       f"{iso(hang[0])} ({hang[1]}): {text}", "Proven")
    why = (f"a hardware verdict on the same node competes: {'; '.join(competing)}" if competing else
           "no NCCL hang or failure onset was read, so the rise is not placed before the failure")
    return _branch("D", "Contributing", f"EFA error counters (layer 3) rose: {text}; {why}", "Hypothesis (to validate)",
                   confirm)


def _competing(j: Judged, ids: set[str]) -> list[str]:
    """RULES §0.5 "with nothing competing": a node of D's signal with a hardware verdict of its own (REPLACE, REBOOT:
    branch A's signal could be what broke its links), said with that verdict's evidence."""
    return [f"{n.instance_id}: {n.verdict}" + (f" ({_cut(n.verdict_evidence, 160)})" if n.verdict_evidence else "")
            for n in j.nodes if n.instance_id in ids and n.verdict in ("REPLACE", "REBOOT")]


def _fabric_manager_faults(j: Judged, nodes: Sequence[NodeResult]) -> list[tuple[NodeResult, FabricManagerReading]]:
    """RULES §8 D layer 2: NVSwitch nodes whose Fabric Manager failed, restarted or is absent
    (rules/fabric_manager.py)."""
    out = []
    end = min(j.evidence.window.end, j.evidence.now)
    for n in nodes:
        profile = j.evidence.profiles.get(n.instance_type or "")
        reading = fabric_manager_of([p.line for p in j.lines_by_node.get(n.instance_id, [])],
                                    j.boot_lines_by_node.get(n.instance_id, []),
                                    fabric_class(n.instance_type, profile)[1],
                                    j.evidence.window.start - TIMELINE_MARGIN, end, n.coverage)
        if reading is not None and reading.faulty:
            out.append((n, reading))
    return out


def _fabric_manager_branch(fm: list[tuple[NodeResult, FabricManagerReading]], nvlink: list[tuple[str, int | None]],
                           hang: tuple[datetime, str] | None) -> Branch:
    """Proven only when the fault is read on the node before the hang (RULES §8 D: a layer 1–3 signal before it)."""
    text = "; ".join(f"{n.instance_id} ({n.instance_type}): {n.verdict} — "
                     + "; ".join(f"Fabric Manager {b.state} at {iso(b.line.time)} in {b.line.log_group} / "
                                 f"{b.line.log_stream}: \"{_cut(b.line.message, 200)}\"" for b in r.faulty if b.line)
                     for n, r in fm)
    text += "".join(f"; {i}: Xid {c}" for i, c in nvlink)
    first = min(b.line.time for _, r in fm for b in r.faulty if b.line)
    if hang is not None and first < hang[0]:
        return _branch("D", "Root cause", f"NVSwitch fabric (layer 2) failed before the hang at {iso(hang[0])} "
                       f"({hang[1]}): {text}", "Proven")
    when = (f"after the hang at {iso(hang[0])}, so it may be its effect" if hang is not None else
            "no NCCL hang or failure onset was read, so it is not shown to have caused this failure")
    return _branch("D", "Contributing", f"NVSwitch fabric (layer 2): {text}; {when}", "Hypothesis (to validate)",
                   "`systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager` on the node, "
                   f"then an all_reduce test (nccl-tests) with `{NCCL_DEBUG}`")


def _layer4(sg: FindingStep, place: FindingStep | None = None) -> str:
    """RULES §0.4, §8 D layer 4: the security groups whose rules were read, and the self rule found or missing —
    said whatever layer 1 showed, so a cleared precondition names what cleared it; and where the job's nodes are."""
    text = f"layer 4, EFA security group self-referencing all-traffic rules — {sg.status}: {sg.evidence}"
    if place is not None and place.status != "Not applicable":
        text += f"; {place.name} — {place.status}: {place.evidence}"
    return text


def _split(place: FindingStep) -> str:
    """The job's nodes split across subnets or AZs (layer 4), said beside another precondition when read."""
    return f"; {place.name} — {place.status}: {place.evidence}" if place.status == "Blocked" else ""


NCCL_DEBUG = NCCL_COMMAND


def _bad_line(n: NodeResult, t: NcclTransport) -> str:
    return (f"{n.instance_id} ({n.instance_type}): NCCL used {t.transport} — {t.why}: \"{_cut(t.message)}\" in "
            f"{t.log_group} / {t.log_stream} at {iso(t.time)}")


def _cut(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[:limit] + f"… [cut: {len(message) - limit} more characters]"


def _hang(j: Judged) -> tuple[datetime, str] | None:
    """When the failure began, and where that was read (RULES §0.5): the stated onset, else the first failure
    signal read (rules/onset.py); None when neither exists — the window's start is never taken for it."""
    onset = failure_onset(j)
    return None if onset is None else (onset.time, onset.source)


def _fabric_context(j: Judged) -> Context:
    return Context(j, Plan(j.evidence.now, DEFAULT_RUN_HOURS, False, None), tuple(gpu_groups(j.evidence)))


def _efa_width(j: Judged, ids: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """(nodes at full EFA width, nodes short of it, nodes whose attachment is Not observable), as evidence text."""
    info = {n.instance_id: n for n in j.evidence.nodes}
    full, short, unseen = [], [], []
    for iid in ids:
        node = info.get(iid)
        profile = j.evidence.profiles.get((node.instance_type if node else None) or "")
        top = profile.max_efa_interfaces if profile else None
        if node is None or node.efa_attached is None or top is None:
            unseen.append(f"{iid}: EFA attached Not observable" + (f" (of {top} supported)" if top else ""))
        elif node.efa_attached < top:
            short.append(f"{iid}: {node.efa_attached} of {top} EFA interfaces attached")
        else:
            full.append(f"{iid}: {node.efa_attached} of {top} EFA interfaces attached")
    return full, short, unseen


def _socket_fallback(j: Judged, socket: Sequence[tuple[NodeResult, NcclTransport]],
                     other: Sequence[tuple[NodeResult, NcclTransport]], nvlink: Sequence[tuple[str, int | None]],
                     hang: tuple[datetime, str] | None) -> Branch:
    """A socket fallback on an EFA-capable type (RULES §8 D layer 1), with its preconditions checked and stated."""
    ids = sorted({n.instance_id for n, _ in socket})
    full, short, unseen = _efa_width(j, ids)
    sg = sg_step(_fabric_context(j))
    first_node, first = min(socket, key=lambda x: x[1].time)
    types = ", ".join(sorted({n.instance_type or "type unknown" for n, _ in socket}))
    signal = (f"{len(ids)} node(s) of EFA-capable type {types} ({', '.join(ids)}) used NCCL's socket transport "
              f"(`{first.marker}`), a silent TCP fallback (roughly a third of EFA bus bandwidth); first: "
              f"{_bad_line(first_node, first)}")
    if other:
        signal += "; also " + "; ".join(_bad_line(n, t) for n, t in other)
    if nvlink:
        signal += "; " + "; ".join(f"{i}: Xid {c}" for i, c in nvlink)
    pre = ("Preconditions: EFA width — " + "; ".join(short + unseen + full)
           + f"; security group self-referencing all-traffic rules inbound and outbound — {sg.status}: {sg.evidence}"
           + _split(placement_step(_fabric_context(j))))
    rivals = _competing(j, {n.instance_id for n in _accelerated(j)})
    if sg.status == "Blocked" and not rivals:
        return _branch("D", "Root cause", f"NCCL fell back to TCP sockets on EFA: {signal}. {pre}. The missing "
                       "self-referencing rule is a proven precondition failure (RULES §8 D layer 4): EFA traffic "
                       "between the nodes is dropped", "Proven")
    if sg.status == "Blocked":  # RULES §0.5: a hardware verdict competes, so the precondition is not proven the cause
        return _branch("D", "Contributing", f"NCCL fell back to TCP sockets on EFA: {signal}. {pre}. The missing "
                       "self-referencing rule is a proven precondition failure (RULES §8 D layer 4), but a hardware "
                       f"verdict on a node of the job competes: {'; '.join(rivals)}", "Hypothesis (to validate)",
                       f"re-run an all_reduce test (nccl-tests) on {', '.join(ids)} with `{NCCL_DEBUG}` once the "
                       "security group has its self-referencing rules")
    early = [t for _, t in socket if hang is not None and t.time <= hang[0]]
    checked = ("" if sg.status == "Cleared" else
               f" The security group could not be checked ({sg.status}), so it is not cleared.")
    if short:
        cause = " Fewer EFA interfaces than the type supports on " + ", ".join(s.split(":")[0] for s in short) + "."
    else:
        cause = (" The preconditions AWS shows are met: look at the node's EFA software (aws-ofi-nccl plugin loaded, "
                 "`FI_PROVIDER=efa`, `fi_info -p efa`)." if sg.status == "Cleared" and not unseen else "")
    competing = _competing(j, {n.instance_id for n, t in socket if t in early})
    if early and hang is not None and not competing:
        return _branch("D", "Root cause", f"NCCL fell back to TCP sockets on EFA before the hang ({iso(hang[0])}, "
                       f"{hang[1]}): {signal}. {pre}.{checked}{cause}", "Proven")
    unread = j.evidence.job_figure_unread_groups
    when = (f"the failure's onset is not known ({onset_text(None, unread)})" if hang is None else
            f"a hardware verdict on the same node competes: {'; '.join(competing)}" if early and competing else
            f"the fallback line is after the hang ({iso(hang[0])}, {hang[1]})")
    return _branch("D", "Contributing", f"NCCL fell back to TCP sockets on EFA: {signal}. {pre}.{checked}{cause} Not "
                   f"Proven: {when}", "Hypothesis (to validate)",
                   f"re-run an all_reduce test (nccl-tests) on {', '.join(ids)} with `{NCCL_DEBUG}` and read which "
                   "transport it selects")


def branch_e(j: Judged) -> Branch:
    """RULES §8 E: a cluster change shortly before the failure. With an onset known (RULES §0.5), a change made after
    it (a replacement or update ordered in response) is named but is not evidence for E: it cannot have caused what
    began before it. With no onset, every change in the window stays a hypothesis (its order is not known)."""
    ev = j.evidence
    read = [e for e in relevant_trail(ev) if e.event_name in CHANGE_EVENTS and not e.error_code
            and ev.window.start - CLOUDTRAIL_LOOKBACK <= e.time <= ev.window.end]
    onset = failure_onset(j)
    changes = [e for e in read if onset is None or e.time <= onset.time]
    later = [e for e in read if e not in changes]
    after = ("" if not later or onset is None else
             "; after " + onset_text(onset) + ", so not its cause: "
             + "; ".join(f"{e.event_name} at {iso(e.time)} by {e.username}{replaced_nodes(e, ev)}" for e in later))
    image = image_drift(ev)
    updating = [n.instance_id for n in ev.nodes if n.status == "SystemUpdating"]
    if changes or image or updating:
        text = "; ".join([f"{e.event_name} at {iso(e.time)} by {e.username}{replaced_nodes(e, ev)}" for e in changes]
                         + [f"group {g}: CurrentImageId ≠ DesiredImageId" for g in image]
                         + [f"{i} SystemUpdating" for i in updating])
        return _branch("E", "Contributing", text + after, "Hypothesis (to validate)",
                       "compare the failure time with the change's completion in the cluster events or CloudTrail")
    if ev.cloudtrail is None or not ev.cloudtrail_complete:
        return _branch("E", "Not assessed", "CloudTrail could not be read for every change event (see visibility "
                       "gaps): a cluster change cannot be ruled out" + after)
    before = "before the onset" if onset is not None else "in the window"
    return _branch("E", "Ruled out", "CloudTrail read by event name from 6 h before the window: no UpdateCluster, "
                   f"UpdateClusterSoftware, UpdateFileSystem or Batch*ClusterNodes call for this cluster {before}"
                   + after + f"; {_images_said(ev)}")


def _images_said(ev: Evidence) -> str:
    """RULES §0.4: images are called current only where both image IDs were read for a group."""
    read = [g.name for g in ev.cluster.instance_groups if g.current_image_id and g.desired_image_id]
    if read:
        return f"images current (CurrentImageId = DesiredImageId on {', '.join(read)})"
    return "instance group images Not checked (no CurrentImageId/DesiredImageId read)"


def image_drift(ev: Evidence) -> list[str]:
    """Instance groups whose CurrentImageId differs from their DesiredImageId (an AMI change under way)."""
    return [g.name for g in ev.cluster.instance_groups
            if g.current_image_id and g.desired_image_id and g.current_image_id != g.desired_image_id]


def replaced_nodes(event: CloudTrailEvent, ev: Evidence) -> str:
    """RULES §5.7: a `nodeIds` entry absent from today's node list was replaced; the node launched just after
    the call is its replacement, and the call (not hardware) explains it being Pending."""
    if event.event_name != "BatchReplaceClusterNodes":
        return ""
    asked = [str(i) for i in (event.request_parameters or {}).get("nodeIds", []) or []]
    listed = {n.instance_id for n in ev.nodes}
    gone = [i for i in asked if i not in listed]
    if not gone:
        return f" (nodes {', '.join(asked)} still listed)" if asked else ""
    after = sorted((n for n in ev.nodes if n.launch_time and n.launch_time >= event.time),
                   key=lambda n: n.launch_time or event.time)
    parts = []
    for old, new in zip(gone, after + [None] * len(gone), strict=False):
        if new is None:
            parts.append(f"{old} replaced (no node launched after the call is listed yet)")
        else:
            pending = " — this call, not hardware, explains it being Pending" if new.status == "Pending" else ""
            parts.append(f"{old} replaced by {new.instance_id} (group {new.instance_group}, launched "
                         f"{iso(new.launch_time) if new.launch_time else '—'}){pending}")
    return " (" + "; ".join(parts) + ")"


def branch_f(j: Judged, others: Sequence[Branch]) -> Branch:
    nodes = _accelerated(j)
    app = [(n, e) for n in nodes for e in n.gpu_errors if e.class_ == "application"]
    classes: dict[str, set[str]] = {n.instance_id: {str(e.class_) for e in n.gpu_errors} for n in nodes}
    codes = {n.instance_id: {e.code for e in n.gpu_errors if e.code is not None} for n in nodes}
    pattern = fleet_pattern(classes, codes, image_changed=bool(image_drift(j.evidence)))
    if app:
        app.sort(key=lambda ne: (ne[1].time, ne[0].instance_id))
        text = "; ".join(f"{n.instance_id}: Xid {e.code} ({e.meaning}) ×{e.count} at {iso(e.time)} in "
                         f"{e.log_group} / {e.log_stream}" + (f", HMA reason {e.hma_reason}" if e.hma_reason else "")
                         for n, e in app[:NAMED_UP_TO])
        if len(app) > NAMED_UP_TO:  # readable at fleet size: the first lines whole, the rest counted per code
            rest = app[NAMED_UP_TO:]
            per_code = Counter(e.code for _, e in rest)
            commonest = sorted(per_code.items(), key=lambda ck: (-ck[1], ck[0] or 0))
            text += (f"; and {len(rest):,} more application-class Xid line(s) on "
                     f"{len({n.instance_id for n, _ in rest}):,} node(s) ("
                     + ", ".join(f"Xid {c} ×{k:,}" for c, k in commonest) + "), each under its node")
        if pattern == "F":
            text += "; application-class Xids on several nodes, no hardware class anywhere"
        clean = [b for b in others if b.status == "Ruled out"]
        open_ = [b.branch for b in others if b.status != "Ruled out"]
        # RULES §8 F: list the clean signals, so nobody re-investigates infrastructure
        text += ". Ruled out with evidence: " + ("; ".join(f"{b.branch} ({BRANCH_NAMES[b.branch]}) — "
                                                           f"{_cut(b.evidence.split('; ')[0], 200)}" for b in clean)
                                                 or "none")
        confirm = ("the application owner matches the process and PID in the Xid line to the job running at "
                   "that time (job logs, exit code) and the change that preceded it")
        if open_:
            return _branch("F", "UNVERIFIED", text + f"; not yet ruled out: {', '.join(open_)}",
                           "Hypothesis (to validate)", confirm)
        # RULES §0.5: Proven only on a signal read before the failure's onset (stated, else the first failure
        # signal read); with no onset, or the first application Xid after it, the order is not shown.
        onset = failure_onset(j)
        if onset is not None and app[0][1].time <= onset.time:
            return _branch("F", "Root cause", text + f"; the first application-class Xid precedes "
                           f"{onset_text(onset)}", "Proven")
        when = (f"the first application-class Xid ({iso(app[0][1].time)}) is after {onset_text(onset)}, so it may "
                "be the failure's effect" if onset is not None else
                onset_text(None, j.evidence.job_figure_unread_groups) + ", so the Xid is not shown to precede it")
        return _branch("F", "UNVERIFIED", f"{text}; not Proven: {when}", "Hypothesis (to validate)", confirm)
    if any(n.xid_status == "Not observable" for n in nodes):
        return _branch("F", "Not assessed", "no application-class Xid read, but coverage is Not observable on part "
                       "of the fleet")
    if (why := unread_fleet(j)) is not None:
        return _branch("F", "Not assessed", f"no application-class Xid read, but {why}")
    return _branch("F", "Ruled out", "no application-class Xid on proven coverage")


def assess(j: Judged) -> tuple[list[Branch], str, list[str]]:
    a, b, d, e = branch_a(j), branch_b(j), branch_d(j), branch_e(j)
    c = branch_c(j, [a, b, d, e])
    f = branch_f(j, [a, b, c, d, e])
    branches = [_alone_is_not_contributing(x, [a, b, c, d, e, f]) for x in (a, b, c, d, e, f)]
    by: dict[str, Branch] = {x.branch: x for x in branches}
    root = [x for x in branches if x.status == "Root cause"]
    actions: list[str] = []
    named_blocks = [r for r in j.evidence.capacity_reservations or []
                    if is_capacity_block(r) and r.reservation_id in by["B"].evidence]
    if by["B"].status in ("Root cause", "UNVERIFIED", "Contributing") and named_blocks:  # a Capacity Block's plan
        actions += ["Before a Capacity Block ends: checkpoint ahead of the termination time (EndDate − lead time), "
                    "extend the block (`aws ec2 describe-capacity-block-extension-offerings`) or buy the next one, "
                    "and alarm on the `Capacity Block Expiration Warning` EventBridge event",
                    "Keep `Capacity Reservation Instance Interruption Warning` events (an EventBridge rule to a log "
                    "group or archive) so the next expiry is proven per instance"]
    if by["D"].status in ("Root cause", "Contributing", "UNVERIFIED"):
        actions += _transport_actions(j)
    if not j.evidence.cluster.kind.startswith("hyperpod"):  # HyperPod hosts are the service's, not the account's
        actions += host_actions(host_events(j.evidence, {n.instance_id for n in j.nodes}))
    boot = j.bootstrap
    if boot is not None:
        actions.append(_bootstrap_action(j, boot))
    if root:
        lead = root[0]
        headline = f"Root cause (Proven): branch {lead.branch}, {BRANCH_NAMES[lead.branch]} — {lead.evidence}"
        if boot is not None:
            headline += f" Also stated by clustermgtd: {boot.summary()}."
    elif boot is not None:
        # The service's own word on the queue (RULES §8 non-GPU causes): a measured signal, not an inference.
        headline = (f"Root cause (Proven): {boot.summary()} — a configuration or lifecycle failure, not hardware; "
                    "no node is replaced for it.")
    else:
        leading = next((by[x] for x in HEADLINE_ORDER if by[x].status in ("UNVERIFIED", "Contributing")
                        and by[x].label == "Hypothesis (to validate)"), None)
        dead = deciding_silence(j.evidence, j.control)
        if leading is not None:
            headline = (f"Leading hypothesis: branch {leading.branch}, {BRANCH_NAMES[leading.branch]} — "
                        f"{_first_sentence(leading.evidence)}")
        elif dead is not None:
            headline = not_observable_headline(*dead)
            actions.append(f"Restore the control-plane log `{dead[0].where}` ({dead[0].what}) and read it for the "
                           "window on the node; until then the cause of the node changes cannot be decided")
        else:
            headline = "Root cause: Not observable — the deciding evidence is missing (see visibility gaps)"
    return branches, headline, actions


# RULES §8 D layer 1: what to fix for each bad transport (the steps preflight P12 names), and the good marker the
# confirming run must then print on every node
TRANSPORT_FIX: dict[str, tuple[str, str]] = {
    "Socket": ("fix the EFA path NCCL fell back from (the aws-ofi-nccl plugin found by NCCL, `FI_PROVIDER=efa`, "
               "`fi_info -p efa` on the node, the security group's self rule)", "Selected Provider is efa"),
    "SHM": ("check `NCCL_P2P_DISABLE` and the container's IPC settings (peer access unused on an NVSwitch node)",
            "via P2P"),
    "IB": ("install and select the aws-ofi-nccl plugin (NCCL chose `IB` on EC2)", "Selected Provider is efa"),
}


def _transport_actions(j: Judged) -> list[str]:
    """A bad NCCL transport behind branch D is a fault no node verdict carries (the node is not the cause): its fix
    is the operator's action, one per transport with the nodes it was read on, then the run that confirms it."""
    by_transport: dict[str, list[str]] = {}
    for n in _accelerated(j):
        for t in n.nccl_transports:
            ids = by_transport.setdefault(t.transport, []) if t.assessment == "bad" and t.transport in TRANSPORT_FIX \
                else None
            if ids is not None and n.instance_id not in ids:
                ids.append(n.instance_id)
    return [f"On {', '.join(ids)}: {TRANSPORT_FIX[transport][0]}; then re-run an all_reduce test with "
            f"`{NCCL_COMMAND}` and check every node's NCCL lines for `{TRANSPORT_FIX[transport][1]}`"
            for transport, ids in by_transport.items()]


def _bootstrap_action(j: Judged, boot: BootstrapFailure) -> str:
    queues = ", ".join(boot.queues) or "the failing queue"
    text = (f"Bootstrap failures on {queues}: read the failed nodes' `cloud-init-output` and `bootstrap_error_msg` "
            "streams (on a node: `/var/log/cloud-init-output.log`), fix the queue's custom actions, AMI or network "
            "and relaunch; do not replace nodes for it")
    if boot.protected:
        text += (f"; the queue is INACTIVE (protected mode) until `pcluster update-compute-fleet --cluster-name "
                 f"{j.evidence.cluster.name} --status START_REQUESTED`")
    return text


def _alone_is_not_contributing(branch: Branch, branches: Sequence[Branch]) -> Branch:
    """RULES §8: `Contributing` only beside a leading cause. A branch with evidence and no leading cause
    beside it is the leading hypothesis itself: `UNVERIFIED`, labelled Hypothesis, with its measurement."""
    if branch.status != "Contributing":
        return branch
    leading = [x for x in branches if x.branch != branch.branch and x.status in ("Root cause", "UNVERIFIED")]
    if leading:
        return branch
    return branch.model_copy(update={"status": "UNVERIFIED", "label": "Hypothesis (to validate)"})


def _first_sentence(text: str) -> str:
    cut = text.split("; ")[0]
    return cut if cut.endswith(".") else cut + "."
