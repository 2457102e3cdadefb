"""No starved clusters (#34 item 5): the hourly execution audits clusters least recently audited first.

An execution that reaches its timeout leaves the clusters it had not reached unaudited. In the configured order,
those are the same tail clusters every hour. Here 60 clusters are configured and each period's execution finishes
only the first 35 of its plan (the rest cut off by the timeout). The real Plan handler orders each period's plan from
the findings table; the marks are written by the synthesized MarkAudited state itself, run in moto's Step Functions
interpreter against the same table. Every cluster is audited within two periods."""

from __future__ import annotations

import json
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path[:0] = [str(Path(__file__).parents[1] / "handlers"), str(Path(__file__).parents[1] / "infra")]

from cdk_synth import Synthesized, state_machine_definition, synthesize  # noqa: E402
from handlers import plan  # noqa: E402
from lambda_harness import LambdaContext, deploy_configuration, scheduled_event, world_account  # noqa: E402
from test_state_machine import with_table  # noqa: E402

from gpuaudit.model.timeutil import iso  # noqa: E402

CLUSTERS = [f"train-{i:02d}" for i in range(60)]
FINISHED_PER_PERIOD = 35  # the clusters an execution audits before its timeout cuts off the rest
SFN_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}


@pytest.fixture(scope="module")
def synth() -> Synthesized:
    return synthesize()


def mark_state(synth: Synthesized, name: str) -> dict[str, Any]:
    """The synthesized mark state, as the state machine runs it (its Catch target left out: nothing fails here)."""
    stack = [state_machine_definition(synth)]
    while stack:
        states = stack.pop()["States"]
        if name in states:
            state = {k: v for k, v in states[name].items() if k not in ("Next", "Catch", "End")}
            return with_table({"States": {name: {**state, "End": True}}})["States"][name]  # type: ignore[no-any-return]
        stack += [s["ItemProcessor"] for s in states.values() if s["Type"] == "Map"]
    raise AssertionError(f"no state {name}")


class Marks:
    """The synthesized MarkAudited state over each finished cluster's summary line, in moto's interpreter."""

    def __init__(self, session: Any, state: dict[str, Any]) -> None:
        self.client = session.client("stepfunctions")
        definition = {"StartAt": "Each", "States": {"Each": {
            "Type": "Map", "ItemsPath": "$.finished", "End": True,
            "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": "MarkAudited",
                              "States": {"MarkAudited": state}}}}}
        self.arn = self.client.create_state_machine(
            name=f"marks-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition),  # one per state tried
            roleArn="arn:aws:iam::123456789012:role/gpuaudit-state-machine")["stateMachineArn"]

    def run(self, finished: list[str]) -> None:
        lines = [{"cluster": c, "mode": "coverage", "audited": True, "audit_s": "60"}  # Verdict's summary lines
                 for c in finished]
        execution = self.client.start_execution(stateMachineArn=self.arn, name=uuid.uuid4().hex,
                                                input=json.dumps({"finished": lines}))["executionArn"]
        deadline = time.monotonic() + 120
        while (described := self.client.describe_execution(executionArn=execution))["status"] == "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert described["status"] == "SUCCEEDED", described


