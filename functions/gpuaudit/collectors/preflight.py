"""Pre-flight evidence (RULES §10): what checks P1–P16 need beyond inventory, logs and reservations.

Each source is read on its own: a failed call leaves its Evidence field None (or the one item
unread) and a gap naming the call, never an exception. Each reader returns the part it read
(model/evidence_parts.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.inventory import ID_FILTER_VALUES, instance_pages
from gpuaudit.domain.capability import is_accelerated
from gpuaudit.domain.capacity import (
    cluster_reservations,
)
from gpuaudit.domain.readplan import FSX_READINGS, FSX_SATURATION, GPU_POWER
from gpuaudit.domain.timing import FSX_BUCKET
from gpuaudit.model.evidence import Evidence, Gap
from gpuaudit.model.evidence_parts import (
    AlarmsPart,
    CapacityExtensionsPart,
    EventRulesPart,
    FileSystemsPart,
    GpuActivityPart,
    InstanceNetworkPart,
    Part,
    RouteTablesPart,
    SecurityGroupsPart,
    ServiceQuotasPart,
    SubnetsPart,
    TrainingPlansPart,
)
from gpuaudit.model.planned_reads import (
    AlarmInfo,
    EventRuleInfo,
    ExtensionOffering,
    ExtensionOfferings,
    FileSystemInfo,
    FsxReading,
    GpuActivity,
    InstanceNetwork,
    MetricPeak,
    PlannedRead,
    QuotaAsk,
    ReadSource,
    Route,
    RouteTableInfo,
    SecurityGroupInfo,
    ServiceQuotaInfo,
    SgRule,
    SubnetInfo,
    TrainingPlanInfo,
)
from gpuaudit.model.timeutil import floor_hour, hours_between, parse_time

IDLE_BELOW = 5.0  # percent, as reported (RULES §0.6, §8 idle reserved GPUs)


def _instance_network(aws: Aws, evidence: Evidence, read: PlannedRead) -> InstanceNetworkPart:
    ids = [n.instance_id for n in evidence.nodes if n.discovered_by in ("api", "user")]
    if not ids:
        return InstanceNetworkPart(instance_network=[])
    out = []
    try:
        # By filter, paged (never one response of the fleet's raw instances), each turned into its record at once.
        for k in range(0, len(ids), ID_FILTER_VALUES):
            for i in instance_pages(aws, Filters=[{"Name": "instance-id", "Values": ids[k:k + ID_FILTER_VALUES]}]):
                out.append(_network_of(i))
    except CallFailed as failed:
        return InstanceNetworkPart(gaps=[failed.gap_for("security groups, subnets and interfaces of the nodes not "
                                                        "read")])
    return InstanceNetworkPart(instance_network=out)


def _network_of(i: dict[str, Any]) -> InstanceNetwork:
    interfaces = i.get("NetworkInterfaces", []) or []
    groups = {g["GroupId"] for g in i.get("SecurityGroups", []) or [] if g.get("GroupId")}
    groups |= {g["GroupId"] for n in interfaces for g in n.get("Groups", []) or [] if g.get("GroupId")}
    return InstanceNetwork(
        instance_id=i["InstanceId"], subnet_id=i.get("SubnetId"), vpc_id=i.get("VpcId"),
        security_group_ids=sorted(groups), interfaces=len(interfaces),
        efa_interfaces=sum(1 for n in interfaces if n.get("InterfaceType") in ("efa", "efa-only")),
        private_ips=sum(max(1, len(n.get("PrivateIpAddresses", []) or [])) for n in interfaces),
        public_ip=bool(i.get("PublicIpAddress")))


def _training_plans(aws: Aws, evidence: Evidence, read: PlannedRead) -> TrainingPlansPart:
    arns = sorted({g.training_plan_arn for g in evidence.cluster.instance_groups if g.training_plan_arn})
    plans = []
    gaps: list[Gap] = []
    for arn in arns:
        name = arn.rsplit("/", 1)[-1]
        try:
            p = aws.call("sagemaker", "DescribeTrainingPlan", TrainingPlanName=name)
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"training plan {name} not read"))
            continue
        plans.append(TrainingPlanInfo(
            arn=p.get("TrainingPlanArn", arn), name=p.get("TrainingPlanName", name), status=p.get("Status"),
            start_time=p.get("StartTime"), end_time=p.get("EndTime"), duration_hours=p.get("DurationHours"),
            total_instance_count=p.get("TotalInstanceCount"),
            available_instance_count=p.get("AvailableInstanceCount"),
            in_use_instance_count=p.get("InUseInstanceCount"),
            unhealthy_instance_count=p.get("UnhealthyInstanceCount"),
            available_spare_instance_count=p.get("AvailableSpareInstanceCount")))
    return TrainingPlansPart(gaps=gaps, training_plans=plans)


def _extension_offerings(aws: Aws, evidence: Evidence, read: PlannedRead) -> CapacityExtensionsPart:
    """Read-only offerings for each Capacity Block the plan names, for the duration it asks."""
    if evidence.capacity_reservations is None:
        return CapacityExtensionsPart()
    out = []
    gaps: list[Gap] = []
    for ask in read.offerings:
        try:
            items = list(aws.paginate("ec2", "DescribeCapacityBlockExtensionOfferings",
                                      "CapacityBlockExtensionOfferings", CapacityReservationId=ask.reservation_id,
                                      CapacityBlockExtensionDurationHours=ask.duration_hours))
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"extension offerings of {ask.reservation_id} not read"))
            out.append(ExtensionOfferings(reservation_id=ask.reservation_id, requested_hours=ask.duration_hours))
            continue
        out.append(ExtensionOfferings(reservation_id=ask.reservation_id, requested_hours=ask.duration_hours, offerings=[
            ExtensionOffering(offering_id=o.get("CapacityBlockExtensionOfferingId", "unnamed"),
                              instance_type=o.get("InstanceType"), instance_count=o.get("InstanceCount"),
                              start_date=o.get("CapacityBlockExtensionStartDate"),
                              end_date=o.get("CapacityBlockExtensionEndDate"),
                              duration_hours=o.get("CapacityBlockExtensionDurationHours")) for o in items]))
    return CapacityExtensionsPart(gaps=gaps, capacity_extensions=out)


def _rule(p: dict[str, Any]) -> SgRule:
    return SgRule(protocol=str(p.get("IpProtocol", "")), from_port=p.get("FromPort"), to_port=p.get("ToPort"),
                  cidrs=[r["CidrIp"] for r in p.get("IpRanges", []) or [] if r.get("CidrIp")],
                  ipv6_cidrs=[r["CidrIpv6"] for r in p.get("Ipv6Ranges", []) or [] if r.get("CidrIpv6")],
                  group_ids=[g["GroupId"] for g in p.get("UserIdGroupPairs", []) or [] if g.get("GroupId")],
                  prefix_list_ids=[x["PrefixListId"] for x in p.get("PrefixListIds", []) or []
                                   if x.get("PrefixListId")])


def _security_groups(aws: Aws, evidence: Evidence, read: PlannedRead) -> SecurityGroupsPart:
    ids = set(evidence.cluster.security_group_ids)
    ids |= {g for n in evidence.instance_network or [] for g in n.security_group_ids}
    if not ids:
        return SecurityGroupsPart(security_groups=[])
    gaps: list[Gap] = []
    groups = aws.read_all(gaps, f"security groups {', '.join(sorted(ids))} not read",
                          "ec2", "DescribeSecurityGroups", "SecurityGroups", GroupIds=sorted(ids))
    if groups is None:
        return SecurityGroupsPart(gaps=gaps)
    return SecurityGroupsPart(gaps=gaps, security_groups=[
        SecurityGroupInfo(group_id=g["GroupId"], group_name=g.get("GroupName"), vpc_id=g.get("VpcId"),
                          ingress=[_rule(p) for p in g.get("IpPermissions", []) or []],
                          egress=[_rule(p) for p in g.get("IpPermissionsEgress", []) or []]) for g in groups])


def _subnets(aws: Aws, evidence: Evidence, read: PlannedRead) -> SubnetsPart:
    ids = set(evidence.cluster.subnet_ids) | {n.subnet_id for n in evidence.instance_network or [] if n.subnet_id}
    if not ids:
        return SubnetsPart(subnets=[])
    gaps: list[Gap] = []
    subnets = aws.read_all(gaps, f"free IPs of {', '.join(sorted(ids))} not read",
                           "ec2", "DescribeSubnets", "Subnets", SubnetIds=sorted(ids))
    if subnets is None:
        return SubnetsPart(gaps=gaps)
    return SubnetsPart(gaps=gaps, subnets=[
        SubnetInfo(subnet_id=s["SubnetId"], vpc_id=s.get("VpcId"), availability_zone=s.get("AvailabilityZone"),
                   cidr=s.get("CidrBlock"), available_ips=s.get("AvailableIpAddressCount"),
                   map_public_ip_on_launch=s.get("MapPublicIpOnLaunch")) for s in subnets])


def _route_tables(aws: Aws, evidence: Evidence, read: PlannedRead) -> RouteTablesPart:
    vpcs = sorted({s.vpc_id for s in evidence.subnets or [] if s.vpc_id}
                  | {n.vpc_id for n in evidence.instance_network or [] if n.vpc_id})
    if not vpcs:
        return RouteTablesPart(route_tables=[])
    gaps: list[Gap] = []
    tables = aws.read_all(gaps, f"route tables of {', '.join(vpcs)} not read",
                          "ec2", "DescribeRouteTables", "RouteTables", Filters=[{"Name": "vpc-id", "Values": vpcs}])
    if tables is None:
        return RouteTablesPart(gaps=gaps)
    target_keys = ("GatewayId", "NatGatewayId", "TransitGatewayId", "NetworkInterfaceId", "VpcPeeringConnectionId",
                   "InstanceId", "EgressOnlyInternetGatewayId", "LocalGatewayId", "CarrierGatewayId")
    out = []
    for t in tables:
        routes = []
        for r in t.get("Routes", []) or []:
            dest = (r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock")
                    or r.get("DestinationPrefixListId"))
            target = next((r[k] for k in target_keys if r.get(k)), "unknown")
            if dest:
                routes.append(Route(destination=dest, target=target, state=r.get("State")))
        assoc = t.get("Associations", []) or []
        out.append(RouteTableInfo(route_table_id=t["RouteTableId"], vpc_id=t.get("VpcId"),
                                  main=any(a.get("Main") for a in assoc),
                                  subnet_ids=[a["SubnetId"] for a in assoc if a.get("SubnetId")], routes=routes))
    return RouteTablesPart(gaps=gaps, route_tables=out)


def _alarms(aws: Aws, evidence: Evidence, read: PlannedRead) -> AlarmsPart:
    gaps: list[Gap] = []
    alarms = aws.read_all(gaps, "CloudWatch alarms in ALARM not read",
                          "cloudwatch", "DescribeAlarms", "MetricAlarms", StateValue="ALARM")
    if alarms is None:
        return AlarmsPart(gaps=gaps)
    return AlarmsPart(gaps=gaps, alarms_in_alarm=[
        AlarmInfo(name=a.get("AlarmName", ""), state_since=a.get("StateTransitionedTimestamp")
                  or a.get("StateUpdatedTimestamp"), state_reason=a.get("StateReason"),
                  namespace=a.get("Namespace"), metric=a.get("MetricName"),
                  dimensions={d.get("Name", ""): d.get("Value", "") for d in a.get("Dimensions", []) or []})
        for a in alarms])


def _event_rules(aws: Aws, evidence: Evidence, read: PlannedRead) -> EventRulesPart:
    gaps: list[Gap] = []
    rules = aws.read_all(gaps, "EventBridge rules not read",
                         "events", "ListRules", "Rules")
    if rules is None:
        return EventRulesPart(gaps=gaps)
    return EventRulesPart(gaps=gaps, event_rules=[
        EventRuleInfo(name=r.get("Name", ""), state=r.get("State"), event_pattern=r.get("EventPattern"),
                      event_bus=r.get("EventBusName")) for r in rules])


def _quota(aws: Aws, ask: QuotaAsk) -> ServiceQuotaInfo:
    try:
        q = aws.call("service-quotas", "GetServiceQuota", ServiceCode=ask.service_code,
                     QuotaCode=ask.quota_code)["Quota"]
    except CallFailed as failed:
        return ServiceQuotaInfo(service_code=ask.service_code, quota_code=ask.quota_code, quota_name=ask.quota_name,
                                error=f"{failed.code}: {failed.message}",
                                absent=failed.code == "NoSuchResourceException")
    return ServiceQuotaInfo(service_code=ask.service_code, quota_code=ask.quota_code,
                            quota_name=q.get("QuotaName", ask.quota_name), value=q.get("Value"))


def _quotas(aws: Aws, evidence: Evidence, read: PlannedRead) -> ServiceQuotasPart:
    """The quotas the plan asks for: by code with GetServiceQuota, by name (no fixed code) from one listing."""
    by_name = [a for a in read.quotas if a.quota_code is None]
    quotas = [_quota(aws, a) for a in read.quotas if a.quota_code is not None]
    if by_name:
        quotas += _quotas_by_name(aws, by_name)
    # An absent quota was read: P3 says so, it is no visibility gap.
    return ServiceQuotasPart(service_quotas=quotas, gaps=[
        Gap(kind="not-read", service="service-quotas", operation="quota",
            target=f"{q.service_code} {q.quota_code or ''} ({q.quota_name})", outcome="not read", error_message=q.error)
        for q in quotas if q.error and not q.absent])


def _quotas_by_name(aws: Aws, asks: list[QuotaAsk]) -> list[ServiceQuotaInfo]:
    """`ml.<type> for cluster usage` has no fixed quota code to ask for: list the service's quotas once."""
    service = asks[0].service_code
    try:
        listed = list(aws.paginate("service-quotas", "ListServiceQuotas", "Quotas", ServiceCode=service))
    except CallFailed as failed:
        return [ServiceQuotaInfo(service_code=a.service_code, quota_code=None, quota_name=a.quota_name,
                                 error=f"ListServiceQuotas: {failed.code}: {failed.message}") for a in asks]
    found = {q.get("QuotaName"): q for q in listed}
    return [ServiceQuotaInfo(service_code=a.service_code, quota_code=found[a.quota_name].get("QuotaCode"),
                             quota_name=a.quota_name, value=found[a.quota_name].get("Value"))
            if a.quota_name in found else
            ServiceQuotaInfo(service_code=a.service_code, quota_code=None, quota_name=a.quota_name,
                             error="no quota of that name in ListServiceQuotas", absent=True) for a in asks]


