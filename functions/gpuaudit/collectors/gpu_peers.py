"""The CloudWatch agent's per-GPU metrics of the GPU nodes (RULES §8 straggler GPU): SM clock, temperature, power
draw, PCIe link width and generation, per `index`, hourly averages over the window ± margin. The agent names a node
by `InstanceId` when `append_dimensions` adds it, else by `host` (the node's private DNS name, or its first label)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.cwagent import AgentNodes
from gpuaudit.domain.readplan import CWAGENT_NAMESPACE
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.evidence_parts import GpuPeersPart
from gpuaudit.model.planned_reads import GpuPeerSeries, PlannedRead

QUERIES_PER_CALL = 500  # GetMetricData: at most 500 MetricDataQuery structures per request
HOUR_S = 3600


def read_gpu_peers(aws: Aws, evidence: Evidence, read: PlannedRead) -> GpuPeersPart:
    """Every CWAgent series of the GPU compute nodes for the read's metrics, or a gap naming the failed call
    (fail closed: a partial read is no peer comparison)."""
    nodes = [n for n in evidence.nodes if n.role in ("compute", "unknown") and n.discovered_by in ("api", "user")]
    agent = AgentNodes(nodes)
    start, end = read.start or evidence.window.start, read.end or evidence.now
    try:
        series: list[tuple[str, str, str, list[dict[str, Any]]]] = []
        for metric in read.names:
            for m in aws.paginate("cloudwatch", "ListMetrics", "Metrics", Namespace=CWAGENT_NAMESPACE,
                                  MetricName=metric):
                dims = {d.get("Name", ""): d.get("Value", "") for d in m.get("Dimensions", []) or []}
                node = agent.node_of(dims)
                if node is not None and "index" in dims:
                    series.append((node, dims["index"], metric, m["Dimensions"]))
        points: dict[int, dict[Any, float]] = defaultdict(dict)
        for k in range(0, len(series), QUERIES_PER_CALL):
            chunk = series[k:k + QUERIES_PER_CALL]
            queries = [{"Id": f"s{k + i}", "MetricStat": {
                "Metric": {"Namespace": CWAGENT_NAMESPACE, "MetricName": metric, "Dimensions": dims},
                "Period": HOUR_S, "Stat": "Average"}} for i, (_, _, metric, dims) in enumerate(chunk)]
            for r in aws.paginate("cloudwatch", "GetMetricData", "MetricDataResults", StartTime=start, EndTime=end,
                                  MetricDataQueries=queries):
                points[int(str(r.get("Id", "s0"))[1:])].update(
                    zip(r.get("Timestamps", []), (float(v) for v in r.get("Values", [])), strict=False))
    except CallFailed as failed:
        return GpuPeersPart(gaps=[failed.gap_for("CWAgent per-GPU metrics not read; a straggler GPU is not "
                                                 "assessed")])
    out = []
    for i, (node, index, metric, _) in enumerate(series):
        hours = sorted(points.get(i, {}))
        out.append(GpuPeerSeries(instance_id=node, index=index, metric=metric, hours=hours,
                                 values=[points[i][h] for h in hours]))
    return GpuPeersPart(gpu_peers=out)
