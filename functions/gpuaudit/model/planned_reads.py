"""The read plan and what its sources return: the control-plane, capacity, network and Kubernetes records
(domain/readplan.py decides which sources a mode reads, collectors/source_reads.py reads them, the rules judge
against the plan). Evidence (model/evidence.py) holds one field per source; None there means not read."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gpuaudit.model.frozen import Frozen
from gpuaudit.model.timeutil import UtcDatetime

# The read plan (domain/readplan.py decides it, the collectors execute it, the rules judge against it).
ReadSource = Literal[
    "cluster-events", "capacity-reservations", "cloudtrail", "health", "instance-status", "fsx",
    "instance-network", "training-plans", "extension-offerings", "security-groups", "subnets", "route-tables",
    "alarms", "event-rules", "quotas", "file-systems", "gpu-activity", "kubernetes-nodes", "kubernetes-events",
    "gpu-peers",
    "gpu-count",
    "efa-counters",
]


class KubeCondition(Frozen):
    type: str
    status: str
    reason: str | None = None
    last_transition: UtcDatetime | None = None


class KubeNode(Frozen):
    """A Kubernetes node as GET /api/v1/nodes lists it: what the health agent and node monitoring agent set."""

    name: str
    instance_id: str | None  # from spec.providerID (aws:///<az>/<instance-id>), else the HyperPod node name
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[str] = Field(default_factory=list)  # key=value:effect
    conditions: list[KubeCondition] = Field(default_factory=list)


class KubeEvent(Frozen):
    """A Kubernetes Event about a node (GET /api/v1/events, involvedObject.kind=Node)."""

    node: str
    time: UtcDatetime
    type: str | None = None  # Normal, Warning
    reason: str | None = None
    message: str = ""


class QuotaAsk(Frozen):
    """One Service Quotas value the plan asks for; `quota_code` None: found by name in ListServiceQuotas."""

    service_code: str
    quota_code: str | None
    quota_name: str


class OfferingAsk(Frozen):
    """Extension offerings of one Capacity Block, for the duration that covers the planned run."""

    reservation_id: str
    instance_type: str
    duration_hours: int


class PlannedRead(Frozen):
    """One source the plan asked for: why (the rule that needs it), and exactly what was asked."""

    source: ReadSource
    reason: str
    start: UtcDatetime | None = None
    end: UtcDatetime | None = None
    names: list[str] = Field(default_factory=list)  # CloudTrail event names or CloudWatch metric names
    quotas: list[QuotaAsk] = Field(default_factory=list)
    offerings: list[OfferingAsk] = Field(default_factory=list)


class CloudTrailEvent(Frozen):
    time: UtcDatetime
    event_name: str
    event_source: str
    username: str | None = None
    resources: list[str] = Field(default_factory=list)
    request_parameters: dict[str, Any] | None = None
    response_elements: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None


class ClusterEvent(Frozen):
    time: UtcDatetime
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
    start_date: UtcDatetime | None = None
    end_date: UtcDatetime | None = None
    total_instance_count: int | None = None
    available_instance_count: int | None = None


class HealthEvent(Frozen):
    arn: str | None = None
    service: str | None = None
    event_type: str | None = None
    category: str | None = None
    status: str | None = None
    start: UtcDatetime | None = None
    entities: list[str] = Field(default_factory=list)
    description: str | None = None
    end: UtcDatetime | None = None
    # When AWS Health last posted or updated the event: a scheduled change is announced before its own start
    # (RULES §5: listed in the timeline at its announcement, with its date).
    last_updated: UtcDatetime | None = None


class ScheduledEvent(Frozen):
    """One EC2 scheduled event of an instance (DescribeInstanceStatus `Events`): `instance-retirement`,
    `system-reboot`, `system-maintenance`, `instance-reboot`, `instance-stop`. EC2 does not say when it was
    announced; a `[Completed]` or `[Canceled]` description marks one already past."""

    code: str
    not_before: UtcDatetime | None = None
    not_after: UtcDatetime | None = None
    description: str = ""


class InstanceStatusInfo(Frozen):
    instance_id: str
    system_status: str | None = None
    instance_status: str | None = None
    scheduled_events: list[str] = Field(default_factory=list)  # "<code> at <time>: <description>"
    events: list[ScheduledEvent] = Field(default_factory=list)  # the same events, typed
    # The earliest `ImpairedSince` of the failing system or instance check (its Details): when it began failing.
    impaired_since: UtcDatetime | None = None


class FileSystemInfo(Frozen):
    file_system_id: str
    file_system_type: str | None = None
    deployment_type: str | None = None
    storage_type: str | None = None
    weekly_maintenance: str | None = None
    dns_name: str | None = None
    storage_capacity_gib: int | None = None  # DescribeFileSystems StorageCapacity: an OST's share is it / OSTs


class MetricPeak(Frozen):
    """One FSx saturation metric over the window, quoted as the service reports it (RULES §0.6)."""

    file_system_id: str
    metric: str
    dimensions: dict[str, str]
    statistic: str
    peak: float | None
    minutes_at_or_above_90: int
    datapoints: int
    longest_run_at_or_above_90: int = 0  # consecutive 1-minute datapoints ≥ 90 %: "sustained" (RULES §8 C)
    sustained_from: UtcDatetime | None = None  # start of the first run of 5+ consecutive minutes ≥ 90 %


class FsxReading(Frozen):
    """One FSx metric of RULES §8 C that is not a utilization percent, per dimension ListMetrics found: a `Sum`
    (MetadataOperations, DataReadBytes, DataWriteBytes, ClientConnections) read as a rate, Sum / period seconds
    (§0.6), or the `Minimum` of FreeDataStorageCapacity per OST (bytes)."""

    file_system_id: str
    metric: str
    dimensions: dict[str, str]
    statistic: str
    period_seconds: int = 60
    datapoints: int = 0
    minimum: float | None = None  # of the per-period values (a rate for Sum)
    maximum: float | None = None
    # the per-period values averaged over 10-minute buckets (bucket start, value): enough to see a rise or a drop
    buckets: list[tuple[UtcDatetime, float]] = Field(default_factory=list)


class TrainingPlanInfo(Frozen):
    """DescribeTrainingPlan of a HyperPod group's TrainingPlanArn (RULES §10 P1, P3). Prices are not kept."""

    arn: str
    name: str
    status: str | None = None
    start_time: UtcDatetime | None = None
    end_time: UtcDatetime | None = None
    duration_hours: int | None = None
    total_instance_count: int | None = None
    available_instance_count: int | None = None
    in_use_instance_count: int | None = None
    unhealthy_instance_count: int | None = None
    available_spare_instance_count: int | None = None


