"""Which clusters a region holds (the deployed plan's `discover`, the MCP server's list_clusters): every HyperPod
cluster (ListClusters, and ListTags when a tag filter is set) and every ParallelCluster with a live instance (its
`parallelcluster:cluster-name` tag). Only callers that discover need these reads: the audit steps never call them,
so their roles do not hold `sagemaker:ListTags` (tests/infra/test_stack_iam.py checks both sides)."""

from __future__ import annotations

from typing import Literal, Protocol

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.inventory import PCLUSTER_TAG, instance_pages

LIVE_STATES = ["pending", "running", "stopping", "stopped"]  # instances a live ParallelCluster can have


DiscoveredKind = Literal["hyperpod", "parallelcluster"]


class TagFilter(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def value(self) -> str: ...


def discovered_clusters(aws: Aws, tag: TagFilter | None, gaps: list[str],
                        kinds: tuple[DiscoveredKind, ...] = ("hyperpod", "parallelcluster")
                        ) -> list[tuple[str, DiscoveredKind]]:
    """Every HyperPod cluster (ListClusters, every page) and every ParallelCluster with a live instance (its
    `parallelcluster:cluster-name` tag) of the region, optionally only those carrying `tag`; a source that cannot
    be listed is a gap (said), never an empty answer. `kinds` leaves a source out: a HyperPod event's plan needs
    only the HyperPod clusters, never the instance scan ParallelCluster discovery costs."""
    found: list[tuple[str, DiscoveredKind]] = []
    if "parallelcluster" not in kinds:
        return sorted(set(_hyperpod_clusters(aws, tag, gaps)))
    found.extend(_hyperpod_clusters(aws, tag, gaps) if "hyperpod" in kinds else [])
    filters = [{"Name": "tag-key", "Values": [PCLUSTER_TAG]},
               {"Name": "instance-state-name", "Values": LIVE_STATES}]
    if tag is not None:
        filters.append({"Name": f"tag:{tag.key}", "Values": [tag.value]})
    try:
        for instance in instance_pages(aws, interfaces=False, Filters=filters):
            found.extend((t["Value"], "parallelcluster") for t in instance.get("Tags", [])
                         if t.get("Key") == PCLUSTER_TAG)
    except CallFailed as failed:
        gaps.append(failed.gap_for("ParallelCluster clusters not discovered").prose())
    return sorted(set(found))


def _hyperpod_clusters(aws: Aws, tag: TagFilter | None, gaps: list[str]) -> list[tuple[str, DiscoveredKind]]:
    found: list[tuple[str, DiscoveredKind]] = []
    try:
        for summary in aws.paginate("sagemaker", "ListClusters", "ClusterSummaries"):
            if tag is None or _hyperpod_tagged(aws, summary["ClusterArn"], tag, gaps):
                found.append((summary["ClusterName"], "hyperpod"))
    except CallFailed as failed:
        gaps.append(failed.gap_for("HyperPod clusters not discovered").prose())
    return found


def _hyperpod_tagged(aws: Aws, arn: str, tag: TagFilter, gaps: list[str]) -> bool:
    try:
        tags = {t["Key"]: t.get("Value") for t in aws.paginate("sagemaker", "ListTags", "Tags", ResourceArn=arn)}
    except CallFailed as failed:
        gaps.append(failed.gap_for(f"tags of {arn.rsplit('/', 1)[-1]} not read; cluster not audited").prose())
        return False
    return tags.get(tag.key) == tag.value
