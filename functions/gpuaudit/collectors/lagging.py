"""The re-read of the streams an hourly audit cannot yet call final (collectors/cache.py `lagging`), by name.

A stream's lines reach CloudWatch Logs in order (an agent ships each file in sequence; RULES §4 treats a gap followed by
later lines as lost, not late): once its line at time L is readable, its earlier lines are too, save a margin for
batches retried out of order. So the hours a late line can still fill are a stream's trailing silence only. A stream
still writing when the last audit ran is read again from the hour before that audit, with the whole group; one that
had fallen silent less than the late-delivery horizon before it (a node that died, an agent that stalled) is read
again by name from its silence on, here: a `@logStream in [...]` query is served by the default field index and scans
only those streams, so a few silent streams do not make every hour re-read the whole group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gpuaudit.collectors import insights  # insights.MAX_ROWS: the one cap, patched in one place
from gpuaudit.collectors.insights import InsightsRunner, _group_name, _split_by_time, _time
from gpuaudit.collectors.log_queries import (
    GPU_QUERY,
    KERNEL_LINES_QUERY,
    hours_query_cost,
    lagging_hours_query,
    named_query,
)
from gpuaudit.collectors.query_budget import QUERY_CHAR_BUDGET, pack
from gpuaudit.model.evidence import Gap, GpuLine, QueryPurpose, QueryRecord
from gpuaudit.model.timeutil import floor_hour

StreamKey = tuple[str, str]  # (log group, stream)


@dataclass
class StreamHourLines:
    """One stream's lines in the hours read again: per hour, the count and the first and last line."""

    hours: dict[datetime, int] = field(default_factory=dict)
    first: datetime | None = None
    last: datetime | None = None


@dataclass
class LaggingRead:
    streams: dict[StreamKey, StreamHourLines] = field(default_factory=dict)
    gpu_lines: list[GpuLine] = field(default_factory=list)
    queries: list[QueryRecord] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)  # a failed query names its groups: they are not cached
    unread: set[StreamKey] = field(default_factory=set)  # streams whose hours query did not answer
    gpu_unread: bool = False  # a GPU-lines query did not answer, or stayed at the row cap
    # Per stream, the kernel lines that arrived since the last audit read it, and the latest of them.
    kernel: dict[StreamKey, tuple[int, datetime]] = field(default_factory=dict)
    kernel_unread: bool = False


def _chunks(keys: list[StreamKey], fixed: int) -> list[list[StreamKey]]:
    """`keys` in queries of at most QUERY_CHAR_BUDGET characters, `fixed` of them the query's text without names."""
    return pack(sorted(keys), lambda k: hours_query_cost(k[1]), QUERY_CHAR_BUDGET - fixed, 10_000)


def read_lagging(runner: InsightsRunner, opened: dict[StreamKey, datetime], end: datetime,
                 seen: Mapping[StreamKey, datetime] | None = None, kernel_until: datetime | None = None) -> LaggingRead:
    """The lines of each stream of `opened` from its hour there to `end` (the settled hour the whole-group read starts
    at): per-hour counts with first and last line, and the GPU lines. Streams are read together over the earliest
    hour, each kept from its own hour on (before it, the cache's hours are final and its lines already counted).
    With `seen` (each stream's last line when the last audit read it) and `kernel_until` (where that audit's kernel
    count ended), also the kernel lines that arrived since: stamped after the stream's last line then (earlier ones
    were read then: lines arrive in order) and before `kernel_until` (later ones the hourly kernel read counts)."""
    out = LaggingRead(queries=runner.records, gaps=runner.gaps)
    if not opened:
        return out
    start = min(opened.values())
    keys = sorted(opened)
    # Every query started before any is read: they run side by side (one wait in the state machine, not several).
    hours = [(chunk, runner.start("stream-hours", sorted({g for g, _ in chunk}), start, end,
                                  lagging_hours_query([s for _, s in chunk]),
                                  f" for {len(chunk)} stream(s) silent before the last audit"))
             for chunk in _chunks(keys, len(lagging_hours_query([])))]
    line_reads: list[tuple[QueryPurpose, datetime, datetime, str]] = [("gpu-lines", start, end, GPU_QUERY)]
    kernel_from = min((seen[key] for key in keys if key in seen), default=start) if seen else start
    if seen is not None and kernel_until is not None and kernel_until > kernel_from:  # only lines after the last seen
        line_reads.append(("kernel-streams", kernel_from, kernel_until, KERNEL_LINES_QUERY))
    lines = [(purpose, lo, hi, chunk, text, runner.start(purpose, sorted({g for g, _ in chunk}), lo, hi, text))
             for purpose, lo, hi, query in line_reads
             for chunk in _chunks(keys, len(named_query([], query)))
             for text in [named_query((s for _, s in chunk), query)]]
    for chunk, pending in hours:
        rows = runner.results(pending)
        if rows is None:  # the runner's gap names the query's groups
            out.unread.update(chunk)
            continue
        for r in rows:
            key, hour = (_group_name(r.get("@log", "")), r.get("@logStream", "")), _time(r.get("hour"))
            if key not in opened or hour is None or floor_hour(hour) < opened[key]:
                continue
            stream = out.streams.setdefault(key, StreamHourLines())
            stream.hours[floor_hour(hour)] = int(float(r["lines"]))
            first, last = _time(r.get("first")), _time(r.get("last"))
            stream.first = min(filter(None, [stream.first, first]), default=None)
            stream.last = max(filter(None, [stream.last, last]), default=None)
    for purpose, lo, hi, chunk, text, pending in lines:
        rows = runner.results(pending)
        read = rows is not None
        if rows is not None and len(rows) >= insights.MAX_ROWS:  # read again in halves of the range
            rows, read = _split_by_time(runner, purpose, text, sorted({g for g, _ in chunk}), lo, hi, runner.gaps,
                                        f"lines of {len(chunk)} stream(s) silent before the last audit", depth=0)
            if read:
                runner.mark_reread(pending)
        kernel = purpose == "kernel-streams"
        if kernel:
            out.kernel_unread |= not read
        else:
            out.gpu_unread |= not read
        for r in rows or []:
            key, when = (_group_name(r.get("@log", "")), r.get("@logStream", "")), _time(r.get("@timestamp"))
            if key not in opened or when is None or when < opened[key]:
                continue
            if not kernel:
                out.gpu_lines.append(GpuLine(time=when, log_group=key[0], log_stream=key[1],
                                             message=r.get("@message", "")))
            elif seen is not None and (key not in seen or when > seen[key]) and (
                    kernel_until is None or when < kernel_until):
                count, last = out.kernel.get(key, (0, None))
                out.kernel[key] = (count + 1, max(filter(None, [last, when])))
    return out