class ExtensionOffering(Frozen):
    """One Capacity Block extension offering (DescribeCapacityBlockExtensionOfferings); prices are not kept."""

    offering_id: str
    instance_type: str | None = None
    instance_count: int | None = None
    start_date: UtcDatetime | None = None
    end_date: UtcDatetime | None = None
    duration_hours: int | None = None


class ExtensionOfferings(Frozen):
    """The offerings read for one Capacity Block; `offerings` is None when the call failed."""

    reservation_id: str
    requested_hours: int
    offerings: list[ExtensionOffering] | None = None


class SgRule(Frozen):
    protocol: str  # "-1" is all traffic
    from_port: int | None = None
    to_port: int | None = None
    cidrs: list[str] = Field(default_factory=list)
    ipv6_cidrs: list[str] = Field(default_factory=list)
    group_ids: list[str] = Field(default_factory=list)
    prefix_list_ids: list[str] = Field(default_factory=list)


class SecurityGroupInfo(Frozen):
    group_id: str
    group_name: str | None = None
    vpc_id: str | None = None
    ingress: list[SgRule] = Field(default_factory=list)
    egress: list[SgRule] = Field(default_factory=list)


class InstanceNetwork(Frozen):
    """Network attachment of one EC2 node (DescribeInstances); HyperPod instances are not visible here."""

    instance_id: str
    subnet_id: str | None = None
    vpc_id: str | None = None
    security_group_ids: list[str] = Field(default_factory=list)
    interfaces: int = 0
    efa_interfaces: int = 0
    private_ips: int = 0
    public_ip: bool = False


class SubnetInfo(Frozen):
    subnet_id: str
    vpc_id: str | None = None
    availability_zone: str | None = None
    cidr: str | None = None
    available_ips: int | None = None
    map_public_ip_on_launch: bool | None = None


