"""Pre-flight evidence (RULES §10): what checks P1–P16 need beyond inventory, logs and reservations.

Each source is read on its own: a failed call leaves its Evidence field None (or the one item
unread) and a gap naming the call, never an exception.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpuaudit.collectors import controlplane
from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.domain.capability import is_accelerated
from gpuaudit.domain.capacity import (
    DEFAULT_RUN_HOURS,
    cluster_reservations,
    ec2_family_quota,
    extension_hours,
    holding_reservation,
    run_fit,
)
from gpuaudit.domain.timing import lookback
from gpuaudit.model.evidence import (
    AlarmInfo,
    CapacityReservation,
    EventRuleInfo,
    Evidence,
    ExtensionOffering,
    ExtensionOfferings,
    FileSystemInfo,
    Gap,
    GpuActivity,
    InstanceNetwork,
    MetricPeak,
    Route,
    RouteTableInfo,
    SecurityGroupInfo,
    ServiceQuotaInfo,
    SgRule,
    SubnetInfo,
    TrainingPlanInfo,
)
from gpuaudit.model.timeutil import floor_hour

if TYPE_CHECKING:
    from gpuaudit.model.evidence import AuditRequest

ENI_QUOTA = ("vpc", "L-DF5E4CA3", "Network interfaces per Region")
GPU_POWER = "GPUPowerUtilization"
IDLE_BELOW = 5.0  # percent, as reported (RULES §0.6, §8 idle reserved GPUs)


def collect(aws: Aws, evidence: Evidence, request: AuditRequest) -> None:
    hyperpod = evidence.cluster.kind.startswith("hyperpod")
    start = request.run_start or evidence.now
    if not hyperpod:
        _instance_network(aws, evidence)
    _training_plans(aws, evidence)
    _extension_offerings(aws, evidence, start, request.run_hours)
    _security_groups(aws, evidence)
    _subnets(aws, evidence)
    if not hyperpod:
        _route_tables(aws, evidence)
    _alarms(aws, evidence)
    _event_rules(aws, evidence)
    _quotas(aws, evidence, start)
    span = lookback(evidence.now, request.run_hours)  # the last similar run (RULES §10 P8, P9)
    _file_systems(aws, evidence, span)
    if not hyperpod:
        _gpu_activity(aws, evidence, span)


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


def _instance_network(aws: Aws, evidence: Evidence) -> None:
    ids = [n.instance_id for n in evidence.nodes if n.discovered_by in ("api", "user")]
    if not ids:
        evidence.instance_network = []
        return
    try:
        instances = [i for r in aws.paginate("ec2", "DescribeInstances", "Reservations", InstanceIds=ids)
                     for i in r.get("Instances", [])]
    except CallFailed as failed:
        evidence.gaps.append(failed.gap_for("security groups, subnets and interfaces of the nodes not read"))
        return
    out = []
    for i in instances:
        interfaces = i.get("NetworkInterfaces", []) or []
        groups = {g["GroupId"] for g in i.get("SecurityGroups", []) or [] if g.get("GroupId")}
        groups |= {g["GroupId"] for n in interfaces for g in n.get("Groups", []) or [] if g.get("GroupId")}
        out.append(InstanceNetwork(
            instance_id=i["InstanceId"], subnet_id=i.get("SubnetId"), vpc_id=i.get("VpcId"),
            security_group_ids=sorted(groups), interfaces=len(interfaces),
            efa_interfaces=sum(1 for n in interfaces if n.get("InterfaceType") in ("efa", "efa-only")),
            private_ips=sum(max(1, len(n.get("PrivateIpAddresses", []) or [])) for n in interfaces),
            public_ip=bool(i.get("PublicIpAddress"))))
    evidence.instance_network = out


def _training_plans(aws: Aws, evidence: Evidence) -> None:
    arns = sorted({g.training_plan_arn for g in evidence.cluster.instance_groups if g.training_plan_arn})
    plans = []
    for arn in arns:
        name = arn.rsplit("/", 1)[-1]
        try:
            p = aws.call("sagemaker", "DescribeTrainingPlan", TrainingPlanName=name)
        except CallFailed as failed:
            evidence.gaps.append(failed.gap_for(f"training plan {name} not read"))
            continue
        plans.append(TrainingPlanInfo(
            arn=p.get("TrainingPlanArn", arn), name=p.get("TrainingPlanName", name), status=p.get("Status"),
            start_time=p.get("StartTime"), end_time=p.get("EndTime"), duration_hours=p.get("DurationHours"),
            total_instance_count=p.get("TotalInstanceCount"),
            available_instance_count=p.get("AvailableInstanceCount"),
            in_use_instance_count=p.get("InUseInstanceCount"),
            unhealthy_instance_count=p.get("UnhealthyInstanceCount"),
            available_spare_instance_count=p.get("AvailableSpareInstanceCount")))
    evidence.training_plans = plans


def _blocks(evidence: Evidence, start: datetime) -> list[tuple[CapacityReservation, str, datetime]]:
    """The Capacity Blocks the cluster's accelerated capacity runs on, with their instance type and end."""
    found: dict[str, tuple[CapacityReservation, str, datetime]] = {}
    for itype, ids in compute_types(evidence).items():
        held = holding_reservation(cluster_reservations(evidence, itype, ids), start)
        if held is not None and held.reservation_type == "capacity-block" and held.end_date is not None:
            found[held.reservation_id] = (held, itype, held.end_date)
    return list(found.values())


