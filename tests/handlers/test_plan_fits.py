"""A Plan that fits (issue #47 items 3, 4 and 6): its output bounded at the production shape, discovery once per
period, no cluster audited by two executions at once, each execution only what fits its period, a console input
the audit cannot honour refused naming its field. The Plan handler runs as deployed (lambda_harness) against one
world-backed account and one moto table; time is the trigger's and the handler's injected clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from handlers import inventory, plan
from handlers.execution_share import NEW_CLUSTER_ESTIMATE_S
from handlers.rotation import audited_key
from handlers.runtime import InvalidEvent
from lambda_harness import (
    TABLE,
    Account,
    LambdaContext,
    capacity_block_warning,
    deploy_configuration,
    hyperpod_node_health_event,
    scheduled_event,
)

from gpuaudit.embedded import backend as embedded
from gpuaudit.model.timeutil import iso

STATE_LIMIT = 131_072  # the issue's bound on any state: half of Step Functions' 256 KB


def planned(event: Any, execution: str | None = None) -> dict[str, Any]:
    given = {"trigger": event, "execution": execution} if execution else event
    return plan.handler(given, LambdaContext())  # type: ignore[no-any-return]


def fleet_ids(fleet: int) -> list[str]:
    return [f"i-{fleet:02x}{n:015x}" for n in range(1000)]


def test_plan_output_stays_bounded_at_the_production_shape(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """200 clusters and 10 self-managed fleets of 1,000 IDs each: Plan's output held every ID (287,647 bytes, past
    Step Functions' 256 KB); its targets now carry only what the child needs, and every one of the 210 fits (a cap of
    200 deferred 10 every period, so a stopped execution left some clusters three periods unaudited)."""
    clusters = [f"training-cluster-{i:03d}-" + "x" * 40 for i in range(200)]
    fleets = {f"fleet-{f}": fleet_ids(f) for f in range(10)}
    deploy_configuration(monkeypatch, {"clusters": clusters + list(fleets), "instances": fleets})
    out = planned(scheduled_event("2026-10-01T18:17:04Z"))
    assert len(json.dumps(out, separators=(",", ":"))) <= STATE_LIMIT
    assert len(out["targets"]) == 210 and all(t["request"]["instance_ids"] == [] for t in out["targets"])
    assert all(t["scope"] == "deployment" for t in out["targets"]) and out["skipped"] == []


def test_plan_output_stays_bounded_with_the_longest_names(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """400 clusters of 256-character names (HyperPod's and tags' limit): the targets Plan keeps are bounded by their
    bytes, the rest deferred and named, and the output stays under half of Step Functions' limit."""
    clusters = [f"c{i:03d}-" + "n" * 251 for i in range(400)]
    deploy_configuration(monkeypatch, {"clusters": clusters})
    out = planned(scheduled_event("2026-10-01T18:17:04Z"))
    kept = len(out["targets"])
    assert len(json.dumps(out, separators=(",", ":"))) <= STATE_LIMIT
    assert 100 < kept < 400
    (note,) = out["skipped"]
    assert note.startswith(f"{400 - kept} audits deferred to the next period") and "96 KB of targets" in note
    again = planned(scheduled_event("2026-10-01T18:17:04Z"), "second")  # nothing marked: the same order
    assert [t["request"]["cluster"] for t in again["targets"]] == clusters[:kept]


