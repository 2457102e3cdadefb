"""SageMaker HyperPod: clusters, their nodes and events, training plans."""

from __future__ import annotations

from typing import Any

from gpuaudit.embedded.responders.registry import ApiError, Backend, page, responds
from gpuaudit.model.timeutil import parse_time


def _cluster(backend: Backend, name_or_arn: str) -> dict[str, Any]:
    for c in backend.world.section("sagemaker", "clusters"):
        if name_or_arn in (c.get("ClusterName"), c.get("ClusterArn")):
            return c
    raise ApiError("ResourceNotFound", f"Cluster {name_or_arn} not found")


@responds("sagemaker", "ListClusters")
def _list_clusters(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    summaries = [{k: c.get(k) for k in ("ClusterArn", "ClusterName", "ClusterStatus", "CreationTime")}
                 for c in b.world.section("sagemaker", "clusters")]
    return page(summaries, p, "ClusterSummaries", default=100)


@responds("sagemaker", "DescribeCluster")
def _describe_cluster(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    return _cluster(b, p["ClusterName"])


@responds("sagemaker", "ListClusterNodes")
def _list_cluster_nodes(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    nodes = _cluster(b, p["ClusterName"]).get("Nodes", [])
    if p.get("InstanceGroupNameContains"):
        nodes = [n for n in nodes if p["InstanceGroupNameContains"] in n.get("InstanceGroupName", "")]
    nodes = sorted(nodes, key=lambda n: parse_time(n.get("LaunchTime") or "1970-01-01T00:00:00Z"),
                   reverse=p.get("SortOrder", "Descending") == "Descending")
    return page(nodes, p, "ClusterNodeSummaries", default=100)


@responds("sagemaker", "DescribeClusterNode")
def _describe_cluster_node(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    for node in _cluster(b, p["ClusterName"]).get("Nodes", []):
        if node.get("InstanceId") == p.get("NodeId"):
            return {"NodeDetails": node}
    raise ApiError("ResourceNotFound", f"Node {p.get('NodeId')} not found in cluster {p['ClusterName']}")


CONTINUOUS_ONLY = "ListClusterEvents is only supported for cluster with NodeProvisioningMode set to Continuous"


def _cluster_events(b: Backend, name: str) -> list[dict[str, Any]]:
    cluster = _cluster(b, name)
    if cluster.get("NodeProvisioningMode") != "Continuous":
        raise ApiError("ValidationException", CONTINUOUS_ONLY)
    return list(cluster.get("Events", []))


@responds("sagemaker", "ListClusterEvents")
def _list_cluster_events(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    events = _cluster_events(b, p["ClusterName"])
    after, before = p.get("EventTimeAfter"), p.get("EventTimeBefore")
    selected = []
    for e in events:
        t = parse_time(e["EventTime"])
        if (after and t < parse_time(after)) or (before and t > parse_time(before)):
            continue
        if p.get("NodeId") and e.get("InstanceId") != p["NodeId"]:
            continue
        if p.get("InstanceGroupName") and e.get("InstanceGroupName") != p["InstanceGroupName"]:
            continue
        if p.get("ResourceType") and e.get("ResourceType") != p["ResourceType"]:
            continue
        selected.append(e)
    selected.sort(key=lambda e: parse_time(e["EventTime"]), reverse=p.get("SortOrder") == "Descending")
    return page(selected, p, "Events", default=100)


@responds("sagemaker", "DescribeClusterEvent")
def _describe_cluster_event(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    for e in _cluster_events(b, p["ClusterName"]):
        if e.get("EventId") == p["EventId"]:
            return {"EventDetails": e}
    raise ApiError("ResourceNotFound", f"Event {p['EventId']} not found")


@responds("sagemaker", "DescribeTrainingPlan")
def _describe_training_plan(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    for plan in b.world.section("sagemaker", "training_plans"):
        if p["TrainingPlanName"] in (plan.get("TrainingPlanName"), plan.get("TrainingPlanArn")):
            return plan
    raise ApiError("ResourceNotFound", f"Training plan {p['TrainingPlanName']} not found")
