"""Log sources and coverage evidence (RULES §3, §4) via Logs Insights, batched per log group.

Per batch of at most 50 groups, three queries, never one per node:
  kernel-streams  streams with `kernel:` lines over the nodes' lifetimes: count, last line   (b)
  stream-summary  all lines binned by stream and hour over the padded window, then folded to one
                  row per stream (live hours, first/last event)                               (a)
  gpu-lines       NVRM / HMA / NCCL / Fabric Manager lines in the window
  boot-lines      only for nodes whose window held no Fabric Manager start or driver banner: those boot-time
                  lines in the nodes' own streams from their launch (at most the kernel lookback) to the
                  window, newest first, at most BOOT_ROWS rows
  job-figures     incident only, over the batch's job groups (named with --log-group, or holding NCCL lines in
                  the GPU-lines read): the throughput and step-time lines in the GPU-lines window, oldest first
A kernel-streams or stream-summary read past the 10,000-row cap (both counted first in one `stream-count` query at
fleet scale, known from the last read, or found capped) is read in parts by the instance ID's ending, or host
name, in the stream name (`Part`), so a large fleet costs a few more queries, not one per node.
Then `stream-hours` detail queries, only for node streams whose live hours have a hole (healthy nodes, and
streams silent for good, cost nothing extra: `one_run`), packed over the batch's groups by the live hours the
summary counted and by `QUERY_CHAR_BUDGET` characters (`detail_chunks`). Every query is started within the
audit's concurrency budget (collectors/query_budget.py): over budget, it waits for an earlier one instead of
failing.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.inventory import node_from_log_stream
from gpuaudit.collectors.query_budget import QUERY_CHAR_BUDGET, QuerySlots, pack
from gpuaudit.domain.capability import accelerated_by_family, nvswitch_class
from gpuaudit.domain.markers import (
    DRIVER_BANNER,
    FABRIC_MANAGER_STARTED,
    NCCL_MARKER,
    NCCL_TIMEOUT_MARKERS,
    boot_lines_query,
    gpu_lines_query,
)
from gpuaudit.domain.streams import (
    HMA_PREFIX,
    HYPERPOD_NODE_STREAM,
    INSTANCE_ID,
    PCLUSTER_STREAM,
    NodeIndex,
    is_hma_group,
    is_pcluster_group,
    pcluster_control_log,
    stream_node_ids,
)
from gpuaudit.domain.throughput import job_figures_query, read_figures
from gpuaudit.model.evidence import (
    NAMED_BY_OPERATOR,
    ClusterInfo,
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
from gpuaudit.model.timeutil import HOUR, floor_hour, hours_between, iso, parse_time

KEYWORDS = ("kernel", "messages", "syslog", "system", "dmesg", "journal", "gpu")
MAX_GROUPS_PER_QUERY = 50
MAX_ROWS = 10_000
FINISHED = {"Complete", "Failed", "Cancelled", "Timeout", "Unknown"}


def _quoted_insights(text: str) -> str:
    """A Logs Insights string literal: single quotes when the text holds a double quote (no escapes needed)."""
    return f"'{text}'" if '"' in text and "'" not in text else json.dumps(text)


KERNEL_FILTER = 'filter @message like /kernel:/ or @message like /"_TRANSPORT"\\s*:\\s*"kernel"/'
KERNEL_QUERY = f"{KERNEL_FILTER} | stats count(*) as kernel_lines, max(@timestamp) as last_kernel_line by @log, @logStream"
SUMMARY_QUERY = (
    "stats count(*) as lines, min(@timestamp) as first, max(@timestamp) as last by @log, @logStream, bin(1h) as hour "
    "| stats count(*) as live_hours, sum(lines) as total_lines, min(first) as first_event, max(last) as last_event "
    "by @log, @logStream"
)
# How many rows the two per-stream reads return, in one query and one row: `streams` (a line: stream-summary rows)
# and `kernel_streams` (a kernel line: kernel-streams rows). `strcontains` is the documented 1-or-0 substring test
# (a query cannot test a regex per line), so the JSON form of KERNEL_FILTER is counted in its two usual spacings
# only; a count is only a size, and a part it makes too big is read again in halves (`_Parts`).
# `id_streams` / `kernel_id_streams`: those whose name holds "i-" (an instance ID, as a substring test sees it), so
# the names without one, which ride with the first part, can be given parts of their own from the start.
KERNEL_MARKERS = ("kernel:", '"_TRANSPORT":"kernel"', '"_TRANSPORT": "kernel"')
_KERNEL_LINE = f"greatest({', '.join(f'strcontains(@message, {_quoted_insights(m)})' for m in KERNEL_MARKERS)})"
_NAMED = 'strcontains(@logStream, "i-")'
STREAM_COUNTS = (
    f"fields {_KERNEL_LINE} as kernel_line, {_NAMED} as named, least({_KERNEL_LINE}, {_NAMED}) as kernel_named "
    "| stats max(kernel_line) as kernel, max(named) as id, max(kernel_named) as kernel_id by @log, @logStream "
    "| stats count(*) as streams, sum(kernel) as kernel_streams, sum(id) as id_streams, "
    "sum(kernel_id) as kernel_id_streams by @log"
)
# The GPU evidence lines the rules match on (domain/markers.py), with the status streams' error lines.
GPU_QUERY = gpu_lines_query(MAX_ROWS)
# A training job's throughput and step-time lines (domain/throughput.py), and what makes a group a job's: NCCL's
# own lines are printed by the training processes, so a group holding them holds the job's output.
JOB_QUERY = job_figures_query(MAX_ROWS)
JOB_LINE = re.compile("|".join((NCCL_MARKER, *NCCL_TIMEOUT_MARKERS)))


def hours_query(streams: Iterable[str]) -> str:
    """Detail bins for named streams; names are JSON-quoted, so no name can break out of the string."""
    names = ", ".join(_quoted(s) for s in sorted(set(streams)))
    return f"filter @logStream in [{names}] | stats count(*) as lines by @log, @logStream, bin(1h) as hour"


def _quoted(stream: str) -> str:
    return json.dumps(stream)


def _hours_query_cost(stream: str) -> int:
    """Characters a stream adds to `hours_query`: its quoted name and the ", " before it."""
    return len(_quoted(stream)) + 2


@dataclass
class LogEvidence:
    log_groups: list[LogGroupInfo]
    hma_log_group: str | None
    kernel_streams: list[KernelStream]
    stream_activity: list[StreamActivity]
    gpu_lines: list[GpuLine]
    queries: list[QueryRecord]
    discovered_nodes: list[NodeInfo]
    hma_streams: list[str] | None
    listed_streams: list[ListedStream]
    silent_streams: list[ListedStream]
    boot_lines: list[GpuLine]
    kernel_unread_groups: list[str]  # groups whose kernel-streams read did not complete
    summary_unread_groups: list[str]  # groups whose stream-summary read did not complete
    job_figures: list[JobFigure]
    job_figure_groups: list[str]  # job groups whose figures were read whole
    job_figure_unread_groups: list[str]  # job groups whose figures read failed or stayed at the row cap


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


def _batches(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def _row(row: list[dict[str, str]]) -> dict[str, str]:
    return {cell["field"]: cell.get("value", "") for cell in row}


def _group_name(log_field: str) -> str:
    # @log is `<account-id>:<group>`; the account ID stops here and never reaches the result.
    return log_field.split(":", 1)[1] if ":" in log_field else log_field


@dataclass(eq=False)  # identity: the concurrency budget tracks each query, not equal-looking ones
class _Pending:
    purpose: QueryPurpose
    groups: list[str]
    start: datetime
    end: datetime
    query_id: str | None
    subject: str = ""  # what the query reads beyond its groups, for the gap if it fails
    settle: Callable[[], None] = lambda: None
    settled: bool = False
    rows: list[dict[str, str]] | None = None
    key: str = ""  # in the journal
    record: int | None = None  # its QueryRecord in the runner's records


class JournalEntry(BaseModel):
    """One query of a batch across invocations: its ID, when it started, and its outcome once read."""

    query_id: str | None
    started: datetime
    status: str | None = None  # None: still running when last asked
    rows: list[dict[str, str]] | None = None
    scanned: float = 0.0
    failure: Gap | None = None  # GetQueryResults itself failed


class QueryJournal(BaseModel):
    """The queries a batch has started and read, kept between Lambda invocations so a query is waited for by
    the state machine (Wait state), never by a Lambda: on each invocation the batch's collection is replayed,
    started queries are not started again, finished ones are not read again, and a query still running ends the
    invocation (QueriesPending) until it finishes or its deadline passes (then it is stopped: a gap)."""

    entries: dict[str, JournalEntry] = {}
    calls: dict[str, int] = {}  # calls made by earlier invocations, "service:operation" -> count


QUOTA_FULL = "LimitExceededException"  # StartQuery past the account's concurrent-query quota


class QueriesPending(Exception):
    """A journaled query is still running: come back after a wait (the state machine's Wait state)."""


def _journal_key(purpose: str, groups: list[str], start: datetime, end: datetime, query: str) -> str:
    return json.dumps([purpose, groups, iso(start), iso(end), query])


class InsightsRunner:
    """Starts queries within the audit's concurrency budget, polls them with a deadline, stops the ones it
    gives up on. `slots` is shared by every runner of one audit; without one, the runner has its own. With a
    `journal` (the deployed path), it never sleeps: a query still running raises QueriesPending instead."""

    def __init__(self, aws: Aws, gaps: list[Gap], poll_seconds: float = 1.0, deadline_s: float = 300.0,
                 slots: QuerySlots | None = None, journal: QueryJournal | None = None) -> None:
        self.aws, self.gaps, self.poll_seconds, self.deadline_s = aws, gaps, poll_seconds, deadline_s
        self.slots = slots or QuerySlots()
        self.records: list[QueryRecord] = []
        self.journal = journal

    def start(self, purpose: QueryPurpose, groups: list[str], start: datetime, end: datetime, query: str,
              subject: str = "") -> _Pending:
        pending = _Pending(purpose, groups, start, end, None, subject)
        pending.settle = lambda: self._settle(pending)
        self.slots.take(pending)  # may first settle the oldest query in flight
        key = _journal_key(purpose, groups, start, end, query)
        pending.key = key
        entry = self.journal.entries.get(key) if self.journal is not None else None
        if entry is not None and (entry.query_id is not None or entry.failure is not None):
            pending.query_id = entry.query_id  # started (or refused for good) by an earlier invocation
            if pending.query_id is None:
                self.gaps.append(entry.failure or Gap(kind="not-read", service="logs", operation="StartQuery",
                                                      target=", ".join(groups)))
                pending.settled = True
                self.slots.release(pending)
            return pending
        try:
            # endTime is inclusive to the whole second: stop one second short so [start, end) is queried and a
            # line at exactly the padded end cannot fill an extra hour bin (and hide an empty hour in the count).
            pending.query_id = self.aws.call(
                "logs", "StartQuery", logGroupNames=groups, startTime=int(start.timestamp()),
                endTime=math.ceil(end.timestamp()) - 1, queryString=query)["queryId"]
        except CallFailed as failed:
            if self.journal is not None and failed.code == QUOTA_FULL:
                # Every concurrent query of the account is in use (other audits, dashboards): wait in the state
                # machine and start it then, rather than record a gap, until the query's deadline passes.
                waiting = entry or JournalEntry(query_id=None, started=self.aws.clock())
                self.journal.entries[key] = waiting
                if (self.aws.clock() - waiting.started).total_seconds() < self.deadline_s:
                    raise QueriesPending(f"{purpose}: the account's Logs Insights query quota is in use") from None
            gap = failed.gap_for(f"{purpose} query over {', '.join(groups)}{subject} not run")
            self.gaps.append(gap)
            pending.settled = True
            self.slots.release(pending)
            if self.journal is not None:
                self.journal.entries[key] = JournalEntry(query_id=None, started=self.aws.clock(), failure=gap)
            return pending
        if self.journal is not None:
            self.journal.entries[key] = JournalEntry(query_id=pending.query_id, started=self.aws.clock())
        return pending

    def results(self, pending: _Pending) -> list[dict[str, str]] | None:
        self._settle(pending)
        return pending.rows

    def _settle(self, pending: _Pending) -> None:
        if not pending.settled:
            pending.rows = self._poll(pending)
            pending.settled = True
        self.slots.release(pending)

    def _poll(self, pending: _Pending) -> list[dict[str, str]] | None:
        if pending.query_id is None:
            return None
        if self.journal is not None:
            return self._read_journaled(pending, self.journal.entries[pending.key])
        waited = 0.0
        while True:
            try:
                out = self.aws.call("logs", "GetQueryResults", queryId=pending.query_id)
            except CallFailed as failed:
                self.gaps.append(failed.gap_for(f"{pending.purpose} results{pending.subject} not read"))
                return None
            status = out.get("status", "Unknown")
            if status in FINISHED:
                break
            if waited >= self.deadline_s:
                with contextlib.suppress(CallFailed):  # the gap below already says the query was abandoned
                    self.aws.call("logs", "StopQuery", queryId=pending.query_id)
                self.gaps.append(Gap(kind="timed-out", service="logs", operation="GetQueryResults",
                                     unseen=f"{pending.purpose} query still {status} after "
                                     f"{self.deadline_s:.0f} s over {', '.join(pending.groups)}{pending.subject}; stopped"))
                self._record(pending, f"{status} (abandoned)", 0, 0.0, False)
                return None
            self.aws.sleep(self.poll_seconds)
            waited += self.poll_seconds
        rows = [_row(r) for r in out.get("results", [])]
        scanned = float((out.get("statistics") or {}).get("recordsScanned", 0.0))
        return self._finished(pending, status, rows, scanned)

    def _read_journaled(self, pending: _Pending, entry: JournalEntry) -> list[dict[str, str]] | None:
        """One look at a journaled query (or none, when an earlier invocation already read it)."""
        if entry.status is None and entry.failure is None:
            try:
                out = self.aws.call("logs", "GetQueryResults", queryId=pending.query_id)
            except CallFailed as failed:
                entry.failure = failed.gap_for(f"{pending.purpose} results{pending.subject} not read")
            else:
                status = out.get("status", "Unknown")
                if status in FINISHED:
                    entry.status, entry.rows = status, [_row(r) for r in out.get("results", [])]
                    entry.scanned = float((out.get("statistics") or {}).get("recordsScanned", 0.0))
                elif (self.aws.clock() - entry.started).total_seconds() < self.deadline_s:
                    raise QueriesPending(pending.purpose)
                else:
                    with contextlib.suppress(CallFailed):  # the gap below already says the query was abandoned
                        self.aws.call("logs", "StopQuery", queryId=pending.query_id)
                    entry.status = f"{status} (abandoned)"
        if entry.failure is not None:
            self.gaps.append(entry.failure)
            return None
        if entry.status is not None and entry.status.endswith("(abandoned)"):
            self.gaps.append(Gap(kind="timed-out", service="logs", operation="GetQueryResults",
                                 unseen=f"{pending.purpose} query still {entry.status.split(' ')[0]} after "
                                 f"{self.deadline_s:.0f} s over {', '.join(pending.groups)}{pending.subject}; stopped"))
            self._record(pending, entry.status, 0, 0.0, False)
            return None
        return self._finished(pending, entry.status or "Unknown", entry.rows or [], entry.scanned)

    def _finished(self, pending: _Pending, status: str, rows: list[dict[str, str]],
                  scanned: float) -> list[dict[str, str]] | None:
        truncated = len(rows) >= MAX_ROWS
        self._record(pending, status, len(rows), scanned, truncated)
        if status != "Complete":
            self.gaps.append(Gap(kind="query-failed", service="logs", operation="StartQuery",
                                 unseen=f"{pending.purpose} query ended {status} over "
                                 f"{', '.join(pending.groups)}{pending.subject}"))
            return None
        return rows

    def _record(self, p: _Pending, status: str, rows: int, scanned: float, truncated: bool) -> None:
        p.record = len(self.records)
        self.records.append(QueryRecord(purpose=p.purpose, log_groups=p.groups, start=p.start, end=p.end,
                                        status=status, rows=rows, records_scanned=scanned, truncated=truncated))

    def mark_reread(self, p: _Pending) -> None:
        """The capped query's streams were all read again in parts that stayed under the cap."""
        if p.record is not None:
            self.records[p.record] = self.records[p.record].model_copy(update={"reread": True})


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
    # in this batch's groups a stream's absence from them proves nothing.
    unread: list[str] = []
    # Incident: the job groups' throughput and step-time figures; the job groups read whole, and those not.
    job_figures: list[JobFigure] = []
    job_groups: list[str] = []
    job_unread: list[str] = []


def looks_like_node_stream(stream: str, nodes: list[NodeInfo] | NodeIndex) -> bool:
    """Known node, or any instance ID: nodes that vanished from DescribeInstances are found only later."""
    return bool(stream_node_ids(stream, nodes)) or INSTANCE_ID.search(stream) is not None


def collect_batch(aws: Aws, cluster_name: str, nodes: list[NodeInfo], batch: list[str], win: LogWindow,
                  runner: InsightsRunner | None = None,
                  known_kernel: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
                  slots: QuerySlots | None = None, journal: QueryJournal | None = None,
                  expected_streams: Mapping[str, Mapping[str, Rows]] | None = None,
                  job_groups: Collection[str] = ()) -> BatchEvidence:
    """The batch's three queries plus per-hour detail for node streams with gaps. `known_kernel`: kernel
    streams identified by an earlier read (incremental audits count only the new kernel lines). `slots`:
    the audit's concurrency budget, when batches share one.

    A per-stream read (kernel streams, stream summary) expected past the 10,000-row cap is read in parts from the
    start: `expected_streams` gives its rows per group when known (an hourly read, from the last read's streams);
    when it does not and the fleet alone would pass the cap (a stream or more per node), one `stream-count` query
    counts the rows of every such read first (one row per group). Each part names only the groups it reads
    (`group_parts`): Logs Insights bills every record of each group it names, so a part never scans a group whose
    streams it does not read. Otherwise the whole is read, and read again in parts if it reaches the cap.
    `job_groups`: groups known to hold a job's output (named with --log-group, or NCCL lines in cached hours), read
    for the job's figures in an incident with the groups whose GPU lines hold NCCL's."""
    gaps: list[Gap] = []
    runner = runner or InsightsRunner(aws, gaps, slots=slots, journal=journal)
    runner.gaps = gaps
    reads: dict[str, tuple[QueryPurpose, datetime, datetime, str]] = {
        "kernel": ("kernel-streams", win.lifetime_start, win.kernel_until, KERNEL_QUERY),
        "summary": ("stream-summary", win.padded_start, win.padded_end, SUMMARY_QUERY),
        "gpu": ("gpu-lines", win.gpu_start, win.gpu_end, GPU_QUERY)}
    expect = dict(expected_streams or {})
    # The kernel look-back (launch to the query time, up to 14 days) is read a day at a time: no query scans more
    # than a day of a group, so none runs long enough to be stopped (#34 item 4). Each day is read whole, and again in
    # parts if it reaches the cap: a count over the look-back would size every day for its busiest (the launch day).
    spans = {kind: day_spans(start, end) if kind == "kernel" else [(start, end)]
             for kind, (_, start, end, _) in reads.items()}

    def read(kind: str, rows: Mapping[str, Rows] | None) -> list[tuple[datetime, datetime, _Pending | _Parts]]:
        purpose, _, _, query = reads[kind]
        if rows is not None and in_parts(sum(r.streams for r in rows.values())):
            return [(start, end, _Parts(runner, purpose, groups, start, end, query, parts))
                    for start, end in spans[kind] for groups, parts in group_parts(batch, rows)]
        return [(start, end, runner.start(purpose, batch, start, end, query)) for start, end in spans[kind]]

    counting = [kind for kind in ("kernel", "summary")
                if kind not in expect and in_parts(len(nodes)) and len(spans[kind]) == 1]
    count = runner.start("stream-count", batch, min(reads[kind][1] for kind in counting),
                         max(reads[kind][2] for kind in counting), STREAM_COUNTS,
                         f" (rows of the {' and '.join(reads[kind][0] for kind in counting)} reads)") \
        if counting else None
    pending = {kind: read(kind, expect.get(kind)) for kind in reads if kind not in counting}
    counted = _streams_counted(runner.results(count)) if count else None
    for kind in counting:  # a count not read leaves the whole to be read (re-read if capped)
        pending[kind] = read(kind, None if counted is None else counted[kind])
    kernel: list[KernelStream] = []
    summary: dict[tuple[str, str], StreamActivity] = {}
    gpu_lines: list[GpuLine] = []
    truncated: set[str] = set()
    unanswered: set[str] = set()
    node_index = NodeIndex(nodes)
    for kind, slices in sorted(pending.items(), key=lambda item: list(reads).index(item[0])):
        purpose, _, _, query = reads[kind]
        rows, left, answered = [], 0, 0
        for start, end, p in slices:
            if isinstance(p, _Parts):  # expected past the cap: read in parts from the start
                parts = p.read()
            else:
                whole = runner.results(p)
                parts = PartsRead(whole or [], int(whole is None), whole is not None)
                if whole is not None and len(whole) >= MAX_ROWS and kind == "gpu":
                    split, complete = _split_by_time(runner, "gpu-lines", GPU_QUERY, batch, win.gpu_start,
                                                     win.gpu_end, gaps, "GPU lines", depth=0)
                    if complete:  # every line read: the capped query was read again, so the cache may keep it
                        runner.mark_reread(p)
                    parts = PartsRead(split, 0, True)
                elif whole is not None and len(whole) >= MAX_ROWS:
                    parts = _Parts(runner, purpose, batch, start, end, query,
                                   id_parts(stream_part_ranges(whole, node_index, len(nodes))), whole, capped=p).read()
            answered += parts.answered
            left += parts.left if parts.answered else 0
            rows += parts.rows
        if not answered:
            unanswered.add(kind)
            continue
        if len(slices) > answered:  # a day of the look-back did not answer: its gap is the failed query's own
            truncated.add(kind)
        if len(slices) > 1:
            rows = _summed_days(rows)
        if left:
            truncated.add(kind)
            gaps.append(Gap(kind="truncated", service="logs", operation="GetQueryResults",
                            unseen=f"the {purpose} query over {', '.join(batch)} was read in parts by the instance ID "
                            f"or host name in the stream name, of which {left} reached the Logs Insights maximum of "
                            f"{MAX_ROWS} rows or did not answer; rows beyond them were not read and are not "
                            "treated as empty"))
        for r in rows:
            group, stream = _group_name(r.get("@log", "")), r.get("@logStream", "")
            if kind == "kernel":
                kernel.append(KernelStream(log_group=group, log_stream=stream, kernel_lines=int(r["kernel_lines"]),
                                           last_kernel_line=_time(r.get("last_kernel_line"))))
            elif kind == "summary":
                summary[(group, stream)] = StreamActivity(
                    log_group=group, log_stream=stream, lines=int(float(r["total_lines"])),
                    live_hours=int(r["live_hours"]), first_event=_time(r.get("first_event")),
                    last_event=_time(r.get("last_event")))
            else:
                gpu_lines.append(GpuLine(time=_time(r["@timestamp"]) or win.padded_start, log_group=group,
                                         log_stream=stream, message=r.get("@message", "")))
    expected = len(hours_between(win.padded_start, win.padded_end))
    kernel_keys = {(k.log_group, k.log_stream) for k in kernel} | set(known_kernel)
    if win.deep_kernel_start is not None and not {"kernel"} & (unanswered | truncated):
        kernel += _deep_kernel(runner, batch, node_index, nodes, kernel_keys, win.deep_kernel_start, win.lifetime_start)
        kernel_keys = {(k.log_group, k.log_stream) for k in kernel} | set(known_kernel)
    need_detail = {key for key in kernel_keys
                   if looks_like_node_stream(key[1], node_index) and key in summary
                   and summary[key].live_hours < expected}
    # Control-plane streams are binned like kernel streams (#15 item 3): every empty hour is listed.
    need_detail.update(key for key, a in summary.items()
                       if a.live_hours < expected and pcluster_control_log(key[0], key[1], cluster_name))
    for group in batch:
        if is_hma_group(group, cluster_name):
            other_streams = [key for key in summary if key[0] == group and not key[1].startswith(HMA_PREFIX)]
            if not any(summary[key].live_hours >= expected for key in other_streams):
                need_detail.update(other_streams)
    # Rows past the 10,000-row cap, or of a summary that failed, were never read: a node's kernel stream missing
    # from the summary is asked for by name (detail query), never taken as empty for the window.
    unread: set[tuple[str, str]] = set()
    if "summary" in truncated | unanswered:
        unread = {key for key in kernel_keys if looks_like_node_stream(key[1], node_index) and key not in summary}
        summary.update({key: StreamActivity(log_group=key[0], log_stream=key[1], lines=0, live_hours=0)
                        for key in unread})
        need_detail |= unread
    in_one_run = {key: hours for key in need_detail - unread if (hours := one_run(summary[key])) is not None}
    detail = _hour_detail(runner, need_detail - in_one_run.keys(), expected, win.padded_start, win.padded_end,
                          {key: a.live_hours for key, a in summary.items() if key not in unread})
    detail.update(in_one_run)
    activity = [_with_hours(a, detail.get(key), key in unread) if key in need_detail else a
                for key, a in sorted(summary.items())]
    listed = list_streams(aws, batch, win.padded_start, gaps) if unanswered & {"kernel", "summary"} else []
    boot = _boot_lines(runner, batch, node_index, nodes, gpu_lines, win) if "gpu" not in unanswered else []
    jobs = sorted({g for g in batch if g in job_groups} | {g.log_group for g in gpu_lines if JOB_LINE.search(g.message)})
    figures, unread_jobs = _job_figures(runner, jobs, win.job_range, gaps) if win.job_range and jobs else ([], [])
    return BatchEvidence(groups=batch, kernel=kernel, activity=activity, gpu_lines=gpu_lines,
                         queries=runner.records, gaps=gaps, listed=listed, boot_lines=boot,
                         unread=sorted({"kernel", "summary"} & (truncated | unanswered)),
                         job_figures=figures, job_groups=[g for g in jobs if g not in unread_jobs], job_unread=unread_jobs)


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


DAY = timedelta(days=1)


def day_spans(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at each UTC midnight inside it: no span is longer than a day."""
    cuts = [start]
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0) + DAY
    while midnight < end:
        cuts.append(midnight)
        midnight += DAY
    return list(zip(cuts, [*cuts[1:], end], strict=True))


def _summed_days(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """kernel-streams rows of several days as the whole look-back's: per stream, the kernel lines summed and the
    latest last line."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        key = (r.get("@log", ""), r.get("@logStream", ""))
        prior = out.get(key)
        if prior is None:
            out[key] = dict(r)
            continue
        prior["kernel_lines"] = str(int(float(prior["kernel_lines"])) + int(float(r["kernel_lines"])))
        if (_time(r.get("last_kernel_line")) or _EARLIEST) > (_time(prior.get("last_kernel_line")) or _EARLIEST):
            prior["last_kernel_line"] = r.get("last_kernel_line", "")
    return list(out.values())


_EARLIEST = datetime.min.replace(tzinfo=UTC)


BOOT_ROWS = 1_000  # newest boot-time lines kept per query: a node boots a few times, each boot logs a few lines


def lacking_boot_lines(nodes: list[NodeInfo], lines: list[GpuLine], index: NodeIndex) -> list[str]:
    """GPU nodes whose own streams held, in the GPU-lines window, no driver banner — or, on an NVSwitch type
    (RULES §2 table), no Fabric Manager start line: the ones a since-launch search is for."""
    seen_fm: set[str] = set()
    seen_driver: set[str] = set()
    for line in lines:
        owners = stream_node_ids(line.log_stream, index)
        if any(m in line.message for m in FABRIC_MANAGER_STARTED):
            seen_fm.update(owners)
        if DRIVER_BANNER in line.message:
            seen_driver.update(owners)
    out = []
    for n in nodes:
        itype = (n.instance_type or "").removeprefix("ml.")
        if n.role not in ("compute", "unknown") or accelerated_by_family(itype) is False:
            continue
        fm_expected = bool(itype) and nvswitch_class(itype, None)[1]
        if n.instance_id not in seen_driver or (fm_expected and n.instance_id not in seen_fm):
            out.append(n.instance_id)
    return sorted(out)


def _boot_lines(runner: InsightsRunner, batch: list[str], index: NodeIndex, nodes: list[NodeInfo],
                lines: list[GpuLine], win: LogWindow) -> list[GpuLine]:
    """RULES §2: Fabric Manager and the driver banner are logged at boot, often before the window. Their cost is
    bounded: only nodes lacking them in the window, only their streams named, from the lifetime start (launch, at
    most KERNEL_LOOKBACK before the window, the kernel-streams query's own range) to where the GPU-lines query
    began — nothing it read is read twice — and at most BOOT_ROWS rows."""
    if not win.boot_lines or win.lifetime_start >= win.gpu_start:
        return []
    lacking = lacking_boot_lines(nodes, lines, index)
    found: list[GpuLine] = []
    for i in range(0, len(lacking), DEEP_IDS_PER_QUERY):
        query = boot_lines_query(lacking[i:i + DEEP_IDS_PER_QUERY], BOOT_ROWS)
        for r in runner.results(runner.start("boot-lines", batch, win.lifetime_start, win.gpu_start, query)) or []:
            found.append(GpuLine(time=_time(r.get("@timestamp")) or win.lifetime_start,
                                 log_group=_group_name(r.get("@log", "")), log_stream=r.get("@logStream", ""),
                                 message=r.get("@message", "")))
    return found


DEEP_IDS_PER_QUERY = 200  # instance IDs named in one deep kernel query's stream filter


def _deep_kernel(runner: InsightsRunner, batch: list[str], index: NodeIndex, nodes: list[NodeInfo],
                 kernel_keys: set[tuple[str, str]], start: datetime, lifetime: datetime) -> list[KernelStream]:
    """RULES §4 (b) is "since launch": nodes launched before the bounded lookback whose streams held no `kernel:`
    line in it are looked up back to their launch (at most KERNEL_DEEP_LOOKBACK), naming only their streams, so a
    quiet kernel stream is never called "not shipping kernel lines" for want of reading its boot lines."""
    proven = {iid for _, stream in kernel_keys for iid in stream_node_ids(stream, index)}
    lacking = sorted(n.instance_id for n in nodes if n.launch_time and n.launch_time < lifetime
                     and n.instance_id not in proven and n.role in ("compute", "unknown"))
    found: list[KernelStream] = []
    for i in range(0, len(lacking), DEEP_IDS_PER_QUERY):
        ids = lacking[i:i + DEEP_IDS_PER_QUERY]
        query = f"filter @logStream like /{'|'.join(ids)}/ | {KERNEL_QUERY}"
        days = [runner.start("kernel-streams", batch, a, b, query) for a, b in day_spans(start, lifetime)]
        rows = _summed_days([r for p in days for r in runner.results(p) or []])
        for r in rows:
            found.append(KernelStream(log_group=_group_name(r.get("@log", "")), log_stream=r.get("@logStream", ""),
                                      kernel_lines=int(r["kernel_lines"]),
                                      last_kernel_line=_time(r.get("last_kernel_line"))))
    return found


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
                                           first_event=_time_ms(s.get("firstEventTimestamp")), last_event=_time_ms(last)))
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