def file_system(f: dict[str, Any]) -> FileSystemInfo:
    lustre = f.get("LustreConfiguration") or {}
    return FileSystemInfo(file_system_id=f["FileSystemId"], file_system_type=f.get("FileSystemType"),
                          deployment_type=lustre.get("DeploymentType"), storage_type=f.get("StorageType"),
                          dns_name=f.get("DNSName"), weekly_maintenance=lustre.get("WeeklyMaintenanceStartTime"),
                          storage_capacity_gib=f.get("StorageCapacity"))


def saturation_peaks(aws: Aws, systems: list[FileSystemInfo], read: PlannedRead, unread: str,
                     found: FileSystemsPart) -> FileSystemsPart:
    """`found` (the file systems read) with every row of RULES §8 C's table the plan names, per dimension ListMetrics
    finds for each of `systems`: the per-minute maxima of the saturation percents (`fsx_metrics`), and the Sum /
    Minimum rows (`fsx_readings`). When a call fails, `fsx_metrics` None and a gap saying `unread`: both unread."""
    peaks: list[MetricPeak] = []
    readings: list[FsxReading] = []
    try:
        for fs in systems:
            for metric in read.names:
                for m in aws.paginate("cloudwatch", "ListMetrics", "Metrics", Namespace="AWS/FSx", MetricName=metric,
                                      Dimensions=[{"Name": "FileSystemId", "Value": fs.file_system_id}]):
                    dims = {d["Name"]: d["Value"] for d in m.get("Dimensions", [])}
                    if metric in FSX_SATURATION and FSX_SATURATION[metric] in dims:
                        peaks.append(_peak(aws, fs.file_system_id, metric, dims, read))
                    elif metric in FSX_READINGS and set(dims) == {"FileSystemId",
                                                                  *filter(None, [FSX_READINGS[metric][0]])}:
                        readings.append(_reading(aws, fs.file_system_id, metric, dims, read))
    except CallFailed as failed:
        return found.model_copy(update={"fsx_metrics": None, "gaps": [*found.gaps, failed.gap_for(unread)]})
    return found.model_copy(update={"fsx_metrics": peaks, "fsx_readings": readings})


