"""Control-plane liveness (#15 item 3; RULES §0.4, §4): the head node's `clustermgtd`, `slurm_resume` and
`slurmctld` streams on ParallelCluster, the cluster log group on HyperPod.

Their hourly bins come from the window's own stream-summary and stream-hours queries (collectors/logs.py). Only
a stream with no line in the padded window costs a call: DescribeLogStreams gives its last event, i.e. since
when it has been silent, or says that the stream does not exist.
"""

from __future__ import annotations

from typing import Any

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.domain.streams import (
    HMA_PREFIX,
    HYPERPOD_CLUSTER_LOG,
    PCLUSTER_CONTROL_LOGS,
    PCLUSTER_STREAM,
    is_pcluster_group,
)
from gpuaudit.model.evidence import ClusterInfo, ControlStream, Evidence, Gap, LogGroupInfo, NodeInfo, StreamActivity
from gpuaudit.model.evidence_parts import ControlStreamsPart
from gpuaudit.model.timeutil import parse_time


def collect_control_streams(aws: Aws, evidence: Evidence) -> ControlStreamsPart:
    """The control-plane streams silent in the padded window, with their last event; None when the orchestrator
    has no control-plane log source the audit found (or the lookup failed: a gap says so)."""
    gaps: list[Gap] = []
    cluster, activity = evidence.cluster, evidence.stream_activity
    control = None
    if cluster.kind == "parallelcluster":
        control = _pcluster(aws, cluster, evidence.nodes, evidence.log_groups, activity, gaps)
    elif cluster.kind.startswith("hyperpod") and evidence.hma_log_group is not None:
        control = _hyperpod(aws, evidence.hma_log_group, activity, gaps)
    return ControlStreamsPart(control_streams=control, gaps=gaps)


def _pcluster(aws: Aws, cluster: ClusterInfo, nodes: list[NodeInfo], groups: list[LogGroupInfo],
              activity: list[StreamActivity], gaps: list[Gap]) -> list[ControlStream] | None:
    pc_groups = [g.name for g in groups if is_pcluster_group(g.name, cluster.name)]
    heads = [n for n in nodes if n.role == "head"]
    if not pc_groups or not heads:
        return None
    live = {(a.log_group, a.log_stream) for a in activity}
    found: list[ControlStream] = []
    for group in pc_groups:
        for head in heads:
            host = _head_host(head, group, activity)
            if host is None:
                gaps.append(Gap(kind="not-read", service="logs", operation="DescribeLogStreams", target=group,
                                outcome="not read", unseen=f"the control-plane streams of head node {head.instance_id} "
                                "(its host name, the streams' prefix, is unknown)"))
                continue
            prefix = f"{host}.{head.instance_id}."
            silent = [prefix + log for log in PCLUSTER_CONTROL_LOGS if (group, prefix + log) not in live]
            if not silent:
                continue
            try:
                listed = {s.get("logStreamName"): s for s in aws.paginate(
                    "logs", "DescribeLogStreams", "logStreams", token="nextToken", logGroupName=group,
                    logStreamNamePrefix=prefix)}
            except CallFailed as failed:
                gaps.append(failed.gap_for(f"last events of the control-plane streams {', '.join(silent)} of "
                                           f"{group}, silent in the window, not read"))
                continue
            if not listed and len(pc_groups) > 1:
                continue  # an older group of a cluster recreated under the same name: this head never wrote there
            found.extend(_control(group, name, name[len(prefix):], head.instance_id, listed.get(name))
                         for name in silent)
    return found


def _head_host(head: NodeInfo, group: str, activity: list[StreamActivity]) -> str | None:
    """The host part of `<host>.<instance-id>.<log>`: from a stream of the head seen in the window, else its DNS."""
    for a in activity:
        match = PCLUSTER_STREAM.match(a.log_stream) if a.log_group == group else None
        if match and match["iid"] == head.instance_id:
            return match["host"]
    return head.private_dns.split(".", 1)[0] if head.private_dns else None


def _hyperpod(aws: Aws, group: str, activity: list[StreamActivity], gaps: list[Gap]) -> list[ControlStream] | None:
    """The cluster log group is live while any non-HMA stream writes (RULES §4): only when none wrote in the padded
    window is the group asked which stream wrote last, and when."""
    if any(a.log_group == group and not a.log_stream.startswith(HMA_PREFIX) for a in activity):
        return []
    try:
        listed = aws.call("logs", "DescribeLogStreams", logGroupName=group, orderBy="LastEventTime",
                          descending=True, limit=50).get("logStreams", [])
    except CallFailed as failed:
        gaps.append(failed.gap_for(f"last event of the HyperPod cluster log group {group}, silent in the window, "
                                   "not read"))
        return None
    latest = next((s for s in listed if not str(s.get("logStreamName", "")).startswith(HMA_PREFIX)), None)
    return [_control(group, latest.get("logStreamName") if latest else None, HYPERPOD_CLUSTER_LOG, None, latest)]


def _control(group: str, stream: str | None, role: str, instance_id: str | None,
             listed: dict[str, Any] | None) -> ControlStream:
    return ControlStream(log_group=group, log_stream=stream, role=role, instance_id=instance_id,
                         listed=listed is not None, first_event=_ms(listed, "firstEventTimestamp"),
                         last_event=_ms(listed, "lastEventTimestamp"))


def _ms(listed: dict[str, Any] | None, key: str) -> Any:
    value = (listed or {}).get(key)
    return parse_time(value) if isinstance(value, (int, float)) else None
