"""The Xid watch's alarm (issue #51 items 1-2): an incident audit of its cluster through the same Plan path, one audit
per burst whatever mix of watch alarms and HyperPod node events makes it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from handlers import plan
from handlers.runtime import InvalidEvent
from lambda_harness import EVENT_ACCOUNT, Account, LambdaContext, hyperpod_node_health_event, scheduled_event

from gpuaudit.settings import XID_WATCH_ALARM_INFIX

STACK = "GpuAudit"


def alarm_event(cluster: str, time: str, state: str = "ALARM", stack: str = STACK) -> dict[str, Any]:
    """The "CloudWatch Alarm State Change" event as CloudWatch documents it (single-metric alarm)."""
    name = f"{stack}{XID_WATCH_ALARM_INFIX}{cluster}"
    return {
        "version": "0",
        "id": "c4c1c1c9-6542-e61b-6ef0-8c4d36933a92",
        "detail-type": "CloudWatch Alarm State Change",
        "source": "aws.cloudwatch",
        "account": EVENT_ACCOUNT,
        "time": time,
        "region": "us-west-2",
        "resources": [f"arn:aws:cloudwatch:us-west-2:{EVENT_ACCOUNT}:alarm:{name}"],
        "detail": {
            "alarmName": name,
            "state": {"value": state, "reason": "Threshold Crossed: 1 datapoint [3.0]", "timestamp": time},
            "previousState": {"value": "OK" if state == "ALARM" else "ALARM"},
            "configuration": {
                "metrics": [
                    {
                        "id": "m1",
                        "metricStat": {
                            "metric": {
                                "namespace": "gpuaudit/XidWatch",
                                "name": f"FatalXidLines-{cluster}",
                                "dimensions": {},
                            },
                            "period": 60,
                            "stat": "Sum",
                        },
                        "returnData": True,
                    }
                ]
            },
        },
    }


def run(event: Any) -> dict[str, Any]:
    return plan.handler(event, LambdaContext())  # type: ignore[no-any-return]


def test_the_watch_alarm_starts_an_incident_audit_of_its_cluster_up_to_the_alarm(account: Account) -> None:
    out = run(alarm_event("research-hp-slurm", "2026-10-01T10:02:41Z"))
    (target,) = out["targets"]
    assert (out["trigger"], target["trigger"], target["window_source"]) == ("xid-watch", "xid-watch", "event")
    assert target["request"]["cluster"] == "research-hp-slurm" and target["request"]["mode"] == "incident"
    assert (target["request"]["since"], target["request"]["until"]) == ("2026-09-30T10:02:00Z", "2026-10-01T10:02:00Z")


@pytest.mark.parametrize(("event", "said"), [
    (alarm_event("research-hp-slurm", "2026-10-01T10:02:41Z", state="OK"), "is not ALARM"),
    (alarm_event("someone-elses-cluster", "2026-10-01T10:02:41Z"), "not the Xid watch alarm of an audited cluster"),
    # a configured name that is only the tail of the alarm's cluster is not that cluster
    (alarm_event("x-research-hp-slurm", "2026-10-01T10:02:41Z"), "not the Xid watch alarm of an audited cluster"),
], ids=["back-to-ok", "unaudited", "suffix-only"])
def test_an_alarm_back_to_ok_or_of_another_cluster_starts_nothing(account: Account, event: dict[str, Any],
                                                                  said: str) -> None:
    out = run(event)
    assert out["targets"] == [] and said in out["skipped"][0]


def test_a_burst_of_watch_alarms_and_node_events_is_one_audit(account: Account) -> None:
    """A GPU falls off the bus at 10:01 on a HyperPod cluster: 500 lines from 50 nodes over two minutes move the
    watch's alarm to ALARM (and, with lines paused for a minute, to OK and to ALARM again), and HyperPod sends a
    node-health event per node. One incident audit; every other trigger ends at Plan, named as coalesced."""
    triggers = [alarm_event("research-hp-slurm", "2026-10-01T10:02:05Z")]
    triggers += [hyperpod_node_health_event("research-hp-slurm", f"2026-10-01T10:{1 + i // 25:02d}:{i % 60:02d}Z")
                 for i in range(50)]
    triggers.append(alarm_event("research-hp-slurm", "2026-10-01T10:04:05Z"))
    outs = [run(t) for t in triggers]
    audits = [t for o in outs for t in o["targets"]]
    assert len(audits) == 1 and audits[0]["trigger"] == "xid-watch"
    assert all("coalesced" in o["skipped"][0] for o in outs[1:])
    # the watch firing again in the next quarter hour is a new burst: audited again
    (later,) = run(alarm_event("research-hp-slurm", "2026-10-01T10:16:05Z"))["targets"]
    assert later["request"]["until"] == "2026-10-01T10:16:00Z"


def test_a_redelivered_alarm_event_plans_nothing_twice(account: Account) -> None:
    first = run(alarm_event("research-hp-slurm", "2026-10-01T10:02:41Z"))
    again = run(alarm_event("research-hp-slurm", "2026-10-01T10:02:41Z"))
    assert len(first["targets"]) == 1 and again["targets"] == [] and "coalesced" in again["skipped"][0]


def test_a_malformed_alarm_delivery_is_refused_naming_the_field_without_echoing_it_raw(account: Account) -> None:
    event = alarm_event("research-hp-slurm", "2026-10-01T10:02:41Z")
    event["detail"]["alarmName"] = "GpuAudit-xid-watch-\x1b[2J\r\nFAKE: all nodes healthy" + "x" * 300
    del event["detail"]["state"]
    with pytest.raises(InvalidEvent) as raised:
        run(event)
    message = str(raised.value)
    assert "detail.state" in message and "detail.alarmName" in message
    assert "\x1b" not in message and "\r\n" not in message  # quoted (repr), cut short, never raw


def test_an_alarm_name_with_control_characters_starts_nothing(account: Account) -> None:
    out = run(alarm_event("research-hp-slurm\r\nx", "2026-10-01T10:02:41Z"))
    assert out["targets"] == [] and "no audit" in out["skipped"][0]


def test_a_watch_alarm_during_a_running_incident_audit_is_folded_into_the_next_audit(
        account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node event's incident audit runs from 10:00; the watch fires at 10:16 (a new quarter hour) while it runs: the
    watch's execution skips the cluster, naming the running audit, and the next audit of the cluster — the hourly
    one at 11:00, its own mode's claim — reads the window holding the line."""
    monkeypatch.setenv("GPUAUDIT_IN_FLIGHT_S", "5400")
    now = datetime(2026, 10, 1, 10, 0, 30, tzinfo=UTC)
    monkeypatch.setattr(plan, "clock", lambda: now)
    given = {"trigger": hyperpod_node_health_event("research-hp-slurm", "2026-10-01T10:00:10Z"), "execution": "ev-10"}
    assert len(run(given)["targets"]) == 1
    now = datetime(2026, 10, 1, 10, 16, 30, tzinfo=UTC)
    watch = run({"trigger": alarm_event("research-hp-slurm", "2026-10-01T10:16:20Z"), "execution": "watch-1016"})
    assert watch["targets"] == [] and "running in another execution" in watch["skipped"][0]
    now = datetime(2026, 10, 1, 11, 0, 30, tzinfo=UTC)
    (hourly,) = run({"trigger": scheduled_event("2026-10-01T11:00:05Z"), "execution": "h-11"})["targets"]
    assert hourly["request"]["until"] == "2026-10-01T11:00:00Z" > "2026-10-01T10:16:20Z"
