"""World files (WORLD-FORMAT.md): load, validate, and expose as an in-memory account.

Validation is strict where a typo would silently empty a section (unknown keys) and
where a bad value would surface later as a confusing answer (timestamps). Errors name
the key path, so the CLI can say exactly what is wrong (exit 2).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

from gpuaudit.model.timeutil import parse_time, to_epoch_ms

FORMAT = "gpu-audit-world/1"

SECTIONS: dict[str, set[str]] = {
    "sagemaker": {"clusters", "training_plans"},
    "ec2": {
        "instances", "instance_types", "instance_status", "capacity_reservations",
        "capacity_block_extension_offerings", "security_groups", "subnets", "route_tables",
    },
    "cloudtrail": {"events"},
    "logs": {"groups"},
    "cloudwatch": {"metrics", "alarms"},
    "fsx": {"file_systems"},
    "events": {"rules"},
    "health": {"events"},
    "servicequotas": {"quotas"},
}
TOP_LEVEL = {"format", "now", "account_id", "region", "faults", "logs_concurrent_queries", *SECTIONS}
# The Logs Insights concurrent-query quota the account allows (30 unless raised; docs/decisions.md).
DEFAULT_LOGS_CONCURRENT_QUERIES = 30
GROUP_KEYS = {"logGroupName", "streams", "creationTime", "retentionInDays", "metricFilterCount", "arn",
              "storedBytes", "logGroupClass", "logGroupArn", "kmsKeyId", "dataProtectionStatus"}
STREAM_KEYS = {"logStreamName", "events", "periodic", "creationTime", "arn", "storedBytes",
               "firstEventTimestamp", "lastEventTimestamp", "lastIngestionTime", "uploadSequenceToken"}


class WorldError(ValueError):
    """The world file is unreadable, not of this format, or holds a bad key or value."""


def _epoch_ms(value: Any, where: str) -> int:
    if isinstance(value, bool) or value is None:
        raise WorldError(f"{where}: expected an ISO-8601 UTC time or epoch milliseconds, got {value!r}")
    try:
        ms = to_epoch_ms(parse_time(value))
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise WorldError(f"{where}: bad timestamp {value!r} ({exc})") from None
    if not EARLIEST_MS <= ms < LATEST_MS:
        raise WorldError(f"{where}: {value!r} is outside the years 1970-2100")
    return ms


EARLIEST_MS, LATEST_MS = 0, 4_102_444_800_000  # 1970-01-01 to 2100-01-01
MIN_EVERY_S = 0.1  # periodic entries: at most ten lines a second
MAX_PERIODIC_LINES = 50_000_000  # one entry; generated 10,000-node weeks stay below
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")


def _check_basics(raw: dict[str, Any]) -> None:
    """What the world's top level and cluster items must be before any call is served, named by key path."""
    region = raw.get("region")
    if not isinstance(region, str) or not REGION.match(region):
        raise WorldError(f"world: region must be an AWS region name such as 'us-west-2', got {region!r}")
    if not isinstance(raw.get("account_id"), str):
        raise WorldError(f"world: account_id must be a string, got {raw.get('account_id')!r}")
    for ci, cluster in enumerate((raw.get("sagemaker") or {}).get("clusters", []) or []):
        if not isinstance(cluster, dict):
            raise WorldError(f"world: sagemaker.clusters[{ci}] must be an object, got {cluster!r}")
        for ni, node in enumerate(cluster.get("Nodes", []) or []):
            where = f"sagemaker.clusters[{ci}].Nodes[{ni}]"
            if not isinstance(node, dict) or not isinstance(node.get("InstanceId"), str):
                raise WorldError(f"world: {where} must be an object with a string InstanceId")
            if "LaunchTime" in node:
                _epoch_ms(node["LaunchTime"], f"world: {where}.LaunchTime")


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
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorldError(f"world file {path} is not valid JSON (truncated?): {exc.msg} at line {exc.lineno} "
                         f"column {exc.colno}") from None
    except RecursionError:
        raise WorldError(f"world file {path}: JSON nested too deeply") from None
    world = parse_world(raw)
    world.source = str(path)
    return world


