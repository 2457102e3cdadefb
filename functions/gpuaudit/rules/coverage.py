"""Proving coverage (RULES §4): per node and per source, which stream carries the node's
kernel messages (b), and whether that exact stream was live in every hour of the padded
window (a). HyperPod HMA status is decided separately: its absence is meaningful only
while the cluster log group is live.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuaudit.domain.capability import is_accelerated
from gpuaudit.domain.streams import HMA_PREFIX, NodeIndex, stream_node_ids
from gpuaudit.domain.window import Padded
from gpuaudit.model.evidence import Evidence, KernelStream, ListedStream, NodeInfo, StreamActivity
from gpuaudit.model.result import CoverageRow, XidStatus
from gpuaudit.model.timeutil import HOUR, floor_hour, iso

KERNEL_HINTS = ("system-messages", "syslog", "messages", "kernel", "dmesg", "journal")
LATE_DELIVERY = timedelta(hours=2)
# The current hour is judged only once this much of it has passed: an hour a few minutes old holds no line from a
# stream that logs every ten minutes, and the hourly audit (`rate(1 hour)`, any minute past) would call half a healthy
# fleet Not observable at every run (docs/decisions.md, "The current partial hour").
PARTIAL_HOUR_GRACE = timedelta(minutes=15)
COLLECT_ON_NODE = ("check the node directly (`dmesg -T | grep -i nvrm`, `journalctl -k | grep -i xid`) "
                   "and fix log shipping")


@dataclass
class NodeCoverage:
    rows: list[CoverageRow]
    xid_status: XidStatus
    notes: list[str] = field(default_factory=list)


@dataclass
class StreamIndex:
    """Evidence re-keyed by node once, so each node's coverage costs a dict lookup."""

    kernel: dict[str, list[KernelStream]]
    activity: dict[str, list[StreamActivity]]
    activity_by_key: dict[tuple[str, str], StreamActivity]
    silent_by_key: dict[tuple[str, str], ListedStream]

    @classmethod
    def build(cls, evidence: Evidence, nodes: list[NodeInfo]) -> StreamIndex:
        kernel: dict[str, list[KernelStream]] = defaultdict(list)
        activity: dict[str, list[StreamActivity]] = defaultdict(list)
        index = NodeIndex(nodes)
        for k in evidence.kernel_streams:
            for iid in stream_node_ids(k.log_stream, index):
                kernel[iid].append(k)
        for a in evidence.stream_activity:
            for iid in stream_node_ids(a.log_stream, index):
                activity[iid].append(a)
        return cls(kernel, activity, {(a.log_group, a.log_stream): a for a in evidence.stream_activity},
                   {(s.log_group, s.log_stream): s for s in evidence.silent_streams})


def expected_hours(node: NodeInfo, pad: Padded) -> list[datetime]:
    """Hours a node's kernel stream must fill: the padded window, from the node's launch hour on."""
    hours = pad.hours
    if node.launch_time is not None:
        hours = hours[bisect_left(hours, floor_hour(node.launch_time)):]  # the padded hours are in order
    return hours


def empty_hours(activity: StreamActivity | None, hours: list[datetime], pad: Padded) -> list[datetime] | None:
    """Hours with no line; None when the per-hour detail was needed but not read."""
    if activity is None:
        empty = list(hours)
    elif activity.hour_counts is not None:
        empty = [h for h in hours if activity.hour_counts.get(h, 0) == 0]
    elif activity.live_hours >= len(pad.hours):
        empty = []
    else:
        return None
    # RULES §4: the current, partial hour counts as live only if it already holds a line; without one it is empty
    # like any other hour, and every empty hour is listed (a gap running to the query time is said possibly late) —
    # once PARTIAL_HOUR_GRACE of it has passed; younger, it is neither live nor empty: too soon to tell.
    partial = pad.partial_last_hour
    if partial is not None and partial in empty and pad.now - partial < PARTIAL_HOUR_GRACE:
        empty = [h for h in empty if h != partial]
    return empty