def test_sixty_clusters_are_each_audited_within_two_schedule_periods(synth: Synthesized,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with world_account(monkeypatch, mock_config=SFN_CONFIG) as account:
        deploy_configuration(monkeypatch, {"clusters": CLUSTERS})
        marks = Marks(account.session, mark_state(synth, "MarkAudited"))
        audited: list[set[str]] = []
        orders: list[list[str]] = []
        for period in range(5):
            trigger = scheduled_event(iso(datetime(2026, 10, 1, 18, 17, 4) + timedelta(hours=period)))
            planned = plan.handler(trigger, LambdaContext())
            assert planned["gaps"] == []
            order = [t["request"]["cluster"] for t in planned["targets"]]
            assert sorted(order) == sorted(CLUSTERS)
            marks.run(order[:FINISHED_PER_PERIOD])
            orders.append(order)
            audited.append(set(order[:FINISHED_PER_PERIOD]))
            time.sleep(0.01)  # the marks carry the state's entered time: the next period's are later
    assert orders[0] == CLUSTERS  # nothing audited yet: the configured order
    assert orders[1][:25] == CLUSTERS[35:]  # the tail the first execution did not reach leads the second
    for first, second in zip(audited, audited[1:], strict=False):
        assert first | second == set(CLUSTERS)  # every cluster within any two consecutive periods


def test_one_failed_audit_is_retried_first_and_a_cluster_that_keeps_failing_takes_its_turn(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    """RecordFailure's line goes through MarkFailedAudit. One failure (a killed or timed-out step) keeps the cluster's
    place, so the next execution audits it first and it is not two periods late; from the second failure in a row it
    goes by the failure's time, so a cluster that always fails cannot hold the front; a completed audit resets it."""
    def order() -> list[str]:
        planned = plan.handler(scheduled_event("2026-10-01T18:17:04Z"), LambdaContext())
        return [t["request"]["cluster"] for t in planned["targets"]]

    with world_account(monkeypatch, mock_config=SFN_CONFIG) as account:
        deploy_configuration(monkeypatch, {"clusters": CLUSTERS[:3]})
        audited = Marks(account.session, mark_state(synth, "MarkAudited"))
        failed = Marks(account.session, mark_state(synth, "MarkFailedAudit"))
        for cluster in CLUSTERS[:3]:  # every cluster audited once, train-00 first (the oldest)
            audited.run([cluster])
            time.sleep(0.01)
        failed.run([CLUSTERS[0]])
        once = order()
        time.sleep(0.01)
        failed.run([CLUSTERS[0]])
        twice = order()
        time.sleep(0.01)
        for cluster in (CLUSTERS[1], CLUSTERS[2], CLUSTERS[0]):
            audited.run([cluster])
            time.sleep(0.01)
        after_success = order()
    assert once == CLUSTERS[:3]  # its last audit is still the oldest: retried first
    assert twice == [CLUSTERS[1], CLUSTERS[2], CLUSTERS[0]]  # failing again: after the others
    assert after_success == [CLUSTERS[1], CLUSTERS[2], CLUSTERS[0]]  # by its audit time again


def test_a_cluster_never_audited_that_fails_twice_stops_leading(synth: Synthesized,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with world_account(monkeypatch, mock_config=SFN_CONFIG) as account:
        deploy_configuration(monkeypatch, {"clusters": CLUSTERS[:3]})
        audited = Marks(account.session, mark_state(synth, "MarkAudited"))
        for cluster in CLUSTERS[1:3]:
            audited.run([cluster])
            time.sleep(0.01)
        failed = Marks(account.session, mark_state(synth, "MarkFailedAudit"))
        failed.run([CLUSTERS[0]])
        first = [t["request"]["cluster"] for t in plan.handler(scheduled_event("2026-10-01T18:17:04Z"),
                                                               LambdaContext())["targets"]]
        time.sleep(0.01)
        failed.run([CLUSTERS[0]])
        second = [t["request"]["cluster"] for t in plan.handler(scheduled_event("2026-10-01T18:17:04Z"),
                                                                LambdaContext())["targets"]]
    assert first[0] == CLUSTERS[0]  # never audited: still first after one failure
    assert second == [CLUSTERS[1], CLUSTERS[2], CLUSTERS[0]]


def test_an_unreadable_order_keeps_the_configured_one_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    with world_account(monkeypatch):
        deploy_configuration(monkeypatch, {"clusters": CLUSTERS[:3]})
        monkeypatch.setenv("FINDINGS_TABLE", "no-such-table")
        planned = plan.handler(scheduled_event("2026-10-01T18:17:04Z"), LambdaContext())
    assert [t["request"]["cluster"] for t in planned["targets"]] == CLUSTERS[:3]
    (gap,) = planned["gaps"]
    assert gap.startswith("audit order not read (ResourceNotFoundException)")


def test_marking_an_audit_ends_its_executions_claim_and_records_how_long_it_took(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    """No overlapping work (handlers/execution_share.py): while the first execution audits both clusters, a second
    plans neither; MarkAudited (after the Verdict) and MarkFailedAudit (after RecordFailure), as synthesized, end the
    claim, so the next execution takes each cluster as soon as its audit ended, not when the claim would lapse."""
    monkeypatch.setenv("GPUAUDIT_IN_FLIGHT_S", "5400")
    with world_account(monkeypatch, mock_config=SFN_CONFIG) as account:
        deploy_configuration(monkeypatch, {"clusters": CLUSTERS[:2]})
        trigger = scheduled_event("2026-10-01T18:17:04Z")

        def targets(execution: str) -> list[str]:
            out = plan.handler({"trigger": trigger, "execution": execution}, LambdaContext())
            return [t["request"]["cluster"] for t in out["targets"]]

        assert targets("first") == CLUSTERS[:2]
        assert targets("second") == []
        Marks(account.session, mark_state(synth, "MarkAudited")).run([CLUSTERS[0]])
        assert targets("second") == [CLUSTERS[0]]
        Marks(account.session, mark_state(synth, "MarkFailedAudit")).run([CLUSTERS[1]])
        assert targets("third") == [CLUSTERS[1]]  # the first was claimed again by "second" above
        ddb = account.session.client("dynamodb")
        audited, failed = (ddb.get_item(TableName="gpuaudit-findings-test", Key={
            "pk": {"S": "AUDITED#coverage"}, "sk": {"S": c}})["Item"] for c in CLUSTERS[:2])
    assert audited["audit_s"] == {"N": "60"}  # the Verdict's measure, which Plan fits the next period with
    assert failed["in_flight_by"]["S"] == "third" and "audit_s" not in failed  # a failed audit is not a measure
