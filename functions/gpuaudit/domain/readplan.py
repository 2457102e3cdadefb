"""The read plan: which control-plane sources an audit reads, and exactly which quotas, extension offerings,
metrics and CloudTrail events — a pure function of the Evidence so far.

The collectors execute one planned read at a time and record it in `Evidence.read_plan`; the rules judge what
was asked for and read (a quota never asked for is a defect to name, not a missing permission). The next read
may depend on earlier ones: the quotas and offerings a pre-flight asks for follow from the reservations read.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from gpuaudit.domain.capability import is_accelerated
from gpuaudit.domain.capacity import (
    DEFAULT_RUN_HOURS,
    cluster_reservations,
    ec2_family_quota,
    extension_hours,
    holding_reservation,
    run_fit,
)
from gpuaudit.domain.timing import CLOUDTRAIL_LOOKBACK, TIMELINE_MARGIN, lookback
from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.planned_reads import OfferingAsk, PlannedRead, QuotaAsk, ReadSource
from gpuaudit.model.timeutil import floor_hour

# Looked up by event name, never by instance ID: a HyperPod replace gives the node a new ID (RULES §5.7).
CLOUDTRAIL_EVENTS: dict[str, tuple[str, ...]] = {
    "sagemaker.amazonaws.com": ("UpdateCluster", "UpdateClusterSoftware", "BatchReplaceClusterNodes",
                                "BatchRebootClusterNodes", "BatchDeleteClusterNodes", "StartClusterHealthCheck"),
    # CreateFleet: ParallelCluster launches compute nodes with it too; its capacity errors are branch B's (RULES §8 B).
    "ec2.amazonaws.com": ("TerminateInstances", "RunInstances", "CreateFleet"),
    "fsx.amazonaws.com": ("UpdateFileSystem",),
}
EVENT_SOURCE = {name: source for source, names in CLOUDTRAIL_EVENTS.items() for name in names}
# FSx for Lustre saturation metrics (RULES §8 C) and the dimension each is reported per: Maximum, in percent.
FSX_SATURATION = {"NetworkThroughputUtilization": "FileServer", "FileServerDiskThroughputUtilization": "FileServer",
                  "DiskIopsUtilization": "StorageTargetId", "CPUUtilization": "FileServer"}
# The other rows of §8 C's table: (the dimension besides FileSystemId, or None for the file system alone; statistic).
FSX_READINGS: dict[str, tuple[str | None, str]] = {
    "MetadataOperations": (None, "Sum"), "FreeDataStorageCapacity": ("StorageTargetId", "Minimum"),
    "DataReadBytes": (None, "Sum"), "DataWriteBytes": (None, "Sum"), "ClientConnections": (None, "Sum")}
FSX_METRICS = (*FSX_SATURATION, *FSX_READINGS)
ENI_QUOTA = QuotaAsk(service_code="vpc", quota_code="L-DF5E4CA3", quota_name="Network interfaces per Region")
GPU_POWER = "GPUPowerUtilization"
# The CloudWatch agent's `nvidia_gpu` metrics a straggler GPU shows below its peers on (RULES §8), in namespace
# `CWAgent` per `index` (and `host`, or `InstanceId` when appended): what each measures, as a reader says it.
CWAGENT_NAMESPACE = "CWAgent"
STRAGGLER_METRICS: dict[str, str] = {
    "nvidia_smi_clocks_current_sm": "SM clock (MHz)", "nvidia_smi_temperature_gpu": "temperature (°C)",
    "nvidia_smi_power_draw": "power draw (W)", "nvidia_smi_pcie_link_width_current": "PCIe link width",
    "nvidia_smi_pcie_link_gen_current": "PCIe link generation"}


PREFLIGHT_SOURCES: tuple[ReadSource, ...] = (
    "instance-network", "training-plans", "extension-offerings", "security-groups", "subnets", "route-tables",
    "alarms", "event-rules", "quotas", "file-systems", "gpu-activity")
# Incident questions beside the branches: what a replacement needs (a plan's spare, free IPs), the EFA security
# group of a hang, and idle reserved GPUs in the window (RULES §8 A, B, D, idle reserved GPUs).
INCIDENT_SOURCES: tuple[ReadSource, ...] = ("instance-network", "training-plans", "security-groups", "subnets",
                                            "gpu-activity", "gpu-peers", "efa-counters")
# HyperPod nodes are not EC2 instances of the account: their interfaces, route tables and EC2 metrics are not read.
EC2_ONLY: frozenset[ReadSource] = frozenset({"instance-network", "route-tables", "gpu-activity", "gpu-peers",
                                             "gpu-count", "efa-counters"})
CWAGENT_GPU = "nvidia_smi_utilization_gpu"
# RULES §8 D layer 3: the CloudWatch agent's EFA error counters (namespace `CWAgent`, per `device`/`port`/`eniId`, and
# `host` or an appended `InstanceId`; reported as deltas), what each counts. HyperPod's `node_amazonefa_*` are the
# observability add-on's Prometheus series, not CloudWatch's: not read here (rules/efa_counters.py says so).
EFA_COUNTERS: dict[str, str] = {
    "efa_retrans_pkts": "packets retransmitted", "efa_retrans_timeout_events": "retransmission timeouts",
    "efa_impaired_remote_conn_events": "impaired remote connections",
    "efa_unresponsive_remote_events": "unresponsive remote peers", "efa_rx_dropped": "received packets dropped",
    "efa_rdma_read_wr_err": "RDMA read work-request errors", "efa_rdma_write_wr_err": "RDMA write work-request errors"}
EFA_PERIOD_S = 300  # 5-minute sums: fine enough to tell a rise before a hang from one after it
EFA_BASELINE = timedelta(hours=6)  # each counter's own rate before the window, which a rise is measured against


def sources_for(evidence: Evidence) -> list[ReadSource]:
    """The control-plane sources of the audit's mode and orchestrator, in the order they are read."""
    hyperpod = evidence.cluster.kind.startswith("hyperpod")
    out: list[ReadSource] = ["cluster-events"] if hyperpod else []
    if hyperpod and evidence.cluster.eks_cluster:  # the health agent's verdicts live on the Kubernetes nodes (§7)
        out.append("kubernetes-nodes")  # (self-managed EKS reads them at inventory: they name its nodes)
    if evidence.mode == "incident" and evidence.cluster.eks_cluster:
        out.append("kubernetes-events")  # the node Events of the window (NodeNotReady, Rebooted…)
    if evidence.mode in ("incident", "preflight"):
        out.append("capacity-reservations")
    if evidence.mode == "incident":
        out += ["cloudtrail", "health", "instance-status", "fsx"]
        out += [s for s in INCIDENT_SOURCES if not (hyperpod and s in EC2_ONLY)]
    elif evidence.mode == "coverage" and evidence.named_file_systems:
        out.append("fsx")  # `--filesystem`: details, maintenance window and saturation in every mode
    if evidence.mode == "preflight":
        out += [s for s in PREFLIGHT_SOURCES if not (hyperpod and s in EC2_ONLY)]
    if not hyperpod:  # every mode gives node verdicts: fewer GPUs than the type is one (RULES §6, §7)
        out.append("gpu-count")
    return out