def _series(aws: Aws, metric: str, dims: dict[str, str], read: PlannedRead, stat: str) -> list[tuple[datetime, float]]:
    out = aws.call("cloudwatch", "GetMetricData", StartTime=read.start, EndTime=read.end, MetricDataQueries=[{
        "Id": "m", "MetricStat": {"Metric": {"Namespace": "AWS/FSx", "MetricName": metric,
                                             "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()]},
                                  "Period": 60, "Stat": stat}}])
    return sorted((parse_time(t), float(v)) for r in out.get("MetricDataResults", [])
                  for t, v in zip(r.get("Timestamps", []), r.get("Values", []), strict=False))


def _peak(aws: Aws, fs_id: str, metric: str, dims: dict[str, str], read: PlannedRead) -> MetricPeak:
    points = _series(aws, metric, dims, read, "Maximum")
    values = [v for _, v in points]
    longest, sustained_from = saturated_runs(points)
    return MetricPeak(file_system_id=fs_id, metric=metric, dimensions=dims, statistic="Maximum",
                      peak=max(values) if values else None,
                      minutes_at_or_above_90=sum(1 for v in values if v >= 90.0), datapoints=len(values),
                      longest_run_at_or_above_90=longest, sustained_from=sustained_from)


BUCKET = FSX_BUCKET


def _reading(aws: Aws, fs_id: str, metric: str, dims: dict[str, str], read: PlannedRead) -> FsxReading:
    """A Sum row as a rate (Sum / 60 s per 1-minute period, RULES §0.6), a Minimum row as reported (bytes)."""
    stat = FSX_READINGS[metric][1]
    points = [(t, v / 60.0 if stat == "Sum" else v) for t, v in _series(aws, metric, dims, read, stat)]
    grouped: dict[datetime, list[float]] = defaultdict(list)
    for t, v in points:
        grouped[t - (t - t.replace(minute=0, second=0, microsecond=0)) % BUCKET].append(v)
    values = [v for _, v in points]
    return FsxReading(file_system_id=fs_id, metric=metric, dimensions=dims, statistic=stat, datapoints=len(values),
                      minimum=min(values) if values else None, maximum=max(values) if values else None,
                      buckets=[(t, sum(vs) / len(vs)) for t, vs in sorted(grouped.items())])


SUSTAINED_MINUTES = 5


def saturated_runs(points: list[tuple[datetime, float]]) -> tuple[int, datetime | None]:
    """Longest run of consecutive 1-minute datapoints at or above 90 %, and when the first run of at least
    SUSTAINED_MINUTES began (a missing minute breaks a run: it was not measured)."""
    longest, run, start, first = 0, 0, None, None
    previous: datetime | None = None
    for t, v in points:
        contiguous = previous is not None and (t - previous).total_seconds() <= 60
        previous = t
        if v < 90.0:
            run = 0
            continue
        if run == 0 or not contiguous:
            run, start = 0, t
        run += 1
        longest = max(longest, run)
        if run >= SUSTAINED_MINUTES and first is None:
            first = start
    return longest, first


def named_lustre(aws: Aws, evidence: Evidence, gaps: list[Gap]) -> list[dict[str, Any]]:
    """The file systems the operator named (`--filesystem`), one DescribeFileSystems each, so one that does not
    exist (or is not FSx for Lustre) is a named gap (added to `gaps`) and never hides the others."""
    out = []
    for fs_id in evidence.named_file_systems:
        try:
            found = aws.call("fsx", "DescribeFileSystems", FileSystemIds=[fs_id]).get("FileSystems", [])
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"file system {fs_id} (named with --filesystem) not audited"))
            continue
        for f in found:
            if f.get("FileSystemType") == "LUSTRE":
                out.append(f)
            else:
                gaps.append(Gap(kind="unsupported", service="fsx", operation="DescribeFileSystems",
                                target=fs_id, unseen=f"{fs_id} (named with --filesystem) is "
                                f"{f.get('FileSystemType')}, not FSx for Lustre: not audited"))
    return out


