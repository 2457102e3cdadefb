"""Does the embedded Logs Insights evaluator answer as the service does? (`scripts/verify-insights`)

Given a log group the user already has, read its events in a window with FilterLogEvents (bounded),
build an embedded world from exactly those events, run every query template the product uses (and a
few probes of the behaviours the evaluator assumes) once on AWS and once on that world, and print
each difference: rows, hour-bin boundaries, timestamp formats, the `@log` form, the default row
limit, the inclusive endTime. Read-only: the calls are FilterLogEvents, StartQuery, GetQueryResults
and StopQuery (a query that outlives the deadline), through the collectors' read-only port; nothing
is created in the account. Account IDs are masked in the output. Not run in CI (it needs credentials);
tests/embedded/test_conformance.py runs it against the embedded backend.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from gpuaudit.access import UserError, aws_for
from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.insights import FINISHED
from gpuaudit.collectors.kernel_lookback import BOOT_ROWS, DEEP_IDS_PER_QUERY
from gpuaudit.collectors.log_queries import (
    GPU_QUERY,
    JOB_QUERY,
    KERNEL_QUERY,
    STREAM_COUNTS,
    SUMMARY_QUERY,
    hours_query,
    lagging_hours_query,
    named_query,
)
from gpuaudit.collectors.logs import detail_chunks
from gpuaudit.collectors.stream_parts import ENDINGS, stream_part_filter
from gpuaudit.domain.markers import boot_lines_query
from gpuaudit.domain.streams import INSTANCE_ID
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import FORMAT, World, WorldError, parse_world
from gpuaudit.model.redaction import redact
from gpuaudit.model.timeutil import iso, parse_time

EXIT_SAME, EXIT_DIFFERENT, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 0, 1, 2, 3
DEFAULT_MAX_EVENTS = 50_000
QUERY_DEADLINE_S = 600.0
PLACEHOLDER_ACCOUNT = "000000000000"  # when no answer shows the account (an empty window)
_DIGITS = re.compile(r"\d")
_TIMESTAMP_LIKE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}")


class BadInput(ValueError):
    """A wrong argument or an unknown log group: exit 2 with the message, never a traceback."""


@dataclass(frozen=True)
class Probe:
    name: str
    query: str
    start_s: int
    end_s: int
    ordered: bool  # the query sorts, so row order is part of the answer


@dataclass
class Answer:
    status: str
    rows: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None


@dataclass
class EventRead:
    events: list[dict[str, Any]]
    start_s: int
    end_s: int  # inclusive, as StartQuery's
    cut: bool  # the read stopped at max_events: the window was shortened to what was read whole


def read_events(aws: Aws, group: str, start_s: int, end_s: int, max_events: int) -> EventRead:
    """The group's events in [start_s, end_s] (whole seconds, both inclusive), at most `max_events`.
    When there are more, the window ends one second before the last event read, so the embedded world
    holds every event of the shortened window (FilterLogEvents returns events in time order)."""
    pages = aws.paginate("logs", "FilterLogEvents", "events", token="nextToken", logGroupName=group,
                         startTime=start_s * 1000, endTime=end_s * 1000 + 999)
    events = list(islice(pages, max_events + 1))
    if len(events) <= max_events:
        return EventRead(events, start_s, end_s, cut=False)
    last_second = max(int(e["timestamp"]) for e in events) // 1000
    end_s = max(start_s, last_second - 1)
    kept = [e for e in events if int(e["timestamp"]) <= end_s * 1000 + 999]
    return EventRead(kept, start_s, end_s, cut=True)


def probes(read: EventRead) -> list[Probe]:
    """The product's templates over the read window, then the behaviours the evaluator assumes."""
    start, end = read.start_s, read.end_s
    streams = sorted({str(e["logStreamName"]) for e in read.events})
    hours = max(1, (end - start) // 3600 + 1)
    chunks = [[name for _, name in chunk] for chunk in detail_chunks((("", s) for s in streams), hours, {})]
    found = [
        Probe("kernel-streams", KERNEL_QUERY, start, end, False),
        Probe("stream-summary", SUMMARY_QUERY, start, end, False),
        Probe("gpu-lines", GPU_QUERY, start, end, True),
        Probe("job-figures", JOB_QUERY, start, end, True),  # a job's throughput / step-time lines (incident)
        # at fleet scale: the rows of the two per-stream reads counted first (one query: strcontains, greatest, a
        # computed field under two stats), the per-line kernel test it sums, and a part of one by ID ending
        Probe("stream-count", STREAM_COUNTS, start, end, False),
        Probe("kernel-lines", STREAM_COUNTS.split(" | ")[0] + " | stats sum(kernel_line) as kernel_lines, "
              "count(*) as lines by @logStream", start, end, False),
        Probe("stream-part", f"{stream_part_filter((0, ENDINGS // 2), unnamed=True)} | {SUMMARY_QUERY}", start, end,
              False),
    ]
    ids = sorted({m.group(0) for s in streams if (m := INSTANCE_ID.search(s))})
    if ids:  # the since-launch search for boot-time lines names the nodes' instance IDs
        found.append(Probe("boot-lines", boot_lines_query(ids[:DEEP_IDS_PER_QUERY], BOOT_ROWS), start, end, True))
    if chunks:
        found.append(Probe("stream-hours", hours_query(chunks[0]), start, end, False))
        # an hourly read's by-name reads: the GPU and kernel lines of the streams with a hint, a lagging stream's hours
        found.append(Probe("gpu-lines-named", named_query(chunks[0], GPU_QUERY), start, end, True))
        found.append(Probe("kernel-named", named_query(chunks[0], KERNEL_QUERY), start, end, False))
        found.append(Probe("lagging-hours", lagging_hours_query(chunks[0]), start, end, False))
    # Default row limit when `limit` is omitted, raw-record order and the timestamp format of raw lines.
    found.append(Probe("default-limit", "fields @timestamp, @message, @logStream, @log", start, end, False))
    # endTime includes its whole second: a window of exactly the last event's second holds that event.
    if read.events:
        last = max(int(e["timestamp"]) for e in read.events) // 1000
        found.append(Probe("end-inclusive", "stats count(*) as n, max(@timestamp) as last", last, last, False))
    return found


def run_probe(aws: Aws, group: str, probe: Probe, poll_s: float = 1.0) -> Answer:
    """One query, polled to a final status; abandoned (StopQuery) after QUERY_DEADLINE_S."""
    try:
        qid = aws.call("logs", "StartQuery", logGroupNames=[group], startTime=probe.start_s, endTime=probe.end_s,
                       queryString=probe.query)["queryId"]
        waited = 0.0
        while True:
            out = aws.call("logs", "GetQueryResults", queryId=qid)
            status = str(out.get("status", "Unknown"))
            if status in FINISHED:
                break
            if waited >= QUERY_DEADLINE_S:
                aws.call("logs", "StopQuery", queryId=qid)
                return Answer(f"{status} (stopped after {QUERY_DEADLINE_S:.0f} s)")
            aws.sleep(poll_s)
            waited += poll_s
    except CallFailed as failed:
        return Answer("Failed", error=f"{failed.code}: {failed.message}")
    rows = [{cell["field"]: cell.get("value", "") for cell in row} for row in out.get("results", [])]
    return Answer(status, rows)


def account_of(answers: Sequence[Answer], group: str) -> str:
    """The account ID as the service prints it in `@log` (`<account-id>:<group>`), for the embedded world."""
    for answer in answers:
        for row in answer.rows:
            account, _, rest = row.get("@log", "").partition(":")
            if rest == group and account.isdigit():
                return account
    return PLACEHOLDER_ACCOUNT


def world_of(group: str, read: EventRead, account: str, region: str) -> World:
    """An embedded world holding exactly the events read, in their streams."""
    streams: dict[str, list[list[Any]]] = {}
    for event in read.events:
        streams.setdefault(str(event["logStreamName"]), []).append([int(event["timestamp"]), str(event["message"])])
    raw = {"format": FORMAT, "now": iso(parse_time((read.end_s + 1) * 1000)), "account_id": account, "region": region,
           "logs": {"groups": [{"logGroupName": group, "streams": [
               {"logStreamName": name, "events": events} for name, events in sorted(streams.items())]}]}}
    return parse_world(raw)


def _shape(value: str) -> str:
    return _DIGITS.sub("9", value)


def differences(probe: Probe, real: Answer, embedded: Answer) -> list[str]:
    """What differs between the service's answer and the evaluator's, most telling first."""
    if real.status != embedded.status or real.error != embedded.error:
        return [f"status: AWS {real.status}{f' ({real.error})' if real.error else ''}, embedded "
                f"{embedded.status}{f' ({embedded.error})' if embedded.error else ''}"]
    found: list[str] = []
    if len(real.rows) != len(embedded.rows):
        found.append(f"rows: AWS {len(real.rows)}, embedded {len(embedded.rows)}")
    for name in sorted({k for row in real.rows + embedded.rows for k in row}):
        real_values = [row[name] for row in real.rows if name in row]
        mine = [row[name] for row in embedded.rows if name in row]
        if name == "@log" or any(_TIMESTAMP_LIKE.match(v) for v in real_values + mine):
            real_shapes, my_shapes = sorted(set(map(_shape, real_values))), sorted(set(map(_shape, mine)))
            if real_shapes != my_shapes:
                found.append(f"{name} format: AWS {real_shapes}, embedded {my_shapes}")
        if name == "hour" and sorted(set(real_values)) != sorted(set(mine)):
            found.append(f"hour bins: AWS {sorted(set(real_values))[:3]}…, embedded {sorted(set(mine))[:3]}…")
    real_rows = [json.dumps(row, sort_keys=True) for row in real.rows]
    my_rows = [json.dumps(row, sort_keys=True) for row in embedded.rows]
    if not probe.ordered and probe.name != "default-limit":
        real_rows, my_rows = sorted(real_rows), sorted(my_rows)
    if probe.name == "default-limit":  # which lines a capped raw listing keeps is not specified: count only
        return found
    if real_rows != my_rows:
        first = next((i for i, (a, b) in enumerate(zip(real_rows, my_rows, strict=False)) if a != b),
                     min(len(real_rows), len(my_rows)))
        found.append(f"row {first + 1}: AWS {real_rows[first] if first < len(real_rows) else '(none)'}, "
                     f"embedded {my_rows[first] if first < len(my_rows) else '(none)'}")
    return found


def verify(account: Aws, group: str, start: datetime, end: datetime, max_events: int = DEFAULT_MAX_EVENTS,
           out: TextIO = sys.stdout) -> int:
    """Run every probe on the account and on a world built from its events; print the comparison.
    Returns the exit code: 0 every answer the same, 1 some differ."""
    if end <= start:
        raise BadInput(f"the window is empty: {iso(start)} is not before {iso(end)}")
    read = read_events(account, group, int(start.timestamp()), int(end.timestamp()), max_events)
    plan = probes(read)
    real = [run_probe(account, group, probe) for probe in plan]
    world = world_of(group, read, account_of(real, group), account.region)
    backend = WorldBackend(world)
    embedded_aws = Aws(session=backend.session(), region=world.region, clock=lambda: world.now,
                        sleep=backend.sleep, monotonic=backend.monotonic)
    mine = [run_probe(embedded_aws, group, probe) for probe in plan]
    shown = {world.account_id}

    def say(text: str) -> None:
        print(redact(text, shown), file=out)

    say(f"verify-insights: {group}, {iso(parse_time(read.start_s * 1000))} .. "
        f"{iso(parse_time(read.end_s * 1000))} inclusive, {len(read.events)} events read with FilterLogEvents"
        + (f" (stopped at --max-events {max_events}: window shortened to what was read whole)" if read.cut else ""))
    different = 0
    for probe, real_answer, my_answer in zip(plan, real, mine, strict=True):
        found = differences(probe, real_answer, my_answer)
        different += bool(found)
        say(f"[{'DIFF' if found else 'same'}] {probe.name}: AWS {real_answer.status}, {len(real_answer.rows)} rows")
        for line in found:
            say(f"    {line}")
    say(f"{len(plan) - different} same, {different} different")
    return EXIT_DIFFERENT if different else EXIT_SAME


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="verify-insights", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-group", required=True, help="an existing log group (read only)")
    parser.add_argument("--region", help="AWS Region (default: the session's)")
    parser.add_argument("--last", default="24h", help="window ending now: <n>h or <n>d (default 24h)")
    parser.add_argument("--since", help="window start (ISO-8601 UTC); with --until instead of --last")
    parser.add_argument("--until", help="window end (ISO-8601 UTC)")
    parser.add_argument("--max-events", type=int, default=DEFAULT_MAX_EVENTS,
                        help=f"most events read with FilterLogEvents (default {DEFAULT_MAX_EVENTS})")
    parser.add_argument("--world", type=Path, help="a world file standing in for the account (offline check)")
    return parser.parse_args(argv)


def _window(args: argparse.Namespace, now: datetime) -> tuple[datetime, datetime]:
    try:
        if args.since or args.until:
            if not (args.since and args.until):
                raise BadInput("--since and --until go together")
            return parse_time(args.since), parse_time(args.until)
        match = re.fullmatch(r"(\d+)([hd])", args.last)
        if match is None or int(match.group(1)) == 0:
            raise BadInput(f"--last: expected <n>h or <n>d, got {args.last!r}")
        span = timedelta(hours=int(match.group(1)) * (24 if match.group(2) == "d" else 1))
        return now - span, now
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:

    args = _arguments(argv)
    try:
        if args.max_events < 1:
            raise BadInput("--max-events must be at least 1")
        aws = aws_for(args.world, args.region)
        start, end = _window(args, aws.clock())
        try:
            return verify(aws, args.log_group, start, end, args.max_events, out)
        except CallFailed as failed:
            if failed.code == "ResourceNotFoundException":
                raise BadInput(f"log group {args.log_group!r} not found: {failed.message}") from None
            print(f"verify-insights: {failed}", file=sys.stderr)
            return EXIT_UNREACHABLE
    except (BadInput, WorldError) as exc:
        print(f"verify-insights: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UserError as exc:
        print(f"verify-insights: {exc}", file=sys.stderr)
        return exc.code