def _filled_span(activity: StreamActivity, pad: Padded) -> set[datetime] | None:
    """Without per-hour counts, the hours with a line are still known when the summary's live-hour count equals the
    hours its first and last event (in the padded window) span: every hour between them holds a line, and none
    outside them can. None when some hour between is empty (which one, only per-hour detail says)."""
    if activity.first_event is None or activity.last_event is None:
        return None
    span = {h for h in pad.hours if floor_hour(activity.first_event) <= h <= floor_hour(activity.last_event)}
    return span if activity.live_hours == len(span) else None


def _possibly_late(empty: list[datetime], hours: list[datetime], pad: Padded) -> bool:
    """A gap that reaches the query time (the current, partial hour) or the last whole hour before it, and began at
    most LATE_DELIVERY before the query, may still be filled by late delivery; an older gap is a lost one."""
    if not empty or not hours:
        return False
    # the gap must end at the last hour, or at the last whole one when the last is the partial hour (in order)
    ends = {hours[-1], *hours[-2:-1]} if hours[-1] == pad.partial_last_hour else {hours[-1]}
    if empty[-1] not in ends:
        return False
    listed, began = set(empty), empty[-1]
    while began - HOUR in listed:
        began -= HOUR
    return pad.now - began <= LATE_DELIVERY


def _live_hours(activity: StreamActivity | None, hours: list[datetime]) -> int:
    """Expected hours holding at least one line (a partial hour without a line is empty, RULES §4)."""
    if activity is None:
        return 0
    if activity.hour_counts is not None:
        return sum(1 for h in hours if activity.hour_counts.get(h, 0) > 0)
    return min(activity.live_hours, len(hours))


def _kernel_row(node: NodeInfo, k: KernelStream, activity: StreamActivity | None, pad: Padded,
                silent: ListedStream | None) -> CoverageRow:
    hours = expected_hours(node, pad)
    empty = empty_hours(activity, hours, pad)
    notes = []
    if activity is None:
        notes.append("kernel lines since launch (query b) but no line at all in the padded window: the stream is "
                     "empty for the window, not a query error" + (_died(silent, pad) if silent else ""))
    status: XidStatus = "Not observable"
    if empty is None:
        notes.append("per-hour detail could not be read (see visibility gaps); liveness not proven")
    live = _live_hours(activity, hours)
    if empty is not None:
        # Measured needs an hour shown live: a node launched after the padded window (or minutes before the query,
        # its one hour too young to judge) has none, and a real zero is not claimed on no hour read
        status = "Measured" if k.kernel_lines > 0 and not empty and live > 0 else "Not observable"
        if not empty and live == 0:
            notes.append(_no_hour(node, pad))
        if _possibly_late(empty, hours, pad):
            notes.append("the gap runs to the query time: possibly late delivery, not yet lost")
    seen = activity or silent
    return CoverageRow(log_group=k.log_group, log_stream=k.log_stream, kernel_lines_ever=k.kernel_lines,
                       live_hours=live, empty_hours=empty or [], liveness_read=empty is not None,
                       first_event=seen.first_event if seen else None,
                       last_event=seen.last_event if seen else None, status=status,
                       note="; ".join(notes) or None)


def _no_hour(node: NodeInfo, pad: Padded) -> str:
    launched = iso(node.launch_time) if node.launch_time else "at an unknown time"
    where = (f"after the padded window ends ({iso(pad.end)})" if node.launch_time and node.launch_time >= pad.end
             else "in the current hour, too recently to judge it")
    return f"the node launched {launched}, {where}: no hour of the window to prove live, nothing measured"


