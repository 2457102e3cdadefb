"""Evidence: what the collectors read from AWS, typed and JSON-serialisable; the request that asked for it, the
gaps, and the node and log records. The read plan's sources' records are in model/planned_reads.py.

Rules read only this. Every field names the resource it came from, so a claim in the
result can always be traced back to a call made in this run (RULES §0.4, §11).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from gpuaudit.model.frozen import Frozen
from gpuaudit.model.history import HistoryRead
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
    ReadSource,
    RouteTableInfo,
    SecurityGroupInfo,
    ServiceQuotaInfo,
    SubnetInfo,
    TrainingPlanInfo,
)
from gpuaudit.model.text import printable_name
from gpuaudit.model.timeutil import UtcDatetime

# HyperPod cluster states worth an incident audit (a state change to any other status starts none).
FAILED_CLUSTER_STATES = ("Failed", "RollingBack")
ClusterKind = Literal["hyperpod-slurm", "hyperpod-eks", "parallelcluster", "ec2", "eks"]
Mode = Literal["coverage", "incident", "preflight"]
WindowSource = Literal["user", "default-24h", "default-72h", "default-7d", "schedule", "event"]


# A CloudWatch Logs log group name as the service accepts it (1–512 characters of this set).
LogGroupName = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^[.\-_/#A-Za-z0-9]+$")]
InstanceId = Annotated[str, StringConstraints(pattern=r"^i-[0-9a-f]{8,17}$")]
FileSystemId = Annotated[str, StringConstraints(pattern=r"^fs-[0-9a-f]{8,17}$")]
MAX_INSTANCES = 1000
MAX_FILE_SYSTEMS = 50
# A cluster name (or fleet label, or a configured cluster's ARN) as every entry point accepts it: 1-256 characters,
# none of them a control or invisible character (it names result folders, alert subjects and history keys).
ClusterText = Annotated[str, StringConstraints(min_length=1, max_length=256), AfterValidator(printable_name)]
# Preflight's planned run and checkpoint interval: finite, above zero, and at most ten years (a run end or a last
# checkpoint beyond that lies outside the dates any time input may name; 1e308 hours is not a plan).
MAX_RUN_HOURS = 87_600.0
EksClusterName = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]*$")]
# The years every time input may name, at every entry point (a window reaching past them: domain/window.py)
FIRST_YEAR, LAST_YEAR = 1970, 2100


def _in_years(value: datetime) -> datetime:
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        raise ValueError(f"{value.isoformat()} is outside the years {FIRST_YEAR}-{LAST_YEAR}")
    return value


RequestTime = Annotated[UtcDatetime, AfterValidator(_in_years)]  # on datetime.UTC (model/timeutil.py), 1970–2100
# The longest time or length any time input takes (an ISO-8601 time with fractions and an offset is ~35)
TIME_TEXT_MAX = 64
RunHours = Annotated[float, Field(gt=0, le=MAX_RUN_HOURS, allow_inf_nan=False)]
CheckpointMinutes = Annotated[float, Field(gt=0, le=MAX_RUN_HOURS * 60, allow_inf_nan=False)]


def fleet_label(instances: int, file_systems: int = 0) -> str:
    """The cluster name of an audit scoped by instance IDs and/or file systems alone: a label, never taken for a
    real cluster."""
    parts = (([f"{instances}-instances"] if instances else [])
             + ([f"{file_systems}-file-systems"] if file_systems else []))
    return "fleet-of-" + "-and-".join(parts)
NAMED_BY_OPERATOR = "named by the operator"


class AuditRequest(Frozen):
    """One audit to run: what the CLI parses from flags and the state machine from its input."""

    cluster: ClusterText  # a fleet label when only instance IDs are given
    mode: Mode = "coverage"
    since: RequestTime | None = None
    until: RequestTime | None = None
    last: str | None = Field(default=None, pattern=r"^[1-9][0-9]{0,5}[mhd]$")  # 30m, 2h, 2d (domain/window.py)
    instance_ids: list[InstanceId] = Field(default_factory=list, max_length=MAX_INSTANCES)
    # FSx for Lustre file systems the operator names (`--filesystem`), audited with or without a cluster.
    file_system_ids: list[FileSystemId] = Field(default_factory=list, max_length=MAX_FILE_SYSTEMS)
    # Log groups the operator names (a job's own stdout, where NCCL prints its transport), read beside the groups
    # found by substring; at most 50, each a CloudWatch Logs group name.
    log_groups: list[LogGroupName] = Field(default_factory=list, max_length=50)
    # Self-managed EKS: the EKS cluster whose Kubernetes nodes (providerID) are the nodes to audit.
    eks_cluster: EksClusterName | None = None
    run_hours: RunHours | None = None
    run_start: RequestTime | None = None
    checkpoint_minutes: CheckpointMinutes | None = None
    # Incident: when the failure began, as the operator states it (`--onset`); inside the impact window (RULES §0.5).
    onset: RequestTime | None = None

    @model_validator(mode="before")
    @classmethod
    def _fleet(cls, data: Any) -> Any:
        """`--cluster` is optional when `--instances` scopes the audit: the result's cluster is a labelled fleet;
        with `--eks-cluster` alone, the EKS cluster names the audit."""
        if isinstance(data, dict) and not data.get("cluster") and isinstance(data.get("eks_cluster"), str):
            return {**data, "cluster": data["eks_cluster"]}
        if isinstance(data, dict) and not data.get("cluster") and (data.get("instance_ids") or
                                                                   data.get("file_system_ids")):
            return {**data,
                    "cluster": fleet_label(_count(data.get("instance_ids")), _count(data.get("file_system_ids")))}
        return data

    @model_validator(mode="after")
    def _onset_in_window(self) -> AuditRequest:
        """A stated onset lies inside the window it is measured in (RULES §0.5); the window's own defaults are
        checked when it is resolved (domain/window.py)."""
        if self.onset is not None and (self.since is not None and self.onset < self.since
                                       or self.until is not None and self.onset > self.until):
            raise ValueError(f"onset {self.onset.isoformat()} is outside the impact window "
                             f"{self.since.isoformat() if self.since else '…'} → "
                             f"{self.until.isoformat() if self.until else 'now'}")
        return self

    @property
    def fleet(self) -> bool:
        """No cluster was named: the audit is of the instances and file systems given."""
        return self.cluster == fleet_label(len(set(self.instance_ids)), len(set(self.file_system_ids)))


def _count(items: Any) -> int:
    return len({str(i) for i in items}) if isinstance(items, list) else 0


# Why something was not read. Call failures are classified by error code (collectors/aws.py); the rest name
# what the collector itself stopped on.
GapKind = Literal[
    "denied", "throttled", "unavailable", "expired-credentials", "unreachable", "deadline", "not-read",
    "timed-out", "query-failed", "truncated", "unsupported", "step-failed",
]
# Which part of the Evidence a gap leaves incomplete, where a rule must know (today: the node list).
GapScope = Literal["node-list", "history", "cache"]  # "cache": the tool's own cache not written, nothing unread


class Gap(Frozen):
    """What one audit could not read: the call, why, what stays unseen. Prose only when the Result is built."""

    kind: GapKind
    service: str  # "logs", "ec2", …; "step" for a state machine step that failed
    operation: str  # the API operation (or step name) that would close the gap when it succeeds
    target: str | None = None  # which resources of the call, when the operation alone does not say
    error_code: str | None = None
    error_message: str | None = None
    outcome: str = "failed"  # the verb of the prose: "failed", "not read"
    unseen: str | None = None  # what this leaves unseen
    scope: GapScope | None = None

    @property
    def closing_call(self) -> str:
        return f"{self.service} {self.operation}"

    def prose(self) -> str:
        if self.kind == "truncated":
            return f"Visibility gap: {self.unseen}"
        if self.kind == "unsupported":
            return f"Capability limit: {self.unseen}"
        head = f"Not checked: {self.closing_call}" + (f" {self.target}" if self.target else "")
        if self.error_code is not None:
            head += f" {self.outcome} ({self.error_code}: {self.error_message})"
        elif self.error_message is not None:
            head += f" {self.outcome} ({self.error_message})"
        return head + (f" — {self.unseen}" if self.unseen else "")


class Window(Frozen):
    start: UtcDatetime
    end: UtcDatetime
    source: WindowSource
    # The failure's onset as the operator states it (RULES §0.5): "before the failure" is measured from it. The
    # window's start is a search bound, never the onset.
    onset: UtcDatetime | None = None


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
    labelled_fleet: bool = False  # no cluster named: the instances and file systems the operator gave
    eks_cluster: str | None = None  # HyperPod EKS: the orchestrating EKS cluster's name (Orchestrator.Eks.ClusterArn)
    creation_time: UtcDatetime | None = None  # HyperPod DescribeCluster CreationTime: no log is expected before it


NodeSource = Literal["api", "log-streams", "cloudtrail", "user"]
GroupRole = Literal["compute", "controller", "login"]


class NodeInfo(Frozen):
    instance_id: str
    instance_group: str | None = None
    instance_type: str | None = None  # EC2 type, HyperPod's `ml.` prefix stripped
    status: str
    status_message: str | None = None
    launch_time: UtcDatetime | None = None
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
    creation_time: UtcDatetime | None = None
    stored_bytes: int | None = None
    owner_account: str | None = None  # from the group's ARN; used only to redact it from every output


class KernelStream(Frozen):
    """(b) of RULES §4: a stream holding `kernel:` lines over the node's lifetime."""

    log_group: str
    log_stream: str
    kernel_lines: int
    last_kernel_line: UtcDatetime | None = None


