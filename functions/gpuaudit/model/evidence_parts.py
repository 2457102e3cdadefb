"""What each collector read, as the typed part it returns, and the one place a part becomes Evidence (`merged`).

A collector never writes into the shared `Evidence`: it reads what it needs from it and returns a part whose fields
are the Evidence fields it sets (each typed as in Evidence), with the gaps it met, so its signature says what it
writes. Only the fields a collector set are merged (`model_fields_set`): a source that failed sets nothing and leaves
the field as it was (None: not read), and an explicit None is merged as None (e.g. CloudTrail with every name failed).
The gaps are appended in the order the collectors ran, so the result names them in that order.
tests/unit/test_architecture.py keeps both halves true: every part's field is an Evidence field of the same type, and
no function under collectors/ assigns to an Evidence it is given.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from gpuaudit.model.evidence import (
    CapabilityProfile,
    ControlStream,
    Evidence,
    Gap,
    GpuLine,
    JobFigure,
    KernelStream,
    ListedStream,
    NodeInfo,
    QueryRecord,
    StreamActivity,
)
from gpuaudit.model.planned_reads import (
    AlarmInfo,
    CapacityReservation,
    CloudTrailEvent,
    ClusterEvent,
    EfaCounterSeries,
    EventRuleInfo,
    ExtensionOfferings,
    FileSystemInfo,
    FsxReading,
    GpuActivity,
    GpuCount,
    GpuPeerSeries,
    HealthEvent,
    InstanceNetwork,
    InstanceStatusInfo,
    KubeEvent,
    KubeNode,
    MetricPeak,
    PlannedRead,
    RouteTableInfo,
    SecurityGroupInfo,
    ServiceQuotaInfo,
    SubnetInfo,
    TrainingPlanInfo,
)


class Part(BaseModel):
    """One collector's reading: the gaps it met; a subclass adds the Evidence fields it sets."""

    gaps: list[Gap] = Field(default_factory=list)


def merged(evidence: Evidence, *parts: Part) -> Evidence:
    """`evidence` with each part's set fields taken (a later part's over an earlier's) and its gaps appended, in
    order: the one place a collector's reading becomes Evidence."""
    update: dict[str, object] = {}
    gaps = list(evidence.gaps)
    for part in parts:
        update.update({name: getattr(part, name) for name in sorted(part.model_fields_set - {"gaps"})})
        gaps += part.gaps
    return evidence.model_copy(update={**update, "gaps": gaps})


# The pipeline's own steps around the log reads.
class NodesPart(Part):
    nodes: list[NodeInfo] = Field(default_factory=list)


class ProfilesPart(Part):
    profiles: dict[str, CapabilityProfile] = Field(default_factory=dict)


class ControlStreamsPart(Part):
    control_streams: list[ControlStream] | None = None


class ReadPlanPart(Part):
    read_plan: list[PlannedRead] = Field(default_factory=list)


class LogsPart(Part):
    """The log reads of every batch, joined (collectors/logs.py::merge_batches); `nodes` adds those found only by
    their streams (vanished from the inventory)."""

    nodes: list[NodeInfo] = Field(default_factory=list)
    hma_log_group: str | None = None
    hma_streams: list[str] | None = None
    kernel_streams: list[KernelStream] = Field(default_factory=list)
    stream_activity: list[StreamActivity] = Field(default_factory=list)
    listed_streams: list[ListedStream] = Field(default_factory=list)
    silent_streams: list[ListedStream] = Field(default_factory=list)
    gpu_lines: list[GpuLine] = Field(default_factory=list)
    boot_lines: list[GpuLine] = Field(default_factory=list)
    kernel_unread_groups: list[str] = Field(default_factory=list)
    summary_unread_groups: list[str] = Field(default_factory=list)
    gpu_unread_groups: list[str] = Field(default_factory=list)
    job_figures: list[JobFigure] = Field(default_factory=list)
    job_figure_groups: list[str] = Field(default_factory=list)
    job_figure_unread_groups: list[str] = Field(default_factory=list)
    queries: list[QueryRecord] = Field(default_factory=list)


# The read plan's sources (collectors/source_reads.py::READERS), one part each.
class ClusterEventsPart(Part):
    cluster_events: list[ClusterEvent] | None = None


class CapacityReservationsPart(Part):
    capacity_reservations: list[CapacityReservation] | None = None


class CloudTrailPart(Part):
    cloudtrail: list[CloudTrailEvent] | None = None
    cloudtrail_complete: bool = False


class HealthPart(Part):
    health_events: list[HealthEvent] | None = None


class InstanceStatusPart(Part):
    instance_status: list[InstanceStatusInfo] | None = None


class FileSystemsPart(Part):
    """FSx for Lustre in scope and its metrics (the `fsx` and `file-systems` sources)."""

    file_systems: list[FileSystemInfo] | None = None
    cluster_file_system_ids: list[str] | None = None
    fsx_metrics: list[MetricPeak] | None = None
    fsx_readings: list[FsxReading] | None = None


class KubeNodesPart(Part):
    kube_nodes: list[KubeNode] | None = None


class KubeEventsPart(Part):
    kube_events: list[KubeEvent] | None = None


class GpuPeersPart(Part):
    gpu_peers: list[GpuPeerSeries] | None = None


class GpuCountsPart(Part):
    gpu_counts: list[GpuCount] | None = None


class EfaCountersPart(Part):
    efa_counters: list[EfaCounterSeries] | None = None


class InstanceNetworkPart(Part):
    instance_network: list[InstanceNetwork] | None = None


class TrainingPlansPart(Part):
    training_plans: list[TrainingPlanInfo] | None = None


class CapacityExtensionsPart(Part):
    capacity_extensions: list[ExtensionOfferings] | None = None


class SecurityGroupsPart(Part):
    security_groups: list[SecurityGroupInfo] | None = None


class SubnetsPart(Part):
    subnets: list[SubnetInfo] | None = None


class RouteTablesPart(Part):
    route_tables: list[RouteTableInfo] | None = None


class AlarmsPart(Part):
    alarms_in_alarm: list[AlarmInfo] | None = None


class EventRulesPart(Part):
    event_rules: list[EventRuleInfo] | None = None


class ServiceQuotasPart(Part):
    service_quotas: list[ServiceQuotaInfo] | None = None


class GpuActivityPart(Part):
    gpu_activity: list[GpuActivity] | None = None
