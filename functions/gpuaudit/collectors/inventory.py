"""Inventory and capability profile (RULES §2): what the cluster is, which nodes it has,
and what each instance type can do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from gpuaudit.collectors.aws import INTERFACE_TYPES, Aws, CallFailed
from gpuaudit.collectors.trail import lookup_by_name
from gpuaudit.domain.capability import family_classification, nvswitch_class
from gpuaudit.domain.timing import LAUNCH_LOOKBACK, NAMED_LAUNCH_LOOKBACK
from gpuaudit.model.evidence import (
    CapabilityProfile,
    ClusterInfo,
    ClusterKind,
    Evidence,
    Gap,
    GroupRole,
    InstanceGroup,
    NodeInfo,
    NodeSource,
)
from gpuaudit.model.evidence_parts import NodesPart, ProfilesPart
from gpuaudit.model.timeutil import iso, parse_time

PCLUSTER_TAG = "parallelcluster:cluster-name"
NOT_FOUND = {"ResourceNotFound", "ResourceNotFoundException", "ValidationException"}
# Named in the gap when ListClusterNodes stops part-way (the gap also carries scope="node-list").
NODE_LIST_INCOMPLETE = "node list incomplete"


class UnknownCluster(LookupError):
    """No HyperPod cluster, ParallelCluster or instance list matches the name given."""


def cluster_names(aws: Aws) -> list[str]:
    """The HyperPod clusters of the region, for "did you mean" after an unknown name: one ListClusters page, no
    pagination (a hint, not an inventory); empty when the call fails."""
    try:
        page = aws.call("sagemaker", "ListClusters", MaxResults=100)
    except CallFailed:
        return []
    return sorted({str(c["ClusterName"]) for c in page.get("ClusterSummaries", []) if c.get("ClusterName")})


def strip_ml(instance_type: str | None) -> str | None:
    return instance_type[3:] if instance_type and instance_type.startswith("ml.") else instance_type


def collect_inventory(aws: Aws, name: str, instance_ids: list[str] | None,
                      gaps: list[Gap], since: datetime | None = None) -> tuple[ClusterInfo, list[NodeInfo]]:
    if instance_ids:
        return _self_managed(aws, name, instance_ids, gaps, since or aws.clock())
    unreachable: CallFailed | None = None
    try:
        described = aws.call("sagemaker", "DescribeCluster", ClusterName=name)
        return _hyperpod(aws, described, gaps)
    except CallFailed as failed:
        if failed.code not in NOT_FOUND:
            unreachable = failed
            gaps.append(failed.gap_for("HyperPod inventory not read; trying ParallelCluster tags"))
    subnets: set[str] = set()
    tagged = [{"Name": f"tag:{PCLUSTER_TAG}", "Values": [name]}]
    nodes = [_node_from_instance(i, subnets=subnets) for i in instance_pages(aws, interfaces=False, Filters=tagged)]
    if nodes:
        return _parallelcluster(aws, name, nodes, subnets)
    if unreachable is not None:
        raise unreachable  # not "not found": SageMaker could not be asked
    raise UnknownCluster(
        f"cluster {name!r} not found in region {aws.region}: no SageMaker HyperPod cluster of that name "
        f"(DescribeCluster) and no EC2 instance tagged {PCLUSTER_TAG}={name} (DescribeInstances); for "
        f"self-managed EC2/EKS pass --instances i-…")


# DescribeInstances page size (EC2 accepts MaxResults 5..1000, and none with InstanceIds). A p5.48xlarge is about
# 33 KB of XML (32 EFA interfaces) and about 190 KB while botocore parses it: 200 a page bounds a page's parse
# near 40 MB whatever the fleet (docs/BENCHMARKS.md, the deployed steps through wire parsing).
INSTANCE_PAGE = 200


def instance_pages(aws: Aws, interfaces: bool = True, **params: Any) -> Iterator[dict[str, Any]]:
    """The instances the filters select, page by page: the caller turns each into its own record before the next
    page is asked for, so at most one page of raw instances is alive (never the fleet's). `interfaces` False: each
    network interface carries only its `InterfaceType` (aws.INTERFACE_TYPES), for a reader that needs no more."""
    view = None if interfaces else INTERFACE_TYPES
    for reservation in aws.paginate("ec2", "DescribeInstances", "Reservations", view=view, MaxResults=INSTANCE_PAGE,
                                    **params):
        yield from reservation.get("Instances", [])


def _hyperpod(aws: Aws, described: dict[str, Any], gaps: list[Gap]) -> tuple[ClusterInfo, list[NodeInfo]]:
    name = described["ClusterName"]
    orchestrator = described.get("Orchestrator") or {}
    kind: ClusterKind = "hyperpod-eks" if "Eks" in orchestrator else "hyperpod-slurm"
    groups = []
    roles: dict[str, GroupRole] = {}
    by_slurm_type: dict[str, GroupRole] = {"Controller": "controller", "Login": "login", "Compute": "compute"}
    for g in described.get("InstanceGroups", []):
        node_type = (g.get("SlurmConfig") or {}).get("NodeType", "Compute" if kind == "hyperpod-eks" else "")
        role = by_slurm_type.get(node_type, "compute")
        roles[g["InstanceGroupName"]] = role
        groups.append(InstanceGroup(
            name=g["InstanceGroupName"], instance_type=strip_ml(g.get("InstanceType")),
            current_count=g.get("CurrentCount"), target_count=g.get("TargetCount"),
            on_start_deep_health_checks=list(g.get("OnStartDeepHealthChecks") or []),
            training_plan_arn=g.get("TrainingPlanArn"), current_image_id=g.get("CurrentImageId"),
            desired_image_id=g.get("DesiredImageId"),
            node_role=role))
    arn = described.get("ClusterArn")
    vpc = described.get("VpcConfig") or {}
    cluster = ClusterInfo(
        name=name, kind=kind, region=aws.region, arn=arn,
        cluster_id=arn.rsplit("/", 1)[-1] if arn else None,
        status=described.get("ClusterStatus"), creation_time=described.get("CreationTime"),
        node_recovery=described.get("NodeRecovery"),
        node_provisioning_mode=described.get("NodeProvisioningMode"), instance_groups=groups,
        security_group_ids=list(vpc.get("SecurityGroupIds", [])), subnet_ids=list(vpc.get("Subnets", [])),
        eks_cluster=((orchestrator.get("Eks") or {}).get("ClusterArn") or "").rsplit("/", 1)[-1] or None)
    nodes = []
    for summary in _summaries(aws, name, gaps):
        status = (summary.get("InstanceStatus") or {}).get("Status", "Unknown")
        detail = summary
        if status != "Running":  # RULES §2: DescribeClusterNode for every node not Running
            try:
                detail = aws.call("sagemaker", "DescribeClusterNode", ClusterName=name,
                                  NodeId=summary["InstanceId"])["NodeDetails"]
            except CallFailed as failed:
                gaps.append(failed.gap_for(f"status detail of {summary['InstanceId']} not read"))
        group = summary.get("InstanceGroupName")
        nodes.append(NodeInfo(
            instance_id=summary["InstanceId"], instance_group=group,
            instance_type=strip_ml(summary.get("InstanceType")), status=status,
            status_message=((detail.get("InstanceStatus") or {}).get("Message") or None),
            launch_time=summary.get("LaunchTime"), private_dns=detail.get("PrivateDnsHostname"),
            role=roles.get(group or "", "compute"),
            efa_attached=None))
    return cluster, nodes


def _summaries(aws: Aws, name: str, gaps: list[Gap]) -> list[dict[str, Any]]:
    """Every ListClusterNodes page that could be read; a failure part-way is a named gap, not a lost audit."""
    summaries: list[dict[str, Any]] = []
    try:
        for summary in aws.paginate("sagemaker", "ListClusterNodes", "ClusterNodeSummaries", ClusterName=name):
            summaries.append(summary)
    except CallFailed as failed:
        gaps.append(failed.gap_for(f"{NODE_LIST_INCOMPLETE} of {name}: stopped "
                                 f"after {len(summaries)} node(s); nodes not listed are Not checked",
                                 scope="node-list"))
    return summaries


def _node_from_instance(instance: dict[str, Any], discovered_by: NodeSource = "api",
                        subnets: set[str] | None = None) -> NodeInfo:
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    if subnets is not None and instance.get("SubnetId"):
        subnets.add(instance["SubnetId"])
    node_type = tags.get("parallelcluster:node-type")
    interfaces = instance.get("NetworkInterfaces", [])  # only their types when read with INTERFACE_TYPES
    return NodeInfo(
        instance_id=instance["InstanceId"], instance_group=tags.get("parallelcluster:queue-name"),
        instance_type=instance.get("InstanceType"), status=(instance.get("State") or {}).get("Name", "unknown"),
        launch_time=instance.get("LaunchTime"), private_dns=instance.get("PrivateDnsName") or None,
        role="head" if node_type == "HeadNode" else "compute",
        discovered_by=discovered_by,
        efa_attached=sum(1 for n in interfaces if n.get("InterfaceType") in ("efa", "efa-only")),
        capacity_reservation_id=instance.get("CapacityReservationId"), image_id=instance.get("ImageId"))


def _parallelcluster(aws: Aws, name: str, nodes: list[NodeInfo],
                     subnets: set[str]) -> tuple[ClusterInfo, list[NodeInfo]]:
    groups_ = sorted({n.instance_group for n in nodes if n.instance_group})
    cluster = ClusterInfo(name=name, kind="parallelcluster", region=aws.region, subnet_ids=sorted(subnets),
                          instance_groups=[InstanceGroup(name=g, node_role="compute") for g in groups_])
    return cluster, nodes


ID_FILTER_VALUES = 200  # values per EC2 filter


def _self_managed(aws: Aws, name: str, instance_ids: list[str], gaps: list[Gap],
                  since: datetime) -> tuple[ClusterInfo, list[NodeInfo]]:
    """The instances named. By filter, not InstanceIds: one that EC2 has forgotten (terminated more than about an
    hour ago) is no error but a node to audit from its log streams and CloudTrail (RULES §2)."""
    try:
        nodes = [_node_from_instance(i, "user") for k in range(0, len(instance_ids), ID_FILTER_VALUES)
                 for i in instance_pages(aws, interfaces=False, Filters=[{"Name": "instance-id",
                                                        "Values": instance_ids[k:k + ID_FILTER_VALUES]}])]
    except CallFailed:
        raise  # the account could not be asked (exit 3), not a bad instance list (exit 2): fail closed, say which
    listed = {n.instance_id for n in nodes}
    missing = [i for i in instance_ids if i not in listed]
    if missing:
        nodes += forgotten_instances(aws, missing, since, gaps)
    return ClusterInfo(name=name, kind="ec2", region=aws.region), nodes


def forgotten_instances(aws: Aws, ids: list[str], since: datetime, gaps: list[Gap]) -> list[NodeInfo]:
    """Named instances DescribeInstances no longer returns: their type and launch from the RunInstances request
    and response, their end from TerminateInstances (CloudTrail, looked up by event name, never by ID)."""
    wanted = set(ids)
    launched: dict[str, dict[str, Any]] = {}
    ended: dict[str, str] = {}
    unread = []
    for event_name in ("RunInstances", "TerminateInstances"):
        try:
            events = lookup_by_name(aws, event_name, since - NAMED_LAUNCH_LOOKBACK, aws.clock())
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"CloudTrail {event_name} for {', '.join(ids)} not read: their "
                                       + ("type and launch" if event_name == "RunInstances" else "termination")
                                       + " unknown; audited from their log streams"))
            unread.append(event_name)
            continue
        for event in events:
            detail = _trail_detail(event)
            if detail.get("errorCode"):
                continue
            if event_name == "RunInstances":
                request = detail.get("requestParameters") or {}
                for item in ((detail.get("responseElements") or {}).get("instancesSet") or {}).get("items", []) or []:
                    if item.get("instanceId") in wanted:
                        launched[item["instanceId"]] = {**item, "requestedType": request.get("instanceType")}
            else:
                for item in ((detail.get("requestParameters") or {}).get("instancesSet") or {}).get("items", []) or []:
                    if item.get("instanceId") in wanted:
                        when = event.get("EventTime")
                        ended[item["instanceId"]] = (f"TerminateInstances at {iso(parse_time(when)) if when else '—'} "
                                                     "(CloudTrail)")
    nodes = []
    for iid in ids:
        item = launched.get(iid, {})
        launch = item.get("launchTime")
        said = [ended[iid]] if iid in ended else []
        if not item and "RunInstances" not in unread:
            said.append(f"no RunInstances for it in CloudTrail since {since - NAMED_LAUNCH_LOOKBACK:%Y-%m-%dT%H:%MZ}")
        nodes.append(NodeInfo(
            instance_id=iid, instance_type=item.get("requestedType") or item.get("instanceType"), status="terminated",
            status_message="; ".join(["not returned by DescribeInstances", *said]),
            launch_time=parse_time(launch) if isinstance(launch, (int, float, str)) and launch else None,
            private_dns=item.get("privateDnsName") or None, role="compute",
            discovered_by="cloudtrail" if item else "user"))
    return nodes


def _trail_detail(event: dict[str, Any]) -> dict[str, Any]:
    try:
        detail = json.loads(event.get("CloudTrailEvent") or "{}")
    except json.JSONDecodeError:
        return {}
    return detail if isinstance(detail, dict) else {}


def collect_profiles(aws: Aws, evidence: Evidence) -> ProfilesPart:
    """DescribeInstanceTypes for the audited nodes' types; a failure leaves the type unverified."""
    profiles: dict[str, CapabilityProfile] = {}
    gaps: list[Gap] = []
    wanted = sorted({n.instance_type for n in evidence.nodes if n.instance_type})
    if not wanted:
        return ProfilesPart(profiles=profiles)
    try:
        infos = list(aws.paginate("ec2", "DescribeInstanceTypes", "InstanceTypes", InstanceTypes=wanted))
    except CallFailed as failed:
        gaps.append(failed.gap_for(f"GPU count and EFA maximum of {', '.join(wanted)} unverified; classified by "
                                   f"instance family instead: {family_classification(wanted)}"))
        infos = []
    missing = sorted(set(wanted) - {i.get("InstanceType") for i in infos})
    if infos and missing:
        gaps.append(Gap(kind="not-read", service="ec2", operation="DescribeInstanceTypes", target=", ".join(missing),
                        outcome="not described", unseen="GPU count and EFA maximum unverified; classified by "
                        f"instance family instead: {family_classification(missing)}"))
    for info in infos:
        gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
        network = info.get("NetworkInfo") or {}
        efa = network.get("EfaInfo") or {}
        nvswitch, fabric_manager = nvswitch_class(info["InstanceType"], sum(g.get("Count", 0) for g in gpus))
        profiles[info["InstanceType"]] = CapabilityProfile(
            instance_type=info["InstanceType"], gpu_count=sum(g.get("Count", 0) for g in gpus),
            gpu_name=" + ".join(f"{g.get('Manufacturer', '')} {g.get('Name', '')}".strip() for g in gpus) or None,
            efa_supported=network.get("EfaSupported"), max_efa_interfaces=efa.get("MaximumEfaInterfaces"),
            nvswitch=nvswitch, fabric_manager_expected=fabric_manager)
    return ProfilesPart(profiles=profiles, gaps=gaps)


def node_from_log_stream(instance_id: str, hostname: str | None, group: str | None) -> NodeInfo:
    """A compute node that no longer appears in DescribeInstances, found by its log streams."""
    return NodeInfo(instance_id=instance_id, instance_group=group, instance_type=None,
                    status="terminated", private_dns=hostname, role="compute", discovered_by="log-streams")


def launched_by_cluster(aws: Aws, evidence: Evidence) -> NodesPart:
    """The audit's nodes with the ParallelCluster compute nodes launched by the cluster (RunInstances with one of its
    launch templates, `<cluster>-<queue>-<compute resource>`) that DescribeInstances no longer returns (other
    orchestrators: nothing read)."""
    if evidence.cluster.kind != "parallelcluster":
        return NodesPart(nodes=evidence.nodes)
    prefix, known = f"{evidence.cluster.name}-", {n.instance_id for n in evidence.nodes}
    found: dict[str, NodeInfo] = {}
    try:
        # Account-wide, so read once for every cluster of the account and kept (collectors/trail.py).
        events = lookup_by_name(aws, "RunInstances", evidence.window.start - LAUNCH_LOOKBACK, evidence.now)
    except CallFailed as failed:
        return NodesPart(nodes=evidence.nodes, gaps=[failed.gap_for("compute nodes launched and since terminated are "
                                                                     "found by log streams only")])
    for event in events:
        detail = _trail_detail(event)
        template = ((detail.get("requestParameters") or {}).get("launchTemplate") or {}).get("launchTemplateName", "")
        if detail.get("errorCode") or not str(template).startswith(prefix):
            continue
        for item in ((detail.get("responseElements") or {}).get("instancesSet") or {}).get("items", []):
            iid = item.get("instanceId")
            if iid and iid not in known and iid not in found:
                launch = item.get("launchTime")
                found[iid] = NodeInfo(
                    instance_id=iid, instance_type=item.get("instanceType"), status="terminated",
                    launch_time=parse_time(launch) if isinstance(launch, (int, float, str)) and launch else None,
                    private_dns=item.get("privateDnsName") or None, role="compute", discovered_by="cloudtrail")
    return NodesPart(nodes=[*evidence.nodes, *sorted(found.values(), key=lambda n: n.instance_id)])