def _extension_offerings(aws: Aws, evidence: Evidence, start: datetime, run_hours: float | None) -> None:
    """Read-only offerings for each Capacity Block; the duration asked for covers the planned run (72 h when
    the length is unknown), at least one day."""
    if evidence.capacity_reservations is None:
        return
    out = []
    longest = run_hours or max(DEFAULT_RUN_HOURS)
    for block, itype, end in _blocks(evidence, start):
        hours = extension_hours(run_fit(end, itype, max(start, block.start_date or start), longest,
                                        evidence.now).shortfall)
        try:
            items = list(aws.paginate("ec2", "DescribeCapacityBlockExtensionOfferings",
                                      "CapacityBlockExtensionOfferings", CapacityReservationId=block.reservation_id,
                                      CapacityBlockExtensionDurationHours=hours))
        except CallFailed as failed:
            evidence.gaps.append(failed.gap_for(f"extension offerings of {block.reservation_id} not read"))
            out.append(ExtensionOfferings(reservation_id=block.reservation_id, requested_hours=hours))
            continue
        out.append(ExtensionOfferings(reservation_id=block.reservation_id, requested_hours=hours, offerings=[
            ExtensionOffering(offering_id=o.get("CapacityBlockExtensionOfferingId", "unnamed"),
                              instance_type=o.get("InstanceType"), instance_count=o.get("InstanceCount"),
                              start_date=o.get("CapacityBlockExtensionStartDate"),
                              end_date=o.get("CapacityBlockExtensionEndDate"),
                              duration_hours=o.get("CapacityBlockExtensionDurationHours")) for o in items]))
    evidence.capacity_extensions = out


def _rule(p: dict[str, Any]) -> SgRule:
    return SgRule(protocol=str(p.get("IpProtocol", "")), from_port=p.get("FromPort"), to_port=p.get("ToPort"),
                  cidrs=[r["CidrIp"] for r in p.get("IpRanges", []) or [] if r.get("CidrIp")],
                  ipv6_cidrs=[r["CidrIpv6"] for r in p.get("Ipv6Ranges", []) or [] if r.get("CidrIpv6")],
                  group_ids=[g["GroupId"] for g in p.get("UserIdGroupPairs", []) or [] if g.get("GroupId")],
                  prefix_list_ids=[x["PrefixListId"] for x in p.get("PrefixListIds", []) or []
                                   if x.get("PrefixListId")])


def _security_groups(aws: Aws, evidence: Evidence) -> None:
    ids = set(evidence.cluster.security_group_ids)
    ids |= {g for n in evidence.instance_network or [] for g in n.security_group_ids}
    if not ids:
        evidence.security_groups = []
        return
    groups = aws.read_all(evidence.gaps, f"security groups {', '.join(sorted(ids))} not read",
                          "ec2", "DescribeSecurityGroups", "SecurityGroups", GroupIds=sorted(ids))
    if groups is None:
        return
    evidence.security_groups = [
        SecurityGroupInfo(group_id=g["GroupId"], group_name=g.get("GroupName"), vpc_id=g.get("VpcId"),
                          ingress=[_rule(p) for p in g.get("IpPermissions", []) or []],
                          egress=[_rule(p) for p in g.get("IpPermissionsEgress", []) or []]) for g in groups]