def _died(silent: ListedStream, pad: Padded) -> str:
    """When a silent stream last wrote, as DescribeLogStreams says (eventually consistent: within about an hour),
    placed against the padded window: before it, after it (the stream wrote again later), or inside it."""
    if silent.last_event is None:
        return "; DescribeLogStreams lists no event time for it"
    first = f"first event {iso(silent.first_event) if silent.first_event else 'not listed'}; DescribeLogStreams"
    last = iso(silent.last_event)
    if silent.last_event < pad.start:
        return (f"; its last event was {last}, {_duration(pad.start - silent.last_event)} before the padded window "
                f"({first})")
    if silent.last_event >= pad.end:
        return (f"; its last event was {last}, {_duration(silent.last_event - pad.end)} after the padded window: the "
                f"stream wrote again after the window, nothing inside it ({first})")
    return (f"; its listed last event {last} falls inside the padded window, yet the query read no line there "
            f"(DescribeLogStreams' event times are eventually consistent; {first})")


def _duration(span: timedelta) -> str:
    """A span as days and hours (minutes under an hour), never negative: callers order the two ends."""
    minutes = max(int(span.total_seconds() // 60), 0)
    days, rest = divmod(minutes, 24 * 60)
    if days:
        return f"{days} day(s) {rest // 60} h"
    return f"{rest // 60} h" if rest >= 60 else f"{rest} min"


def _other_logs_row(node: NodeInfo, group: str, streams: list[StreamActivity], since: datetime,
                    kernel_unread: bool, pad: Padded) -> CoverageRow:
    best = sorted(streams, key=lambda a: (not a.log_stream.endswith(KERNEL_HINTS), -a.lines, a.log_stream))[0]
    # (a) is tested on this stream as on any other: every empty hour is listed, whatever (b) found (RULES §4)
    hours = expected_hours(node, pad)
    # the read plan bins by hour only the streams that carry kernel lines; this one's summary may still place them
    span = _filled_span(best, pad) if best.hour_counts is None else None
    empty = empty_hours(best if span is None else best.model_copy(update={"hour_counts": dict.fromkeys(span, 1)}),
                        hours, pad)
    liveness = ("; which hours held a line was not read for this stream: liveness not proven" if empty is None else
                "; the gap runs to the query time: possibly late delivery, not yet lost"
                if _possibly_late(empty, hours, pad) else "")
    read, empty, live = empty is not None, empty or [], _live_hours(best, hours)
    if kernel_unread:  # (b) failed or was cut at the 10,000-row cap: absence from it is not "no kernel lines"
        return CoverageRow(
            log_group=group, log_stream=best.log_stream, kernel_lines_ever=None, live_hours=live,
            empty_hours=empty, liveness_read=read, first_event=best.first_event, last_event=best.last_event,
            status="Not observable",
            note="the kernel-streams query over this group did not complete (it failed, or stayed at the Logs "
                 "Insights 10,000-row cap), so whether the node's streams carry `kernel:` lines was not read (see "
                 f"visibility gaps); {COLLECT_ON_NODE}{liveness}")
    if node.launch_time is not None and node.launch_time < since:
        # (b) is "since launch": older lines were not searched, so "ships no kernel lines" is not shown.
        why = (f"none held a `kernel:` line since {iso(since)}; the node launched {iso(node.launch_time)}, before "
               f"that, and older lines were not searched (the lookback is bounded): not proven either way; "
               f"{COLLECT_ON_NODE}")
    else:
        why = f"none held a `kernel:` line since {iso(since)}: the pipeline ships other logs, not kernel messages"
    return CoverageRow(
        log_group=group, log_stream=best.log_stream, kernel_lines_ever=0, live_hours=live, empty_hours=empty,
        liveness_read=read,
        first_event=best.first_event, last_event=best.last_event, status="Not observable",
        note=f"{len(streams)} stream(s) of this group name the node; {why}{liveness}")


def kernel_rows(node: NodeInfo, evidence: Evidence, index: StreamIndex, pad: Padded,
                lifetime_start: datetime) -> list[CoverageRow]:
    rows = []
    kernel = index.kernel.get(node.instance_id, [])
    kernel_keys = {(k.log_group, k.log_stream) for k in kernel}
    for k in sorted(kernel, key=lambda k: (k.log_group, k.log_stream)):
        if k.log_group == evidence.hma_log_group:
            continue
        key = (k.log_group, k.log_stream)
        rows.append(_kernel_row(node, k, index.activity_by_key.get(key), pad, index.silent_by_key.get(key)))
    unread = set(evidence.kernel_unread_groups)
    other: dict[str, list[StreamActivity]] = defaultdict(list)
    for a in index.activity.get(node.instance_id, []):
        if a.log_group != evidence.hma_log_group and (a.log_group, a.log_stream) not in kernel_keys:
            other[a.log_group].append(a)
    for group, streams in sorted(other.items()):
        if group not in {k.log_group for k in kernel}:
            rows.append(_other_logs_row(node, group, streams, lifetime_start, group in unread, pad))
    return rows


@dataclass(frozen=True)
class HmaGroupLiveness:
    """RULES §4: whether the HyperPod cluster log group received other streams in every hour of the padded window,
    kept per hour so a node is held only to the hours since its launch (docs/decisions.md, decision 3): hours before
    the node (or the cluster) existed cannot carry its agent's lines, so they prove nothing either way."""

    group: str | None
    proof: str  # the streams that make it live, or why it is not
    missing: tuple[datetime, ...] = ()  # hours of the padded window with no line of another stream
    has_streams: bool = False

    def for_node(self, node: NodeInfo) -> tuple[bool, str]:
        if self.group is None or not self.has_streams:
            return False, self.proof
        launched = floor_hour(node.launch_time) if node.launch_time is not None else None
        missing = [h for h in self.missing if launched is None or h >= launched]
        if missing:
            return False, (f"cluster log group {self.group} had no line in {len(missing)} hour(s) of the padded "
                           f"window (first {iso(missing[0])})")
        if self.missing and launched is not None:
            return True, f"{self.proof}, from the node's launch hour {iso(launched)}"
        return True, self.proof


def hma_group_live(evidence: Evidence, pad: Padded) -> HmaGroupLiveness:
    """Is the HyperPod cluster log group receiving other streams in every hour? (and the proof)"""
    group = evidence.hma_log_group
    if group is None:
        return HmaGroupLiveness(None, "no HyperPod cluster log group /aws/sagemaker/Clusters/<name>/<id> was found")
    others = [a for a in evidence.stream_activity if a.log_group == group and not a.log_stream.startswith(HMA_PREFIX)]
    if not others:
        return HmaGroupLiveness(group, f"cluster log group {group} holds no live stream")
    for a in sorted(others, key=lambda a: -a.live_hours):
        if a.live_hours >= len(pad.hours):
            return HmaGroupLiveness(group, f"cluster log group live in every hour through {a.log_stream}",
                                    has_streams=True)
    covered: set[datetime] = set()
    for a in others:
        covered.update(h for h, n in (a.hour_counts or {}).items() if n > 0)
    # the current, partial hour is judged as a kernel stream's is (empty_hours): live only with a line, once
    # PARTIAL_HOUR_GRACE of it has passed
    partial = pad.partial_last_hour
    young = partial is not None and pad.now - partial < PARTIAL_HOUR_GRACE
    missing = tuple(h for h in pad.hours if h not in covered and not (young and h == partial))
    return HmaGroupLiveness(group, "cluster log group live in every hour across "
                            + ", ".join(sorted(a.log_stream for a in others)), missing, has_streams=True)


def hma_row(node: NodeInfo, evidence: Evidence, live: tuple[bool, str]) -> CoverageRow:
    group = evidence.hma_log_group or f"/aws/sagemaker/Clusters/{evidence.cluster.name}/{evidence.cluster.cluster_id}"
    expected = f"{HMA_PREFIX}{node.instance_group}/{node.instance_id}"
    is_live, proof = live
    if evidence.hma_streams is None:
        return CoverageRow(log_group=group, log_stream=None, status="Not observable", source_kind="hma",
                           note=f"HMA streams could not be listed; {proof}. Confirm "
                                "`sagemaker-health-monitoring-agent.service` runs on the node")
    stream = next((s for s in evidence.hma_streams if s.endswith(f"/{node.instance_id}")), None)
    activity = next((a for a in evidence.stream_activity if a.log_group == group and a.log_stream == stream), None)
    if not is_live and activity is not None and activity.lines > 0:
        # RULES §4: a node's own HMA stream with a line inside the padded window is live, whatever the cluster
        # group's other streams show: the agent ran on this node then, so its detections were read.
        return CoverageRow(log_group=group, log_stream=stream, status="Measured", source_kind="hma",
                           live_hours=activity.live_hours, first_event=activity.first_event,
                           last_event=activity.last_event,
                           note=f"the node's own HMA stream wrote {activity.lines} line(s) inside the padded window: "
                                f"the agent ran on the node then ({proof})")
    if not is_live:
        return CoverageRow(log_group=group, log_stream=stream, status="Not observable", source_kind="hma",
                           note=f"{proof}; HMA absence proves nothing. Confirm "
                                "`sagemaker-health-monitoring-agent.service` runs on the node")
    if stream is None and node.status == "Pending":
        # RULES §0.2: "No HMA detections" is a clean claim on an agent that ran; a node still being provisioned has
        # not run it, so the absence of its stream proves nothing yet (a live cluster group speaks for other nodes)
        return CoverageRow(log_group=group, log_stream=None, status="Not observable", source_kind="hma",
                           note=f"no {expected} stream, but the node is Pending (not yet running): the health agent "
                                f"has not run on it, so HMA absence proves nothing; {proof}")
    if stream is None:
        return CoverageRow(log_group=group, log_stream=None, status="No HMA detections", source_kind="hma",
                           note=f"no {expected} stream (HMA creates it only at a node's first detection); {proof}")
    return CoverageRow(log_group=group, log_stream=stream, status="Measured", source_kind="hma",
                       live_hours=activity.live_hours if activity else 0,
                       first_event=activity.first_event if activity else None,
                       last_event=activity.last_event if activity else None,
                       note=f"HMA detection stream present; {proof}")


def node_coverage(node: NodeInfo, evidence: Evidence, index: StreamIndex, pad: Padded, lifetime_start: datetime,
                  hma_live: HmaGroupLiveness | None) -> NodeCoverage:
    rows = kernel_rows(node, evidence, index, pad, lifetime_start)
    accelerated = is_accelerated(node, evidence)
    if evidence.cluster.kind.startswith("hyperpod") and accelerated and hma_live is not None:
        rows.append(hma_row(node, evidence, hma_live.for_node(node)))
    if not rows and not accelerated:
        rows.append(CoverageRow(log_group="(not searched: no GPU)", log_stream=None, status="Not observable",
                                liveness_read=False,
                                note=f"{node.instance_type} has no GPU or Trainium device: Xid evidence does not "
                                f"apply"))
    elif not rows:
        searched = ", ".join(g.name for g in evidence.log_groups) or "none found"
        unread = sorted({*evidence.kernel_unread_groups, *evidence.summary_unread_groups})
        # RULES §4: the window read found no line of the node and (b), the control, no `kernel:` line since its
        # launch; a stream that wrote only outside both ranges is seen by neither, so "no stream" is not claimed.
        note = (f"no stream of the log groups searched ({searched}) held a line naming this node in the padded window "
                f"({iso(pad.start)} → {iso(pad.end)}) or a `kernel:` line since {iso(lifetime_start)}: no source "
                "carries its kernel messages, or the query is suspect (log group, region, time range); "
                f"{COLLECT_ON_NODE}") if not unread else (
            f"no stream read names this node; the per-stream queries over {', '.join(unread)} did not complete "
            "(see visibility gaps), so its streams may be there")
        rows.append(CoverageRow(log_group="(none)", log_stream=None, status="Not observable", liveness_read=False,
                                note=note))
    if any(r.status == "Measured" for r in rows):
        status: XidStatus = "Measured"
    elif any(r.status == "No HMA detections" for r in rows):
        status = "No HMA detections"
    else:
        status = "Not observable"
    return NodeCoverage(rows=rows, xid_status=status)
