"""The read plan executed: each source domain/readplan.py plans (RULES §4 'ask the control plane', §5 timeline
sources 4–8, §8 branches, §10 pre-flight), read by its reader in `READERS`.

Each source is optional: a failed or unsupported call leaves its field None and a named gap. A reader reads the
Evidence it is given and returns the part it read (model/evidence_parts.py); `collect` merges each part before the
next read is planned, so a later read sees what an earlier one found.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpuaudit.collectors import kubernetes
from gpuaudit.collectors import preflight as preflight_collectors
from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.efa_counters import read_efa_counters
from gpuaudit.collectors.gpu_count import read_gpu_counts
from gpuaudit.collectors.gpu_peers import read_gpu_peers
from gpuaudit.collectors.preflight import file_system, named_lustre, saturation_peaks, scoped_file_systems
from gpuaudit.collectors.trail import lookup_by_name
from gpuaudit.domain.readplan import EVENT_SOURCE, next_read
from gpuaudit.model.evidence import Evidence, Gap
from gpuaudit.model.evidence_parts import (
    CapacityReservationsPart,
    CloudTrailPart,
    ClusterEventsPart,
    FileSystemsPart,
    HealthPart,
    InstanceStatusPart,
    Part,
    ReadPlanPart,
    merged,
)
from gpuaudit.model.planned_reads import (
    CapacityReservation,
    CloudTrailEvent,
    ClusterEvent,
    HealthEvent,
    InstanceStatusInfo,
    PlannedRead,
    ReadSource,
    ScheduledEvent,
)
from gpuaudit.model.timeutil import parse_time

if TYPE_CHECKING:
    from gpuaudit.model.evidence import AuditRequest

CONTINUOUS_ONLY = "ListClusterEvents not supported (NodeProvisioningMode not Continuous)"


def collect(aws: Aws, evidence: Evidence, request: AuditRequest) -> Evidence:
    """Execute the read plan one read at a time, each recorded before it runs: the rules judge what was asked."""
    while (read := next_read(evidence, request)) is not None:
        evidence = merged(evidence, ReadPlanPart(read_plan=[*evidence.read_plan, read]))
        evidence = merged(evidence, READERS[read.source](aws, evidence, read))
    return evidence


def _cluster_events(aws: Aws, evidence: Evidence, read: PlannedRead) -> ClusterEventsPart:
    try:
        events = list(aws.paginate("sagemaker", "ListClusterEvents", "Events", ClusterName=evidence.cluster.name,
                                   EventTimeAfter=read.start, EventTimeBefore=read.end))
    except CallFailed as failed:
        if failed.code == "ValidationException" and "Continuous" in failed.message:
            return ClusterEventsPart(gaps=[Gap(kind="unsupported", service="sagemaker", operation="ListClusterEvents",
                                               unseen=f"{CONTINUOUS_ONLY}; the control-plane timeline comes from "
                                               "CloudTrail and node status only")])
        return ClusterEventsPart(gaps=[failed.gap_for("HyperPod cluster events not read")])
    return ClusterEventsPart(cluster_events=[
        ClusterEvent(time=e["EventTime"], event_id=e.get("EventId"), resource_type=e.get("ResourceType"),
                     instance_id=e.get("InstanceId"), instance_group=e.get("InstanceGroupName"),
                     description=e.get("Description", "")) for e in events])


def _capacity_reservations(aws: Aws, evidence: Evidence, read: PlannedRead) -> CapacityReservationsPart:
    gaps: list[Gap] = []
    items = aws.read_all(gaps, "capacity reservations not read",
                         "ec2", "DescribeCapacityReservations", "CapacityReservations")
    if items is None:
        return CapacityReservationsPart(gaps=gaps)
    return CapacityReservationsPart(gaps=gaps, capacity_reservations=[
        CapacityReservation(reservation_id=r["CapacityReservationId"], instance_type=r.get("InstanceType", ""),
                            state=r.get("State", ""), reservation_type=r.get("ReservationType"),
                            start_date=r.get("StartDate"), end_date=r.get("EndDate"),
                            total_instance_count=r.get("TotalInstanceCount"),
                            available_instance_count=r.get("AvailableInstanceCount")) for r in items])


def _cloudtrail(aws: Aws, evidence: Evidence, read: PlannedRead) -> CloudTrailPart:
    """By event name, never by instance ID: a HyperPod replace gives the node a new ID (RULES §5.7)."""
    found: list[CloudTrailEvent] = []
    gaps: list[Gap] = []
    failures = 0
    start, end = read.start or evidence.window.start, read.end or evidence.now  # the plan always sets both
    for name in read.names:
        source = EVENT_SOURCE[name]
        try:
            events = lookup_by_name(aws, name, start, end)
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"CloudTrail {name} events not read"))
            failures += 1
            continue
        found.extend(_trail_event(e) for e in events if e.get("EventSource", source) == source)
    return CloudTrailPart(gaps=gaps, cloudtrail=sorted(found, key=lambda e: e.time) if failures < len(read.names)
                          else None, cloudtrail_complete=failures == 0)


def _trail_event(e: dict[str, Any]) -> CloudTrailEvent:
    try:
        detail = json.loads(e.get("CloudTrailEvent") or "{}")
    except json.JSONDecodeError:
        detail = {}
    return CloudTrailEvent(
        time=e["EventTime"], event_name=e.get("EventName", ""), event_source=e.get("EventSource", ""),
        username=e.get("Username"), resources=[r.get("ResourceName", "") for r in e.get("Resources", []) or []],
        request_parameters=(detail.get("requestParameters") if isinstance(detail.get("requestParameters"), dict)
                            else None),
        response_elements=detail.get("responseElements") if isinstance(detail.get("responseElements"), dict) else None,
        error_code=detail.get("errorCode"), error_message=detail.get("errorMessage"))


def _health(aws: Aws, evidence: Evidence, read: PlannedRead) -> HealthPart:
    try:
        events = list(aws.paginate("health", "DescribeEvents", "events", token="nextToken",
                                   filter={"services": ["EC2", "SAGEMAKER"]}))
        out = []
        for e in events:
            entities = [x.get("entityValue", "") for x in aws.paginate(
                "health", "DescribeAffectedEntities", "entities", token="nextToken",
                filter={"eventArns": [e["arn"]]})] if e.get("arn") else []
            out.append(HealthEvent(arn=e.get("arn"), service=e.get("service"), event_type=e.get("eventTypeCode"),
                                   category=e.get("eventTypeCategory"), status=e.get("statusCode"),
                                   start=e.get("startTime"), end=e.get("endTime"),
                                   last_updated=e.get("lastUpdatedTime"), entities=entities))
    except CallFailed as failed:
        return HealthPart(gaps=[failed.gap_for("AWS Health events not read (needs a Business or Enterprise "
                                               "support plan for the Health API)")])
    return HealthPart(health_events=out)


STATUS_IDS = 100


def _instance_status(aws: Aws, evidence: Evidence, read: PlannedRead) -> InstanceStatusPart:
    # A terminated instance has no status checks; one EC2 has forgotten would fail the whole call.
    ids = [n.instance_id for n in evidence.nodes if n.discovered_by in ("api", "user") and n.status != "terminated"
           and not evidence.cluster.kind.startswith("hyperpod")]
    if not ids:
        return InstanceStatusPart()
    gaps: list[Gap] = []
    # EC2 takes at most 100 explicit instance IDs per DescribeInstanceStatus (and no MaxResults with them).
    statuses: list[dict[str, Any]] = []
    for k in range(0, len(ids), STATUS_IDS):
        chunk = aws.read_all(gaps, "EC2 status checks and scheduled events not read",
                             "ec2", "DescribeInstanceStatus", "InstanceStatuses", InstanceIds=ids[k:k + STATUS_IDS],
                             IncludeAllInstances=True)
        if chunk is None:
            return InstanceStatusPart(gaps=gaps)  # fail closed: part of the fleet's checks are not the fleet's
        statuses += chunk
    return InstanceStatusPart(gaps=gaps, instance_status=[
        InstanceStatusInfo(
            instance_id=s["InstanceId"], system_status=(s.get("SystemStatus") or {}).get("Status"),
            instance_status=(s.get("InstanceStatus") or {}).get("Status"),
            scheduled_events=[f"{e.get('Code')} at {e.get('NotBefore')}: {e.get('Description', '')}"
                              for e in s.get("Events", []) or []],
            events=[ScheduledEvent(code=str(e.get("Code", "")), not_before=e.get("NotBefore"),
                                   not_after=e.get("NotAfter"), description=str(e.get("Description", "")))
                    for e in s.get("Events", []) or []],
            impaired_since=_impaired_since(s)) for s in statuses])


def _impaired_since(status: dict[str, Any]) -> datetime | None:
    """The earliest `ImpairedSince` among the failing checks' details (system and instance reachability)."""
    since = [parse_time(d["ImpairedSince"]) if isinstance(d["ImpairedSince"], str) else d["ImpairedSince"]
             for key in ("SystemStatus", "InstanceStatus") for d in (status.get(key) or {}).get("Details", []) or []
             if d.get("ImpairedSince") and d.get("Status") != "passed"]
    return min(since) if since else None


