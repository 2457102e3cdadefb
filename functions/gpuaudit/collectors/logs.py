"""Log sources and coverage evidence (RULES §3, §4) via Logs Insights, batched per log group.

Per batch of at most 50 groups, three queries, never one per node:
  kernel-streams  streams with `kernel:` lines over the nodes' lifetimes: count, last line   (b)
  stream-summary  all lines binned by stream and hour over the padded window, then folded to one
                  row per stream (live hours, first/last event, and the lines that may be GPU
                  or kernel lines: `gpu_hints`, `kernel_hints`)                                (a)
  gpu-lines       NVRM / HMA / NCCL / Fabric Manager lines in the window
  boot-lines      only for nodes whose window held no Fabric Manager start or driver banner: those boot-time
                  lines in the nodes' own streams from their launch (at most the kernel lookback) to the
                  window, newest first, at most BOOT_ROWS rows
  job-figures     incident only, over the batch's job groups (named with --log-group, or holding NCCL lines in
                  the GPU-lines read): the throughput and step-time lines in the GPU-lines window, oldest first
A kernel-streams or stream-summary read past the 10,000-row cap (both counted first in one `stream-count` query at
fleet scale, known from the last read, or found capped) is read in parts by the instance ID's ending, or host
name, in the stream name (`Part`), so a large fleet costs a few more queries, not one per node.
An hourly read (`by_hint`) reads the summary first and asks the kernel-streams and gpu-lines queries only of the
streams with a hint of them, by name (`_by_hint`): the new hours are scanned once, not three times.
Then `stream-hours` detail queries, only for node streams whose live hours have a hole (healthy nodes, and
streams silent for good, cost nothing extra: `one_run`), packed over the batch's groups by the live hours the
summary counted and by `QUERY_CHAR_BUDGET` characters (`detail_chunks`). Every query is started within the
audit's concurrency budget (collectors/query_budget.py): over budget, it waits for an earlier one instead of
failing.

Beside this module: the query texts (`log_queries.py`), the re-read of streams that fell silent before the last
hourly audit (`lagging.py`), the reads before the window — the kernel look-back a day at
a time, the deep look-back and the boot-time lines (`kernel_lookback.py`) — the one runner every query goes through
(`insights.py`), the reads in parts past the cap (`stream_parts.py`) and finding the log sources (`log_sources.py`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuaudit.collectors import insights  # insights.MAX_ROWS: one cap, patched in one place
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.insights import (
    MAX_GROUPS_PER_QUERY,
    InsightsRunner,
    QueryJournal,
    _batches,
    _group_name,
    _Pending,
    _split_by_time,
    _time,
)
from gpuaudit.collectors.kernel_lookback import kernel_spans, read_boot_lines, read_deep_kernel, summed_days
from gpuaudit.collectors.log_queries import (
    GPU_QUERY,
    JOB_LINE,
    JOB_QUERY,
    KERNEL_QUERY,
    STREAM_COUNTS,
    SUMMARY_QUERY,
    hours_query,
    hours_query_cost,
    nameable,
    named_query,
)
from gpuaudit.collectors.log_sources import (
    _hma_streams,
    describe_silent_streams,
    discover_vanished_nodes,
    list_streams,
)
from gpuaudit.collectors.query_budget import QUERY_CHAR_BUDGET, QuerySlots, pack
from gpuaudit.collectors.stream_parts import (
    PartsRead,
    Rows,
    _Parts,
    _streams_counted,
    group_parts,
    id_parts,
    in_parts,
    stream_part_ranges,
)
from gpuaudit.domain.streams import (
    HMA_PREFIX,
    INSTANCE_ID,
    NodeIndex,
    is_hma_group,
    pcluster_control_log,
    stream_node_ids,
)
from gpuaudit.domain.throughput import read_figures
from gpuaudit.model.evidence import (
    Evidence,
    Gap,
    GpuLine,
    JobFigure,
    KernelStream,
    ListedStream,
    LogGroupInfo,
    NodeInfo,
    QueryPurpose,
    QueryRecord,
    StreamActivity,
)
from gpuaudit.model.evidence_parts import LogsPart
from gpuaudit.model.timeutil import HOUR, floor_hour, hours_between

_Slice = tuple[datetime, datetime, _Pending | _Parts, str, list[str]]  # a query's range, the query, its text, groups


class LogWindow(BaseModel):
    """Time ranges of the three queries: (a) padded window, (b) node lifetimes, GPU lines (window ± margin)."""

    model_config = ConfigDict(frozen=True)

    padded_start: datetime
    padded_end: datetime
    lifetime_start: datetime
    gpu_start: datetime
    gpu_end: datetime
    # Full reads only: how far back nodes older than lifetime_start are looked up when no kernel stream names them.
    deep_kernel_start: datetime | None = None
    # Incident and pre-flight reads only: boot-time lines are searched from lifetime_start (RULES §2, §10 P11); the
    # hourly coverage audit, the one that runs unattended, does not pay for them.
    boot_lines: bool = False
    # Where query (b) stops: the query time. `kernel lines ever` counts from launch to `now`, not to the window's
    # end (RULES §4 b); None (an older payload) falls back to the padded end.
    kernel_end: datetime | None = None
    # Incident reads only: the range of the job-figures read (the GPU-lines window, whole even when a cached read
    # queries only the fresh hours: a drop is told against the readings before it); None: not read.
    job_range: tuple[datetime, datetime] | None = None

    @property
    def kernel_until(self) -> datetime:
        return self.kernel_end or self.padded_end


class BatchEvidence(BaseModel):
    """What one batch of ≤ 50 log groups holds; batches are independent, so they can fan out."""

    groups: list[str]
    kernel: list[KernelStream]
    activity: list[StreamActivity]
    gpu_lines: list[GpuLine]
    queries: list[QueryRecord]
    gaps: list[Gap]
    listed: list[ListedStream] = []  # DescribeLogStreams, only when the kernel or summary query failed
    boot_lines: list[GpuLine] = []  # boot-time lines from before the GPU-lines window (boot-lines query)
    # The per-stream reads ("kernel", "summary") that did not complete (a query failed, or a part stayed capped):
    # in this batch's groups a stream's absence from them proves nothing; "gpu": a GPU-lines read did not answer.
    unread: list[str] = []
    # Incident: the job groups' throughput and step-time figures; the job groups read whole, and those not.
    job_figures: list[JobFigure] = []
    job_groups: list[str] = []
    job_unread: list[str] = []
    # A batch read in parts (collectors/cache.py read_plan): per read, the groups it left unread; None: all of them.
    unread_groups: dict[str, list[str]] | None = None

    def unread_in(self, kind: str) -> list[str]:
        """The groups whose `kind` read did not complete."""
        if self.unread_groups is not None:
            return self.unread_groups.get(kind, [])
        return list(self.groups) if kind in self.unread else []


def looks_like_node_stream(stream: str, nodes: list[NodeInfo] | NodeIndex) -> bool:
    """Known node, or any instance ID: nodes that vanished from DescribeInstances are found only later."""
    return bool(stream_node_ids(stream, nodes)) or INSTANCE_ID.search(stream) is not None


_Reads = dict[str, tuple[QueryPurpose, datetime, datetime, str]]  # per kind: its purpose, range and query text


@dataclass(frozen=True)
class BatchRead:
    """What one batch's read asks, as its caller decides it: the groups, the nodes, the ranges (`window`), and what an
    earlier read already knows. `known_kernel`: kernel streams identified by an earlier read (incremental audits
    count only the new kernel lines). `expected_streams`: each per-stream read's rows per group when known (an hourly
    read, from the last read's streams). `job_groups`: groups known to hold a job's output (named with --log-group,
    or NCCL lines in cached hours), read for the job's figures in an incident with the groups whose GPU lines hold
    NCCL's. `by_hint` (an hourly read): the GPU and kernel lines are read by name from the streams the summary
    counted a hint of them in (`_by_hint`). `kernel_by_day`: the kernel look-back a day at a time (a group stopped
    at the deadline before). A full read is `BatchRead(cluster, nodes, groups, window)`; collectors/cache.py's
    `incremental_read` gives the hourly one."""

    cluster_name: str
    nodes: list[NodeInfo]
    groups: list[str]
    window: LogWindow
    known_kernel: frozenset[tuple[str, str]] = frozenset()
    expected_streams: Mapping[str, Mapping[str, Rows]] = field(default_factory=dict)
    job_groups: Collection[str] = ()
    by_hint: bool = False
    kernel_by_day: bool = False


@dataclass(frozen=True)
class BatchPlan:
    """The per-stream queries of a batch read, decided before any runs (`plan_batch`, pure): each kind's purpose,
    range and text (`reads`), the ranges it is asked over (`spans`), whether the GPU and kernel lines are then read
    by hint (`hinted`), the kinds started first (`first`), and those a `stream-count` query sizes first (`counting`)."""

    reads: _Reads
    spans: dict[str, list[tuple[datetime, datetime]]]
    hinted: bool
    first: list[str]
    counting: list[str]


def plan_batch(read: BatchRead) -> BatchPlan:
    """The batch's queries and their order, from the read alone (no query, no clock).

    A per-stream read (kernel streams, stream summary) expected past the 10,000-row cap is read in parts from the
    start: `expected_streams` gives its rows per group when known; when it does not and the fleet alone would pass
    the cap (a stream or more per node), one `stream-count` query counts the rows of every such read first (one row
    per group)."""
    win = read.window
    reads: _Reads = {
        "kernel": ("kernel-streams", win.lifetime_start, win.kernel_until, KERNEL_QUERY),
        "summary": ("stream-summary", win.padded_start, win.padded_end, SUMMARY_QUERY),
        "gpu": ("gpu-lines", win.gpu_start, win.gpu_end, GPU_QUERY)}
    # An hourly read reads the new hours once: the summary counts per stream the lines that may be GPU or kernel
    # lines (`gpu_hints`, `kernel_hints`), and only the streams with a hint are then asked for those lines, by name
    # (`_by_hint`): the default `@logStream` field index makes such a query scan those streams only. It needs the
    # summary's range to hold the GPU-lines and kernel ranges (an hourly read's do: both start at or after it).
    hinted = read.by_hint and win.padded_start <= min(win.gpu_start, win.lifetime_start) \
        and max(win.gpu_end, win.kernel_until) <= win.padded_end
    # The kernel look-back (launch to the query time, up to 14 days) is one range, one query (#50 item 1); a day at a
    # time only for a group whose read was stopped at the deadline before (`kernel_by_day`): no query of it then scans
    # more than a day, so none runs long enough to be stopped again (#34 item 4). Each day is read whole, and again
    # in parts if it reaches the cap: a count over the look-back would size every day for its busiest (launch day).
    spans = {kind: kernel_spans(start, end, read.kernel_by_day) if kind == "kernel" else [(start, end)]
             for kind, (_, start, end, _) in reads.items()}
    first = ["summary"] if hinted else list(reads)
    counting: list[str] = [kind for kind in ("kernel", "summary") if kind in first and kind not in read.expected_streams
                and in_parts(len(read.nodes)) and len(spans[kind]) == 1]
    return BatchPlan(reads=reads, spans=spans, hinted=hinted, first=first, counting=counting)


def collect_batch(aws: Aws, read: BatchRead, runner: InsightsRunner | None = None, slots: QuerySlots | None = None,
                  journal: QueryJournal | None = None) -> BatchEvidence:
    """The batch's read executed (`plan_batch` decides its queries): the three queries plus per-hour detail for node
    streams with gaps. `slots`: the audit's concurrency budget, when batches share one.

    Each part of a read in parts names only the groups it reads (`group_parts`): Logs Insights bills every record of
    each group it names, so a part never scans a group whose streams it does not read. Otherwise the whole is read,
    and read again in parts if it reaches the cap."""
    gaps: list[Gap] = []
    runner = runner or InsightsRunner(aws, gaps, slots=slots, journal=journal)
    runner.gaps = gaps
    run = _BatchRun(runner, read, plan_batch(read), gaps)
    run.read_streams()
    kernel, activity = run.stream_hours()
    win, batch, unanswered = read.window, read.groups, run.unanswered
    listed = list_streams(aws, batch, win.padded_start, gaps) if unanswered & {"kernel", "summary"} else []
    boot = read_boot_lines(runner, batch, run.node_index, read.nodes, run.gpu_lines, win.lifetime_start,
                           win.gpu_start) if win.boot_lines and "gpu" not in unanswered else []
    jobs = sorted({g for g in batch if g in read.job_groups}
                  | {g.log_group for g in run.gpu_lines if JOB_LINE.search(g.message)})
    figures, unread_jobs = _job_figures(runner, jobs, win.job_range, gaps) if win.job_range and jobs else ([], [])
    return BatchEvidence(groups=batch, kernel=kernel, activity=activity, gpu_lines=run.gpu_lines,
                         queries=runner.records, gaps=gaps, listed=listed, boot_lines=boot,
                         unread=sorted({"kernel", "summary", "gpu"} & (run.truncated | unanswered)),
                         job_figures=figures, job_groups=[g for g in jobs if g not in unread_jobs],
                         job_unread=unread_jobs)


class _BatchRun:
    """One batch read being executed: its queries started in the plan's order, and the rows each kind kept; a kind
    none of whose queries answered is `unanswered`, one left partly unread `truncated`."""

    def __init__(self, runner: InsightsRunner, read: BatchRead, plan: BatchPlan, gaps: list[Gap]) -> None:
        self.runner, self.read, self.plan, self.gaps = runner, read, plan, gaps
        self.node_index = NodeIndex(read.nodes)
        self.kernel: list[KernelStream] = []
        self.summary: dict[StreamKey, StreamActivity] = {}
        self.hints: dict[str, dict[StreamKey, int]] = {"gpu": {}, "kernel": {}}  # per stream, the summary's counts
        self.gpu_lines: list[GpuLine] = []
        self.truncated: set[str] = set()
        self.unanswered: set[str] = set()

    def start(self, kind: str, rows: Mapping[str, Rows] | None) -> list[_Slice]:
        """`kind`'s queries started over the batch: in parts when `rows` says it would pass the cap, else whole."""
        purpose, _, _, query = self.plan.reads[kind]
        batch, runner = self.read.groups, self.runner
        if rows is not None and in_parts(sum(r.streams for r in rows.values())):
            return [(start, end, _Parts(runner, purpose, groups, start, end, query, parts), query, batch)
                    for start, end in self.plan.spans[kind] for groups, parts in group_parts(batch, rows)]
        return [(start, end, runner.start(purpose, batch, start, end, query), query, batch)
                for start, end in self.plan.spans[kind]]

    def read_streams(self) -> None:
        """The per-stream reads: the counted ones sized first, then every kind read; an hourly read's GPU and kernel
        lines after the summary, by hint."""
        plan, runner, expect = self.plan, self.runner, self.read.expected_streams
        reads, counting = plan.reads, plan.counting
        count = runner.start("stream-count", self.read.groups, min(reads[kind][1] for kind in counting),
                             max(reads[kind][2] for kind in counting), STREAM_COUNTS,
                             f" (rows of the {' and '.join(reads[kind][0] for kind in counting)} reads)") \
            if counting else None
        pending = {kind: self.start(kind, expect.get(kind)) for kind in plan.first if kind not in counting}
        counted = _streams_counted(runner.results(count)) if count else None
        for kind in counting:  # a count not read leaves the whole to be read (re-read if capped)
            pending[kind] = self.start(kind, None if counted is None else counted[kind])
        for first_kind in sorted(pending, key=list(reads).index):
            self.take(first_kind, pending[first_kind])
        if plan.hinted:  # both kinds' queries started before either is read: they run side by side
            whole = bool({"summary"} & (self.truncated | self.unanswered))  # the summary may have missed a stream
            started: dict[str, list[_Slice]] = {}
            for hint_kind in ("kernel", "gpu"):
                named = None if whole else _by_hint(runner, hint_kind, reads[hint_kind], self.hints[hint_kind])
                started[hint_kind] = named if named is not None else self.start(hint_kind, expect.get(hint_kind))
            for hinted_kind, slices in started.items():
                self.take(hinted_kind, slices)

    def take(self, kind: str, slices: list[_Slice]) -> None:
        """Read `kind`'s queries (a capped one read again in parts, or in halves of its range for GPU lines) and
        keep their rows; a read none of whose queries answered is `unanswered`, one left partly unread `truncated`."""
        purpose, runner, gaps, batch = self.plan.reads[kind][0], self.runner, self.gaps, self.read.groups
        left, answered = 0, 0
        # Per range, a row per stream: a name with two instance IDs may fall in two parts, of one query or of two
        # (a part shared by several groups, `group_parts`), and is kept once before the days are summed.
        spans: dict[tuple[datetime, datetime], dict[StreamKey, dict[str, str]]] = {}
        lines: list[dict[str, str]] = []
        for start, end, p, query, groups in slices:
            if isinstance(p, _Parts):  # expected past the cap: read in parts from the start
                parts = p.read()
            else:
                whole = runner.results(p)
                parts = PartsRead(whole or [], int(whole is None), whole is not None)
                if whole is not None and len(whole) >= insights.MAX_ROWS and kind == "gpu":
                    split, complete = _split_by_time(runner, "gpu-lines", query, groups, start, end, gaps,
                                                     "GPU lines", depth=0)
                    if complete:  # every line read: the capped query was read again, so the cache may keep it
                        runner.mark_reread(p)
                    parts = PartsRead(split, 0 if complete else 1, True)
                elif whole is not None and len(whole) >= insights.MAX_ROWS:
                    parts = _Parts(runner, purpose, groups, start, end, query,
                                   id_parts(stream_part_ranges(whole, self.node_index, len(self.read.nodes))), whole,
                                   capped=p).read()
            answered += parts.answered
            left += parts.left if parts.answered else 0
            if kind == "gpu":
                lines += parts.rows
            else:
                spans.setdefault((start, end), {}).update(
                    ((r.get("@log", ""), r.get("@logStream", "")), r) for r in parts.rows)
        if not slices:
            return  # asked of no stream (no stream holds a hint): nothing to read
        if not answered:
            self.unanswered.add(kind)
            return
        if len(slices) > answered:  # a day of the look-back did not answer: its gap is the failed query's own
            self.truncated.add(kind)
        rows = lines if kind == "gpu" else [r for by_stream in spans.values() for r in by_stream.values()]
        if len(spans) > 1 and kind == "kernel":
            rows = summed_days(rows)
        if left and kind != "gpu":
            self.truncated.add(kind)
            gaps.append(Gap(kind="truncated", service="logs", operation="GetQueryResults",
                            unseen=f"the {purpose} query over {', '.join(batch)} was read in parts by the instance ID "
                            f"or host name in the stream name, of which {left} reached the Logs Insights maximum of "
                            f"{insights.MAX_ROWS} rows or did not answer; rows beyond them were not read and are not "
                            "treated as empty"))
        elif left:
            self.truncated.add(kind)  # _split_by_time named what stayed unread
        self.keep(kind, rows)

    def keep(self, kind: str, rows: list[dict[str, str]]) -> None:
        """`kind`'s rows as kernel streams, stream activity (and the summary's hints) or GPU lines."""
        for r in rows:
            group, stream = _group_name(r.get("@log", "")), r.get("@logStream", "")
            if kind == "kernel":
                self.kernel.append(KernelStream(log_group=group, log_stream=stream,
                                                kernel_lines=int(r["kernel_lines"]),
                                                last_kernel_line=_time(r.get("last_kernel_line"))))
            elif kind == "summary":
                self.summary[(group, stream)] = StreamActivity(
                    log_group=group, log_stream=stream, lines=int(float(r["total_lines"])),
                    live_hours=int(r["live_hours"]), first_event=_time(r.get("first_event")),
                    last_event=_time(r.get("last_event")))
                for hint in self.hints:
                    self.hints[hint][(group, stream)] = int(float(r.get(f"{hint}_hints") or 0))
            else:
                self.gpu_lines.append(_gpu_line(r, self.read.window))

    def stream_hours(self) -> tuple[list[KernelStream], list[StreamActivity]]:
        """The kernel streams (with the deep look-back's), and each stream's activity with its per-hour counts where
        its live hours have a hole (the `stream-hours` detail queries)."""
        read, win, summary, node_index = self.read, self.read.window, self.summary, self.node_index
        kernel, lost = self.kernel, self.unanswered | self.truncated
        expected = len(hours_between(win.padded_start, win.padded_end))
        kernel_keys = {(k.log_group, k.log_stream) for k in kernel} | set(read.known_kernel)
        if win.deep_kernel_start is not None and "kernel" not in lost:
            kernel += read_deep_kernel(self.runner, read.groups, node_index, read.nodes, kernel_keys,
                                       win.deep_kernel_start, win.lifetime_start, read.kernel_by_day)
            kernel_keys = {(k.log_group, k.log_stream) for k in kernel} | set(read.known_kernel)
        need_detail = {key for key in kernel_keys
                       if looks_like_node_stream(key[1], node_index) and key in summary
                       and summary[key].live_hours < expected}
        # Control-plane streams are binned like kernel streams (#15 item 3): every empty hour is listed.
        need_detail.update(key for key, a in summary.items()
                           if a.live_hours < expected and pcluster_control_log(key[0], key[1], read.cluster_name))
        for group in read.groups:
            if is_hma_group(group, read.cluster_name):
                other_streams = [key for key in summary if key[0] == group and not key[1].startswith(HMA_PREFIX)]
                if not any(summary[key].live_hours >= expected for key in other_streams):
                    need_detail.update(other_streams)
        # Rows past the 10,000-row cap, or of a summary that failed, were never read: a node's kernel stream missing
        # from the summary is asked for by name (detail query), never taken as empty for the window.
        unread: set[tuple[str, str]] = set()
        if "summary" in lost:
            unread = {key for key in kernel_keys if looks_like_node_stream(key[1], node_index) and key not in summary}
            summary.update({key: StreamActivity(log_group=key[0], log_stream=key[1], lines=0, live_hours=0)
                            for key in unread})
            need_detail |= unread
        in_one_run = {key: hours for key in need_detail - unread if (hours := one_run(summary[key])) is not None}
        detail = _hour_detail(self.runner, need_detail - in_one_run.keys(), expected, win.padded_start,
                              win.padded_end, {key: a.live_hours for key, a in summary.items() if key not in unread})
        detail.update(in_one_run)
        return kernel, [_with_hours(a, detail.get(key), key in unread) if key in need_detail else a
                        for key, a in sorted(summary.items())]