def _subnets(aws: Aws, evidence: Evidence) -> None:
    ids = set(evidence.cluster.subnet_ids) | {n.subnet_id for n in evidence.instance_network or [] if n.subnet_id}
    if not ids:
        evidence.subnets = []
        return
    subnets = aws.read_all(evidence.gaps, f"free IPs of {', '.join(sorted(ids))} not read",
                           "ec2", "DescribeSubnets", "Subnets", SubnetIds=sorted(ids))
    if subnets is None:
        return
    evidence.subnets = [
        SubnetInfo(subnet_id=s["SubnetId"], vpc_id=s.get("VpcId"), availability_zone=s.get("AvailabilityZone"),
                   cidr=s.get("CidrBlock"), available_ips=s.get("AvailableIpAddressCount"),
                   map_public_ip_on_launch=s.get("MapPublicIpOnLaunch")) for s in subnets]


def _route_tables(aws: Aws, evidence: Evidence) -> None:
    vpcs = sorted({s.vpc_id for s in evidence.subnets or [] if s.vpc_id}
                  | {n.vpc_id for n in evidence.instance_network or [] if n.vpc_id})
    if not vpcs:
        evidence.route_tables = []
        return
    tables = aws.read_all(evidence.gaps, f"route tables of {', '.join(vpcs)} not read",
                          "ec2", "DescribeRouteTables", "RouteTables", Filters=[{"Name": "vpc-id", "Values": vpcs}])
    if tables is None:
        return
    target_keys = ("GatewayId", "NatGatewayId", "TransitGatewayId", "NetworkInterfaceId", "VpcPeeringConnectionId",
                   "InstanceId", "EgressOnlyInternetGatewayId", "LocalGatewayId", "CarrierGatewayId")
    out = []
    for t in tables:
        routes = []
        for r in t.get("Routes", []) or []:
            dest = r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock") or r.get("DestinationPrefixListId")
            target = next((r[k] for k in target_keys if r.get(k)), "unknown")
            if dest:
                routes.append(Route(destination=dest, target=target, state=r.get("State")))
        assoc = t.get("Associations", []) or []
        out.append(RouteTableInfo(route_table_id=t["RouteTableId"], vpc_id=t.get("VpcId"),
                                  main=any(a.get("Main") for a in assoc),
                                  subnet_ids=[a["SubnetId"] for a in assoc if a.get("SubnetId")], routes=routes))
    evidence.route_tables = out


def _alarms(aws: Aws, evidence: Evidence) -> None:
    alarms = aws.read_all(evidence.gaps, "CloudWatch alarms in ALARM not read",
                          "cloudwatch", "DescribeAlarms", "MetricAlarms", StateValue="ALARM")
    if alarms is None:
        return
    evidence.alarms_in_alarm = [
        AlarmInfo(name=a.get("AlarmName", ""), state_since=a.get("StateTransitionedTimestamp")
                  or a.get("StateUpdatedTimestamp"), state_reason=a.get("StateReason"),
                  namespace=a.get("Namespace"), metric=a.get("MetricName"),
                  dimensions={d.get("Name", ""): d.get("Value", "") for d in a.get("Dimensions", []) or []})
        for a in alarms]


def _event_rules(aws: Aws, evidence: Evidence) -> None:
    rules = aws.read_all(evidence.gaps, "EventBridge rules not read",
                         "events", "ListRules", "Rules")
    if rules is None:
        return
    evidence.event_rules = [EventRuleInfo(name=r.get("Name", ""), state=r.get("State"),
                                          event_pattern=r.get("EventPattern"), event_bus=r.get("EventBusName"))
                            for r in rules]


