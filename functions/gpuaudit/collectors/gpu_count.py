"""How many GPUs each accelerated EC2 node has in CloudWatch (RULES §6: distinct `GpuId` of `AWS/EC2` metrics, or
`index` of `CWAgent`, against the type's GPU count; missing metrics are Not observable, never a low count).

Two listings for the whole account (one per namespace, paginated), not one per node: a fleet of 10,000 P5 nodes is
160 pages of 500 series. Then hourly sample counts over the window (500 series per GetMetricData): which of the
listed GPUs reported in the window at all — a listed GPU silent there is Not observable, never counted missing.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.cwagent import AgentNodes
from gpuaudit.domain.capability import is_accelerated
from gpuaudit.domain.readplan import CWAGENT_GPU, GPU_POWER
from gpuaudit.model.evidence import Evidence, NodeInfo
from gpuaudit.model.evidence_parts import GpuCountsPart
from gpuaudit.model.planned_reads import GpuCount, PlannedRead
from gpuaudit.model.timeutil import floor_hour

QUERIES_PER_CALL = 500  # GetMetricData's limit
SOURCES = ((f"AWS/EC2 {GPU_POWER} (GpuId)", "AWS/EC2", GPU_POWER, "GpuId"),
           (f"CWAgent {CWAGENT_GPU} (index)", "CWAgent", CWAGENT_GPU, "index"))


def _nodes(evidence: Evidence) -> list[NodeInfo]:
    return [n for n in evidence.nodes if n.discovered_by in ("api", "user") and n.instance_type
            and n.status.lower() == "running" and is_accelerated(n, evidence)]


def read_gpu_counts(aws: Aws, evidence: Evidence, read: PlannedRead) -> GpuCountsPart:
    nodes = _nodes(evidence)
    if not nodes:
        return GpuCountsPart(gpu_counts=[])
    agent = AgentNodes(nodes)
    start, end = read.start or evidence.now, read.end or evidence.now
    out: list[GpuCount] = []
    try:
        for label, namespace, metric, dimension in SOURCES:
            flat: list[tuple[str, str, dict[str, Any]]] = []  # (node, GPU, series)
            for m in aws.paginate("cloudwatch", "ListMetrics", "Metrics", Namespace=namespace, MetricName=metric):
                dims = {d.get("Name", ""): d.get("Value", "") for d in m.get("Dimensions", [])}
                owner = agent.node_of(dims)
                if owner is not None and dimension in dims:
                    flat.append((owner, dims[dimension], m))
            hours = _hours_with_data(aws, [m for _, _, m in flat], start, end)
            per_node: dict[str, list[tuple[str, set[datetime]]]] = defaultdict(list)
            for i, (owner, gpu, _) in enumerate(flat):
                per_node[owner].append((gpu, hours.get(i, set())))
            out += [_count(iid, label, listed, end) for iid, listed in sorted(per_node.items())]
    except CallFailed as failed:
        return GpuCountsPart(gaps=[failed.gap_for("GPUs each node reports (CloudWatch GPU metrics) not read")])
    return GpuCountsPart(gpu_counts=out)


def _hours_with_data(
    aws: Aws, series: list[dict[str, Any]], start: datetime, end: datetime
) -> dict[int, set[datetime]]:
    """Per series (by its position), the UTC hours holding at least one datapoint."""
    found: dict[int, set[datetime]] = defaultdict(set)
    for first in range(0, len(series), QUERIES_PER_CALL):
        queries = [{"Id": f"s{first + i}", "MetricStat": {
            "Metric": {k: m[k] for k in ("Namespace", "MetricName", "Dimensions") if k in m},
            "Period": 3600, "Stat": "SampleCount"}} for i, m in enumerate(series[first:first + QUERIES_PER_CALL])]
        for page in _pages(aws, queries, start, end):
            for r in page:
                index = int(str(r.get("Id", "s0"))[1:])
                found[index].update(floor_hour(t) for t, v in zip(r.get("Timestamps", []), r.get("Values", []),
                                                                  strict=False) if float(v) > 0)
    return found


def _pages(aws: Aws, queries: list[dict[str, Any]], start: datetime, end: datetime) -> list[list[dict[str, Any]]]:
    pages, token = [], None
    while True:
        params: dict[str, Any] = {"StartTime": start, "EndTime": end, "MetricDataQueries": queries}
        if token:
            params["NextToken"] = token
        data = aws.call("cloudwatch", "GetMetricData", **params)
        pages.append(data.get("MetricDataResults", []))
        token = data.get("NextToken")
        if not token:
            return pages


def _count(iid: str, label: str, listed: list[tuple[str, set[datetime]]], end: datetime) -> GpuCount:
    hours = [h for _, seen in listed for h in seen if h < end]
    return GpuCount(instance_id=iid, source=label, gpu_ids=sorted({gpu for gpu, seen in listed if seen}),
                    listed_ids=sorted({gpu for gpu, _ in listed}), hour=max(hours) if hours else None)