def _fsx(aws: Aws, evidence: Evidence, read: PlannedRead) -> FileSystemsPart:
    gaps: list[Gap] = []
    if evidence.named_file_systems:
        lustre = named_lustre(aws, evidence, gaps)
    else:
        systems = aws.read_all(gaps, "FSx file systems not read; branch C not assessed",
                               "fsx", "DescribeFileSystems", "FileSystems")
        if systems is None:
            return FileSystemsPart(gaps=gaps)
        lustre = [f for f in systems if f.get("FileSystemType") == "LUSTRE"]
    file_systems = [file_system(f) for f in lustre]
    # Which of them the cluster mounts: storage is Proven only on the mounted file system (RULES §8 C).
    scoped = scoped_file_systems(aws, evidence, lustre, gaps)
    return saturation_peaks(aws, file_systems, read, "FSx saturation metrics not read; branch C not assessed",
                            FileSystemsPart(gaps=gaps, file_systems=file_systems, cluster_file_system_ids=scoped))


READERS: dict[ReadSource, Callable[[Aws, Evidence, PlannedRead], Part]] = {
    "cluster-events": _cluster_events, "capacity-reservations": _capacity_reservations, "cloudtrail": _cloudtrail,
    "health": _health, "instance-status": _instance_status, "fsx": _fsx, "kubernetes-nodes": kubernetes.read_nodes,
    "kubernetes-events": kubernetes.read_events, "gpu-peers": read_gpu_peers, "gpu-count": read_gpu_counts,
    "efa-counters": read_efa_counters,
    **preflight_collectors.READERS,
}


__all__ = ["READERS", "collect", "parse_time"]
