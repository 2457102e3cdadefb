"""The incident timeline (RULES §5): window ± 30 minutes, one ordered list, each entry with its source — Xid and
HMA lines, HyperPod status streams, control-plane calls from CloudTrail, Capacity Block ends and the nodes whose
lines stop with them. Read by the branches (B matches terminations to a block's end) and by the judge. Pure."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gpuaudit.domain.capacity import lead_time
from gpuaudit.domain.markers import DRIVER_BANNER, HYPERPOD_STATUS_STREAMS, LIFECYCLE_MARKERS
from gpuaudit.domain.streams import message_host
from gpuaudit.domain.timing import CLOUDTRAIL_LOOKBACK, TIMELINE_MARGIN
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import CapacityReservation, CloudTrailEvent
from gpuaudit.model.result import NodeResult, TimelineEntry
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.capacity import call_errors
from gpuaudit.rules.host_events import (
    health_entry,
    health_kind,
    host_events,
    on_cluster,
    timeline_text,
    timeline_time,
)
from gpuaudit.rules.node_lines import ParsedLine
from gpuaudit.rules.onset import NCCL_HANG
from gpuaudit.rules.reboots import reboots_by_node
from gpuaudit.rules.storage import file_systems_in_scope

if TYPE_CHECKING:
    from gpuaudit.rules.context import Judged


TERMINATION_MATCH = timedelta(minutes=10)


LIFECYCLE = re.compile("|".join(LIFECYCLE_MARKERS))
# RULES §6: the driver's other `NVRM:` lines are diagnostics, listed when they cluster around a failure (an Xid on the
# same node within DIAGNOSTIC_NEAR), never classified; a GSP fault prints dozens (its RPC history), so a node lists
# DIAGNOSTICS_PER_NODE of them and counts the rest.
DIAGNOSTIC_NEAR = timedelta(minutes=5)
DIAGNOSTICS_PER_NODE = 20


def driver_diagnostics(lines: Sequence[ParsedLine]) -> list[ParsedLine]:
    """The node's non-Xid `NVRM:` lines within DIAGNOSTIC_NEAR of one of its Xid lines, in time order."""
    xid_times = sorted(p.line.time for p in lines if p.xid is not None)
    if not xid_times:
        return []

    def near_an_xid(p: ParsedLine) -> bool:
        i = bisect_left(xid_times, p.line.time - DIAGNOSTIC_NEAR)
        return i < len(xid_times) and xid_times[i] <= p.line.time + DIAGNOSTIC_NEAR

    return sorted((p for p in lines if p.xid is None and p.hma is None and "NVRM:" in p.line.message
                   and DRIVER_BANNER not in p.line.message and near_an_xid(p)), key=lambda p: p.line.time)


def last_line(node: NodeResult) -> datetime | None:
    times = [c.last_event for c in node.coverage if c.last_event and c.source_kind == "kernel"]
    return max(times) if times else None


def relevant_trail(evidence: Evidence) -> list[CloudTrailEvent]:
    """CloudTrail events about this cluster: by cluster name (or ARN), by its nodes, by its launch templates, or by
    the file systems it mounts (`UpdateFileSystem` names only the `fileSystemId`, RULES §8 E). A call naming none of
    them is never this cluster's, whatever its service (a cluster without an ARN took every such call in the account
    for its own: other instances' TerminateInstances, any file system's update)."""
    ids = {n.instance_id for n in evidence.nodes}
    name = evidence.cluster.name
    names = {name, evidence.cluster.arn} - {None}  # a ParallelCluster or self-managed cluster has no ARN
    # fsx UpdateFileSystem names its file system, never a cluster: kept when it is one of the audit's (all of them
    # when the file systems were not read, as nothing then says it is another's)
    file_systems = None if evidence.file_systems is None else set(file_systems_in_scope(evidence)[0])
    out = []
    for e in evidence.cloudtrail or []:
        params = e.request_parameters or {}
        text = str(params) + " " + " ".join(e.resources)
        fs = params.get("fileSystemId")
        if params.get("clusterName") in names or (e.username in ids) or \
                (fs is not None and (file_systems is None or fs in file_systems)) or \
                any(i in text for i in ids) or f"'launchTemplateName': '{name}-" in text \
                or f"'LaunchTemplateName': '{name}-" in text:  # CreateFleet's request names its template so
            out.append(e)
    return out