def scoped_file_systems(aws: Aws, evidence: Evidence, systems: list[dict[str, Any]],
                        gaps: list[Gap]) -> list[str] | None:
    """The file systems in scope: those a labelled fleet's operator named, else those the cluster mounts."""
    if evidence.cluster.labelled_fleet and evidence.named_file_systems:
        return sorted(f["FileSystemId"] for f in systems)
    return attached_file_systems(aws, evidence, systems, gaps) if systems else None


def _file_systems(aws: Aws, evidence: Evidence, read: PlannedRead) -> FileSystemsPart:
    """FSx for Lustre of the cluster and its saturation peaks over the last similar run (RULES §8 C, §10 P8)."""
    gaps: list[Gap] = []
    try:
        systems = named_lustre(aws, evidence, gaps) if evidence.named_file_systems else [
            f for f in aws.paginate("fsx", "DescribeFileSystems", "FileSystems") if f.get("FileSystemType") == "LUSTRE"]
    except CallFailed as failed:
        return FileSystemsPart(gaps=[*gaps, failed.gap_for("FSx file systems not read; storage headroom not checked")])
    attached = scoped_file_systems(aws, evidence, systems, gaps)
    in_scope = [file_system(f) for f in systems if attached is None or f["FileSystemId"] in attached]
    return saturation_peaks(aws, in_scope, read, "FSx saturation metrics not read; storage headroom not checked",
                            FileSystemsPart(gaps=gaps, cluster_file_system_ids=attached, file_systems=in_scope))