def _quota(aws: Aws, service: str, code: str, name: str) -> ServiceQuotaInfo:
    try:
        q = aws.call("service-quotas", "GetServiceQuota", ServiceCode=service, QuotaCode=code)["Quota"]
    except CallFailed as failed:
        return ServiceQuotaInfo(service_code=service, quota_code=code, quota_name=name,
                                error=f"{failed.code}: {failed.message}", absent=failed.code == "NoSuchResourceException")
    return ServiceQuotaInfo(service_code=service, quota_code=code, quota_name=q.get("QuotaName", name),
                            value=q.get("Value"))


def _quotas(aws: Aws, evidence: Evidence, start: datetime) -> None:
    """The ENI quota (P14), and for capacity no plan or reservation holds, the instance quota (P3)."""
    quotas = [_quota(aws, *ENI_QUOTA)]
    hyperpod = evidence.cluster.kind.startswith("hyperpod")
    plan_types = {g.instance_type for g in evidence.cluster.instance_groups if g.training_plan_arn}
    unreserved = [t for t, ids in compute_types(evidence).items() if t not in plan_types
                  and holding_reservation(cluster_reservations(evidence, t, ids), start) is None]
    if hyperpod and unreserved:
        quotas += _sagemaker_cluster_quotas(aws, unreserved)
    elif unreserved:
        for code, name in sorted({fq for t in unreserved if (fq := ec2_family_quota(t))}):
            quotas.append(_quota(aws, "ec2", code, name))
    for q in quotas:
        if q.error and not q.absent:  # an absent quota was read: P3 says so, it is no visibility gap
            evidence.gaps.append(Gap(kind="not-read", service="service-quotas", operation="quota",
                                     target=f"{q.service_code} {q.quota_code or ''} ({q.quota_name})",
                                     outcome="not read", error_message=q.error))
    evidence.service_quotas = quotas


def _sagemaker_cluster_quotas(aws: Aws, types: list[str]) -> list[ServiceQuotaInfo]:
    """`ml.<type> for cluster usage` has no fixed quota code to ask for: list SageMaker's quotas once."""
    wanted = {f"ml.{t} for cluster usage": t for t in types}
    try:
        listed = list(aws.paginate("service-quotas", "ListServiceQuotas", "Quotas", ServiceCode="sagemaker"))
    except CallFailed as failed:
        return [ServiceQuotaInfo(service_code="sagemaker", quota_code=None, quota_name=name,
                                 error=f"ListServiceQuotas: {failed.code}: {failed.message}") for name in wanted]
    by_name = {q.get("QuotaName"): q for q in listed}
    return [ServiceQuotaInfo(service_code="sagemaker", quota_code=by_name[name].get("QuotaCode"), quota_name=name,
                             value=by_name[name].get("Value")) if name in by_name else
            ServiceQuotaInfo(service_code="sagemaker", quota_code=None, quota_name=name,
                             error="no quota of that name in ListServiceQuotas", absent=True) for name in wanted]


def _file_systems(aws: Aws, evidence: Evidence, lookback: tuple[datetime, datetime]) -> None:
    """FSx for Lustre of the cluster and its saturation peaks over the last similar run (RULES §8 C, §10 P8)."""
    try:
        systems = [f for f in aws.paginate("fsx", "DescribeFileSystems", "FileSystems")
                   if f.get("FileSystemType") == "LUSTRE"]
    except CallFailed as failed:
        evidence.gaps.append(failed.gap_for("FSx file systems not read; storage headroom not checked"))
        return
    attached = _attached_file_systems(aws, evidence, systems)
    evidence.cluster_file_system_ids = attached
    chosen = [f for f in systems if attached is None or f["FileSystemId"] in attached]
    evidence.file_systems = [
        FileSystemInfo(file_system_id=f["FileSystemId"], file_system_type=f.get("FileSystemType"),
                       deployment_type=(f.get("LustreConfiguration") or {}).get("DeploymentType"),
                       storage_type=f.get("StorageType"), dns_name=f.get("DNSName"),
                       weekly_maintenance=(f.get("LustreConfiguration") or {}).get("WeeklyMaintenanceStartTime"))
        for f in chosen]
    start, end = lookback
    peaks: list[MetricPeak] = []
    try:
        for fs in evidence.file_systems:
            for metric, dim in controlplane.FSX_SATURATION:
                for m in aws.paginate("cloudwatch", "ListMetrics", "Metrics", Namespace="AWS/FSx", MetricName=metric,
                                      Dimensions=[{"Name": "FileSystemId", "Value": fs.file_system_id}]):
                    dims = {d["Name"]: d["Value"] for d in m.get("Dimensions", [])}
                    if dim in dims:
                        peaks.append(controlplane._peak(aws, fs.file_system_id, metric, dims, start, end))
    except CallFailed as failed:
        evidence.gaps.append(failed.gap_for("FSx saturation metrics not read; storage headroom not checked"))
        return
    evidence.fsx_metrics = peaks


