"""CloudWatch metrics and alarms."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpuaudit.embedded.responders.registry import ApiError, Backend, page, responds
from gpuaudit.model.timeutil import parse_time


@responds("cloudwatch", "ListMetrics")
def _list_metrics(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    selected = []
    for m in b.world.section("cloudwatch", "metrics"):
        if p.get("Namespace") and m.get("Namespace") != p["Namespace"]:
            continue
        if p.get("MetricName") and m.get("MetricName") != p["MetricName"]:
            continue
        dims = {d["Name"]: d.get("Value") for d in m.get("Dimensions", [])}
        if any(f["Name"] not in dims or ("Value" in f and dims[f["Name"]] != f["Value"])
               for f in p.get("Dimensions", [])):
            continue
        selected.append({k: m[k] for k in ("Namespace", "MetricName", "Dimensions") if k in m})
    return page(selected, p, "Metrics", default=500)


@responds("cloudwatch", "GetMetricData")
def _get_metric_data(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    start, end = parse_time(p["StartTime"]), parse_time(p["EndTime"])
    results = []
    for query in p["MetricDataQueries"]:
        stat = query.get("MetricStat")
        if stat is None:
            raise ApiError("InvalidParameterValue", "The embedded backend serves MetricStat queries only")
        metric = stat["Metric"]
        dims = sorted((d["Name"], d["Value"]) for d in metric.get("Dimensions", []))
        series = next((m for m in b.world.section("cloudwatch", "metrics")
                       if m.get("Namespace") == metric.get("Namespace") and m.get("MetricName") == metric["MetricName"]
                       and sorted((d["Name"], d["Value"]) for d in m.get("Dimensions", [])) == dims), None)
        period_s = int(stat["Period"])
        buckets: dict[int, list[float]] = {}
        for ts, value in (series or {}).get("Datapoints", []):
            t = parse_time(ts)
            if start <= t < end:
                key = int(t.timestamp()) // period_s * period_s
                buckets.setdefault(key, []).append(float(value))
        aggregations: dict[str, Callable[[list[float]], float]] = {
            "Sum": sum, "Maximum": max, "Minimum": min, "Average": lambda v: sum(v) / len(v),
            "SampleCount": lambda v: float(len(v))}
        agg = aggregations.get(stat["Stat"])
        if agg is None:
            raise ApiError("InvalidParameterValue", f"Unsupported statistic {stat['Stat']}")
        keys = sorted(buckets, reverse=p.get("ScanBy", "TimestampDescending") == "TimestampDescending")
        results.append({"Id": query["Id"], "Label": metric["MetricName"], "StatusCode": "Complete",
                        "Timestamps": [datetime.fromtimestamp(k, tz=start.tzinfo) for k in keys],
                        "Values": [float(agg(buckets[k])) for k in keys]})
    return {"MetricDataResults": results}


@responds("cloudwatch", "DescribeAlarms")
def _describe_alarms(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    alarms = b.world.section("cloudwatch", "alarms")
    if p.get("StateValue"):
        alarms = [a for a in alarms if a.get("StateValue") == p["StateValue"]]
    if p.get("AlarmNamePrefix"):
        alarms = [a for a in alarms if a.get("AlarmName", "").startswith(p["AlarmNamePrefix"])]
    if p.get("AlarmNames"):
        alarms = [a for a in alarms if a.get("AlarmName") in p["AlarmNames"]]
    return page(alarms, p, "MetricAlarms", limit="MaxRecords", default=100)