class StreamActivity(Frozen):
    """(a) of RULES §4: all lines of one exact stream, binned by hour over the padded window.

    `hour_counts` holds every hour with at least one line; it is None when only the
    per-stream summary was read (a stream live in every expected hour needs no detail).
    """

    log_group: str
    log_stream: str
    lines: int
    live_hours: int
    first_event: UtcDatetime | None = None
    last_event: UtcDatetime | None = None
    hour_counts: dict[UtcDatetime, int] | None = None


class ListedStream(Frozen):
    """A stream as DescribeLogStreams lists it: name and first/last event times, no line counts. Read only when
    Logs Insights could not be: it keeps the nodes a stream names in the result, never proves coverage."""

    log_group: str
    log_stream: str
    first_event: UtcDatetime | None = None
    last_event: UtcDatetime | None = None


class ControlStream(Frozen):
    """A control-plane log stream looked up with DescribeLogStreams because it held no line in the padded window
    (RULES §4 'when the logs are dead, ask the control plane'; §0.4 name the stream). `listed` False: the
    lookup ran and found no such stream (never shipped, or deleted)."""

    log_group: str
    log_stream: str | None  # None: the HyperPod cluster log group lists no stream besides HMA's
    role: str  # clustermgtd | slurm_resume | slurmctld | HyperPod cluster log
    instance_id: str | None = None  # the head node, for ParallelCluster
    listed: bool = True
    first_event: UtcDatetime | None = None
    last_event: UtcDatetime | None = None