@dataclass
class BlockEnd:
    reservation: CapacityReservation
    termination: datetime
    lead: timedelta
    nodes: list[str]  # nodes whose lines stop at the termination time
    failed_launches: list[CloudTrailEvent]
    # compute nodes of the block's type that kept writing past its termination time (with their last line), when
    # every one did and nothing else ties the block to the cluster: read evidence that it ended none of them
    outlived: list[tuple[str, datetime]] = field(default_factory=list)


def is_capacity_block(r: CapacityReservation) -> bool:
    """A Capacity Block's end terminates its instances (RULES §8 B); an On-Demand Capacity Reservation's
    (ReservationType `default`) does not. A reservation whose type was not returned may be either."""
    return r.reservation_type in (None, "capacity-block")


def block_ends(j: Judged) -> list[BlockEnd]:
    ev = j.evidence
    start, end = ev.window.start - TIMELINE_MARGIN, ev.window.end + TIMELINE_MARGIN
    types = {n.instance_type for n in ev.nodes}
    trail = relevant_trail(ev)
    found = []
    for r in ev.capacity_reservations or []:
        if r.end_date is None or not (start <= r.end_date <= end + timedelta(hours=1)) or not is_capacity_block(r):
            continue
        lead = lead_time(r.instance_type)
        termination = r.end_date - lead
        stopped = [n.instance_id for n in j.nodes if (t := last_line(n)) and abs(t - termination) <= TERMINATION_MATCH
                   and n.role == "compute"]
        failed = [e for e in trail if e.error_message and r.reservation_id in e.error_message]
        if r.instance_type in types or stopped or failed:
            found.append(BlockEnd(r, termination, lead, stopped, failed,
                                  [] if stopped or failed else _outlived(j, r.instance_type, termination)))
    return found


def _outlived(j: Judged, instance_type: str | None, termination: datetime) -> list[tuple[str, datetime]]:
    """The block's termination kills its instances (RULES §8 B): a compute node of its type whose kernel lines go on
    past that time (beyond the match tolerance) was not on it. Only when every such node was read doing so; one
    whose last line is unknown may have been on the block, so then none is said outlived (fail closed)."""
    same = [n for n in j.nodes if n.role == "compute" and _bare(n.instance_type) == _bare(instance_type)]
    last = [(n.instance_id, last_line(n)) for n in same]
    past = [(iid, t) for iid, t in last if t is not None and t > termination + TERMINATION_MATCH]
    return past if same and len(past) == len(same) else []


def _bare(instance_type: str | None) -> str | None:
    return instance_type.removeprefix("ml.") if instance_type else instance_type