HINTED_QUERIES = 3  # named queries an hourly read may take per kind; past that, one query over the batch


def _by_hint(runner: InsightsRunner, kind: str, read: tuple[QueryPurpose, datetime, datetime, str],
             hints: Mapping[StreamKey, int]) -> list[_Slice] | None:
    """The `kind` read ("gpu", "kernel") asked only of the streams whose summary counted a hint of it (none: no
    query), by name, in queries of at most QUERY_CHAR_BUDGET characters, each over the groups of its streams; None
    when the names need more than HINTED_QUERIES queries (one query over the batch is then the cheaper read)."""
    purpose, start, end, query = read
    named = sorted(key for key, n in hints.items() if n > 0)
    if not all(nameable(stream) for _, stream in named):
        return None  # a name no query string can hold: read the batch whole
    fixed = len(named_query([], query))
    chunks = pack(named, lambda k: hours_query_cost(k[1]), QUERY_CHAR_BUDGET - fixed, insights.MAX_ROWS)
    if len(chunks) > HINTED_QUERIES:
        return None
    slices: list[_Slice] = []
    for chunk in chunks:
        text, groups = named_query((stream for _, stream in chunk), query), sorted({group for group, _ in chunk})
        subject = _streams_named([stream for _, stream in chunk])
        slices.append((start, end, runner.start(purpose, groups, start, end, text, subject), text, groups))
    return slices


