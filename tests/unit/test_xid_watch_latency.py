"""The Xid watch's time-to-alert model (issue #51 item 3, tests/benchmarks/xid_watch_latency.py): the arithmetic of
each hop, the alarm's per-minute evaluation, and one alarm event and one audit per burst."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from benchmarks.xid_watch_latency import (
    STAGES,
    Stage,
    alarm_events,
    alarm_fires_at,
    audits_started,
    time_to_alert,
    time_to_alert_figures,
)

ZERO = dict.fromkeys(STAGES, 0.0)


def test_the_alarm_sees_a_line_once_its_minute_has_ended_and_its_datapoint_arrived() -> None:
    # a line at 10:01:05 (3665 s): its minute ends at 3720; an alarm evaluated at :20 of each minute fires at 3740
    assert alarm_fires_at(3665, 3670, evaluation_offset_s=20) == 3740
    # a datapoint arriving after the minute's end waits for the next evaluation after it
    assert alarm_fires_at(3665, 3745, evaluation_offset_s=20) == 3800
    # an evaluation exactly at the minute's end reads it
    assert alarm_fires_at(3665, 3700, evaluation_offset_s=0) == 3720


def test_time_to_alert_adds_each_hop_and_rounds_the_queries_up_to_the_wait() -> None:
    delays = {**ZERO, "agent_flush": 5, "filter_to_metric": 10, "alarm_to_execution": 2, "lambda_steps": 8,
              "logs_insights": 21, "audit_compute": 4, "sns_publish": 1}
    # fires at 3720 (minute end, ready 3680), then 2 + 8 + 30 (21 s of queries asked every 10 s) + 4 + 1
    assert time_to_alert(3665, delays, evaluation_offset_s=0) == 3720 + 45 - 3665


def test_the_figures_follow_the_stages_bounds() -> None:
    fixed = {name: Stage(s.high, s.high, s.source) for name, s in STAGES.items()}
    figures = time_to_alert_figures([60.0 * i for i in range(1, 50)], random.Random(1), fixed)
    # worst case with each hop at its bound: a line at a minute's start waits the whole minute and a full offset
    worst = 60 + 60 + sum(s.high for n, s in STAGES.items() if n not in ("agent_flush", "filter_to_metric",
                                                                          "logs_insights")) + 60
    assert figures["max"] <= worst and figures["p50"] <= figures["p95"] <= figures["max"]


@pytest.mark.parametrize(("span_s", "wanted"), [(120, 1), (30, 1)])
def test_a_burst_of_lines_is_one_alarm_event_and_one_audit(span_s: float, wanted: int) -> None:
    lines = [3660 + span_s * i / 500 for i in range(500)]
    events = alarm_events(lines, evaluation_offset_s=17, ready_after_s=30)
    assert len(events) == wanted
    assert audits_started(events, datetime(2026, 10, 1, 9, 0, tzinfo=UTC)) == 1


def test_lines_minutes_apart_are_two_alarm_events_coalesced_within_the_quarter_hour() -> None:
    lines = [3660.0, 3665.0, 3900.0]  # 10:01 and 10:05, with quiet minutes between: the alarm went back to OK
    events = alarm_events(lines, evaluation_offset_s=0, ready_after_s=5)
    assert len(events) == 2
    assert audits_started(events, datetime(2026, 10, 1, 9, 0, tzinfo=UTC)) == 1
