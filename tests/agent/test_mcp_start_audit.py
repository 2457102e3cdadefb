"""The deployed MCP endpoint's start_audit (issue #47 item 6): the same request within the hour is one execution
(the tool is marked idempotent), at most MCP_STARTS_PER_PERIOD distinct ones an hour, and the window the CLI accepts,
refused in the tool's own field names. Against Step Functions in moto (its StartExecution keeps AWS's idempotency:
the same name and input while running is the same execution, a finished one's name is refused)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from gpuaudit.agent import deployed
from gpuaudit.agent.deployed import MCP_STARTS_PER_PERIOD, DeployedBackend
from gpuaudit.agent.schema import AuditInput, BadToolInput, ToolProblem
from gpuaudit.settings import DeploymentDocument

REGION = "us-west-2"
NOW = datetime.fromisoformat("2026-10-01T10:05:00+00:00")
PASS = json.dumps({"StartAt": "Plan", "States": {"Plan": {"Type": "Pass", "End": True}}})


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DeployedBackend, list[datetime]]]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    # moto would run the Pass machine to its end at once: kept RUNNING instead, as a real audit is for minutes
    with mock_aws(config={"stepfunctions": {"execute_state_machine": False}}):
        session = boto3.Session(region_name=REGION)
        arn = session.client("stepfunctions").create_state_machine(
            name="gpuaudit", definition=PASS, roleArn="arn:aws:iam::123456789012:role/sfn")["stateMachineArn"]
        clock = [NOW]
        yield (DeployedBackend(session=session, region=REGION, table="t", bucket="b", state_machine_arn=arn,
                               deployment=DeploymentDocument(clusters=["train-a", "train-b"]),
                               clock=lambda: clock[0]), clock)


def _start(backend: DeployedBackend, **fields: Any) -> Any:
    return backend.start_audit(AuditInput(**fields).request())


def _executions(backend: DeployedBackend) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = backend.sfn.list_executions(
        stateMachineArn=backend.state_machine_arn)["executions"]
    return listed


def test_the_same_request_within_the_hour_is_one_execution(backend: tuple[DeployedBackend, list[datetime]]) -> None:
    starter, clock = backend
    first = _start(starter, cluster="train-a", mode="incident", last="2h")
    clock[0] = NOW + timedelta(minutes=40)
    again = _start(starter, cluster="train-a", mode="incident", last="2h")
    assert again.execution_arn == first.execution_arn and "already started this hour" in again.note
    assert len(_executions(starter)) == 1
    # another mode, cluster or window is another audit
    other = [_start(starter, cluster="train-a", mode="coverage", last="2h"),
             _start(starter, cluster="train-b", mode="incident", last="2h"),
             _start(starter, cluster="train-a", mode="incident", last="6h")]
    assert len({first.execution_arn, *(o.execution_arn for o in other)}) == 4 == len(_executions(starter))
    # the next hour, the same request starts a new execution
    clock[0] = NOW + timedelta(hours=1)
    assert _start(starter, cluster="train-a", mode="incident", last="2h").execution_arn != first.execution_arn
    assert json.loads(starter.sfn.describe_execution(executionArn=first.execution_arn)["input"]) == {
        "cluster": "train-a", "mode": "incident", "last": "2h"}


def test_a_finished_execution_of_the_same_request_is_answered_not_restarted(
        backend: tuple[DeployedBackend, list[datetime]]) -> None:
    starter, _clock = backend
    first = _start(starter, cluster="train-a", last="2h")
    starter.sfn.stop_execution(executionArn=first.execution_arn)
    again = _start(starter, cluster="train-a", last="2h")
    assert again.execution_arn == first.execution_arn and "(execution ABORTED)" in again.note


def test_at_most_the_hours_quota_of_distinct_audits_is_started(
        backend: tuple[DeployedBackend, list[datetime]]) -> None:
    starter, clock = backend
    for hours in range(1, MCP_STARTS_PER_PERIOD + 1):
        _start(starter, cluster="train-a", last=f"{hours}h")
    with pytest.raises(ToolProblem, match=f"{MCP_STARTS_PER_PERIOD} on-demand audits were started this hour"):
        _start(starter, cluster="train-a", last="20h")
    # a repeat of one already started is still answered, and the next hour has its own quota
    assert "already started" in _start(starter, cluster="train-a", last="1h").note
    clock[0] = NOW + timedelta(hours=1)
    _start(starter, cluster="train-a", last="20h")
    assert len(_executions(starter)) == MCP_STARTS_PER_PERIOD + 1


@pytest.mark.parametrize(("fields", "said"), [
    ({"last": "91d"}, "last 91d: longer than the maximum window of 90 days"),
    ({"since": "2026-06-01T00:00:00Z", "until": "2026-09-30T00:00:00Z"}, "longer than the maximum of 90 days"),
    ({"since": "2026-10-02T00:00:00Z", "until": "2026-10-03T00:00:00Z"}, "is in the future"),
    ({"mode": "incident", "last": "2h", "onset": "2026-09-30T00:00:00Z"}, "onset 2026-09-30T00:00:00+00:00 is outside"),
])
def test_a_window_the_cli_refuses_is_refused_in_the_tools_field_names_and_nothing_starts(
        backend: tuple[DeployedBackend, list[datetime]], fields: dict[str, str], said: str) -> None:
    starter, _clock = backend
    with pytest.raises(BadToolInput) as refused:
        _start(starter, cluster="train-a", **fields)
    assert said in str(refused.value) and "--" not in str(refused.value)
    assert _executions(starter) == []


def test_the_window_wording_names_fields_not_flags() -> None:
    assert deployed.tool_wording("--last cannot be combined with --since/--until") == \
        "last cannot be combined with since/until"