def attached_file_systems(aws: Aws, evidence: Evidence, systems: list[dict[str, Any]],
                          gaps: list[Gap]) -> list[str] | None:
    """FSx IDs the cluster mounts: HyperPod names them in each group's FsxLustreConfig; ParallelCluster tags
    the file systems it manages; otherwise those in the cluster's VPC. None: not resolved (all are kept)."""
    if evidence.cluster.kind.startswith("hyperpod"):
        try:
            described = aws.call("sagemaker", "DescribeCluster", ClusterName=evidence.cluster.name)
        except CallFailed as failed:
            gaps.append(failed.gap_for("FSx mounts of the instance groups not read"))
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


def _gpu_activity(aws: Aws, evidence: Evidence, read: PlannedRead) -> GpuActivityPart:
    """Hourly `GPUPowerUtilization` maxima of EC2 nodes on reserved capacity: an hour is idle when every GPU
    stayed below 5 % (RULES §8 idle reserved GPUs)."""
    start, end = read.start or evidence.now, read.end or evidence.now
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
                span = hours_between(start, end)
                out.append(GpuActivity(instance_id=n.instance_id, metric=GPU_POWER, gpus=0, start=start, end=end,
                                       hours_observed=0, idle_hours=0, hours_in_span=len(span), missing_hours=span))
                continue
            data = aws.call("cloudwatch", "GetMetricData", StartTime=start, EndTime=end, MetricDataQueries=[
                {"Id": f"g{i}", "MetricStat": {"Metric": {"Namespace": "AWS/EC2", "MetricName": GPU_POWER,
                                                          "Dimensions": m["Dimensions"]},
                                               "Period": 3600, "Stat": "Maximum"}} for i, m in enumerate(series)])
            out.append(_activity(n.instance_id, series, data.get("MetricDataResults", []), start, end))
    except CallFailed as failed:
        return GpuActivityPart(gaps=[failed.gap_for("GPU activity of reserved nodes not read")])
    return GpuActivityPart(gpu_activity=out)