class GpuLine(Frozen):
    time: UtcDatetime
    log_group: str
    log_stream: str
    message: str


class JobFigure(Frozen):
    """One throughput or step-time figure of a training job's log line (domain/throughput.py names the measures)."""

    time: UtcDatetime
    log_group: str
    log_stream: str
    measure: str  # "TFLOP/s per GPU", "ms per iteration", "it/s"…
    value: float


# stream-count: how many rows the kernel-streams and stream-summary reads will return, asked first at fleet scale
# job-figures: a training job's throughput and step-time lines (incident mode; the failure's onset, RULES §0.5)
QueryPurpose = Literal["kernel-streams", "stream-summary", "stream-count", "stream-hours", "gpu-lines", "boot-lines",
                       "job-figures", "xid-locate"]


class QueryRecord(Frozen):
    """One Logs Insights query this audit ran, for cost and for the zero-records control."""

    purpose: QueryPurpose
    log_groups: list[str]
    start: UtcDatetime
    end: UtcDatetime
    status: str
    rows: int
    records_scanned: float
    truncated: bool = False
    reread: bool = False  # truncated, and every stream it covers was read again in parts under the cap


class CallCount(Frozen):
    service: str
    operation: str
    count: int


class NodeScope(Frozen):
    """Which of the cluster's nodes an Xid watch audit judges (issue #51): the nodes the lines that tripped the watch
    name, or, when they could not be located, every node. `said`: the one line the result gives, naming the nodes
    and why, or why the audit is of the whole cluster."""

    narrowed_to: list[str] | None = None  # instance IDs; None: every node of the cluster
    said: str