def _gpu_line(row: Mapping[str, str], win: LogWindow) -> GpuLine:
    return GpuLine(time=_time(row["@timestamp"]) or win.padded_start, log_group=_group_name(row.get("@log", "")),
                   log_stream=row.get("@logStream", ""), message=row.get("@message", ""))


def _job_figures(runner: InsightsRunner, groups: list[str], span: tuple[datetime, datetime],
                 gaps: list[Gap]) -> tuple[list[JobFigure], list[str]]:
    """The job groups' throughput and step-time figures (one query over them, halved in time past the row cap),
    and the groups left unread when any part failed or stayed capped: a drop there may be unread."""
    rows, complete = _split_by_time(runner, "job-figures", JOB_QUERY, groups, *span, gaps,
                                    "throughput or step-time lines")
    figures = [JobFigure(time=time, log_group=_group_name(r.get("@log", "")), log_stream=r.get("@logStream", ""),
                         measure=measure, value=value)
               for r in rows if (time := _time(r.get("@timestamp"))) is not None
               for measure, value in read_figures(r.get("@message", ""))]
    return figures, [] if complete else groups


def one_run(activity: StreamActivity) -> dict[datetime, int] | None:
    """The live hours of a stream its summary alone proves: live in as many hours as there are from its first
    line's hour to its last line's, so each of those held a line and no other did (a node that went silent for
    good, or started late). None when the live hours have holes: the detail query reads them. Each hour is
    marked 1: which hours held a line is what the rules read, not how many lines."""
    if activity.first_event is None or activity.last_event is None:
        return None
    first, last = floor_hour(activity.first_event), floor_hour(activity.last_event)
    span = (last - first) // HOUR + 1
    if activity.live_hours != span:
        return None
    return {first + i * HOUR: 1 for i in range(span)}