def parse_world(raw: Any) -> World:
    if not isinstance(raw, dict):
        raise WorldError("world: top level must be a JSON object")
    if raw.get("format") != FORMAT:
        raise WorldError(f"world: 'format' must be {FORMAT!r}, got {raw.get('format')!r}")
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise WorldError(f"world: unknown top-level key(s) {', '.join(map(repr, unknown))}; "
                         f"allowed: {', '.join(sorted(TOP_LEVEL))}")
    for key in ("now", "account_id", "region"):
        if key not in raw:
            raise WorldError(f"world: missing required key {key!r}")
    _check_basics(raw)
    now = parse_time_or_error(raw["now"], "now")
    data: dict[str, dict[str, list[Any]]] = {}
    for section, keys in SECTIONS.items():
        body = raw.get(section, {})
        if not isinstance(body, dict):
            raise WorldError(f"world: {section!r} must be an object")
        bad = sorted(set(body) - keys)
        if bad:
            raise WorldError(f"world: unknown key(s) {', '.join(map(repr, bad))} in {section!r}; "
                             f"allowed: {', '.join(sorted(keys))}")
        for key, value in body.items():
            if not isinstance(value, list):
                raise WorldError(f"world: {section}.{key} must be a list")
        data[section] = body
    groups = _parse_log_groups(data.get("logs", {}).get("groups", []))
    faults = raw.get("faults", [])
    if not isinstance(faults, list) or not all(isinstance(f, dict) for f in faults):
        raise WorldError("world: 'faults' must be a list of objects")
    for i, fault in enumerate(faults):
        for key in ("service", "operation"):
            if not isinstance(fault.get(key), str):
                raise WorldError(f"world: faults[{i}].{key} must be a string")
        times = fault.get("times")
        if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 0):
            raise WorldError(f"world: faults[{i}].times must be a non-negative integer, got {times!r}")
    concurrent = raw.get("logs_concurrent_queries", DEFAULT_LOGS_CONCURRENT_QUERIES)
    if isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 1:
        raise WorldError(f"world: 'logs_concurrent_queries' must be a positive integer, got {concurrent!r}")
    return World(now=now, account_id=str(raw["account_id"]), region=str(raw["region"]), data=data,
                 log_groups=groups, faults=[dict(f) for f in faults], logs_concurrent_queries=concurrent)


def as_logged(message: str) -> str:
    """CloudWatch Logs stores UTF-8: bytes that are not (lone surrogates in JSON) arrive as U+FFFD."""
    if message.isascii():
        return message
    return message.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def parse_time_or_error(value: Any, where: str) -> datetime:
    return parse_time(_epoch_ms(value, where))


def _parse_log_groups(raw_groups: list[Any]) -> dict[str, LogGroup]:
    groups: dict[str, LogGroup] = {}
    for gi, g in enumerate(raw_groups):
        where = f"logs.groups[{gi}]"
        if not isinstance(g, dict) or not isinstance(g.get("logGroupName"), str):
            raise WorldError(f"{where}: needs a string 'logGroupName'")
        bad = sorted(set(g) - GROUP_KEYS)
        if bad:
            raise WorldError(f"{where} ({g['logGroupName']}): unknown key(s) {', '.join(map(repr, bad))}")
        streams: dict[str, Stream] = {}
        for si, s in enumerate(g.get("streams", [])):
            swhere = f"{where}.streams[{si}]"
            if not isinstance(s, dict) or not isinstance(s.get("logStreamName"), str):
                raise WorldError(f"{swhere}: needs a string 'logStreamName'")
            bad = sorted(set(s) - STREAM_KEYS)
            if bad:
                raise WorldError(f"{swhere} ({s['logStreamName']}): unknown key(s) {', '.join(map(repr, bad))}")
            events = []
            for ei, ev in enumerate(s.get("events", []) or []):
                if not isinstance(ev, list) or len(ev) != 2 or not isinstance(ev[1], str):
                    raise WorldError(f"{swhere}.events[{ei}]: expected [timestamp, message]")
                events.append((_epoch_ms(ev[0], f"{swhere}.events[{ei}][0]"), as_logged(ev[1])))
            periodic = []
            for pi, p in enumerate(s.get("periodic", []) or []):
                pwhere = f"{swhere}.periodic[{pi}]"
                if not isinstance(p, dict) or set(p) - {"from", "to", "every_s", "message"}:
                    raise WorldError(f"{pwhere}: expected keys from, to, every_s, message")
                every = p.get("every_s")
                if isinstance(every, bool) or not isinstance(every, (int, float)) or not every >= MIN_EVERY_S:
                    raise WorldError(f"{pwhere}.every_s: must be a number of at least {MIN_EVERY_S}, got {every!r}")
                span_s = (_epoch_ms(p.get("to"), f"{pwhere}.to") - _epoch_ms(p.get("from"), f"{pwhere}.from")) / 1000
                if span_s / every > MAX_PERIODIC_LINES:
                    raise WorldError(f"{pwhere}: {span_s / every:,.0f} lines, more than {MAX_PERIODIC_LINES:,} in one "
                                     "periodic entry")
                periodic.append(Periodic(_epoch_ms(p.get("from"), f"{pwhere}.from"),
                                         _epoch_ms(p.get("to"), f"{pwhere}.to"),
                                         int(every * 1000), as_logged(str(p.get("message", "")))))
            creation = s.get("creationTime")
            if s["logStreamName"] in streams:
                raise WorldError(f"{swhere}: stream {s['logStreamName']!r} appears twice in {g['logGroupName']!r}")
            streams[s["logStreamName"]] = Stream(
                s["logStreamName"], events, periodic,
                _epoch_ms(creation, f"{swhere}.creationTime") if creation is not None else None)
        meta = {k: v for k, v in g.items() if k not in ("streams",)}
        if g["logGroupName"] in groups:
            raise WorldError(f"{where}: log group {g['logGroupName']!r} appears twice")
        groups[g["logGroupName"]] = LogGroup(g["logGroupName"], streams, meta)
    return groups