class Evidence(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Mode
    cluster: ClusterInfo
    window: Window
    now: UtcDatetime
    nodes: list[NodeInfo] = Field(default_factory=list)
    profiles: dict[str, CapabilityProfile] = Field(default_factory=dict)
    log_groups: list[LogGroupInfo] = Field(default_factory=list)
    hma_log_group: str | None = None  # HyperPod cluster log group, when found
    hma_streams: list[str] | None = None  # `SagemakerHealthMonitoringAgent/...` streams ever created; None: not read
    kernel_streams: list[KernelStream] = Field(default_factory=list)
    stream_activity: list[StreamActivity] = Field(default_factory=list)
    listed_streams: list[ListedStream] = Field(default_factory=list)  # DescribeLogStreams, when Insights failed
    # Log groups whose kernel-streams / stream-summary read did not complete (a query failed, or a part stayed at the
    # 10,000-row cap): there a stream's absence from kernel_streams / stream_activity proves nothing.
    kernel_unread_groups: list[str] = Field(default_factory=list)
    summary_unread_groups: list[str] = Field(default_factory=list)
    gpu_unread_groups: list[str] = Field(default_factory=list)  # a GPU-lines read over the group did not answer
    # Kernel-carrying streams with no line in the padded window, as DescribeLogStreams lists them: when they died.
    silent_streams: list[ListedStream] = Field(default_factory=list)
    gpu_lines: list[GpuLine] = Field(default_factory=list)
    # Control-plane streams silent in the padded window, with their last event (DescribeLogStreams); None: not read.
    control_streams: list[ControlStream] | None = None
    # Fabric Manager start and driver banner lines from before the window, since the node's launch (bounded)
    boot_lines: list[GpuLine] = Field(default_factory=list)
    # Incident: the jobs' throughput and step-time figures in the GPU-lines window, from the job log groups (named
    # with --log-group, or holding NCCL lines); the groups searched whole, and those whose read failed or stayed at
    # the row cap (there a drop may have gone unread: never "no drop").
    job_figures: list[JobFigure] = Field(default_factory=list)
    job_figure_groups: list[str] = Field(default_factory=list)
    job_figure_unread_groups: list[str] = Field(default_factory=list)
    cluster_events: list[ClusterEvent] | None = None  # None: not supported or not read
    cloudtrail: list[CloudTrailEvent] | None = None
    cloudtrail_complete: bool = False  # every event name was looked up without error
    capacity_reservations: list[CapacityReservation] | None = None
    health_events: list[HealthEvent] | None = None
    instance_status: list[InstanceStatusInfo] | None = None
    file_systems: list[FileSystemInfo] | None = None
    fsx_metrics: list[MetricPeak] | None = None
    fsx_readings: list[FsxReading] | None = None  # the other rows of RULES §8 C's table (None: not read)
    queries: list[QueryRecord] = Field(default_factory=list)
    gaps: list[Gap] = Field(default_factory=list)  # collector-level: what could not be read, and the call
    calls: list[CallCount] = Field(default_factory=list)
    # Pre-flight evidence (RULES §10), read only in preflight mode; None: not read (a gap names the call).
    training_plans: list[TrainingPlanInfo] | None = None
    capacity_extensions: list[ExtensionOfferings] | None = None
    security_groups: list[SecurityGroupInfo] | None = None
    instance_network: list[InstanceNetwork] | None = None
    subnets: list[SubnetInfo] | None = None
    route_tables: list[RouteTableInfo] | None = None
    alarms_in_alarm: list[AlarmInfo] | None = None
    event_rules: list[EventRuleInfo] | None = None
    service_quotas: list[ServiceQuotaInfo] | None = None
    cluster_file_system_ids: list[str] | None = None  # FSx file systems attached to the cluster, when resolved
    named_file_systems: list[str] = Field(default_factory=list)  # `--filesystem`: audited in every mode
    gpu_activity: list[GpuActivity] | None = None
    # CWAgent per-GPU series of the GPU nodes in the window (RULES §8 straggler GPU); None: not read, []: none published
    gpu_peers: list[GpuPeerSeries] | None = None
    # CWAgent EFA error counters of the EFA nodes from a baseline before the window (RULES §8 D layer 3); None: not read
    efa_counters: list[EfaCounterSeries] | None = None
    # The GPUs each accelerated EC2 node reports in CloudWatch; None: not read (HyperPod: no system metrics there).
    gpu_counts: list[GpuCount] | None = None
    # EKS-orchestrated clusters: the Kubernetes nodes (labels, taints, conditions); None: not read (a gap says why).
    kube_nodes: list[KubeNode] | None = None
    kube_events: list[KubeEvent] | None = None  # node Events in the window ± margin; None: not read
    # Earlier audits of this cluster's nodes (fleet memory, issue #18); None: no history kept, or it could not be
    # read (then a gap with scope "history" says why).
    history: HistoryRead | None = None
    # What the read plan asked for, in order (domain/readplan.py); a source absent here was never asked for.
    read_plan: list[PlannedRead] = Field(default_factory=list)
    # An Xid watch audit: the nodes it was narrowed to, or why it was not (None: no narrowing was asked).
    node_scope: NodeScope | None = None

    def planned(self, source: ReadSource) -> PlannedRead | None:
        return next((r for r in self.read_plan if r.source == source), None)

    def gpu_line_reads(self, group: str) -> list[QueryRecord]:
        """The queries that read `group`'s GPU lines: its GPU-lines queries; an hourly read with none over the group
        asked only the streams its stream summary counted a GPU hint in (collectors/logs.py `_by_hint`), so
        there the summary's queries over the group are what read them (a hint-less stream holds no GPU line)."""
        lines = [q for q in self.queries if q.purpose == "gpu-lines" and group in q.log_groups]
        return lines or [q for q in self.queries if q.purpose == "stream-summary" and group in q.log_groups]

    def gpu_lines_read(self, group: str) -> bool:
        """`group`'s GPU lines were read: every query that read them completed (a capped one read again) and none
        was refused (a refused query leaves no record, only the group in `gpu_unread_groups`)."""
        reads = self.gpu_line_reads(group)
        return bool(reads) and group not in self.gpu_unread_groups and all(
            q.status == "Complete" and (not q.truncated or q.reread) for q in reads)