def _with_hours(activity: StreamActivity, counts: dict[datetime, int] | None, unread: bool) -> StreamActivity:
    update: dict[str, Any] = {"hour_counts": counts}
    if unread and counts is not None:  # the summary row was past the cap: totals come from the detail bins
        update.update(lines=sum(counts.values()), live_hours=sum(1 for n in counts.values() if n > 0))
    return activity.model_copy(update=update)


def merge_batches(aws: Aws, evidence: Evidence, batches: list[BatchEvidence]) -> LogsPart:
    """Join the batches: find vanished nodes, keep groups that name an audited node, list HMA streams."""
    cluster, nodes, groups = evidence.cluster, evidence.nodes, evidence.log_groups
    kernel = [k for b in batches for k in b.kernel]
    activity = [a for b in batches for a in b.activity]
    gaps = [g for b in batches for g in b.gaps]
    listed = [s for b in batches for s in b.listed]
    discovered = discover_vanished_nodes(cluster, nodes, [*((a.log_group, a.log_stream) for a in activity),
                                                          *((s.log_group, s.log_stream) for s in listed)])
    all_nodes = [*nodes, *discovered]
    hma_group = next((g.name for g in groups if is_hma_group(g.name, cluster.name)), None)
    hma_streams = _hma_streams(aws, hma_group, gaps) if hma_group else None
    index = NodeIndex(all_nodes)
    kept = {g for g, s in [*((a.log_group, a.log_stream) for a in activity),
                           *((k.log_group, k.log_stream) for k in kernel)] if stream_node_ids(s, index)}
    if hma_group:
        kept.add(hma_group)
    silent = describe_silent_streams(aws, [k for k in kernel if k.log_group in kept], activity, gaps)
    return LogsPart(
        nodes=all_nodes, hma_log_group=hma_group,
        kernel_streams=[k for k in kernel if k.log_group in kept],
        stream_activity=[a for a in activity if a.log_group in kept],
        gpu_lines=sorted((g for b in batches for g in b.gpu_lines), key=lambda g: g.time),
        boot_lines=sorted((g for b in batches for g in b.boot_lines), key=lambda g: g.time),
        queries=[q for b in batches for q in b.queries], hma_streams=hma_streams,
        listed_streams=listed, silent_streams=silent,
        kernel_unread_groups=sorted(g for b in batches for g in b.unread_in("kernel")),
        summary_unread_groups=sorted(g for b in batches for g in b.unread_in("summary")),
        gpu_unread_groups=sorted(g for b in batches for g in b.unread_in("gpu")),
        job_figures=sorted((f for b in batches for f in b.job_figures), key=lambda f: f.time),
        job_figure_groups=sorted(g for b in batches for g in b.job_groups),
        job_figure_unread_groups=sorted(g for b in batches for g in b.job_unread), gaps=gaps)