def timeline(j: Judged) -> list[TimelineEntry]:
    ev = j.evidence
    start, end = ev.window.start - TIMELINE_MARGIN, ev.window.end + TIMELINE_MARGIN
    out: list[TimelineEntry] = []

    def add(time: datetime | None, source: str, resource: str, event: str, kind: str | None = None) -> None:
        if time is not None and start <= time <= end:
            out.append(TimelineEntry(time=time, source=source, resource=resource, event=event, kind=kind))

    seen: set[tuple[str, int, str | None, int]] = set()
    # RULES §5.1 lists the first occurrence of each Xid; an Xid returning on the same bus after a reboot decides the
    # verdict (§6/§7: REPLACE if it recurs), so the first occurrence after each of the node's reboots is listed too.
    reboots = reboots_by_node(ev)
    for iid, lines in j.lines_by_node.items():
        for p in lines:
            where = f"{p.line.log_group} / {p.line.log_stream}"
            if p.hma and (p.hma.reason or not p.hma.is_dcgm_echo):  # a reason or a node condition (RULES §5.2)
                # reason, condition, RepairAction and Recommendation each as the agent wrote them
                add(p.line.time, where, iid, f"HMA detection: {p.hma.words}"
                    + (f": {p.hma.message[:200]}" if p.hma.message else ""))
            elif p.hma and p.hma.err_num is not None:
                add(p.line.time, where, iid, f"DCGM policy violation {p.hma.condition or ''} ErrNum {p.hma.err_num}")
            elif p.xid is not None and (iid, p.xid.code, p.xid.pci, boots := bisect_left(
                    reboots.get(iid, []), p.line.time)) not in seen:
                again = any(k[:3] == (iid, p.xid.code, p.xid.pci) for k in seen)  # listed before a reboot
                seen.add((iid, p.xid.code, p.xid.pci, boots))
                said = (f"Xid {p.xid.code} again on PCI {p.xid.pci} after the reboot at "
                        f"{iso(reboots[iid][boots - 1])}" if again else f"first Xid {p.xid.code} on PCI {p.xid.pci}")
                add(p.line.time, where, iid, f"{said}: {p.xid.raw[:200]}",
                    kind=f"{'recurring' if again else 'first'} Xid {p.xid.code}")
            elif LIFECYCLE.search(p.line.message) or p.line.log_stream.startswith(HYPERPOD_STATUS_STREAMS):
                add(p.line.time, where, iid, p.line.message[:240])
        diagnostics = driver_diagnostics(lines)
        for p in diagnostics[:DIAGNOSTICS_PER_NODE]:
            add(p.line.time, f"{p.line.log_group} / {p.line.log_stream}", iid,
                f"driver diagnostic (not an Xid, not classified): {p.line.message[:200]}", kind="driver diagnostic")
        if len(diagnostics) > DIAGNOSTICS_PER_NODE:
            last = diagnostics[-1].line
            add(last.time, f"{last.log_group} / {last.log_stream}", iid,
                f"{len(diagnostics) - DIAGNOSTICS_PER_NODE} more driver diagnostic line(s) around its Xids, the last "
                "here", kind="driver diagnostic")
    for p in j.unassigned_lines:
        if p.xid is not None:  # a host matched to no node (RULES §5.1: every source), first per host, code and bus
            stray = message_host(p.line.message) or ev.cluster.name
            if (stray, p.xid.code, p.xid.pci, 0) not in seen:
                seen.add((stray, p.xid.code, p.xid.pci, 0))
                add(p.line.time, f"{p.line.log_group} / {p.line.log_stream}", stray,
                    f"first Xid {p.xid.code} on PCI {p.xid.pci} (host matched to no node of the cluster): "
                    f"{p.xid.raw[:200]}", kind=f"first Xid {p.xid.code}")
        elif LIFECYCLE.search(p.line.message) or p.line.log_stream.startswith(HYPERPOD_STATUS_STREAMS):
            add(p.line.time, f"{p.line.log_group} / {p.line.log_stream}", ev.cluster.name, p.line.message[:240])
    # the hang as the job saw it (the onset RULES §0.5 measures "before" from) and the bad NCCL transports read
    # before it (RULES §8 D layer 1): without them a timeline of a hang holds none of the lines that decide it
    hang = min((p for p in [*(p for v in j.lines_by_node.values() for p in v), *j.unassigned_lines]
                if NCCL_HANG.search(p.line.message)), key=lambda p: p.line.time, default=None)
    if hang is not None:
        owner = next((iid for iid, lines in j.lines_by_node.items() if hang in lines), ev.cluster.name)
        add(hang.line.time, f"{hang.line.log_group} / {hang.line.log_stream}", owner,
            f"first NCCL timeout line: {hang.line.message[:200]}", kind="NCCL timeout")
    for n in j.nodes:
        for used in n.nccl_transports:
            if used.assessment == "bad":
                add(used.time, f"{used.log_group} / {used.log_stream}", n.instance_id,
                    f"NCCL used {used.transport} (`{used.marker}`), {used.why}: {used.message[:200]}",
                    kind="NCCL transport")
    for n in j.nodes:
        t = last_line(n)
        if n.discovered_by == "log-streams" and t is not None:
            streams = ", ".join(c.log_stream or "" for c in n.coverage if c.last_event == t)
            add(t, "CloudWatch Logs", n.instance_id, f"last line from the node ({streams}); instance no longer "
                                                     "returned by DescribeInstances")
    ids = {n.instance_id for n in ev.nodes}
    for h in ev.health_events or []:  # Health events not judged by A: at their start, or announcement (§5)
        if not (on_cluster(ev, h, ids) and health_kind(h)):
            entry = health_entry(h)
            at = timeline_time(entry, start, end, ev.now)
            add(at, "AWS Health", entry.resource, timeline_text(entry, at) if at else entry.text)
    for host in host_events(ev, ids):  # status checks, scheduled events, Health events on the nodes (RULES §5.4–5)
        at = timeline_time(host, start, end, ev.now)
        add(at, host.source, host.resource, timeline_text(host, at) if at else host.text)
    for r in ev.capacity_reservations or []:
        if not is_capacity_block(r):
            add(r.end_date, "EC2 capacity reservation", r.reservation_id,
                f"Capacity Reservation ends ({r.instance_type}, type {r.reservation_type}, state {r.state})")
            continue
        add(r.end_date, "EC2 capacity reservation", r.reservation_id,
            f"Capacity Block ends ({r.instance_type}, state {r.state})")
        if r.end_date:
            add(r.end_date - lead_time(r.instance_type), "EC2 capacity reservation", r.reservation_id,
                f"instances on the block are terminated ({int(lead_time(r.instance_type).total_seconds() // 60)} min "
                "before EndDate)")
            add(r.end_date - timedelta(minutes=40), "EC2 capacity reservation", r.reservation_id,
                "Capacity Block Expiration Warning is emitted (40 min before EndDate)")
    trail_start = ev.window.start - CLOUDTRAIL_LOOKBACK
    for e in relevant_trail(ev):
        if trail_start <= e.time <= end:
            # the call's own error, and a CreateFleet's launches that failed (rules/capacity.py::call_errors)
            result = "".join(f" → {code}: {message}" for _, code, message in call_errors(e)[:3])
            fs = (e.request_parameters or {}).get("fileSystemId")
            # a Batch*ClusterNodes call names its nodes only in its request (RULES §0.4: every claim by ID)
            named = (e.request_parameters or {}).get("nodeIds")
            nodes = ", ".join(str(i) for i in named) if isinstance(named, list) else ""
            out.append(TimelineEntry(time=e.time, source="CloudTrail", resource=", ".join(e.resources) or nodes or
                                     (e.username or ""), event=f"{e.event_name} by {e.username}"
                                     + (f" on {fs}" if fs else "") + result))
    for ce in ev.cluster_events or []:
        add(ce.time, "HyperPod cluster events", ce.instance_id or ce.instance_group or ev.cluster.name,
            ce.description)
    for ke in ev.kube_events or []:
        add(ke.time, f"Kubernetes {ev.cluster.eks_cluster} events", ke.node,
            f"{ke.type or 'Event'} {ke.reason or ''}: {ke.message[:200]}".strip())
    for k in ev.kube_nodes or []:  # when each node condition last changed (Kubernetes lastTransitionTime)
        for c in k.conditions:
            add(c.last_transition, f"Kubernetes {ev.cluster.eks_cluster}", k.instance_id or k.name,
                f"node {k.name}: condition {c.type} became {c.status}" + (f" ({c.reason})" if c.reason else ""))
    return sorted(out, key=lambda t: (t.time, t.source))