# A per-stream query (kernel-streams, stream-summary) expected past the 10,000-row cap — counted first, or known
# from the last read — or that reaches it, is read in parts, each filtered on a range of the last two hex digits
# of an instance ID in the stream's name (256 endings, uniform whether IDs are random, as EC2's are, or sequential,
# as in test worlds). The names that hold no instance ID ride with the first part (`or ... not like`), or, when the
# count (or the cache) says they would crowd it, have parts of their own from the start, so every name falls in a
# part. A name with two IDs may fall in two; rows are keyed by stream, so the overlap is harmless.
# Filtering on @logStream keeps each stream's row whole. A part that still reaches the cap is halved, down to one
# ending (2.56 million streams per batch); the names without an ID then get a part of their own, split in turn by
# the last digit of an EC2 host name (`ip-10-0-3-17`: streams named `{hostname}`), down to one digit; the names
# with neither (past 10,000 per batch) stay a gap. No look-around: the service's regular expressions are not
# Python's.
_HEX = "0123456789abcdef"
ENDINGS = 256  # two hex digits
Endings = tuple[int, int]  # [first, last + 1) of the 256 two-digit endings, as numbers
_ID_ENDING = "i-(?:[0-9a-f]{{6}}|[0-9a-f]{{15}})(?:{endings})(?:[^0-9a-f]|$)"  # IDs of 8 or 17 digits
_ANY_ID = _ID_ENDING.format(endings="[0-9a-f]{2}")
NO_INSTANCE_ID = f"filter @logStream not like /{_ANY_ID}/"
_ANY_ID_RX = re.compile(_ANY_ID)
_EC2_HOST = "ip-[0-9]+-[0-9]+-[0-9]+-[0-9]*[{digits}](?:[^0-9]|$)"  # its last digit: the IP address's
_DIGITS = "0123456789"
PART_HEADROOM = 1.2  # parts are sized for 83 % of the cap: IDs spread unevenly, and a count may be an estimate