def log_batches(groups: list[LogGroupInfo]) -> list[list[str]]:
    return _batches([g.name for g in groups], MAX_GROUPS_PER_QUERY)


DETAIL_ROWS = 9_000  # rows a detail query is packed for: a tenth of the cap left for lines that arrive meanwhile


StreamKey = tuple[str, str]  # (log group, stream)


def detail_chunks(keys: Iterable[StreamKey], expected_hours: int,
                  live_hours: Mapping[StreamKey, int]) -> list[list[StreamKey]]:
    """Streams of any groups of the batch cut into detail queries of at most DETAIL_ROWS rows — a stream returns
    one row per hour holding a line, which the summary counted over the same range (`live_hours`; a stream it did
    not count is taken to fill every hour) — and QUERY_CHAR_BUDGET characters of query text (stream names run to
    512 characters)."""
    fixed = len(hours_query([]))
    return pack(sorted(keys), lambda k: hours_query_cost(k[1]), QUERY_CHAR_BUDGET - fixed, insights.MAX_ROWS,
                weight=lambda k: min(expected_hours, max(1, live_hours.get(k, expected_hours))), max_weight=DETAIL_ROWS)


def _hour_detail(runner: InsightsRunner, keys: set[StreamKey], expected_hours: int, start: datetime,
                 end: datetime, live_hours: Mapping[StreamKey, int]) -> dict[StreamKey, dict[datetime, int]]:
    """Per-hour counts for the named streams, in queries within the row and length limits (`detail_chunks`), each
    over the groups its streams are in. A query that still reaches the cap (lines arrived since the summary, or a
    same-named stream of another group) is read again in halves."""
    detail: dict[StreamKey, dict[datetime, int]] = {}
    halved: list[_Pending] = []  # capped queries, marked read again once every half was read
    complete = True
    unnameable = sorted(key for key in keys if not nameable(key[1]))
    if unnameable:  # no query can name them: their hours stay unread (liveness not proven), and said so
        keys = keys - set(unnameable)
        runner.gaps.append(Gap(kind="not-read", service="logs", operation="StartQuery", target=unnameable[0][0],
                               unseen=f"per-hour detail of {len(unnameable)} stream(s) whose name holds a control "
                               f"character, e.g. {unnameable[0][1]!r}: a query cannot name them"))

    def begin(chunk: list[StreamKey]) -> tuple[list[StreamKey], _Pending]:
        names = [stream for _, stream in chunk]
        return chunk, runner.start("stream-hours", sorted({group for group, _ in chunk}), start, end,
                                   hours_query(names), _streams_named(names))

    queue = deque(begin(chunk) for chunk in detail_chunks(keys, expected_hours, live_hours))
    while queue:
        chunk, p = queue.popleft()
        rows = runner.results(p)
        if rows is None:
            complete = False
            continue
        if len(rows) >= insights.MAX_ROWS:
            if len(chunk) > 1:
                queue.extend(begin(half) for half in (chunk[:len(chunk) // 2], chunk[len(chunk) // 2:]))
                halved.append(p)
            else:
                complete = False
                runner.gaps.append(Gap(kind="truncated", service="logs", operation="GetQueryResults",
                                       unseen=f"per-hour detail of {chunk[0][0]} / {chunk[0][1]} reached the Logs "
                                       f"Insights maximum of {insights.MAX_ROWS} rows; its hours were not read"))
            continue
        wanted = set(chunk)
        for key in chunk:
            detail[key] = {}
        for r in rows:
            hour, key = _time(r.get("hour")), (_group_name(r.get("@log", "")), r.get("@logStream", ""))
            if hour is not None and key in wanted:
                detail[key][floor_hour(hour)] = int(r["lines"])
    for p in halved if complete else []:
        runner.mark_reread(p)
    return detail


def _streams_named(chunk: list[str]) -> str:
    """The gap's words for a detail query's streams: how many, and the first (shortened: names are long)."""
    first = chunk[0] if len(chunk[0]) <= 80 else chunk[0][:77] + "..."
    return f" for {len(chunk)} stream(s) from {first!r}"
