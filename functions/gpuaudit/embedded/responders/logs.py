"""CloudWatch Logs: log groups and streams, their events, and Logs Insights queries."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

from gpuaudit.embedded import insights
from gpuaudit.embedded.responders.registry import ApiError, Backend, RunningQuery, page, responds
from gpuaudit.embedded.world import World


@responds("logs", "DescribeLogGroups")
def _describe_log_groups(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    pattern, prefix = p.get("logGroupNamePattern"), p.get("logGroupNamePrefix")
    if pattern and prefix:
        raise ApiError("InvalidParameterException", "logGroupNamePattern and logGroupNamePrefix are exclusive")
    groups = []
    for name in sorted(b.world.log_groups):
        if pattern and pattern not in name:  # case-sensitive substring, as AWS documents
            continue
        if prefix and not name.startswith(prefix):
            continue
        meta = dict(b.world.log_groups[name].meta)
        meta.setdefault("arn", f"arn:aws:logs:{b.world.region}:{b.world.account_id}:log-group:{name}:*")
        groups.append(meta)
    return page(groups, p, "logGroups", token="nextToken", limit="limit", default=50)


def _group(b: Backend, name: str) -> Any:
    group = b.world.log_groups.get(name)
    if group is None:
        raise ApiError("ResourceNotFoundException", "The specified log group does not exist.")
    return group


@responds("logs", "DescribeLogStreams")
def _describe_log_streams(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    group = _group(b, p.get("logGroupName") or p.get("logGroupIdentifier", ""))
    streams = list(group.streams.values())
    if p.get("logStreamNamePrefix"):
        if p.get("orderBy") == "LastEventTime":
            raise ApiError("InvalidParameterException", "Cannot order by LastEventTime with a logStreamNamePrefix.")
        streams = [s for s in streams if s.name.startswith(p["logStreamNamePrefix"])]
    if p.get("orderBy") == "LastEventTime":
        streams.sort(key=lambda s: s.last_ms or 0, reverse=bool(p.get("descending")))
    else:
        streams.sort(key=lambda s: s.name, reverse=bool(p.get("descending")))
    shaped = []
    for s in streams:
        item: dict[str, Any] = {"logStreamName": s.name,
                                "arn": f"arn:aws:logs:{b.world.region}:{b.world.account_id}:log-group:"
                                       f"{group.name}:log-stream:{s.name}"}
        for key, value in (("creationTime", s.creation_ms or s.first_ms), ("firstEventTimestamp", s.first_ms),
                           ("lastEventTimestamp", s.last_ms), ("lastIngestionTime", s.last_ms)):
            if value is not None:
                item[key] = value
        shaped.append(item)
    return page(shaped, p, "logStreams", token="nextToken", limit="limit", default=50)


def query_input(world: World, groups: Iterable[str], start_ms: int | None, end_ms: int | None,
                streams: Iterable[str] | None = None) -> Iterable[insights.ScanItem]:
    """The lines of the groups in [start_ms, end_ms], group by group and stream by stream: a stream's
    events as records, then each of its periodic entries as one run of identical lines (Logs Insights
    reads them so; `insights.expanded` gives them line by line). Unknown groups are skipped (callers
    check them first); `streams` keeps only those streams, in the group's order."""
    wanted = None if streams is None else set(streams)
    for name in groups:
        group = world.log_groups.get(name)
        if group is None:
            continue
        for stream in group.streams.values():
            if wanted is not None and stream.name not in wanted:
                continue
            events, runs = stream.pieces(start_ms, end_ms)
            for ts, msg in events:
                yield insights.LogRecord(name, stream.name, ts, msg)
            for stamps, msg in runs:
                yield insights.LogRun(name, stream.name, stamps, msg)


