"""Incremental hourly audits: per-stream hourly bins already proven are kept, and the next audit
queries only the hours that can still change.

The rule (late delivery): an hour is final once it ended at least LATE_DELIVERY_HORIZON before the
query time; until then it is queried again on every run, so a line that arrives late still fills
it. Kernel-line counts (query b) accumulate from the end of the last counted range. A batch of log
groups is read incrementally only when every group has a cache entry covering the whole window;
otherwise it is read in full and the cache is rebuilt from that read. A batch whose read had any gap
leaves its cache entry untouched, so a failed query can never become cached silence.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuaudit.collectors.logs import BatchEvidence, LogWindow
from gpuaudit.model.evidence import GpuLine, KernelStream, StreamActivity
from gpuaudit.timeutil import floor_hour, hours_between

FORMAT = "gpu-audit-cache/2"
LATE_DELIVERY_HORIZON = timedelta(hours=2)
RETENTION = timedelta(days=8)
MAX_CACHED_GPU_LINES = 20_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamHours(_Model):
    # Final hours that held at least one line, as runs of consecutive hours [first epoch hour, count]:
    # a healthy stream is one run, so a 2,000-node cache stays small.
    live_runs: list[tuple[int, int]] = Field(default_factory=list)
    lines: int = 0
    first_event: datetime | None = None
    last_event: datetime | None = None


    @property
    def live(self) -> list[datetime]:
        return [datetime.fromtimestamp((start + i) * 3600, tz=UTC) for start, n in self.live_runs for i in range(n)]

    @staticmethod
    def runs(hours: Iterable[datetime]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for h in sorted({int(x.timestamp()) // 3600 for x in hours}):
            if out and out[-1][0] + out[-1][1] == h:
                out[-1] = (out[-1][0], out[-1][1] + 1)
            else:
                out.append((h, 1))
        return out


class GroupCache(_Model):
    covered_from: datetime  # hours and GPU lines are complete from here ...
    settled_until: datetime  # ... up to here (exclusive); later hours are queried again
    kernel_as_of: datetime  # kernel lines counted before this
    kernel: dict[str, KernelStream] = Field(default_factory=dict)  # by stream name
    hours: dict[str, StreamHours] = Field(default_factory=dict)
    gpu_lines: list[GpuLine] = Field(default_factory=list)


class CacheState(_Model):
    format: str = FORMAT
    cluster: str
    region: str
    groups: dict[str, GroupCache] = Field(default_factory=dict)


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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(state.model_dump_json(), encoding="utf-8")
        tmp.replace(self.path)


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


def fresh_window(win: LogWindow, caches: list[GroupCache]) -> LogWindow:
    settled = caches[0].settled_until
    return LogWindow(padded_start=max(win.padded_start, settled), padded_end=win.padded_end,
                     lifetime_start=caches[0].kernel_as_of, gpu_start=max(win.gpu_start, settled),
                     gpu_end=win.gpu_end)


def _fresh_live(a: StreamActivity, fresh_hours: list[datetime]) -> set[datetime] | None:
    if a.hour_counts is not None:
        return {h for h, n in a.hour_counts.items() if n > 0}
    if a.live_hours >= len(fresh_hours):
        return set(fresh_hours)
    return None  # per-hour detail not read


def merge(fresh: BatchEvidence, caches: dict[str, GroupCache], win: LogWindow, part: LogWindow) -> BatchEvidence:
    """The batch as a full read would have seen it: cached final hours plus the freshly read ones."""
    kernel = {(g, s): k for g, c in caches.items() for s, k in c.kernel.items()}
    for k in fresh.kernel:
        prior = kernel.get((k.log_group, k.log_stream))
        if prior is not None:
            k = k.model_copy(update={"kernel_lines": prior.kernel_lines + k.kernel_lines,
                                     "last_kernel_line": max(filter(None, [prior.last_kernel_line,
                                                                           k.last_kernel_line]), default=None)})
        kernel[(k.log_group, k.log_stream)] = k
    fresh_hours = hours_between(part.padded_start, part.padded_end)
    fresh_by_key = {(a.log_group, a.log_stream): a for a in fresh.activity}
    keys = set(fresh_by_key) | {(g, s) for g, c in caches.items() for s in c.hours}
    activity = []
    for key in sorted(keys):
        cached = caches[key[0]].hours.get(key[1]) if key[0] in caches else None
        old = {h for h in (cached.live if cached else []) if win.padded_start <= h < part.padded_start}
        a = fresh_by_key.get(key)
        new = _fresh_live(a, fresh_hours) if a is not None else set()
        if not old and not new and a is None:
            continue  # no line in the window at all: a full read would not list the stream either
        first = a.first_event if a is not None else None
        if old:
            earliest = min(old)
            first = cached.first_event if cached and cached.first_event and cached.first_event >= earliest \
                else earliest  # hour precision when the cached first line predates the window
        last = a.last_event if a is not None and a.last_event else (cached.last_event if cached else None)
        lines = (a.lines if a is not None else 0) + (cached.lines if cached and old else 0)
        if new is None:
            activity.append(StreamActivity(log_group=key[0], log_stream=key[1], lines=lines, live_hours=len(old),
                                           first_event=first, last_event=last, hour_counts=None))
            continue
        live = old | new
        activity.append(StreamActivity(log_group=key[0], log_stream=key[1], lines=lines, live_hours=len(live),
                                       first_event=first, last_event=last, hour_counts={h: 1 for h in live}))
    old_lines = [g for c in caches.values() for g in c.gpu_lines if win.gpu_start <= g.time < part.gpu_start]
    return fresh.model_copy(update={
        "kernel": sorted(kernel.values(), key=lambda k: (k.log_group, k.log_stream)),
        "activity": activity, "gpu_lines": sorted([*old_lines, *fresh.gpu_lines], key=lambda g: g.time)})


def update(state: CacheState, merged: BatchEvidence, win: LogWindow, now: datetime) -> None:
    """Keep the final hours of a complete read; a read with any gap leaves the prior entry as it was."""
    if merged.gaps or any(q.status != "Complete" or q.truncated for q in merged.queries):
        return
    settled = min(floor_hour(now - LATE_DELIVERY_HORIZON), floor_hour(win.padded_end))
    horizon = floor_hour(now - RETENTION)
    prior = {g: state.groups.get(g) for g in merged.groups}
    covered = [c.covered_from for c in prior.values() if c is not None and c.covered_from <= win.padded_start]
    covered_from = max(min([*covered, win.padded_start]), horizon)
    full = hours_between(win.padded_start, win.padded_end)
    for group in merged.groups:
        entry = GroupCache(covered_from=covered_from, settled_until=settled, kernel_as_of=win.padded_end,
                           kernel={k.log_stream: k for k in merged.kernel if k.log_group == group})
        old = prior.get(group)
        for a in (x for x in merged.activity if x.log_group == group):
            live = {h for h, n in (a.hour_counts or {}).items() if n > 0} if a.hour_counts is not None else \
                (set(full) if a.live_hours >= len(full) else set())
            kept_old = {h for h in (old.hours[a.log_stream].live if old and a.log_stream in old.hours else [])
                        if covered_from <= h < win.padded_start}
            final = sorted(h for h in live | kept_old if covered_from <= h < settled)
            entry.hours[a.log_stream] = StreamHours(live_runs=StreamHours.runs(final), lines=a.lines, first_event=a.first_event,
                                                    last_event=a.last_event)
        if old is not None:  # streams silent in this window keep their older final hours
            for stream, hours in old.hours.items():
                if stream not in entry.hours:
                    kept = [h for h in hours.live if covered_from <= h < win.padded_start]
                    if kept:
                        entry.hours[stream] = hours.model_copy(update={"live_runs": StreamHours.runs(kept)})
        older = [g for g in (old.gpu_lines if old else []) if covered_from <= g.time < win.gpu_start]
        entry.gpu_lines = [*older, *(g for g in merged.gpu_lines if g.log_group == group and g.time < settled)][
            -MAX_CACHED_GPU_LINES:]
        state.groups[group] = entry


