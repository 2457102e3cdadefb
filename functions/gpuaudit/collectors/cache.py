"""Incremental hourly audits: per-stream hourly bins already proven are kept, and the next audit
queries only the hours that can still change.

The rule (late delivery): a stream's lines arrive in order (collectors/lagging.py says why; RULES §4 treats a gap
followed by later lines as lost, not late), so late lines can only fill a stream's trailing silence. An hour is final
once it began before the query time less OUT_OF_ORDER (the margin for batches retried out of order) — for every stream
that wrote after it, or fell silent more than LATE_DELIVERY_HORIZON before the query (a gap that old is lost, not
late). A stream silent since less than that is `lagging`: its hours from its silence on are read again on every run,
by name, until they are final (`read_lagging`), so a line that arrives late still fills them. More lagging streams
than MAX_LAGGING_STREAMS: every hour since the horizon is read again, for all streams, as before. Kernel-line counts
(query b) accumulate from the end of the last counted range, a lagging stream's with the kernel lines that arrived
since, stamped after its last line then.

Per group (`read_plan`): the groups of a batch whose entries cover the window alike are read together
incrementally, first (they are cheap); the groups never cached are read together in full; then each group whose
read was stopped at the deadline before is read alone, fewest stops first. A group is cached only when every
query over it completed and no gap concerns it (`complete`), so a failed query can never become cached silence —
and a group too big to finish within the deadline never keeps the others of its batch from being cached.

A stream's line count over the window (`StreamActivity.lines`, which orders a node's other streams)
is the fresh read's count plus the cached hours' share: the summary query gives a stream's total,
not per hour, so an hour's lines are the stream's mean rate (exact for a steady stream).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuaudit.collectors.lagging import LaggingRead
from gpuaudit.collectors.log_queries import JOB_LINE, nameable
from gpuaudit.collectors.logs import BatchEvidence, BatchRead, LogWindow, StreamKey
from gpuaudit.collectors.stream_parts import Rows, holds_instance_id
from gpuaudit.files import write_atomically
from gpuaudit.model.evidence import Gap, GpuLine, KernelStream, StreamActivity
from gpuaudit.model.timeutil import floor_hour

FORMAT = "gpu-audit-cache/4"
LATE_DELIVERY_HORIZON = timedelta(hours=2)
OUT_OF_ORDER = timedelta(minutes=15)
MAX_LAGGING_STREAMS = 450  # about three named queries of each kind (names run to 512 characters; most are ~60)
RETENTION = timedelta(days=8)
MAX_CACHED_GPU_LINES = 20_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamHours(_Model):
    # Final hours that held at least one line, as runs of consecutive hours [first epoch hour, count]:
    # a healthy stream is one run, so a 2,000-node cache stays small.
    live_runs: list[tuple[int, int]] = Field(default_factory=list)
    # Lines in those hours. Exact per hour only for streams with gaps (the detail query), so the lines of a
    # part of the hours are its share at the stream's rate (`_share`); exact for a steady stream.
    lines: int = 0
    first_event: datetime | None = None
    last_event: datetime | None = None



# Hours are handled as runs of epoch hours, (first, count), ascending and disjoint: the cache and the
# merge then cost per run (one for a healthy stream), not per hour (170 a week) and per stream.
Runs = list[tuple[int, int]]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_HOUR_US = 3_600_000_000


def _floor_h(t: datetime) -> int:
    return ((t - _EPOCH) // _MICROSECOND) // _HOUR_US


def _ceil_h(t: datetime) -> int:
    """The first epoch hour h with h's start >= t (so `h < t` for an hour start is `h < _ceil_h(t)`)."""
    return -(-((t - _EPOCH) // _MICROSECOND) // _HOUR_US)


def _hour_start(h: int) -> datetime:
    return _EPOCH + timedelta(hours=h)


def _span(lo: int, hi: int) -> Runs:
    return [(lo, hi - lo)] if hi > lo else []


def _clip(runs: Runs, lo: int, hi: int) -> Runs:
    return [(max(a, lo), min(a + n, hi) - max(a, lo)) for a, n in runs if min(a + n, hi) > max(a, lo)]


def _union(*parts: Runs) -> Runs:
    out: Runs = []
    for a, n in sorted(run for part in parts for run in part):
        if out and a <= out[-1][0] + out[-1][1]:
            end = max(out[-1][0] + out[-1][1], a + n)
            out[-1] = (out[-1][0], end - out[-1][0])
        else:
            out.append((a, n))
    return out


def _size(runs: Runs) -> int:
    return sum(n for _, n in runs)


def _runs_of(hours: Iterable[datetime]) -> Runs:
    return _union([(_floor_h(h), 1) for h in hours])


def _share(lines: int, part: Runs, hours: float) -> int:
    """The lines of the hours `part`, at the mean rate of `lines` over `hours` (a steady stream: exact)."""
    return round(lines * _size(part) / hours) if hours > 0 else 0


def _hours_read(a: StreamActivity, live: Runs, end: datetime) -> float:
    """The live hours `a.lines` were counted over, the hour of `end` by the part of it that had passed."""
    last = _floor_h(end)
    if not live or live[-1][0] + live[-1][1] != last + 1:
        return float(a.live_hours)
    return a.live_hours - 1 + (end - _hour_start(last)) / timedelta(hours=1)


def _hour_starts(runs: Runs) -> list[datetime]:
    return [_hour_start(a + i) for a, n in runs for i in range(n)]


class GroupCache(_Model):
    covered_from: datetime  # hours and GPU lines are complete from here ...
    settled_until: datetime  # ... up to here (exclusive); later hours are queried again
    kernel_as_of: datetime  # kernel lines counted before this
    kernel: dict[str, KernelStream] = Field(default_factory=dict)  # by stream name
    hours: dict[str, StreamHours] = Field(default_factory=dict)
    gpu_lines: list[GpuLine] = Field(default_factory=list)
    # Streams silent before settled_until, but not yet for LATE_DELIVERY_HORIZON: their hours from this one on are
    # not final (their live runs and GPU lines stop before it) and are read again by name.
    lagging: dict[str, datetime] = Field(default_factory=dict)


class CacheState(_Model):
    format: str = FORMAT
    cluster: str
    region: str
    groups: dict[str, GroupCache] = Field(default_factory=dict)
    # Per group, the consecutive collections whose read of it was stopped at the deadline: read alone next time,
    # fewest first, so the group that keeps timing out goes last and the others finish.
    stopped: dict[str, int] = Field(default_factory=dict)


class CoverageCache(Protocol):
    """Where proven bins are kept: a local file for the CLI, the findings table when deployed."""

    def load(self, cluster: str, region: str) -> CacheState: ...

    def save(self, state: CacheState) -> None: ...


class FileCache:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, cluster: str, region: str) -> CacheState:
        try:
            state = CacheState.model_validate_json(self.path.read_text(encoding="utf-8"))
        except (OSError, ValidationError, json.JSONDecodeError, UnicodeDecodeError):
            return CacheState(cluster=cluster, region=region)  # no usable cache: a full read rebuilds it
        if (state.cluster, state.region, state.format) != (cluster, region, FORMAT):
            return CacheState(cluster=cluster, region=region)
        return state

    def save(self, state: CacheState) -> None:
        """Written beside the file and renamed over it: a failure (a full disk) leaves the previous cache whole and
        no temporary file; the OSError is the caller's to name (pipeline.collect: a gap, never a lost audit)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, state.model_dump_json())


def usable(state: CacheState, batch: list[str], win: LogWindow) -> list[GroupCache] | None:
    entries = [state.groups.get(g) for g in batch]
    if any(e is None for e in entries):
        return None
    caches = [e for e in entries if e is not None]
    settled = {c.settled_until for c in caches}
    kernel_as_of = {c.kernel_as_of for c in caches}
    if len(settled) != 1 or len(kernel_as_of) != 1:
        return None
    if any(c.covered_from > win.padded_start or c.covered_from > win.gpu_start for c in caches):
        return None
    if next(iter(settled)) <= win.padded_start:
        return None  # nothing cached inside this window: a full read costs the same
    return caches


@dataclass(frozen=True)
class ReadPart:
    groups: list[str]
    caches: list[GroupCache] | None  # the groups' entries, read incrementally; None: read in full
    # The kernel look-back read a day at a time: only a group whose read was stopped at the deadline before
    # (docs/decisions.md, "The kernel look-back as one range").
    by_day: bool = False


def read_plan(state: CacheState, batch: list[str], win: LogWindow) -> list[ReadPart]:
    """The batch's reads, in order: groups cached alike together and incrementally, then the never-cached ones
    together in full, then each group stopped at the deadline before, alone, fewest stops first. A batch whose groups
    are all alike (every steady hour, and the first read) is one part: the whole batch."""
    whole = usable(state, batch, win)
    if whole is not None:
        return [ReadPart(batch, whole, by_day=any(state.stopped.get(g) for g in batch))]
    alike: dict[tuple[datetime, datetime], list[str]] = {}
    fresh: list[str] = []
    stopped: list[str] = []
    for group in batch:
        own = usable(state, [group], win)
        if own is not None:
            alike.setdefault((own[0].settled_until, own[0].kernel_as_of), []).append(group)
        elif state.stopped.get(group):
            stopped.append(group)
        else:
            fresh.append(group)
    parts = [ReadPart(groups, usable(state, groups, win)) for groups in alike.values()]
    if fresh:
        parts.append(ReadPart(fresh, None))
    return parts + [ReadPart([g], None, by_day=True) for g in sorted(stopped, key=lambda g: state.stopped[g])]


def joined(parts: list[BatchEvidence]) -> BatchEvidence:
    """The parts of one batch as one batch, each read's unread groups kept per group."""
    if len(parts) == 1:
        return parts[0]
    unread = {kind: [g for p in parts for g in p.unread_in(kind)] for kind in ("kernel", "summary", "gpu")}
    return BatchEvidence(
        groups=[g for p in parts for g in p.groups], kernel=[k for p in parts for k in p.kernel],
        activity=[a for p in parts for a in p.activity],
        gpu_lines=sorted((g for p in parts for g in p.gpu_lines), key=lambda g: g.time),
        queries=[q for p in parts for q in p.queries], gaps=[g for p in parts for g in p.gaps],
        listed=[s for p in parts for s in p.listed],
        boot_lines=sorted((g for p in parts for g in p.boot_lines), key=lambda g: g.time),
        unread=sorted(kind for kind, groups in unread.items() if groups),
        unread_groups={kind: groups for kind, groups in unread.items() if groups},
        job_figures=sorted((f for p in parts for f in p.job_figures), key=lambda f: f.time),
        job_groups=[g for p in parts for g in p.job_groups], job_unread=[g for p in parts for g in p.job_unread])


def _concerns(gap: Gap, group: str, groups: list[str]) -> bool:
    """Whether a gap may leave `group` unread: it names the group, or names none of the batch's (then any)."""
    text = " ".join(t for t in (gap.target, gap.unseen, gap.error_message) if t)
    named = [g for g in groups if g in text]
    return not named or group in named


def complete(read: BatchEvidence, group: str) -> bool:
    """Every query over `group` completed (a capped one read again in parts) and no gap concerns it."""
    if any(group in q.log_groups and (q.status != "Complete" or (q.truncated and not q.reread))
           for q in read.queries):
        return False
    return not any(_concerns(g, group, read.groups) for g in read.gaps)


def note_stops(state: CacheState, read: BatchEvidence) -> None:
    """Count the groups whose query was stopped at the deadline in this read; forget those read completely."""
    for group in read.groups:
        if any(group in q.log_groups and q.status.endswith("(abandoned)") for q in read.queries):
            state.stopped[group] = state.stopped.get(group, 0) + 1
        elif complete(read, group):
            state.stopped.pop(group, None)


def fresh_window(win: LogWindow, caches: list[GroupCache]) -> LogWindow:
    settled = caches[0].settled_until
    return LogWindow(padded_start=max(win.padded_start, settled), padded_end=win.padded_end,
                     lifetime_start=caches[0].kernel_as_of, gpu_start=max(win.gpu_start, settled),
                     gpu_end=win.gpu_end, kernel_end=win.kernel_end, job_range=win.job_range)


def incremental_read(whole: BatchRead, caches: list[GroupCache]) -> BatchRead:
    """`whole` (a batch's full read) as the hourly read of its groups cached alike (`caches`, one per group): only the
    hours that can still change (`fresh_window`), the kernel lines counted since the last read of the streams it
    knew, each per-stream read sized by the last read's streams, and the GPU and kernel lines read by hint."""
    by_group = list(zip(whole.groups, caches, strict=True))
    # The last read's streams size this one's summary: expected past the 10,000-row cap, it starts in parts
    # (those named without an instance ID apart when they would crowd the first part). Kernel streams are not
    # counted first: this read counts only the kernel lines since the last, usually few (read whole, and again
    # in parts if it reaches the cap).
    expected = {"summary": {g: Rows(len(c.hours), sum(not holds_instance_id(name) for name in c.hours))
                            for g, c in by_group},
                "kernel": {g: Rows(0) for g in whole.groups}}
    # A job group known by NCCL lines in the cached hours only is still a job group (the job figures are
    # read over the whole window: fresh_window keeps their range).
    jobs = set(whole.job_groups) | {g for g, c in by_group if any(JOB_LINE.search(x.message) for x in c.gpu_lines)}
    return replace(whole, window=fresh_window(whole.window, caches),
                   known_kernel=frozenset((g, s) for g, c in by_group for s in c.kernel),
                   expected_streams=expected, job_groups=jobs, by_hint=True)


def lagging_streams(groups: list[str], caches: list[GroupCache]) -> tuple[dict[StreamKey, datetime],
                                                                          dict[StreamKey, datetime]]:
    """The streams that had fallen silent shortly before the last read, whose silence is read again by name: each
    from its hour (`read_lagging`'s `opened`), and its last line when last read, where known (`seen`)."""
    by_group = list(zip(groups, caches, strict=True))
    opened = {(g, s): hour for g, c in by_group for s, hour in c.lagging.items()}
    seen = {(g, s): last for g, c in by_group for s in c.lagging
            if s in c.hours and (last := c.hours[s].last_event) is not None}
    return opened, seen


def _live_runs(a: StreamActivity, span: Runs) -> Runs | None:
    """The hours with a line of a stream read over `span`; None when only its summary was read and it has gaps."""
    if a.hour_counts is not None:
        return _runs_of(h for h, n in a.hour_counts.items() if n > 0)
    if a.live_hours >= _size(span):
        return span
    return None  # per-hour detail not read


def merge(fresh: BatchEvidence, caches: dict[str, GroupCache], win: LogWindow, part: LogWindow,
          lag: LaggingRead | None = None) -> BatchEvidence:
    """The batch as a full read would have seen it: cached final hours, the lagging streams' hours read again
    (`lag`), and the freshly read ones. A stream live in every hour of the window has no `hour_counts`, as after a
    full read."""
    lag = lag or LaggingRead()
    kernel = {(g, s): k for g, c in caches.items() for s, k in c.kernel.items()}
    late = [KernelStream(log_group=g, log_stream=s, kernel_lines=n, last_kernel_line=t)
            for (g, s), (n, t) in sorted(lag.kernel.items())]  # arrived since the last audit, stamped before it
    for k in [*late, *fresh.kernel]:
        prior = kernel.get((k.log_group, k.log_stream))
        if prior is not None:
            k = k.model_copy(update={"kernel_lines": prior.kernel_lines + k.kernel_lines,
                                     "last_kernel_line": max(filter(None, [prior.last_kernel_line,
                                                                           k.last_kernel_line]), default=None)})
        kernel[(k.log_group, k.log_stream)] = k
    fresh_span = _span(_floor_h(part.padded_start), _ceil_h(part.padded_end))
    window_size = _size(_span(_floor_h(win.padded_start), _ceil_h(win.padded_end)))
    old_from, old_to = _ceil_h(win.padded_start), _ceil_h(part.padded_start)  # cached hours still in the window
    fresh_by_key = {(a.log_group, a.log_stream): a for a in fresh.activity}
    keys = set(fresh_by_key) | {(g, s) for g, c in caches.items() for s in c.hours} | set(lag.streams)
    activity = []
    for key in sorted(keys):
        cached = caches[key[0]].hours.get(key[1]) if key[0] in caches else None
        kept = _clip(cached.live_runs, old_from, old_to) if cached else []
        again = lag.streams.get(key)
        again_hours = {h: n for h, n in again.hours.items() if old_from <= _floor_h(h) < old_to} if again else {}
        old = _union(kept, _runs_of(h for h, n in again_hours.items() if n > 0))
        a = fresh_by_key.get(key)
        new = _live_runs(a, fresh_span) if a is not None else []
        if not old and not new and a is None:
            continue  # no line in the window at all: a full read would not list the stream either
        first = a.first_event if a is not None else None
        if kept:
            earliest = _hour_start(kept[0][0])
            first = cached.first_event if cached and cached.first_event and cached.first_event >= earliest \
                else earliest  # hour precision when the cached first line predates the window
        elif again_hours and again and again.first:
            first = max(again.first, win.padded_start)
        last = a.last_event if a is not None and a.last_event else max(
            filter(None, [cached.last_event if cached else None, again.last if again else None]), default=None)
        lines = (a.lines if a is not None else 0) + sum(again_hours.values()) + \
            (_share(cached.lines, kept, _size(cached.live_runs)) if cached else 0)
        if new is None or key in lag.unread:  # hours not read: the rules say its liveness is not proven
            activity.append(StreamActivity(log_group=key[0], log_stream=key[1], lines=lines,
                                           live_hours=_size(_union(old, new or [])), first_event=first,
                                           last_event=last, hour_counts=None))
            continue
        live = _union(old, new)
        live_hours = _size(live)
        hour_counts = None if live_hours >= window_size else dict.fromkeys(_hour_starts(live), 1)
        activity.append(StreamActivity(log_group=key[0], log_stream=key[1], lines=lines, live_hours=live_hours,
                                       first_event=first, last_event=last, hour_counts=hour_counts))
    old_lines = [g for c in caches.values() for g in c.gpu_lines if win.gpu_start <= g.time < part.gpu_start]
    old_lines += [g for g in lag.gpu_lines if win.gpu_start <= g.time < part.gpu_start]
    return fresh.model_copy(update={
        "kernel": sorted(kernel.values(), key=lambda k: (k.log_group, k.log_stream)),
        "activity": activity, "gpu_lines": sorted([*old_lines, *fresh.gpu_lines], key=lambda g: g.time),
        "queries": [*fresh.queries, *lag.queries], "gaps": [*fresh.gaps, *lag.gaps],
        "unread": sorted({*fresh.unread, *(["gpu"] if lag.gpu_unread else []),
                          *(["kernel"] if lag.kernel_unread else [])})})


def update(state: CacheState, merged: BatchEvidence, win: LogWindow, now: datetime) -> None:
    """Keep the final hours of each group read completely; a group any gap or unfinished query concerns keeps its
    prior entry as it was."""
    done = [g for g in merged.groups if complete(merged, g)]
    if not done:
        return
    settled, lagging = _settled(merged, done, win, now)
    horizon = floor_hour(now - RETENTION)
    prior = {g: state.groups.get(g) for g in done}
    covered = [c.covered_from for c in prior.values() if c is not None and c.covered_from <= win.padded_start]
    covered_from = max(min([*covered, win.padded_start]), horizon)
    full = _span(_floor_h(win.padded_start), _ceil_h(win.padded_end))
    keep_from, keep_to = _ceil_h(covered_from), _ceil_h(win.padded_start)
    for group in done:
        entry = GroupCache(covered_from=covered_from, settled_until=settled, kernel_as_of=win.kernel_until,
                           kernel={k.log_stream: k for k in merged.kernel if k.log_group == group},
                           lagging=lagging[group])
        old = prior.get(group)
        for a in (x for x in merged.activity if x.log_group == group):
            live = _live_runs(a, full) or []
            prior_hours = old.hours.get(a.log_stream) if old else None
            kept_old = _clip(prior_hours.live_runs, keep_from, keep_to) if prior_hours else []
            final = _clip(live, keep_from, _ceil_h(lagging[group].get(a.log_stream, settled)))
            lines = _share(a.lines, final, _hours_read(a, live, win.padded_end)) + \
                (_share(prior_hours.lines, kept_old, _size(prior_hours.live_runs)) if prior_hours else 0)
            entry.hours[a.log_stream] = StreamHours(live_runs=_union(final, kept_old), lines=lines,
                                                    first_event=a.first_event, last_event=a.last_event)
        if old is not None:  # streams silent in this window keep their older final hours
            for stream, hours in old.hours.items():
                if stream not in entry.hours:
                    kept = _clip(hours.live_runs, keep_from, keep_to)
                    if kept:
                        entry.hours[stream] = hours.model_copy(
                            update={"live_runs": kept, "lines": _share(hours.lines, kept, _size(hours.live_runs))})
        older = [g for g in (old.gpu_lines if old else []) if covered_from <= g.time < win.gpu_start]
        entry.gpu_lines = [*older, *(g for g in merged.gpu_lines if g.log_group == group
                                     and g.time < lagging[group].get(g.log_stream, settled))][-MAX_CACHED_GPU_LINES:]
        state.groups[group] = entry


def _settled(merged: BatchEvidence, done: list[str], win: LogWindow,
             now: datetime) -> tuple[datetime, dict[str, dict[str, datetime]]]:
    """Where the next read of the groups `done` starts (the hour of `now` less OUT_OF_ORDER), and per group the
    streams that are lagging then, each with the first hour it may still gain a line in; past MAX_LAGGING_STREAMS,
    or with one whose name no query can hold, the hour of the late-delivery horizon and none (every stream read again
    from there)."""
    settled = min(floor_hour(now - OUT_OF_ORDER), floor_hour(win.padded_end))
    horizon = now - LATE_DELIVERY_HORIZON
    lagging: dict[str, dict[str, datetime]] = {group: {} for group in done}
    for a in merged.activity:
        last = a.last_event
        if a.log_group in lagging and last is not None and horizon <= last and last - OUT_OF_ORDER < settled:
            lagging[a.log_group][a.log_stream] = floor_hour(max(last - OUT_OF_ORDER, horizon))
    names = [stream for streams in lagging.values() for stream in streams]
    if len(names) > MAX_LAGGING_STREAMS or not all(map(nameable, names)):  # or one no query can name
        return min(floor_hour(horizon), floor_hour(win.padded_end)), {group: {} for group in done}
    return settled, lagging