@responds("logs", "FilterLogEvents")
def _filter_log_events(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    name = p.get("logGroupName") or p.get("logGroupIdentifier", "")
    group = _group(b, name)
    wanted = set(p["logStreamNames"]) if p.get("logStreamNames") else None
    if p.get("logStreamNamePrefix"):
        wanted = {s for s in group.streams if s.startswith(p["logStreamNamePrefix"])}
    matcher = _filter_pattern(p.get("filterPattern"))
    events = [{"logStreamName": r.log_stream, "timestamp": r.timestamp_ms, "message": r.message,
               "ingestionTime": r.timestamp_ms, "eventId": f"{r.timestamp_ms}-{i}"}
              for i, r in enumerate(insights.expanded(query_input(b.world, [name], p.get("startTime"),
                                                                  p.get("endTime"), wanted)))
              if matcher(r.message)]
    events.sort(key=lambda e: int(str(e["timestamp"])))
    return page(events, p, "events", token="nextToken", limit="limit", default=10000)


def _filter_pattern(pattern: str | None) -> Callable[[str], bool]:
    """Text filter patterns: terms (AND), "exact phrases", ?alternatives, %regex%."""
    if not pattern or not pattern.strip():
        return lambda _m: True
    text = pattern.strip()
    if text.startswith("%") and text.endswith("%") and len(text) > 1:
        rx = re.compile(text[1:-1])
        return lambda m: rx.search(m) is not None
    terms = re.findall(r'\?"[^"]*"|\?\S+|"[^"]*"|\S+', text)
    optional = [t[1:].strip('"') for t in terms if t.startswith("?")]
    required = [t.strip('"') for t in terms if not t.startswith("?")]
    if text.startswith("{"):
        raise ApiError("InvalidParameterException",
                       f"JSON filter patterns are not served by the embedded backend: {text}")
    return lambda m: all(t in m for t in required) and (not optional or any(t in m for t in optional))


@responds("logs", "GetLogEvents")
def _get_log_events(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    group = _group(b, p.get("logGroupName") or p.get("logGroupIdentifier", ""))
    stream = group.streams.get(p["logStreamName"])
    if stream is None:
        raise ApiError("ResourceNotFoundException", "The specified log stream does not exist.")
    events = sorted(stream.lines(p.get("startTime"), p.get("endTime")))
    events_out = [{"timestamp": ts, "message": msg, "ingestionTime": ts} for ts, msg in events]
    if not p.get("startFromHead"):
        events_out = events_out[-int(p.get("limit") or 10000):]
    body = page(events_out, {"x": p.get("nextToken", "").split("/")[-1] or 0, "l": p.get("limit")}, "events",
                token="x", limit="l", default=10000)
    return {"events": body["events"], "nextForwardToken": f"f/{body.get('x', len(events_out))}",
            "nextBackwardToken": "b/0"}


@responds("logs", "StartQuery")
def _start_query(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    names = list(p.get("logGroupNames") or ([p["logGroupName"]] if p.get("logGroupName") else [])
                 or p.get("logGroupIdentifiers") or [])
    if not names:
        raise ApiError("InvalidParameterException", "Provide logGroupNames or logGroupIdentifiers")
    # The limits below follow the StartQuery API reference (embedded/insights/syntax.py cites the pages).
    if len(names) > insights.MAX_LOG_GROUPS:
        raise ApiError(insights.INVALID_PARAMETER,
                       f"A query can target at most {insights.MAX_LOG_GROUPS} log groups; got {len(names)}")
    if p["endTime"] < p["startTime"]:
        raise ApiError(insights.INVALID_PARAMETER, "endTime must be later than startTime")
    for name in names:
        _group(b, name)
    query = p["queryString"]
    if p.get("limit") is not None:
        query = f"{query} | limit {int(p['limit'])}"
    try:
        insights.parse_query(p["queryString"])  # the length limit applies to the string as sent
        parsed = insights.parse_query(query, max_chars=None)
    except insights.QueryError as exc:
        raise ApiError(exc.exception, str(exc)) from None
    # "You can have up to 30 concurrent CloudWatch Logs insights queries, including queries that have been
    # added to dashboards" (StartQuery API page); a world states its account's quota (logs_concurrent_queries).
    in_flight = sum(1 for running in b.queries.values() if running.holds_slot)
    if in_flight >= b.world.logs_concurrent_queries:
        raise ApiError("LimitExceededException",
                       f"Account has {in_flight} concurrent Logs Insights queries; the limit is "
                       f"{b.world.logs_concurrent_queries}")
    low, high = p["startTime"] * 1000, p["endTime"] * 1000 + 999
    indexed = _indexed_streams(parsed)
    items = chain.from_iterable(
        query_input(b.world, [name], low, high, None if indexed is None or not _has_default_index(b, name) else indexed)
        for name in names)
    outcome = insights.run_query(query, items, p["startTime"], p["endTime"], b.world.account_id, max_chars=None)
    query_id = str(uuid.uuid4())
    stuck = b.behaviour_fault("logs", "GetQueryResults")
    slow = stuck is not None and stuck["status"] == "Running" and stuck.get("times") is not None
    b.queries[query_id] = RunningQuery(outcome, stuck["status"] if stuck else "Complete",
                                       running_reads=int(stuck["times"]) if slow and stuck else None)
    return {"queryId": query_id}


def _indexed_streams(query: insights.Query) -> set[str] | None:
    """The streams a query's first command keeps by `@logStream = "x"` or `@logStream in [...]`: CloudWatch Logs
    indexes `@logStream` by default in Standard-class groups, and a query filtering on an indexed field by equality
    or `in` scans only the lines of those values ("Create field indexes to improve query performance and reduce scan
    volume"). Those lines alone are read, so records scanned is what AWS bills; any other first command: None."""
    first = query.commands[0] if query.commands else None
    if not isinstance(first, insights.FilterCmd):
        return None
    expr = first.expr
    if isinstance(expr, insights.In) and expr.field == "@logStream" and not expr.negate:
        return {str(v) for v in expr.values}
    if isinstance(expr, insights.Compare) and expr.field == "@logStream" and expr.op == "=":
        return {str(expr.value)}
    return None


def _has_default_index(b: Backend, group: str) -> bool:
    """Default field indexes are given to Standard-class log groups only (a world's group class, Standard unless
    it says otherwise)."""
    found = b.world.log_groups.get(group)
    return found is None or found.meta.get("logGroupClass", "STANDARD") in ("", "STANDARD")


@responds("logs", "GetQueryResults")
def _get_query_results(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    query = b.queries.get(p["queryId"])
    if query is None:
        raise ApiError("ResourceNotFoundException", f"Query {p['queryId']} does not exist")
    if query.running_reads is not None and query.status == "Running":
        if query.running_reads > 0:
            query.running_reads -= 1
        else:
            query.status = "Complete"
    if query.status not in ("Running", "Scheduled"):
        query.holds_slot = False  # its final status has been collected
    if query.status != "Complete" or query.outcome is None:
        return {"status": query.status, "results": [], "statistics": {"recordsMatched": 0.0, "recordsScanned": 0.0,
                                                                     "bytesScanned": 0.0}}
    out = query.outcome
    return {"status": "Complete", "results": out.rows,
            "statistics": {"recordsMatched": float(out.records_matched), "recordsScanned": float(out.records_scanned),
                           "bytesScanned": float(out.bytes_scanned)}}


@responds("logs", "StopQuery")
def _stop_query(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    query = b.queries.get(p["queryId"])
    if query is None or not (query.status in ("Running", "Scheduled") or query.holds_slot):
        return {"success": False}  # a query whose final status was collected has nothing to stop
    query.status = "Cancelled"
    query.holds_slot = False
    return {"success": True}
