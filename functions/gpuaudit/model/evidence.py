"""Evidence: what the collectors read from AWS, typed and JSON-serialisable.

Rules read only this. Every field names the resource it came from, so a claim in the
result can always be traced back to a call made in this run (RULES §0.4, §11).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ClusterKind = Literal["hyperpod-slurm", "hyperpod-eks", "parallelcluster", "ec2", "eks"]
Mode = Literal["coverage", "incident", "preflight"]
WindowSource = Literal["user", "default-24h", "default-72h", "default-7d", "schedule", "event"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Window(Frozen):
    start: datetime
    end: datetime
    source: WindowSource


class InstanceGroup(Frozen):
    name: str
    instance_type: str | None = None
    current_count: int | None = None
    target_count: int | None = None
    on_start_deep_health_checks: list[str] = Field(default_factory=list)
    training_plan_arn: str | None = None
    current_image_id: str | None = None
    desired_image_id: str | None = None
    node_role: Literal["compute", "controller", "login", "unknown"] = "unknown"


class ClusterInfo(Frozen):
    name: str
    kind: ClusterKind
    region: str
    arn: str | None = None
    cluster_id: str | None = None
    status: str | None = None
    node_recovery: str | None = None
    node_provisioning_mode: str | None = None
    instance_groups: list[InstanceGroup] = Field(default_factory=list)
    security_group_ids: list[str] = Field(default_factory=list)
    subnet_ids: list[str] = Field(default_factory=list)


NodeSource = Literal["api", "log-streams", "cloudtrail", "user"]


class NodeInfo(Frozen):
    instance_id: str
    instance_group: str | None = None
    instance_type: str | None = None  # EC2 type, HyperPod's `ml.` prefix stripped
    status: str
    status_message: str | None = None
    launch_time: datetime | None = None
    private_dns: str | None = None
    role: Literal["compute", "head", "controller", "login", "unknown"] = "compute"
    discovered_by: NodeSource = "api"
    efa_attached: int | None = None  # None: not observable (HyperPod service account)
    capacity_reservation_id: str | None = None
    image_id: str | None = None


class CapabilityProfile(Frozen):
    instance_type: str
    gpu_count: int | None = None
    gpu_name: str | None = None
    efa_supported: bool | None = None
    max_efa_interfaces: int | None = None
    nvswitch: str  # wording from the RULES §2 table, e.g. "NVSwitch (900 GB/s)"
    fabric_manager_expected: bool = False


class LogGroupInfo(Frozen):
    name: str
    matched_patterns: list[str] = Field(default_factory=list)
    creation_time: datetime | None = None
    stored_bytes: int | None = None


class KernelStream(Frozen):
    """(b) of RULES §4: a stream holding `kernel:` lines over the node's lifetime."""

    log_group: str
    log_stream: str
    kernel_lines: int
    last_kernel_line: datetime | None = None


class StreamActivity(Frozen):
    """(a) of RULES §4: all lines of one exact stream, binned by hour over the padded window.

    `hour_counts` holds every hour with at least one line; it is None when only the
    per-stream summary was read (a stream live in every expected hour needs no detail).
    """

    log_group: str
    log_stream: str
    lines: int
    live_hours: int
    first_event: datetime | None = None
    last_event: datetime | None = None
    hour_counts: dict[datetime, int] | None = None


class GpuLine(Frozen):
    time: datetime
    log_group: str
    log_stream: str
    message: str


class CloudTrailEvent(Frozen):
    time: datetime
    event_name: str
    event_source: str
    username: str | None = None
    resources: list[str] = Field(default_factory=list)
    request_parameters: dict[str, Any] | None = None
    response_elements: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None


class ClusterEvent(Frozen):
    time: datetime
    event_id: str | None = None
    resource_type: str | None = None
    instance_id: str | None = None
    instance_group: str | None = None
    description: str


class CapacityReservation(Frozen):
    reservation_id: str
    instance_type: str
    state: str
    reservation_type: str | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    total_instance_count: int | None = None
    available_instance_count: int | None = None


class HealthEvent(Frozen):
    arn: str | None = None
    service: str | None = None
    event_type: str | None = None
    category: str | None = None
    status: str | None = None
    start: datetime | None = None
    entities: list[str] = Field(default_factory=list)
    description: str | None = None


class InstanceStatusInfo(Frozen):
    instance_id: str
    system_status: str | None = None
    instance_status: str | None = None
    scheduled_events: list[str] = Field(default_factory=list)  # "<code> at <time>: <description>"


class FileSystemInfo(Frozen):
    file_system_id: str
    file_system_type: str | None = None
    deployment_type: str | None = None
    storage_type: str | None = None
    weekly_maintenance: str | None = None
    dns_name: str | None = None


class MetricPeak(Frozen):
    """One FSx saturation metric over the window, quoted as the service reports it (RULES §0.6)."""

    file_system_id: str
    metric: str
    dimensions: dict[str, str]
    statistic: str
    peak: float | None
    minutes_at_or_above_90: int
    datapoints: int


class QueryRecord(Frozen):
    """One Logs Insights query this audit ran, for cost and for the zero-records control."""

    purpose: Literal["kernel-streams", "stream-summary", "stream-hours", "gpu-lines"]
    log_groups: list[str]
    start: datetime
    end: datetime
    status: str
    rows: int
    records_scanned: float
    truncated: bool = False


class CallCount(Frozen):
    service: str
    operation: str
    count: int


class Evidence(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Mode
    cluster: ClusterInfo
    window: Window
    now: datetime
    nodes: list[NodeInfo] = Field(default_factory=list)
    profiles: dict[str, CapabilityProfile] = Field(default_factory=dict)
    log_groups: list[LogGroupInfo] = Field(default_factory=list)
    hma_log_group: str | None = None  # HyperPod cluster log group, when found
    hma_streams: list[str] | None = None  # `SagemakerHealthMonitoringAgent/...` streams ever created; None: not read
    kernel_streams: list[KernelStream] = Field(default_factory=list)
    stream_activity: list[StreamActivity] = Field(default_factory=list)
    gpu_lines: list[GpuLine] = Field(default_factory=list)
    cluster_events: list[ClusterEvent] | None = None  # None: not supported or not read
    cloudtrail: list[CloudTrailEvent] | None = None
    capacity_reservations: list[CapacityReservation] | None = None
    health_events: list[HealthEvent] | None = None
    instance_status: list[InstanceStatusInfo] | None = None
    file_systems: list[FileSystemInfo] | None = None
    fsx_metrics: list[MetricPeak] | None = None
    queries: list[QueryRecord] = Field(default_factory=list)
    gaps: list[str] = Field(default_factory=list)  # collector-level: what could not be read, and the call
    calls: list[CallCount] = Field(default_factory=list)