class Route(Frozen):
    destination: str
    target: str  # igw-…, nat-…, local, tgw-…, eni-…
    state: str | None = None


class RouteTableInfo(Frozen):
    route_table_id: str
    vpc_id: str | None = None
    main: bool = False
    subnet_ids: list[str] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)


class AlarmInfo(Frozen):
    """A CloudWatch alarm read in state ALARM (DescribeAlarms StateValue=ALARM)."""

    name: str
    state_since: UtcDatetime | None = None
    state_reason: str | None = None
    namespace: str | None = None
    metric: str | None = None
    dimensions: dict[str, str] = Field(default_factory=dict)


class EventRuleInfo(Frozen):
    name: str
    state: str | None = None
    event_pattern: str | None = None
    event_bus: str | None = None


class ServiceQuotaInfo(Frozen):
    """One Service Quotas value; `value` is None when it could not be read (`error` says why)."""

    service_code: str
    quota_code: str | None
    quota_name: str
    value: float | None = None
    error: str | None = None
    absent: bool = False  # read, and the account has no such quota: a finding (UNVERIFIED), not a missing read


class GpuCount(Frozen):
    """The GPUs one EC2 node has in CloudWatch (RULES §6, §7: fewer GPUs than the type → REPLACE): the distinct
    `GpuId` of `AWS/EC2` or `index` of `CWAgent` ListMetrics returns for it, and which of them reported in the window.
    `hour` None: no series of the node had a datapoint in the window (Not observable, never 0 GPUs)."""

    instance_id: str
    source: str  # the namespace, metric and dimension counted
    gpu_ids: list[str] = Field(default_factory=list)  # with a datapoint in the window
    listed_ids: list[str] = Field(default_factory=list)  # every series ListMetrics returned for the node
    hour: UtcDatetime | None = None  # the latest UTC hour any of them reported


class GpuActivity(Frozen):
    """Hourly GPU activity of one EC2 node on reserved capacity (RULES §8 idle reserved GPUs, §10 P9)."""

    instance_id: str
    metric: str
    gpus: int
    start: UtcDatetime
    end: UtcDatetime
    hours_observed: int  # hours with at least one datapoint
    idle_hours: int  # every GPU reported, and every GPU stayed below 5 %
    busy_hours: int = 0  # at least one GPU at or above 5 %
    hours_in_span: int = 0  # the hours the read asked for: the rest of them are missing, never idle or busy
    gpu_ids: list[str] = Field(default_factory=list)
    # UTC hour starts neither idle nor busy: no datapoint, or a GPU silent with none of the others busy (§8)
    missing_hours: list[UtcDatetime] = Field(default_factory=list)


class EfaCounterSeries(Frozen):
    """One CloudWatch agent EFA counter (namespace `CWAgent`, RULES §8 D layer 3) of one node, summed over its EFA
    devices and ports per period (the agent reports deltas). Kept small at fleet size: only the periods whose sum is
    not zero are listed (error counters are zero in health), with how many periods reported at all before the window
    and from its start on — a zero period is a reported period that is not listed."""

    instance_id: str
    metric: str  # e.g. efa_retrans_pkts
    devices: int  # device/port series summed
    period_s: int
    periods_before_window: int = 0  # periods with a datapoint before the window's start (the baseline)
    periods_in_window: int = 0  # periods with a datapoint from the window's start on
    times: list[UtcDatetime] = Field(default_factory=list)  # period starts whose sum is not zero
    values: list[float] = Field(default_factory=list)  # those sums, as reported


class GpuPeerSeries(Frozen):
    """Hourly averages of one CloudWatch agent per-GPU metric (namespace `CWAgent`, dimension `index`) of one node's
    GPU (RULES §8 straggler GPU): SM clock, temperature, power draw, PCIe link width and generation."""

    instance_id: str
    index: str  # the GPU's nvidia-smi index on the node
    metric: str  # e.g. nvidia_smi_clocks_current_sm
    hours: list[UtcDatetime] = Field(default_factory=list)  # UTC hour starts with a datapoint
    values: list[float] = Field(default_factory=list)  # the hour's Average, as reported