def test_skipped_notes_are_bounded_when_another_execution_holds_the_fleet(
        account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line per cluster another execution holds would grow Plan's output with the fleet: at most 20, then a count."""
    clusters = [f"training-cluster-{i:03d}" for i in range(120)]
    deploy_configuration(monkeypatch, {"clusters": clusters})
    monkeypatch.setenv("GPUAUDIT_IN_FLIGHT_S", "5400")
    first = planned(scheduled_event("2026-10-01T18:17:04Z"), "first")
    second = planned(scheduled_event("2026-10-01T18:17:04Z"), "second")
    assert len(first["targets"]) == 120 and second["targets"] == []
    assert len(second["skipped"]) == 21 and second["skipped"][-1].startswith("… and 100 more held by another")
    assert all("not audited twice" in line for line in second["skipped"][:20])


def test_inventory_adds_the_configured_scope_back(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    deploy_configuration(monkeypatch, {"clusters": ["research-hp-slurm"],
                                       "log_groups": {"research-hp-slurm": ["/aws/batch/job"]}})
    (target,) = planned(scheduled_event("2026-10-01T18:17:04Z"))["targets"]
    assert target["request"]["log_groups"] == []
    found = inventory.handler(target, LambdaContext())
    assert found["request"]["log_groups"] == ["/aws/batch/job"]  # what Finish and Verdict are handed


def test_a_console_request_keeps_its_own_scope(account: Account) -> None:
    (target,) = planned({"cluster": "research-hp-slurm", "mode": "incident", "last": "6h",
                         "log_groups": ["/aws/batch/job"]})["targets"]
    assert target["scope"] == "request" and target["request"]["log_groups"] == ["/aws/batch/job"]


class DiscoveryScans:
    """Counts the ParallelCluster discovery scans (DescribeInstances over every instance tagged with a cluster
    name) the backend answers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = embedded.RESPONDERS[("ec2", "DescribeInstances")]

        def counted(b: embedded.WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
            names = {f.get("Name") for f in p.get("Filters", [])}
            if "instance-state-name" in names and "capacity-reservation-id" not in names:
                self.count += 1
            return original(b, p)

        monkeypatch.setitem(embedded.RESPONDERS, ("ec2", "DescribeInstances"), counted)


def test_discovery_runs_at_most_once_per_period(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hourly trigger discovers and keeps the result; a Capacity Block warning later in the hour reuses it;
    a burst of HyperPod node events never scans instances (they need only ListClusters); the next hour scans again."""
    deploy_configuration(monkeypatch, {"clusters": [], "discover": True})
    scans = DiscoveryScans(monkeypatch)
    first = planned(scheduled_event("2026-10-01T18:02:00Z"))
    assert [t["request"]["cluster"] for t in first["targets"]] == ["research-hp-slurm"] and scans.count == 1
    warned = planned(capacity_block_warning("cr-0123456789abcdef0", "2026-10-01T18:20:00Z"))
    assert [t["request"]["cluster"] for t in warned["targets"]] == ["research-hp-slurm"]
    for minute in range(30, 35):
        planned(hyperpod_node_health_event("research-hp-slurm", f"2026-10-01T18:{minute}:00Z"))
    assert scans.count == 1
    planned(scheduled_event("2026-10-01T19:02:00Z"))
    assert scans.count == 2


def test_a_cluster_another_execution_audits_is_not_audited_twice(account: Account,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The 18:00 execution still audits the cluster when the 19:00 one plans: the second skips it, naming why; a
    retried Plan of the first keeps its own claim; once the first one's claim lapses (its timeout), it is audited."""
    monkeypatch.setenv("GPUAUDIT_IN_FLIGHT_S", "5400")
    now = datetime(2026, 10, 1, 18, 0, 30, tzinfo=UTC)
    monkeypatch.setattr(plan, "clock", lambda: now)
    assert len(planned(scheduled_event("2026-10-01T18:00:05Z"), "exec-18")["targets"]) == 1
    assert len(planned(scheduled_event("2026-10-01T18:00:05Z"), "exec-18")["targets"]) == 1  # its own retry
    now = datetime(2026, 10, 1, 19, 0, 30, tzinfo=UTC)
    second = planned(scheduled_event("2026-10-01T19:00:05Z"), "exec-19")
    assert second["targets"] == []
    assert "running in another execution" in second["skipped"][0] and "not audited twice" in second["skipped"][0]
    node_event = planned(hyperpod_node_health_event("research-hp-slurm", "2026-10-01T19:00:10Z"), "exec-event")
    assert len(node_event["targets"]) == 1 and node_event["gaps"] == []  # an incident audit: its own mode's claim
    now = datetime(2026, 10, 1, 19, 31, 0, tzinfo=UTC)  # 18:00:30 + 5,400 s: the stopped execution's claim lapsed
    assert len(planned(scheduled_event("2026-10-01T19:31:00Z"), "exec-1931")["targets"]) == 1


def mark(account: Account, cluster: str, took: timedelta, ended: datetime) -> None:
    """What MarkAudited writes after a Verdict whose audit took `took`."""
    account.session.client("dynamodb").put_item(TableName=TABLE, Item={
        **audited_key(cluster, "coverage"), "audited_at": {"S": iso(ended)},
        "audit_s": {"N": str(int(took.total_seconds()))}})


def test_an_execution_plans_only_what_fits_its_period_and_the_rest_lead_the_next(
        account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two lanes and 30 minutes each: clusters whose last audit took 10 minutes fit three to a lane, six in all; a
    never-audited one counts NEW_CLUSTER_ESTIMATE_S. The deferred keep their older marks, so they lead next time."""
    clusters = [f"c{i:02d}" for i in range(10)]
    deploy_configuration(monkeypatch, {"clusters": clusters})
    monkeypatch.setenv("GPUAUDIT_CLUSTER_LANES", "2")
    monkeypatch.setenv("GPUAUDIT_EXECUTION_BUDGET_S", "1800")
    assert NEW_CLUSTER_ESTIMATE_S == 600
    ended = datetime(2026, 10, 1, 17, 0, tzinfo=UTC)
    for i, cluster in enumerate(clusters[1:]):  # c00 never audited; the others oldest first by index
        mark(account, cluster, timedelta(minutes=10), ended + timedelta(seconds=i))
    out = planned(scheduled_event("2026-10-01T18:17:04Z"))
    kept = [t["request"]["cluster"] for t in out["targets"]]
    assert kept == clusters[:6]
    assert "4 audits deferred to the next period" in out["skipped"][0] and "c06" in out["skipped"][0]
    mark(account, "c09", timedelta(minutes=25), ended + timedelta(seconds=30))  # a slow one, audited most recently
    for cluster in kept:
        mark(account, cluster, timedelta(minutes=10), ended + timedelta(hours=1))
    later = [t["request"]["cluster"] for t in planned(scheduled_event("2026-10-01T19:17:04Z"))["targets"]]
    # What was deferred leads; c09's 25 minutes, on the first lane to free up (after 10), would end at 35: deferred.
    assert later == ["c06", "c07", "c08"]


def test_a_never_measured_cluster_is_laid_out_like_the_fleets_measured_ones(
        account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh deployment's second period: four clusters measured (1, 1, 2 and 3 minutes), six never audited. They are
    laid out at the measured audits' upper quartile (2 minutes), not 10 minutes each, so all ten fit two 30-minute
    lanes (at 10 minutes each, the fleet took 9 periods to audit every cluster once at the production shape)."""
    clusters = [f"c{i:02d}" for i in range(10)]
    deploy_configuration(monkeypatch, {"clusters": clusters})
    monkeypatch.setenv("GPUAUDIT_CLUSTER_LANES", "2")
    monkeypatch.setenv("GPUAUDIT_EXECUTION_BUDGET_S", "1800")
    ended = datetime(2026, 10, 1, 17, 0, tzinfo=UTC)
    for cluster, minutes in zip(clusters[6:], (1, 1, 2, 3), strict=True):
        mark(account, cluster, timedelta(minutes=minutes), ended)
    out = planned(scheduled_event("2026-10-01T18:17:04Z"))
    assert [t["request"]["cluster"] for t in out["targets"]] == clusters and out["skipped"] == []
    monkeypatch.setenv("GPUAUDIT_EXECUTION_BUDGET_S", "300")  # 2 lanes of 5 minutes: 2 + 2 a lane, then measured
    tight = [t["request"]["cluster"] for t in planned(scheduled_event("2026-10-01T18:17:04Z"))["targets"]]
    assert tight == clusters[:4]


@pytest.mark.parametrize(("request_", "field"), [
    ({"since": "2026-10-01T12:00:00Z", "until": "2026-10-01T10:00:00Z"}, "`since`"),
    ({"last": "91d"}, "`last`"),
    ({"since": "2026-11-01T12:00:00Z"}, "`since`"),
    ({"since": "2026-06-01T00:00:00Z", "until": "2026-10-01T00:00:00Z"}, "`since`"),
    ({"last": "6h", "onset": "2026-09-01T00:00:00Z"}, "`onset`"),
], ids=["start-after-end", "too-long", "in-the-future", "past-90-days", "onset-outside"])
def test_a_console_window_the_audit_cannot_honour_fails_naming_the_input_field(account: Account,
                                                                               request_: dict[str, Any],
                                                                               field: str) -> None:
    """Refused at Plan (no Catch: the execution fails with InvalidEvent), one sentence naming the state machine
    input's field — not a CLI flag — where it used to plan the audit and let the execution show Succeeded."""
    with pytest.raises(InvalidEvent) as refused:
        planned({"cluster": "research-hp-slurm", "mode": "incident", **request_})
    message = str(refused.value)
    assert message.startswith(f"on-demand input field {field} cannot be honoured") and "--" not in message


def test_a_stopped_executions_clusters_are_audited_by_the_next_one(account: Account,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is lost: an execution stopped mid-audit never marks its clusters; the next execution finds the claim
    held, asks Step Functions (DescribeExecution) whether its holder still runs, and takes it over — while a holder
    still running keeps it."""
    monkeypatch.setenv("GPUAUDIT_IN_FLIGHT_S", "5400")
    sfn = account.session.client("stepfunctions")
    machine = sfn.create_state_machine(
        name="gpuaudit",
        roleArn="arn:aws:iam::123456789012:role/sfn",
        definition=json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}),
    )["stateMachineArn"]
    running, stopped = (sfn.start_execution(stateMachineArn=machine, name=n)["executionArn"] for n in ("h18", "h19"))
    assert len(planned(scheduled_event("2026-10-01T18:00:05Z"), running)["targets"]) == 1
    assert planned(scheduled_event("2026-10-01T19:00:05Z"), stopped)["targets"] == []  # held by a running one
    sfn.stop_execution(executionArn=running)
    taken = planned(scheduled_event("2026-10-01T19:00:05Z"), stopped)
    assert [t["request"]["cluster"] for t in taken["targets"]] == ["research-hp-slurm"] and taken["skipped"] == []


def test_only_the_schedules_audits_are_fitted_to_the_period(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Capacity Block warning's preflights are not re-planned next period: the period's budget does not cut them
    (only the byte cap on Plan's output bounds them)."""
    clusters = [f"c{i:02d}" for i in range(10)]
    deploy_configuration(monkeypatch, {"clusters": clusters})
    monkeypatch.setenv("GPUAUDIT_CLUSTER_LANES", "2")
    monkeypatch.setenv("GPUAUDIT_EXECUTION_BUDGET_S", "1800")
    warned = planned(capacity_block_warning("cr-0123456789abcdef0", "2026-10-01T18:20:00Z"))
    scheduled = planned(scheduled_event("2026-10-01T18:17:04Z"))
    assert sorted(t["request"]["cluster"] for t in warned["targets"]) == clusters  # every preflight
    assert len(scheduled["targets"]) == 6  # ten 10-minute estimates on two 30-minute lanes
