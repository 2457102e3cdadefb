"""Time to alert with the Xid watch (issue #51 item 3): from a fatal Xid line written on a node to the SNS publish of
the incident audit it starts, by the delivery latencies AWS documents and the ones it does not (stated as assumed).

    .venv/bin/python tests/benchmarks/xid_watch_latency.py --lines 2000 --seed 7

A small simulation: Xid 79 lines written at random moments of an hour (each on a cluster whose alarm sits at its
own evaluation offset), each taken through `time_to_alert` with delays drawn from `STAGES`; then a burst (500 lines
from 50 nodes in two minutes) through the alarm's per-minute evaluation and Plan's quarter-hour claim, counting
the alarm events and audits it makes; then application-class Xid 13 lines through the generated filter pattern,
counting the ones that would start an audit (none should). Prints JSON: `time_to_alert_s` {p50, p95, max}, the
stages with their source, `burst` {lines, nodes, alarm_events, audits}, `xid13_triggers`.

The production-day simulation (tests/benchmarks/production_day.py) prints the same figure by calling
`time_to_alert_figures(line_times, random.Random(seed))` with the times (seconds) its Xid 79 lines are written.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "tests"), str(ROOT)]

from handlers.coalesce import bucket_of  # noqa: E402
from helpers.filter_pattern import matches  # noqa: E402

from infra.xid_watch_pattern import ALARM_PERIOD_S, filter_pattern  # noqa: E402

FIGURES: TextIO = sys.stdout


@dataclass(frozen=True)
class Stage:
    """One hop's delay, drawn uniformly from [low, high] seconds, and where the bound comes from."""

    low: float
    high: float
    source: str


# Each hop of the path, in order. "documented" names the AWS page that states the bound; "assumed" says AWS states
# none and what was taken instead (conservative, so the figure is an upper estimate where AWS is silent).
STAGES: Mapping[str, Stage] = {
    "agent_flush": Stage(
        0,
        5,
        "documented: the CloudWatch agent sends buffered log events at most force_flush_interval "
        "after they are written, default 5 s (CloudWatch User Guide, 'Setting alarms on metrics "
        "created with the embedded metric format')",
    ),
    "filter_to_metric": Stage(
        1,
        30,
        "assumed: CloudWatch Logs documents that metric filters turn events into "
        "datapoints as they are ingested, with no latency bound; 30 s taken",
    ),
    # The alarm hop itself is not a draw: the datapoint belongs to the minute of the line's timestamp; the alarm
    # (period 60 s) is evaluated once a minute (CloudWatch User Guide, 'Alarm evaluation': alarms with a period of
    # 60 s or more are evaluated every minute) and sees the minute once it has ended.
    "alarm_to_execution": Stage(
        0.5,
        5,
        "assumed: CloudWatch guarantees delivery of alarm state-change events to "
        "EventBridge (CloudWatch User Guide, 'Alarm events and EventBridge') and "
        "EventBridge starts the state machine; no latency bound documented; 5 s taken",
    ),
    "lambda_steps": Stage(
        5 * 0.5,
        5 * 3.0,
        "assumed: Plan, Inventory, CollectLogs, Finish and Verdict, each 0.5-3 s "
        "of start (cold start included) and state transition",
    ),
    "logs_insights": Stage(
        5,
        60,
        "assumed: the batch's three Logs Insights queries over the cluster's 24 h finish in "
        "5-60 s (no latency documented); the state machine asks every query_wait_seconds "
        "(10 s), so the wait is rounded up to it",
    ),
    "audit_compute": Stage(
        2,
        30,
        "measured order: docs/BENCHMARKS.md, collect + judge of 100-2,000 nodes in-process "
        "0.8-10.8 s (judge 2.7 s at 2,000); up to 30 s taken for Lambda's slower CPU",
    ),
    "sns_publish": Stage(0, 1, "assumed: one Publish call"),
}
QUERY_WAIT_S = 10


def draw(stages: Mapping[str, Stage], rng: random.Random) -> dict[str, float]:
    return {name: rng.uniform(stage.low, stage.high) for name, stage in stages.items()}


def alarm_fires_at(line_s: float, datapoint_ready_s: float, evaluation_offset_s: float,
                   period_s: int = ALARM_PERIOD_S) -> float:
    """When the alarm first evaluates the minute holding the line: the first evaluation tick (every period, at the
    alarm's own offset) at or after both the minute's end and the datapoint's arrival."""
    minute_end = math.floor(line_s / period_s) * period_s + period_s
    ready = max(minute_end, datapoint_ready_s)
    return evaluation_offset_s + math.ceil((ready - evaluation_offset_s) / period_s) * period_s