def next_read(evidence: Evidence, request: AuditRequest) -> PlannedRead | None:
    """The first source of the mode not yet planned, with what to ask decided from the Evidence read so far."""
    planned = {r.source for r in evidence.read_plan}
    source = next((s for s in sources_for(evidence) if s not in planned), None)
    return None if source is None else plan(source, evidence, request)


def plan(source: ReadSource, ev: Evidence, request: AuditRequest) -> PlannedRead:
    start = request.run_start or ev.now  # the planned run (pre-flight)
    last_run = lookback(ev.now, request.run_hours)  # the last similar run, for metrics (RULES §10 P8, P9)
    match source:
        case "cluster-events":
            return PlannedRead(source=source, reason="control-plane timeline (RULES §5)",
                               start=ev.window.start - TIMELINE_MARGIN,
                               end=min(ev.window.end + TIMELINE_MARGIN, ev.now))
        case "kubernetes-events":
            return PlannedRead(source=source, reason="node Events of the window on the EKS cluster (RULES §5)",
                               start=ev.window.start - TIMELINE_MARGIN,
                               end=min(ev.window.end + TIMELINE_MARGIN, ev.now))
        case "capacity-reservations":
            return PlannedRead(source=source, reason="what holds the capacity (RULES §8 B, §10 P1–P3)")
        case "cloudtrail":
            return PlannedRead(source=source, reason="changes and replacements before the failure (RULES §5, §8 E)",
                               start=ev.window.start - CLOUDTRAIL_LOOKBACK, end=ev.now, names=list(EVENT_SOURCE))
        case "fsx":
            # From TIMELINE_MARGIN before the window: saturation is Proven only when it precedes the slowdown.
            return PlannedRead(source=source, reason="storage saturation before and in the window (RULES §8 C)",
                               start=ev.window.start - TIMELINE_MARGIN, end=min(ev.window.end, ev.now),
                               names=list(FSX_METRICS))
        case "file-systems":
            return PlannedRead(source=source, reason="storage headroom over the last similar run (RULES §10 P8)",
                               start=last_run[0], end=last_run[1], names=list(FSX_METRICS))
        case "gpu-activity" if ev.mode == "incident":
            return PlannedRead(source=source, reason="idle reserved GPU hours in the window (RULES §8)",
                               start=floor_hour(ev.window.start), end=min(ev.window.end, ev.now), names=[GPU_POWER])
        case "gpu-activity":
            return PlannedRead(source=source, reason="idle reserved GPU hours (RULES §8, §10 P9)",
                               start=floor_hour(last_run[0]), end=last_run[1], names=[GPU_POWER])
        case "gpu-peers":
            return PlannedRead(source=source, reason="a straggler GPU below its peers (RULES §8)",
                               start=floor_hour(ev.window.start - TIMELINE_MARGIN),
                               end=min(ev.window.end + TIMELINE_MARGIN, ev.now), names=list(STRAGGLER_METRICS))
        case "efa-counters":
            # From EFA_BASELINE before the window (each counter's own rate), to TIMELINE_MARGIN after it (a rise after
            # the hang is its effect, and is said as one).
            return PlannedRead(source=source, reason="EFA error counters before and in the window (RULES §8 D layer 3)",
                               start=floor_hour(ev.window.start - EFA_BASELINE),
                               end=min(ev.window.end + TIMELINE_MARGIN, ev.now), names=list(EFA_COUNTERS))
        case "gpu-count":
            return PlannedRead(source=source, reason="GPUs each node reports against its type's count (RULES §6, §7)",
                               start=floor_hour(ev.window.start), end=min(ev.window.end, ev.now),
                               names=[GPU_POWER, CWAGENT_GPU])
        case "extension-offerings":
            return PlannedRead(source=source, reason="can the Capacity Blocks be extended (RULES §10 P2)",
                               offerings=offering_asks(ev, start, request.run_hours))
        case "quotas":
            return PlannedRead(source=source, reason="IP headroom (P14) and capacity no reservation holds (P3)",
                               quotas=quota_asks(ev, start))
        case _:
            return PlannedRead(source=source, reason=REASONS[source])