def _activity(instance_id: str, series: list[dict[str, Any]], results: list[dict[str, Any]], start: datetime,
              end: datetime) -> GpuActivity:
    """Hourly maxima per GpuId → idle, busy and missing hours. A GPU with no datapoint in an hour leaves that hour
    missing unless another GPU was busy: a missing value is never read as idle (RULES §0.2)."""
    per_hour: dict[datetime, dict[str, float]] = defaultdict(dict)
    gpu_ids = [next((d["Value"] for d in m["Dimensions"] if d.get("Name") == "GpuId"), str(i))
               for i, m in enumerate(series)]
    for r in results:
        index = int(str(r.get("Id", "g0"))[1:] or 0)
        for t, v in zip(r.get("Timestamps", []), r.get("Values", []), strict=False):
            hour = per_hour[floor_hour(t)]
            hour[gpu_ids[index]] = max(float(v), hour.get(gpu_ids[index], float(v)))
    busy = sum(1 for v in per_hour.values() if max(v.values()) >= IDLE_BELOW)
    idle = sum(1 for v in per_hour.values() if len(v) == len(gpu_ids) and max(v.values()) < IDLE_BELOW)
    span = hours_between(start, end)
    missing = [h for h in span if not per_hour.get(h)
               or (len(per_hour[h]) < len(gpu_ids) and max(per_hour[h].values()) < IDLE_BELOW)]
    return GpuActivity(instance_id=instance_id, metric=GPU_POWER, gpus=len(series), start=start, end=end,
                       hours_observed=len(per_hour), idle_hours=idle, busy_hours=busy,
                       hours_in_span=len(span), gpu_ids=gpu_ids, missing_hours=missing)


READERS: dict[ReadSource, Callable[[Aws, Evidence, PlannedRead], Part]] = {
    "instance-network": _instance_network, "training-plans": _training_plans,
    "extension-offerings": _extension_offerings, "security-groups": _security_groups, "subnets": _subnets,
    "route-tables": _route_tables, "alarms": _alarms, "event-rules": _event_rules, "quotas": _quotas,
    "file-systems": _file_systems, "gpu-activity": _gpu_activity,
}

__all__ = ["READERS", "file_system", "saturation_peaks"]