def _endings_pattern(span: Endings) -> str:
    """The endings [lo, hi) as alternatives of explicit characters (`[9ab]`, never `[9-b]`). An ending's number
    is 16 × its last digit + the digit before, so sequential IDs, whose last digit turns fastest, spread over the
    parts as random ones do."""
    def chars(a: int, b: int) -> str:
        return _HEX[a] if a == b else f"[{_HEX[a:b + 1]}]"

    (a_last, a_before), (b_last, b_before) = divmod(span[0], 16), divmod(span[1] - 1, 16)
    if a_last == b_last:
        return chars(a_before, b_before) + _HEX[a_last]
    pieces = [chars(a_before, 15) + _HEX[a_last]]
    if b_last - a_last > 1:
        pieces.append("[0-9a-f]" + chars(a_last + 1, b_last - 1))
    return "|".join([*pieces, chars(0, b_before) + _HEX[b_last]])


@dataclass(frozen=True)
class Part:
    """A share of a per-stream read by the names of its streams: those whose instance ID ends in `endings`, and
    with `unnamed` those that hold no ID. Without `endings`, only names without an ID: all of them (`host_digits`
    None), those whose EC2 host name ends in one of `host_digits` (with `unhosted`, also those with no such host
    name), or ("") those with no such host name either."""

    endings: Endings | None = None
    unnamed: bool = False
    host_digits: str | None = None
    unhosted: bool = False

    def filter(self) -> str:
        if self.endings is not None:
            where = f"filter @logStream like /{_ID_ENDING.format(endings=_endings_pattern(self.endings))}/"
            return f"{where} or @logStream not like /{_ANY_ID}/" if self.unnamed else where
        if self.host_digits is None:
            return NO_INSTANCE_ID
        if self.host_digits:
            hosted = f"@logStream like /{_EC2_HOST.format(digits=self.host_digits)}/"
            if self.unhosted:
                return f"{NO_INSTANCE_ID} and ({hosted} or @logStream not like /{_EC2_HOST.format(digits=_DIGITS)}/)"
            return f"{NO_INSTANCE_ID} and {hosted}"
        return f"{NO_INSTANCE_ID} and @logStream not like /{_EC2_HOST.format(digits=_DIGITS)}/"

    def halves(self) -> list[Part]:
        """The parts this one is read again in when it reaches the cap; none when it cannot be split."""
        if self.endings is not None:
            if self.unnamed:  # the names without an ID leave it first: its range was sized for the IDs alone
                return [Part(self.endings), Part()]
            lo, hi = self.endings
            return [Part((lo, (lo + hi) // 2)), Part(((lo + hi) // 2, hi))] if hi - lo > 1 else []
        if self.host_digits is None:
            return host_parts(2)
        digits, unhosted = self.host_digits, self.unhosted
        if len(digits) > 1:
            return [Part(host_digits=digits[:len(digits) // 2]),
                    Part(host_digits=digits[len(digits) // 2:], unhosted=unhosted)]
        return [Part(host_digits=digits), Part(host_digits="")] if unhosted and digits else []


def host_parts(count: int) -> list[Part]:
    """The names without an instance ID in `count` parts (2 to 10) by their EC2 host name's last digit, the names
    with no such host name riding with the last."""
    cut = [len(_DIGITS) * i // count for i in range(count + 1)]
    return [Part(host_digits=_DIGITS[a:b], unhosted=b == len(_DIGITS)) for a, b in zip(cut, cut[1:], strict=False)]


def stream_part_filter(span: Endings | None, unnamed: bool = False) -> str:
    """The streams whose name holds an instance ID ending in `span`, and with `unnamed` those whose name holds
    none (`span` None: only those)."""
    return Part(span, unnamed).filter()


def part_ranges(streams: int) -> list[Endings]:
    """Endings for about `streams` streams: as few near-equal parts as keep the widest within 83 % of the cap, at
    least two (at most 256: one ending each)."""
    parts = max(2, math.ceil(streams * PART_HEADROOM / MAX_ROWS))
    while parts < ENDINGS and math.ceil(ENDINGS / parts) * streams * PART_HEADROOM > ENDINGS * MAX_ROWS:
        parts += 1
    parts = min(parts, ENDINGS)
    return [(ENDINGS * i // parts, ENDINGS * (i + 1) // parts) for i in range(parts)]


@dataclass(frozen=True)
class Rows:
    """How many rows a per-stream read returns: its streams, and of them those whose name holds no instance ID."""

    streams: int
    unnamed: int = 0


def id_parts(ranges: list[Endings]) -> list[Part]:
    """Parts by instance-ID ending, the names without an ID riding with the first."""
    return [Part(span, unnamed=i == 0) for i, span in enumerate(ranges)]


def planned_parts(rows: Rows) -> list[Part]:
    """The parts of a read of `rows` expected past the cap: its ID-named streams by ending; the names without an ID
    ride with the first part while that part stays within 83 % of the cap, else they are read apart from the start
    (by the last digit of their EC2 host name when they alone would pass it), not found by the first part's cap."""
    named = max(rows.streams - rows.unnamed, 0)
    ranges = part_ranges(named) if in_parts(named) else [(0, ENDINGS)]
    if not in_parts(named // len(ranges) + rows.unnamed):
        return id_parts(ranges)
    if not in_parts(rows.unnamed):
        return [*map(Part, ranges), Part()]
    return [*map(Part, ranges), *host_parts(min(len(_DIGITS), math.ceil(rows.unnamed * PART_HEADROOM / MAX_ROWS)))]


def holds_instance_id(stream: str) -> bool:
    """Does the stream's name hold an instance ID, as the parts' filters read it (8 or 17 hex digits)?"""
    return _ANY_ID_RX.search(stream) is not None


def in_parts(streams: int) -> bool:
    """Is a per-stream read of about `streams` streams read in parts from the start (its whole would be capped)?"""
    return streams * PART_HEADROOM > MAX_ROWS


def stream_part_ranges(rows: Sequence[dict[str, str]], index: NodeIndex, node_count: int) -> list[Endings]:
    """The endings of a re-read, for an estimate of the streams from the capped rows: the most streams any one
    node has among them (a node's streams are alike across the fleet), times the nodes."""
    per_node = Counter(iid for r in rows for iid in stream_node_ids(r.get("@logStream", ""), index))
    return part_ranges(max(per_node.values(), default=1) * max(node_count, len(per_node), 1))


@dataclass
class PartsRead:
    rows: list[dict[str, str]]
    left: int  # parts still at the cap or unanswered: 0 when every stream was read
    answered: bool  # at least one part returned rows


def _streams_counted(rows: list[dict[str, str]] | None) -> dict[str, dict[str, Rows]] | None:
    """The rows each per-stream read will return, per group, from a STREAM_COUNTS result (a group with no row: none);
    None when it was not read."""
    if rows is None:
        return None
    out: dict[str, dict[str, Rows]] = {"summary": {}, "kernel": {}}
    for row in rows:
        try:
            streams, named, kernel, kernel_named = (int(float(row.get(name, "0"))) for name in (
                "streams", "id_streams", "kernel_streams", "kernel_id_streams"))
        except ValueError:
            return None
        group = _group_name(row.get("@log", ""))
        out["summary"][group] = Rows(streams, streams - named)
        out["kernel"][group] = Rows(kernel, kernel - kernel_named)
    return out


def group_parts(batch: list[str], rows: Mapping[str, Rows]) -> list[tuple[list[str], list[Part]]]:
    """The queries of a per-stream read past the cap, each naming only the groups it reads: a group that alone would
    pass 83 % of the cap in its own parts (`planned_parts`), the others together, as many per query as keep it
    within 83 % of the cap (one part over all their streams, halved if it reaches the cap anyway). A part over both
    groups of a fleet scans both; apart, each part scans only its group (#34 item 7: the summary re-scanned every
    group per part)."""
    out: list[tuple[list[str], list[Part]]] = []
    together: list[str] = []
    held = 0
    for group in batch:
        count = rows.get(group, Rows(0))
        if in_parts(count.streams):
            out.append(([group], planned_parts(count)))
            continue
        if together and in_parts(held + count.streams):
            out.append((together, [Part((0, ENDINGS), unnamed=True)]))
            together, held = [], 0
        together.append(group)
        held += count.streams
    if together:
        out.append((together, [Part((0, ENDINGS), unnamed=True)]))
    return out


class _Parts:
    """A per-stream read in parts: every part is started at once (within the query budget), then read, and a part
    still at the cap is halved. `rows`: a capped whole's rows, when the whole was read first (`capped`)."""

    def __init__(self, runner: InsightsRunner, purpose: QueryPurpose, groups: list[str], start: datetime,
                 end: datetime, query: str, parts: list[Part], rows: Sequence[dict[str, str]] = (),
                 capped: _Pending | None = None) -> None:
        self.runner, self.purpose, self.groups, self.start, self.end, self.query = \
            runner, purpose, groups, start, end, query
        self.by_stream = {(r.get("@log", ""), r.get("@logStream", "")): r for r in rows}
        self.superseded = [capped] if capped else []  # the queries whose rows the parts read again
        self.queue = deque(map(self._begin, parts))

    def _begin(self, part: Part) -> tuple[Part, _Pending]:
        where = part.filter()
        return part, self.runner.start(self.purpose, self.groups, self.start, self.end, f"{where} | {self.query}",
                                       f" for streams matching {where.removeprefix('filter @logStream ')}")

    def read(self) -> PartsRead:
        left, answered = 0, False
        while self.queue:
            part, p = self.queue.popleft()
            rows = self.runner.results(p)
            answered |= rows is not None
            self.by_stream.update(((r.get("@log", ""), r.get("@logStream", "")), r) for r in rows or [])
            halves = part.halves() if rows is not None and len(rows) >= MAX_ROWS else []
            if not halves:
                left += rows is None or len(rows) >= MAX_ROWS
                continue
            self.superseded.append(p)
            self.queue.extend(self._begin(half) for half in halves)
        if not left:
            for p in self.superseded:
                self.runner.mark_reread(p)
        return PartsRead(list(self.by_stream.values()), left, answered)


MAX_GPU_SPLITS = 5  # up to 32 time slices of the window before the rest is reported as a gap


def _split_by_time(runner: InsightsRunner, purpose: QueryPurpose, query: str, batch: list[str], start: datetime,
                   end: datetime, gaps: list[Gap], what: str, depth: int = -1) -> tuple[list[dict[str, str]], bool]:
    """A line query (oldest first) read whole (depth -1), and at the 10,000-row cap re-read in halves of its time
    range: a flood of identical Xids, or a job logging every step, must not hide the later lines (they are
    collapsed downstream, not dropped here). Returns the rows and whether every part was read, under the cap. Each
    capped query whose halves were all read is marked read again, so a complete read seeds the incremental cache (a
    capped query not read again never does: every hourly audit of such a fleet would read the whole window)."""
    if depth < 0:
        first = runner.start(purpose, batch, start, end, query)
        whole = runner.results(first)
        if whole is None or len(whole) < MAX_ROWS:
            return whole or [], whole is not None
        halves, done = _split_by_time(runner, purpose, query, batch, start, end, gaps, what, 0)
        if done:
            runner.mark_reread(first)
        return halves, done
    middle = start + timedelta(seconds=int((end - start).total_seconds()) // 2)  # whole seconds: no overlap
    rows: list[dict[str, str]] = []
    complete = True
    for lo, hi in ((start, middle), (middle, end)):
        pending = runner.start(purpose, batch, lo, hi, query)
        part = runner.results(pending)
        if part is None:
            complete = False
            continue
        if len(part) >= MAX_ROWS and depth + 1 < MAX_GPU_SPLITS:
            part, read = _split_by_time(runner, purpose, query, batch, lo, hi, gaps, what, depth + 1)
            if read:
                runner.mark_reread(pending)
            complete &= read
        elif len(part) >= MAX_ROWS:
            complete = False
            gaps.append(Gap(kind="truncated", service="logs", operation="GetQueryResults",
                            unseen=f"more than {MAX_ROWS} {what} between {iso(lo)} and {iso(hi)} in "
                            f"{', '.join(batch)}; lines beyond the first {MAX_ROWS} of that slice were not read"))
        rows.extend(part)
    return rows, complete


def merge_batches(aws: Aws, cluster: ClusterInfo, nodes: list[NodeInfo], groups: list[LogGroupInfo],
                  batches: list[BatchEvidence], gaps: list[Gap]) -> LogEvidence:
    """Join the batches: find vanished nodes, keep groups that name an audited node, list HMA streams."""
    kernel = [k for b in batches for k in b.kernel]
    activity = [a for b in batches for a in b.activity]
    for b in batches:
        gaps.extend(b.gaps)
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
    return LogEvidence(
        log_groups=groups, hma_log_group=hma_group,
        kernel_streams=[k for k in kernel if k.log_group in kept],
        stream_activity=[a for a in activity if a.log_group in kept],
        gpu_lines=sorted((g for b in batches for g in b.gpu_lines), key=lambda g: g.time),
        boot_lines=sorted((g for b in batches for g in b.boot_lines), key=lambda g: g.time),
        queries=[q for b in batches for q in b.queries], discovered_nodes=discovered, hma_streams=hma_streams,
        listed_streams=listed, silent_streams=describe_silent_streams(
            aws, [k for k in kernel if k.log_group in kept], activity, gaps),
        kernel_unread_groups=sorted(g for b in batches if "kernel" in b.unread for g in b.groups),
        summary_unread_groups=sorted(g for b in batches if "summary" in b.unread for g in b.groups),
        job_figures=sorted((f for b in batches for f in b.job_figures), key=lambda f: f.time),
        job_figure_groups=sorted(g for b in batches for g in b.job_groups),
        job_figure_unread_groups=sorted(g for b in batches for g in b.job_unread))


def log_batches(groups: list[LogGroupInfo]) -> list[list[str]]:
    return _batches([g.name for g in groups], MAX_GROUPS_PER_QUERY)


def _hma_streams(aws: Aws, group: str, gaps: list[Gap]) -> list[str] | None:
    """HMA streams exist only for nodes with a detection (RULES §4), so listing them is one small call."""
    try:
        return [s["logStreamName"] for s in aws.paginate("logs", "DescribeLogStreams", "logStreams", token="nextToken",
                                                         logGroupName=group, logStreamNamePrefix=HMA_PREFIX)]
    except CallFailed as failed:
        gaps.append(failed.gap_for(f"HMA streams of {group} not listed; HMA status Not observable"))
        return None


DETAIL_ROWS = 9_000  # rows a detail query is packed for: a tenth of the cap left for lines that arrive meanwhile


StreamKey = tuple[str, str]  # (log group, stream)


def detail_chunks(keys: Iterable[StreamKey], expected_hours: int,
                  live_hours: Mapping[StreamKey, int]) -> list[list[StreamKey]]:
    """Streams of any groups of the batch cut into detail queries of at most DETAIL_ROWS rows — a stream returns
    one row per hour holding a line, which the summary counted over the same range (`live_hours`; a stream it did
    not count is taken to fill every hour) — and QUERY_CHAR_BUDGET characters of query text (stream names run to
    512 characters)."""
    fixed = len(hours_query([]))
    return pack(sorted(keys), lambda k: _hours_query_cost(k[1]), QUERY_CHAR_BUDGET - fixed, MAX_ROWS,
                weight=lambda k: min(expected_hours, max(1, live_hours.get(k, expected_hours))), max_weight=DETAIL_ROWS)


def _hour_detail(runner: InsightsRunner, keys: set[StreamKey], expected_hours: int, start: datetime,
                 end: datetime, live_hours: Mapping[StreamKey, int]) -> dict[StreamKey, dict[datetime, int]]:
    """Per-hour counts for the named streams, in queries within the row and length limits (`detail_chunks`), each
    over the groups its streams are in. A query that still reaches the cap (lines arrived since the summary, or a
    same-named stream of another group) is read again in halves."""
    detail: dict[StreamKey, dict[datetime, int]] = {}
    halved: list[_Pending] = []  # capped queries, marked read again once every half was read
    complete = True

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
        if len(rows) >= MAX_ROWS:
            if len(chunk) > 1:
                queue.extend(begin(half) for half in (chunk[:len(chunk) // 2], chunk[len(chunk) // 2:]))
                halved.append(p)
            else:
                complete = False
                runner.gaps.append(Gap(kind="truncated", service="logs", operation="GetQueryResults",
                                       unseen=f"per-hour detail of {chunk[0][0]} / {chunk[0][1]} reached the Logs "
                                       f"Insights maximum of {MAX_ROWS} rows; its hours were not read"))
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


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return parse_time(str(value))
    except ValueError:
        return None


def lifetime_start(nodes: list[NodeInfo], padded_start: datetime, lookback: timedelta) -> datetime:
    """Kernel-stream identification looks back over node lifetimes (since launch), not just the window — but never
    more than `lookback` before the padded window: a full read's cost grows with it (docs/DEPLOY.md), and a node
    older than that is judged on the lines of the bounded span, with the bound said (rules/coverage.py)."""
    launches = [n.launch_time for n in nodes if n.launch_time]
    earliest = min(launches) if launches and len(launches) == len(nodes) else padded_start - lookback
    return min(max(earliest, padded_start - lookback), padded_start)


def deep_kernel_start(nodes: list[NodeInfo], lifetime: datetime, deep: timedelta) -> datetime | None:
    """Where a full read's second look for older nodes starts (their earliest launch, at most `deep` before the
    bounded lifetime start); None when no node launched before it."""
    launches = [n.launch_time for n in nodes if n.launch_time and n.launch_time < lifetime]
    return max(min(launches), lifetime - deep) if launches else None