def time_to_alert(line_s: float, delays: Mapping[str, float], evaluation_offset_s: float,
                  query_wait_s: int = QUERY_WAIT_S) -> float:
    """Seconds from a watched line written at `line_s` to the SNS publish of the audit it starts (pure)."""
    ready = line_s + delays["agent_flush"] + delays["filter_to_metric"]
    fired = alarm_fires_at(line_s, ready, evaluation_offset_s)
    queries = math.ceil(delays["logs_insights"] / query_wait_s) * query_wait_s
    published = fired + delays["alarm_to_execution"] + delays["lambda_steps"] + queries + delays["audit_compute"] + \
        delays["sns_publish"]
    return published - line_s


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def time_to_alert_figures(line_times_s: Sequence[float], rng: random.Random,
                          stages: Mapping[str, Stage] = STAGES) -> dict[str, float]:
    """p50, p95 and max seconds to alert over the given line times, each with its own draws and alarm offset."""
    seconds = [time_to_alert(t, draw(stages, rng), rng.uniform(0, ALARM_PERIOD_S)) for t in line_times_s]
    return {"p50": round(percentile(seconds, 0.5), 1), "p95": round(percentile(seconds, 0.95), 1),
            "max": round(max(seconds), 1), "lines": len(seconds)}


def alarm_events(line_times_s: Sequence[float], evaluation_offset_s: float, ready_after_s: float,
                 period_s: int = ALARM_PERIOD_S) -> list[float]:
    """The moments the alarm changes to ALARM. At each evaluation tick it reads the latest minute whose datapoint
    has arrived (`ready_after_s` after the minute's end): ALARM when that minute holds a line (Sum >= 1), OK when it
    holds none (missing data not breaching). Only a change to ALARM is an event to EventBridge."""
    if not line_times_s:
        return []
    minutes = {math.floor(t / period_s) for t in line_times_s}
    first_ready = (min(minutes) + 1) * period_s + ready_after_s
    tick = evaluation_offset_s + math.ceil((first_ready - evaluation_offset_s) / period_s) * period_s
    events, state = [], "OK"
    while math.floor((tick - ready_after_s) / period_s) - 1 <= max(minutes) + 1:
        now = "ALARM" if math.floor((tick - ready_after_s) / period_s) - 1 in minutes else "OK"
        if now == "ALARM" and state == "OK":
            events.append(tick)
        state = now
        tick += period_s
    return events


def audits_started(event_times_s: Sequence[float], epoch: datetime) -> int:
    """Plan's quarter-hour claim per cluster and mode (handlers/coalesce.py): one audit per quarter hour."""
    return len({bucket_of(epoch + timedelta(seconds=t)) for t in event_times_s})


def burst(rng: random.Random, lines: int = 500, nodes: int = 50, span_s: float = 120) -> dict[str, int]:
    start = 3600 + rng.uniform(0, 600)  # inside one quarter hour's first part, as a GPU falling off at 10:01
    times = sorted(start + rng.uniform(0, span_s) for _ in range(lines))
    events = alarm_events(times, rng.uniform(0, ALARM_PERIOD_S), ready_after_s=STAGES["filter_to_metric"].high)
    return {"lines": lines, "nodes": nodes, "alarm_events": len(events),
            "audits": audits_started(events, datetime(2026, 10, 1, 9, 0, tzinfo=UTC))}


def xid13_triggers(count: int, rng: random.Random) -> int:
    pattern = filter_pattern()
    lines = [
        f"[{rng.uniform(1, 9e6):.6f}] NVRM: Xid (PCI:0000:{rng.randrange(256):02x}:00): 13, "
        f"pid={rng.randrange(1, 10**6)}, "
        "name=python3, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Encoding"
        for _ in range(count)
    ]
    return sum(1 for line in lines if matches(pattern, line))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=2000, help="Xid 79 lines written at random moments of an hour")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    line_times = [rng.uniform(0, 3600) for _ in range(args.lines)]
    figures: dict[str, Any] = {
        "time_to_alert_s": time_to_alert_figures(line_times, rng),
        "stages": {name: {"low_s": s.low, "high_s": s.high, "source": s.source} for name, s in STAGES.items()},
        "alarm": {"period_s": ALARM_PERIOD_S, "evaluated": "every minute at the alarm's own offset"},
        "burst": burst(rng),
        "xid13_triggers": xid13_triggers(min(args.lines, 200), rng),
    }
    json.dump(figures, FIGURES, indent=1)
    FIGURES.write("\n")


if __name__ == "__main__":
    main()
