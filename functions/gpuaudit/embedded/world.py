"""World files (WORLD-FORMAT.md): load, validate, and expose as an in-memory account.

The file must be a regular file under MAX_WORLD_BYTES holding JSON the parser can nest; its value is then
checked against the schema (world_schema: types, required keys, ranges, unknown keys) before any of it is
used. Every error names the key path, so the CLI can say exactly what is wrong (exit 2).
"""

from __future__ import annotations

import json
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

from gpuaudit.embedded import world_schema as schema
from gpuaudit.embedded.interface_templates import InterfaceTemplate
from gpuaudit.model.gcpause import collection_paused
from gpuaudit.model.timeutil import parse_time

# The schema (types, required keys, ranges) lives in world_schema; these names stay importable from here.
FORMAT = schema.FORMAT
WorldError = schema.WorldError
DEFAULT_LOGS_CONCURRENT_QUERIES = schema.DEFAULT_LOGS_CONCURRENT_QUERIES


@dataclass(frozen=True)
class Periodic:
    start_ms: int
    end_ms: int  # exclusive
    every_ms: int
    message: str

    def timestamps(self) -> range:
        return range(self.start_ms, self.end_ms, self.every_ms)


@dataclass
class Stream:
    name: str
    events: list[tuple[int, str]]
    periodic: list[Periodic]
    creation_ms: int | None
    first_ms: int | None = field(init=False)
    last_ms: int | None = field(init=False)
    count: int = field(init=False)

    def __post_init__(self) -> None:
        self.events.sort(key=lambda e: e[0])
        firsts = [self.events[0][0]] if self.events else []
        lasts = [self.events[-1][0]] if self.events else []
        self.count = len(self.events)
        for p in self.periodic:
            stamps = p.timestamps()
            if len(stamps):
                firsts.append(stamps[0])
                lasts.append(stamps[-1])
                self.count += len(stamps)
        self.first_ms = min(firsts) if firsts else None
        self.last_ms = max(lasts) if lasts else None

    def lines(self, start_ms: int | None = None, end_ms: int | None = None) -> Iterator[tuple[int, str]]:
        """Every line in [start_ms, end_ms], generated lazily (big worlds stay small in memory).

        Explicit events first (in time order), then each periodic entry in turn. Built from C-level
        iterators (bisect, range, zip, repeat, chain) rather than a Python generator."""
        events, runs = self.pieces(start_ms, end_ms)
        parts: list[Iterator[tuple[int, str]]] = [iter(events)]
        parts.extend(zip(stamps, repeat(message)) for stamps, message in runs)
        return chain.from_iterable(parts)

    def pieces(self, start_ms: int | None = None, end_ms: int | None = None
               ) -> tuple[list[tuple[int, str]], list[tuple[range, str]]]:
        """The lines in [start_ms, end_ms] as `lines()` yields them, without generating them: the explicit
        events in range, then each periodic entry as (its timestamps in range, its message). Logs Insights
        queries read periodic entries this way, as runs of identical lines (embedded/insights.LogRun)."""
        lo = start_ms if start_ms is not None else -(2**62)
        hi = end_ms if end_ms is not None else 2**62
        events = self.events  # sorted by time in __post_init__, so the lines in range are one slice
        chosen: list[tuple[int, str]] = []
        if events:
            first_in = bisect_left(events, lo, key=_event_time)
            chosen = events[first_in:bisect_right(events, hi, lo=first_in, key=_event_time)]
        runs: list[tuple[range, str]] = []
        for p in self.periodic:
            first = p.start_ms if lo <= p.start_ms else p.start_ms + -(-(lo - p.start_ms) // p.every_ms) * p.every_ms
            stamps = range(first, min(p.end_ms, hi + 1), p.every_ms)
            if stamps:
                runs.append((stamps, p.message))
        return chosen, runs


_event_time = itemgetter(0)


@dataclass
class LogGroup:
    name: str
    streams: dict[str, Stream]
    meta: dict[str, Any]


@dataclass
class World:
    now: datetime
    account_id: str
    region: str
    data: dict[str, dict[str, list[Any]]]
    log_groups: dict[str, LogGroup]
    faults: list[dict[str, Any]]
    source: str = "<memory>"
    logs_concurrent_queries: int = DEFAULT_LOGS_CONCURRENT_QUERIES
    # ec2.network_interface_templates by name, compiled once; DescribeInstances expands them per served instance
    interface_templates: dict[str, InterfaceTemplate] = field(default_factory=dict)

    def section(self, service: str, key: str) -> list[Any]:
        return self.data.get(service, {}).get(key, [])


MAX_WORLD_BYTES = 512 * 1024 * 1024  # generated 10,000-node worlds stay far below: they use periodic entries


def load_world(path: str | Path) -> World:
    file = Path(path)
    try:
        if not file.exists():
            raise WorldError(f"cannot read world file {path}: no such file")
        if not file.is_file():
            raise WorldError(f"cannot read world file {path}: not a regular file (a device or a directory)")
        if file.stat().st_size > MAX_WORLD_BYTES:
            raise WorldError(f"world file {path}: larger than {MAX_WORLD_BYTES // 2**20} MiB")
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorldError(f"cannot read world file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise WorldError(f"world file {path} is not UTF-8: {exc}") from None
    # JSON values hold no reference cycles: the collector's passes over a big world's millions of fresh objects
    # find nothing and cost most of the load time (a 10,000-node world: 2.6 s -> 0.7 s to validate and build)
    with collection_paused():
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorldError(f"world file {path} is not valid JSON (truncated?): {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
        except RecursionError:
            raise WorldError(f"world file {path}: JSON nested too deeply") from None
        except ValueError:  # json's own limit on integer digits (int_max_str_digits), not a JSONDecodeError
            raise WorldError(f"world file {path}: holds a number of more than {sys.get_int_max_str_digits():,} "
                             "digits; no field of the format takes one") from None
        world = parse_world(raw)
    world.source = str(path)
    return world


def parse_world(raw: Any) -> World:
    """A world from its JSON value: validated against the schema first (WorldError naming every bad key path),
    then built. The served sections stay as written (the backend shapes them per call); log lines are read
    from the validated model, their timestamps already in epoch milliseconds."""
    with collection_paused():  # as above: no cycles to find
        checked = schema.validate_world(raw)
        data: dict[str, dict[str, list[Any]]] = {section: raw.get(section, {}) for section in schema.SECTIONS}
        raw_groups = data["logs"].get("groups", [])
        groups = {g.logGroupName: _log_group(g, raw_g)
                  for g, raw_g in zip(checked.logs.groups, raw_groups, strict=True)}
    templates = {t.name: InterfaceTemplate(t.name, t.interfaces) for t in checked.ec2.network_interface_templates}
    return World(now=parse_time(checked.now), account_id=checked.account_id, region=checked.region, data=data,
                 log_groups=groups, faults=[dict(f) for f in raw.get("faults", [])],
                 logs_concurrent_queries=checked.logs_concurrent_queries, interface_templates=templates)


def _log_group(group: schema.LogGroup, raw_group: dict[str, Any]) -> LogGroup:
    streams = {
        s.logStreamName: Stream(
            s.logStreamName, list(s.events),
            [Periodic(p.start_ms, p.end_ms, int(p.every_s * 1000), p.message) for p in s.periodic],
            s.creationTime)
        for s in group.streams}
    meta = {k: v for k, v in raw_group.items() if k != "streams"}
    if group.creationTime is not None:  # DescribeLogGroups returns epoch milliseconds; a world may write ISO text
        meta["creationTime"] = group.creationTime
    return LogGroup(group.logGroupName, streams, meta)
