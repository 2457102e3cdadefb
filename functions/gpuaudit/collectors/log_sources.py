"""Finding log sources (RULES §3): log groups discovered by substring (the cluster's name, then each keyword), the HMA
streams of a HyperPod cluster group, streams listed when Logs Insights cannot answer, silent streams described,
and nodes that vanished found by the streams that name them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.inventory import node_from_log_stream
from gpuaudit.domain.streams import (
    HMA_PREFIX,
    HYPERPOD_NODE_STREAM,
    PCLUSTER_STREAM,
    is_hma_group,
    is_pcluster_group,
)
from gpuaudit.model.evidence import (
    NAMED_BY_OPERATOR,
    ClusterInfo,
    Gap,
    KernelStream,
    ListedStream,
    LogGroupInfo,
    NodeInfo,
    StreamActivity,
)
from gpuaudit.model.timeutil import parse_time

KEYWORDS = ("kernel", "messages", "syslog", "system", "dmesg", "journal", "gpu")


def discover_log_groups(aws: Aws, cluster: ClusterInfo, gaps: list[Gap],
                        named: Sequence[str] = (), search: bool = True) -> list[LogGroupInfo]:
    """DescribeLogGroups by substring (never prefix only): the cluster name, then each keyword; then the groups the
    operator named, by exact name (a named group that does not exist is a gap, never a silent skip). `search`
    False: the named groups only (an audit with no node has no node log to find)."""
    found: dict[str, LogGroupInfo] = {}
    for pattern in (cluster.name, *KEYWORDS) if search else ():
        try:
            for g in aws.paginate("logs", "DescribeLogGroups", "logGroups", token="nextToken",
                                  logGroupNamePattern=pattern):
                name = g["logGroupName"]
                prior = found.get(name)
                patterns = [*(prior.matched_patterns if prior else []), pattern]
                found[name] = LogGroupInfo(
                    name=name, matched_patterns=patterns,
                    creation_time=parse_time(g["creationTime"]) if g.get("creationTime") else None,
                    stored_bytes=g.get("storedBytes"), owner_account=_arn_account(g.get("arn") or g.get("logGroupArn")))
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"log groups matching {pattern!r} not listed"))
    for name in named:
        if name in found:
            found[name] = found[name].model_copy(update={
                "matched_patterns": [*found[name].matched_patterns, NAMED_BY_OPERATOR]})
            continue
        try:
            exact = [g for g in aws.paginate("logs", "DescribeLogGroups", "logGroups", token="nextToken",
                                             logGroupNamePrefix=name) if g.get("logGroupName") == name]
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"the named log group {name} not read"))
            continue
        if not exact:
            gaps.append(Gap(kind="not-read", service="logs", operation="DescribeLogGroups", target=name,
                            outcome="found no such group", error_message="no log group of that exact name",
                            unseen=f"the named log group {name} (--log-group) was not searched"))
            continue
        g = exact[0]
        found[name] = LogGroupInfo(
            name=name, matched_patterns=[NAMED_BY_OPERATOR],
            creation_time=parse_time(g["creationTime"]) if g.get("creationTime") else None,
            stored_bytes=g.get("storedBytes"), owner_account=_arn_account(g.get("arn") or g.get("logGroupArn")))
    return sorted(found.values(), key=lambda g: g.name)


def _arn_account(arn: str | None) -> str | None:
    parts = (arn or "").split(":")
    return parts[4] if len(parts) > 4 and parts[4].isdigit() else None


MAX_LISTED_PAGES = 20  # DescribeLogStreams pages per group (50 streams each) when Logs Insights is unavailable


def list_streams(aws: Aws, groups: list[str], since: datetime, gaps: list[Gap]) -> list[ListedStream]:
    """Degrade, don't drop: without Logs Insights, the streams with an event since `since` are still listed
    (newest first, first/last event times), so the nodes they name stay in the result. Coverage stays unproven."""
    listed: list[ListedStream] = []
    since_ms = since.timestamp() * 1000
    for group in groups:
        pages = aws.paginate("logs", "DescribeLogStreams", "logStreams", token="nextToken", logGroupName=group,
                             orderBy="LastEventTime", descending=True)
        try:
            for i, s in enumerate(pages):
                last = s.get("lastEventTimestamp")
                if last is None or last < since_ms:
                    break
                if i >= MAX_LISTED_PAGES * 50:
                    gaps.append(Gap(kind="truncated", service="logs", operation="DescribeLogStreams", target=group,
                                    unseen=f"{group}: more than {i} streams with events in the window; streams past "
                                    "them were not listed, so nodes named only there may be missing"))
                    break
                listed.append(ListedStream(log_group=group, log_stream=s["logStreamName"],
                                           first_event=_time_ms(s.get("firstEventTimestamp")),
                                           last_event=_time_ms(last)))
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"streams of {group} not listed: nodes named only by its streams may be "
                                       "missing", scope="node-list"))
    return listed


MAX_SILENT_LOOKUPS = 100  # DescribeLogStreams calls for streams silent in the window (5 TPS account quota)


def describe_silent_streams(aws: Aws, kernel: list[KernelStream], activity: list[StreamActivity],
                            gaps: list[Gap]) -> list[ListedStream]:
    """When did each kernel-carrying stream with no line in the padded window last write (RULES §4: every empty
    hour is listed; the reader also needs "last event 3 days before the window")? One DescribeLogStreams by
    exact-name prefix per stream, at most MAX_SILENT_LOOKUPS; the rest is a gap that says so."""
    live = {(a.log_group, a.log_stream) for a in activity}
    silent = sorted({(k.log_group, k.log_stream) for k in kernel} - live)
    found: list[ListedStream] = []
    for group, stream in silent[:MAX_SILENT_LOOKUPS]:
        try:
            listed = aws.call("logs", "DescribeLogStreams", logGroupName=group, logStreamNamePrefix=stream, limit=5)
        except CallFailed as failed:
            gaps.append(failed.gap_for(f"first/last event of the silent stream {group} / {stream} not read"))
            continue
        s = next((s for s in listed.get("logStreams", []) if s.get("logStreamName") == stream), None)
        if s is not None:
            found.append(ListedStream(log_group=group, log_stream=stream,
                                      first_event=_time_ms(s.get("firstEventTimestamp")),
                                      last_event=_time_ms(s.get("lastEventTimestamp"))))
    if len(silent) > MAX_SILENT_LOOKUPS:
        gaps.append(Gap(kind="truncated", service="logs", operation="DescribeLogStreams",
                        target=f"{len(silent)} silent streams",
                        unseen=f"first/last event times of {len(silent) - MAX_SILENT_LOOKUPS} of {len(silent)} streams "
                               "silent in the window (their coverage is Not observable either way)"))
    return found


def _time_ms(value: Any) -> datetime | None:
    return parse_time(value) if isinstance(value, (int, float)) else None


def _hma_streams(aws: Aws, group: str, gaps: list[Gap]) -> list[str] | None:
    """HMA streams exist only for nodes with a detection (RULES §4), so listing them is one small call."""
    try:
        return [s["logStreamName"] for s in aws.paginate("logs", "DescribeLogStreams", "logStreams", token="nextToken",
                                                         logGroupName=group, logStreamNamePrefix=HMA_PREFIX)]
    except CallFailed as failed:
        gaps.append(failed.gap_for(f"HMA streams of {group} not listed; HMA status Not observable"))
        return None


def discover_vanished_nodes(cluster: ClusterInfo, nodes: list[NodeInfo],
                            stream_keys: Iterable[tuple[str, str]]) -> list[NodeInfo]:
    """Nodes the inventory did not return, named by the cluster's own log streams with lines in the padded
    window: ParallelCluster compute nodes DescribeInstances has forgotten (terminated instances drop out within
    about an hour); HyperPod nodes replaced since, or all of them when ListClusterNodes could not be read."""
    known = {n.instance_id for n in nodes}
    groups = {g.name: g for g in cluster.instance_groups}
    found: dict[str, NodeInfo] = {}
    for group, stream in stream_keys:
        if cluster.kind == "parallelcluster" and is_pcluster_group(group, cluster.name):
            match = PCLUSTER_STREAM.match(stream)
            if match and match["iid"] not in known and match["iid"] not in found:
                found[match["iid"]] = node_from_log_stream(match["iid"], None, None)
        elif cluster.kind != "parallelcluster" and is_hma_group(group, cluster.name):
            hp = HYPERPOD_NODE_STREAM.match(stream)
            if hp and hp["iid"] not in known and hp["iid"] not in found:
                spec = groups.get(hp["group"])
                found[hp["iid"]] = node_from_log_stream(hp["iid"], None, hp["group"]).model_copy(update={
                    "instance_type": spec.instance_type if spec else None,
                    "role": spec.node_role if spec else "unknown"})
    return sorted(found.values(), key=lambda n: n.instance_id)