def _attached_file_systems(aws: Aws, evidence: Evidence, systems: list[dict[str, Any]]) -> list[str] | None:
    """FSx IDs the cluster mounts: HyperPod names them in each group's FsxLustreConfig; ParallelCluster tags
    the file systems it manages; otherwise those in the cluster's VPC. None: not resolved (all are kept)."""
    if evidence.cluster.kind.startswith("hyperpod"):
        try:
            described = aws.call("sagemaker", "DescribeCluster", ClusterName=evidence.cluster.name)
        except CallFailed as failed:
            evidence.gaps.append(failed.gap_for("FSx mounts of the instance groups not read"))
            return None
        names = {(c.get("FsxLustreConfig") or {}).get("DnsName", "").split(".", 1)[0]
                 for g in described.get("InstanceGroups", []) for c in g.get("InstanceStorageConfigs", []) or []}
        return sorted(n for n in names if n.startswith("fs-"))
    tagged = [f["FileSystemId"] for f in systems
              if {t.get("Key"): t.get("Value") for t in f.get("Tags", []) or []}.get("parallelcluster:cluster-name")
              == evidence.cluster.name]
    if tagged:
        return sorted(tagged)
    vpcs = {s.vpc_id for s in evidence.subnets or [] if s.vpc_id}
    return sorted(f["FileSystemId"] for f in systems if f.get("VpcId") in vpcs) if vpcs else None


def _gpu_activity(aws: Aws, evidence: Evidence, lookback: tuple[datetime, datetime]) -> None:
    """Hourly `GPUPowerUtilization` maxima of EC2 nodes on reserved capacity: an hour is idle when every GPU
    stayed below 5 % (RULES §8 idle reserved GPUs)."""
    start, end = floor_hour(lookback[0]), lookback[1]
    reserved = [n for n in evidence.nodes if n.role == "compute" and n.discovered_by in ("api", "user")
                and n.instance_type and is_accelerated(n, evidence)
                and cluster_reservations(evidence, n.instance_type, [n.instance_id])]
    out = []
    try:
        for n in reserved:
            series = [m for m in aws.paginate("cloudwatch", "ListMetrics", "Metrics", Namespace="AWS/EC2",
                                              MetricName=GPU_POWER,
                                              Dimensions=[{"Name": "InstanceId", "Value": n.instance_id}])
                      if any(d.get("Name") == "GpuId" for d in m.get("Dimensions", []))]
            if not series:
                out.append(GpuActivity(instance_id=n.instance_id, metric=GPU_POWER, gpus=0, start=start, end=end,
                                       hours_observed=0, idle_hours=0))
                continue
            data = aws.call("cloudwatch", "GetMetricData", StartTime=start, EndTime=end, MetricDataQueries=[
                {"Id": f"g{i}", "MetricStat": {"Metric": {"Namespace": "AWS/EC2", "MetricName": GPU_POWER,
                                                          "Dimensions": m["Dimensions"]},
                                               "Period": 3600, "Stat": "Maximum"}} for i, m in enumerate(series)])
            hours: dict[datetime, list[float]] = defaultdict(list)
            for r in data.get("MetricDataResults", []):
                for t, v in zip(r.get("Timestamps", []), r.get("Values", []), strict=False):
                    hours[floor_hour(t)].append(float(v))
            out.append(GpuActivity(instance_id=n.instance_id, metric=GPU_POWER, gpus=len(series), start=start, end=end,
                                   hours_observed=len(hours),
                                   idle_hours=sum(1 for v in hours.values() if max(v) < IDLE_BELOW)))
    except CallFailed as failed:
        evidence.gaps.append(failed.gap_for("GPU activity of reserved nodes not read"))
        return
    evidence.gpu_activity = out


__all__ = ["collect", "compute_types"]
