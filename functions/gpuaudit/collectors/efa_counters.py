"""The CloudWatch agent's EFA error counters of the EFA nodes (RULES §8 D layer 3): `efa_retrans_pkts`,
`efa_retrans_timeout_events`, `efa_impaired_remote_conn_events`, `efa_unresponsive_remote_events`, `efa_rx_dropped`,
`efa_rdma_read_wr_err`, `efa_rdma_write_wr_err`, namespace `CWAgent`, one series per EFA `device` and `port`.

The agent reports them as deltas, so the read asks for the Sum of each 5-minute period (`EFA_PERIOD_S`), from a
baseline before the window (`EFA_BASELINE`) to its end plus margin: the rules judge a rise against the counter's own
rate before the window, and place it before or after the hang. What is kept is one series per node and counter,
summed over its devices and ports, listing only non-zero periods (a p5 node has 32 EFA devices: per-device points
of a fleet would not fit the evidence). One listing per counter for the whole account
(ListMetrics, paginated), then 500 series per GetMetricData (paginated). The agent names a node by an appended
`InstanceId`, else by `host` (the node's private DNS name, or its first label). A failed call is a gap for every
counter (fail closed: a partial read would make a quiet node look clean)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.cwagent import AgentNodes
from gpuaudit.domain.readplan import CWAGENT_NAMESPACE, EFA_PERIOD_S
from gpuaudit.model.evidence import Evidence, NodeInfo
from gpuaudit.model.evidence_parts import EfaCountersPart
from gpuaudit.model.planned_reads import EfaCounterSeries, PlannedRead
from gpuaudit.model.timeutil import parse_time

QUERIES_PER_CALL = 500  # GetMetricData: at most 500 MetricDataQuery structures per request
ROLLUP = "(all devices)"  # a series without a `device` or `eniId` dimension: the agent's aggregation_dimensions


def _one_per_device(series: list[tuple[str, str, str, list[dict[str, str]]]]
                    ) -> list[tuple[str, str, str, list[dict[str, str]]]]:
    """One series per node, counter and device/port, so nothing is counted twice: the per-device series when the
    node has them, else its rolled-up series (the agent's `aggregation_dimensions` add one beside them)."""
    detailed = {(node, metric) for node, metric, device, _ in series if not device.startswith(ROLLUP)}
    seen: set[tuple[str, str, str]] = set()
    out = []
    for node, metric, device, dims in series:
        key = (node, metric, device)
        if key in seen or (device.startswith(ROLLUP) and (node, metric) in detailed):
            continue
        seen.add(key)
        out.append((node, metric, device, dims))
    return out


def efa_nodes(evidence: Evidence) -> list[NodeInfo]:
    """The compute nodes of the account whose type has EFA, or whose type was not read (not excluded unread)."""
    out = []
    for n in evidence.nodes:
        profile = evidence.profiles.get(n.instance_type or "")
        if n.role in ("compute", "unknown") and n.discovered_by in ("api", "user") and \
                (profile is None or profile.efa_supported is not False):
            out.append(n)
    return out


def read_efa_counters(aws: Aws, evidence: Evidence, read: PlannedRead) -> EfaCountersPart:
    nodes = efa_nodes(evidence)
    if not nodes:
        return EfaCountersPart(efa_counters=[])
    agent = AgentNodes(nodes)
    start, end = read.start or evidence.window.start, read.end or evidence.now
    series: list[tuple[str, str, str, list[dict[str, str]]]] = []  # (node, metric, device/port, dimensions)
    try:
        for metric in read.names:
            for m in aws.paginate("cloudwatch", "ListMetrics", "Metrics", Namespace=CWAGENT_NAMESPACE,
                                  MetricName=metric):
                dims = {d.get("Name", ""): d.get("Value", "") for d in m.get("Dimensions", []) or []}
                node = agent.node_of(dims)
                if node is not None:
                    device = "/".join(v for v in (dims.get("device") or dims.get("eniId") or ROLLUP, dims.get("port"))
                                      if v)
                    series.append((node, metric, device, m["Dimensions"]))
        series = _one_per_device(series)
        points = _sums(aws, series, start, end)
    except CallFailed as failed:
        return EfaCountersPart(gaps=[failed.gap_for("CWAgent EFA counters not read; EFA counters (RULES §8 D layer 3) "
                                                    "are not assessed")])
    return EfaCountersPart(efa_counters=_per_node(series, points, evidence.window.start))


def _per_node(series: list[tuple[str, str, str, list[dict[str, str]]]], points: dict[int, dict[datetime, float]],
              window_start: datetime) -> list[EfaCounterSeries]:
    """Each node's counter summed over its device/port series per period; only non-zero periods listed."""
    summed: dict[tuple[str, str], dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    devices: dict[tuple[str, str], set[str]] = defaultdict(set)
    for i, (node, metric, device, _) in enumerate(series):
        devices[(node, metric)].add(device)
        table = summed[(node, metric)]
        for t, v in points.get(i, {}).items():
            table[t] += v
    out = []
    for (node, metric), table in sorted(summed.items()):
        busy = sorted(t for t, v in table.items() if v)
        out.append(EfaCounterSeries(
            instance_id=node, metric=metric, devices=len(devices[(node, metric)]), period_s=EFA_PERIOD_S,
            periods_before_window=sum(t < window_start for t in table), periods_in_window=sum(t >= window_start
                                                                                            for t in table),
            times=busy, values=[table[t] for t in busy]))
    return out


def _sums(aws: Aws, series: list[tuple[str, str, str, list[dict[str, str]]]], start: datetime,
          end: datetime) -> dict[int, dict[datetime, float]]:
    """Per series (by its position): period start → the period's Sum."""
    points: dict[int, dict[datetime, float]] = defaultdict(dict)
    for k in range(0, len(series), QUERIES_PER_CALL):
        queries: list[dict[str, Any]] = [
            {
                "Id": f"s{k + i}",
                "MetricStat": {
                    "Metric": {"Namespace": CWAGENT_NAMESPACE, "MetricName": metric, "Dimensions": dims},
                    "Period": EFA_PERIOD_S,
                    "Stat": "Sum",
                },
            }
            for i, (_, metric, _, dims) in enumerate(series[k : k + QUERIES_PER_CALL])
        ]
        for r in aws.paginate("cloudwatch", "GetMetricData", "MetricDataResults", StartTime=start, EndTime=end,
                              MetricDataQueries=queries, ScanBy="TimestampAscending"):
            points[int(str(r.get("Id", "s0"))[1:])].update(
                (t if isinstance(t, datetime) else parse_time(str(t)), float(v))
                for t, v in zip(r.get("Timestamps", []), r.get("Values", []), strict=False))
    return points