REASONS: dict[ReadSource, str] = {
    "health": "AWS Health events on EC2 and SageMaker (RULES §5)",
    "instance-status": "EC2 status checks and scheduled events (RULES §5)",
    "instance-network": "interfaces, subnets and security groups of the nodes (RULES §10 P7, P14–P16)",
    "training-plans": "what holds HyperPod capacity (RULES §10 P1–P3)",
    "security-groups": "EFA self-referencing rules (RULES §10 P7, P15)",
    "subnets": "free IPs for a replacement (RULES §10 P14)",
    "route-tables": "compute nodes can bootstrap (RULES §10 P16)",
    "alarms": "alarms already firing (RULES §10 P13)",
    "event-rules": "capacity end alarmed (RULES §10 P10)",
    "kubernetes-nodes": "node health labels, taints and conditions on the EKS nodes (RULES §7)",
}


def compute_types(evidence: Evidence) -> dict[str, list[str]]:
    """Accelerated compute instance types of the cluster → their node IDs (HyperPod groups included)."""
    types: dict[str, list[str]] = defaultdict(list)
    for n in evidence.nodes:
        if n.role in ("compute", "unknown") and n.instance_type and is_accelerated(n, evidence):
            types[n.instance_type].append(n.instance_id)
    for g in evidence.cluster.instance_groups:
        if g.node_role == "compute" and g.instance_type and g.instance_type not in types:
            profile = evidence.profiles.get(g.instance_type)
            if profile is None or (profile.gpu_count or 0) > 0 or g.instance_type.startswith(("trn", "inf")):
                types[g.instance_type] = []
    return dict(types)


def quota_asks(evidence: Evidence, start: datetime) -> list[QuotaAsk]:
    """The ENI quota (P14), and for capacity no plan or reservation holds, the instance quota (P3)."""
    plan_types = {g.instance_type for g in evidence.cluster.instance_groups if g.training_plan_arn}
    unreserved = [t for t, ids in compute_types(evidence).items() if t not in plan_types
                  and holding_reservation(cluster_reservations(evidence, t, ids), start) is None]
    if evidence.cluster.kind.startswith("hyperpod"):
        return [ENI_QUOTA, *(QuotaAsk(service_code="sagemaker", quota_code=None,
                                      quota_name=f"ml.{t} for cluster usage") for t in unreserved)]
    families = sorted({fq for t in unreserved if (fq := ec2_family_quota(t))})
    return [ENI_QUOTA, *(QuotaAsk(service_code="ec2", quota_code=code, quota_name=name) for code, name in families)]


def offering_asks(evidence: Evidence, start: datetime, run_hours: float | None) -> list[OfferingAsk]:
    """Each Capacity Block the accelerated capacity runs on, for a duration that covers the planned run (the
    longest default length when it is unknown), at least one day. None read: nothing to ask."""
    if evidence.capacity_reservations is None:
        return []
    longest = run_hours or max(DEFAULT_RUN_HOURS)
    found: dict[str, OfferingAsk] = {}
    for itype, ids in compute_types(evidence).items():
        held = holding_reservation(cluster_reservations(evidence, itype, ids), start)
        if held is None or held.reservation_type != "capacity-block" or held.end_date is None:
            continue
        fit = run_fit(held.end_date, itype, max(start, held.start_date or start), longest, evidence.now)
        found[held.reservation_id] = OfferingAsk(reservation_id=held.reservation_id, instance_type=itype,
                                                 duration_hours=extension_hours(fit.shortfall))
    return list(found.values())
