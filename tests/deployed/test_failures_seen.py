"""Every failure is seen (issue #33 item 3): a step killed in the local state machine run (moto's ASL interpreter
running the SYNTHESIZED definition, tests/deployed/test_state_machine.py) reaches an alarm's metric or the
execution-status rule, matched against what the template synthesized, not against a copy of it.

- Verdict raises: the child execution still succeeds (its Catch), RecordFailure records the cluster's failed audit
  in the findings table and emits AuditsFailed with exactly the namespace and dimensions the AuditsFailed alarm
  watches.
- Verdict is stopped at its Lambda timeout (Lambda answers `Sandbox.Timedout`, and a killed function flushes no
  EMF, so StepErrors stays silent): retried once, then caught and recorded the same way.
- A failed execution: its EventBridge status event matches the synthesized rule's pattern (moto's matcher), and
  the rule's input transformer turns it into readable text without the account ID; a child execution of the
  cluster map (labelled ARN) matches too, another state machine's does not.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path[:0] = [str(Path(__file__).parents[1] / "handlers"), str(Path(__file__).parents[1] / "infra")]

from cdk_synth import Synthesized, state_machine_definition, synthesize  # noqa: E402
from handlers import record_failure, verdict  # noqa: E402
from moto.events.models import EventPattern  # noqa: E402
from policy_eval import Names  # noqa: E402
from test_state_machine import SCHEDULED, audits, deployed  # noqa: E402

from gpuaudit import pipeline  # noqa: E402

ACCOUNT_ID = re.compile(r"\b\d{12}\b")


@pytest.fixture(scope="module")
def synth() -> Synthesized:
    return synthesize()


@pytest.fixture
def stack_env(synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    """The POWERTOOLS_* environment the stack gives every function (the `service` dimension comes from it)."""
    (env,) = {tuple(sorted((k, v) for k, v in f["Properties"]["Environment"]["Variables"].items()
                           if k.startswith("POWERTOOLS_")))
              for f in synth.resources("AWS::Lambda::Function").values()}
    for name, value in env:
        monkeypatch.setenv(name, str(value))


def alarm_on(synth: Synthesized, metric: str) -> dict[str, Any]:
    (alarm,) = [a["Properties"] for a in synth.resources("AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("MetricName") == metric and a["Properties"].get("Namespace") == "gpuaudit"]
    return alarm


def emitted(stdout: str, metric: str) -> list[tuple[str, dict[str, str], float]]:
    """(namespace, dimensions, value) of every EMF datum of `metric` the handlers printed."""
    out = []
    for line in stdout.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        record = json.loads(line)
        for directive in record["_aws"]["CloudWatchMetrics"]:
            if metric in {m["Name"] for m in directive["Metrics"]}:
                for dims in directive["Dimensions"]:
                    out.append((directive["Namespace"], {d: record[d] for d in dims}, record[metric][0]))
    return out


def assert_alarm_reads(synth: Synthesized, stdout: str, metric: str) -> None:
    """An emitted datum lands in exactly the series the alarm watches (namespace, metric, dimensions)."""
    alarm = alarm_on(synth, metric)
    watched = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
    hits = [v for ns, dims, v in emitted(stdout, metric) if ns == alarm["Namespace"] and dims == watched]
    assert hits and sum(hits) > alarm["Threshold"], (watched, emitted(stdout, metric))


def test_a_verdict_that_raises_is_recorded_and_counted_in_the_series_its_alarm_watches(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch, capsys: Any, stack_env: None) -> None:
    def crash(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("judge crashed on account 123456789012")

    with deployed(synth, monkeypatch) as machine:
        monkeypatch.setattr(pipeline, "judge", crash)
        (audit,) = audits(machine.run(SCHEDULED))
        findings = machine.account.findings()
    assert audit["audited"] is False and audit["recorded"] is True and audit["cluster"] == "research-hp-slurm"
    assert (audit["failure"]["step"], audit["failure"]["error"]) == ("Verdict", "RuntimeError")
    (item,) = [i for i in findings if i["pk"] == "FAILED#research-hp-slurm"]
    assert item["sk"].endswith("#coverage") and item["step"] == "Verdict" and item["error"] == "RuntimeError"
    assert "judge crashed" in item["cause"] and "123456789012" not in item["cause"]  # redacted
    assert int(item["expires_at"]) > 0
    # then MarkFailedAudit: the failed cluster takes its turn in the next plan's order, not the front (rotation.py)
    assert [i["sk"] for i in findings if i["pk"] == "AUDITED#coverage"] == ["research-hp-slurm"]
    stdout = capsys.readouterr().out
    assert_alarm_reads(synth, stdout, "AuditsFailed")
    assert not [d for d in emitted(stdout, "AuditsCompleted")], "a failed audit is not a completed one"


def test_a_verdict_stopped_at_its_timeout_is_retried_once_then_recorded(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch, capsys: Any, stack_env: None) -> None:
    timed_out = type("Sandbox.Timedout", (Exception,), {})  # the errorType Lambda reports for a timeout
    killed: list[str] = []

    def killed_at_timeout(event: dict[str, Any], context: Any) -> Any:
        killed.append(event["request"]["cluster"])  # no handler code runs to its end: nothing is flushed
        raise timed_out("RequestId: 0a Error: Task timed out after 300.00 seconds")

    with deployed(synth, monkeypatch) as machine:
        monkeypatch.setattr(verdict, "handler", killed_at_timeout)
        (audit,) = audits(machine.run(SCHEDULED))
        findings = machine.account.findings()
    assert killed == ["research-hp-slurm"] * 2, "Sandbox.Timedout is retried exactly once"
    assert (audit["failure"]["step"], audit["failure"]["error"]) == ("Verdict", "Sandbox.Timedout")
    (item,) = [i for i in findings if i["pk"] == "FAILED#research-hp-slurm"]
    assert item["error"] == "Sandbox.Timedout" and "Task timed out" in item["cause"]
    stdout = capsys.readouterr().out
    assert not emitted(stdout, "StepErrors"), "a killed function reports no StepErrors: only the Catch sees it"
    assert_alarm_reads(synth, stdout, "AuditsFailed")


def test_a_record_failure_killed_while_closing_a_deleted_clusters_history_is_still_counted_and_caught(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch, capsys: Any, stack_env: None) -> None:
    """Issue #47 item 6: RecordFailure for a deleted cluster closes a span per node, its long part. Killed there
    (retried once, killed again), the failure item and AuditsFailed were already written and flushed, and its Catch
    ends the cluster's audit as not recorded, marked in the rotation, instead of failing it."""
    timed_out = type("Sandbox.Timedout", (Exception,), {})
    killed: list[str] = []

    def killed_at_timeout(_store: Any, cluster: str, *_args: Any) -> int:
        killed.append(cluster)
        raise timed_out("RequestId: 0b Error: Task timed out after 30.00 seconds")

    with deployed(synth, monkeypatch) as machine:
        world = machine.account.world
        world.data["sagemaker"]["clusters"] = []  # the configured cluster deleted: Inventory's UnknownCluster
        monkeypatch.setattr(record_failure, "close_gone_cluster", killed_at_timeout)
        (audit,) = audits(machine.run(SCHEDULED))
        findings = machine.account.findings()
    assert killed == ["research-hp-slurm"] * 2, "Sandbox.Timedout is retried exactly once"
    assert audit["audited"] is False and audit["recorded"] is False and audit["cluster"] == "research-hp-slurm"
    assert (audit["failure"]["step"], audit["failure"]["error"]) == ("RecordFailure", "Sandbox.Timedout")
    items = [i for i in findings if i["pk"] == "FAILED#research-hp-slurm"]
    assert items and all(i["step"] == "Inventory" and i["error"] == "UnknownCluster" for i in items)
    assert [i["sk"] for i in findings if i["pk"] == "AUDITED#coverage"] == ["research-hp-slurm"]
    assert_alarm_reads(synth, capsys.readouterr().out, "AuditsFailed")


def status_event(described: dict[str, Any], machine_arn: str, status: str | None = None) -> dict[str, Any]:
    """The "Step Functions Execution Status Change" event Step Functions sends for an execution."""
    region, account = machine_arn.split(":")[3:5]
    return {"version": "0", "id": "315c1398-40ff-a850-213b-158f73e60175",
            "detail-type": "Step Functions Execution Status Change", "source": "aws.states", "account": account,
            "time": "2026-10-01T18:17:09Z", "region": region, "resources": [described["executionArn"]],
            "detail": {"executionArn": described["executionArn"], "stateMachineArn": machine_arn,
                       "name": described["name"], "status": status or described["status"],
                       "startDate": 1759342624000, "stopDate": 1759342629000, "input": described.get("input"),
                       "output": None, "error": described.get("error"), "cause": described.get("cause")}}


def render(transformer: dict[str, Any], event: dict[str, Any]) -> str:
    """EventBridge's input transformer: each <name> of the template replaced by its JSON path's value."""
    text = transformer["InputTemplate"]
    for name, path in transformer["InputPathsMap"].items():
        value: Any = event
        for part in path.removeprefix("$.").split("."):
            value = value[part]
        text = text.replace(f"<{name}>", str(value))
    return str(json.loads(text))


def test_a_failed_execution_matches_the_status_rule_and_notifies_readable_text_without_the_account(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    with deployed(synth, monkeypatch) as machine:
        described = machine.run({"cluster": "research-hp-slurm", "mode": "bogus"})  # Plan refuses it
    assert described["status"] == "FAILED"
    (machine_id,) = synth.resources("AWS::StepFunctions::StateMachine")
    names = Names(synth.template, region=machine.arn.split(":")[3], account=machine.arn.split(":")[4],
                  physical={machine_id: machine.arn.rsplit(":", 1)[-1]})
    (rule,) = [r["Properties"] for r in synth.resources("AWS::Events::Rule").values()
               if r["Properties"].get("EventPattern", {}).get("source") == ["aws.states"]]
    pattern = EventPattern.load(json.dumps(names.resolve(rule["EventPattern"])))
    event = status_event(described, machine.arn)
    assert pattern.matches_event(event)
    label = state_machine_definition(synth)["States"]["AuditClusters"]["Label"]
    assert pattern.matches_event(status_event(described, f"{machine.arn}/{label}", "TIMED_OUT"))  # a child
    assert pattern.matches_event(status_event(described, machine.arn, "ABORTED"))
    assert not pattern.matches_event(status_event(described, machine.arn, "SUCCEEDED"))
    assert not pattern.matches_event(status_event(described, f"{machine.arn}-other", "FAILED"))
    (target,) = rule["Targets"]
    message = render(target["InputTransformer"], event)
    assert message.startswith("gpuaudit: an audit execution ended FAILED") and described["name"] in message
    assert not ACCOUNT_ID.search(message), message
    (topic,) = synth.resources("AWS::SNS::Topic")
    assert target["Arn"] == {"Ref": topic} and "DeadLetterConfig" in target


def test_the_child_execution_alarms_watch_the_cluster_maps_labelled_arn(synth: Synthesized) -> None:
    """AWS/States metrics of a Distributed Map's child executions carry `stateMachine:<name>/<MapRunLabel>` (Step
    Functions Developer Guide, "Viewing a Distributed Map Run execution"): the alarm's dimension is built from the
    label the definition really has."""
    (machine_id,) = synth.resources("AWS::StepFunctions::StateMachine")
    label = state_machine_definition(synth)["States"]["AuditClusters"]["Label"]
    children = {"Fn::Join": ["", [{"Ref": machine_id}, f"/{label}"]]}
    watched = {a["Properties"]["MetricName"] for a in synth.resources("AWS::CloudWatch::Alarm").values()
               if a["Properties"].get("Namespace") == "AWS/States"
               and a["Properties"]["Dimensions"] == [{"Name": "StateMachineArn", "Value": children}]}
    assert watched == {"ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"}


def test_every_function_has_an_errors_and_a_near_timeout_alarm(synth: Synthesized) -> None:
    alarms = [a["Properties"] for a in synth.resources("AWS::CloudWatch::Alarm").values()
              if a["Properties"].get("Namespace") == "AWS/Lambda"]
    for function_id, function in synth.resources("AWS::Lambda::Function").items():
        mine = {a["MetricName"]: a for a in alarms
                if a["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]}
        assert set(mine) == {"Errors", "Duration"}, function_id
        assert mine["Errors"]["Threshold"] == 0 and mine["Errors"]["Statistic"] == "Sum"
        assert mine["Duration"]["ExtendedStatistic"] == "p99"
        assert mine["Duration"]["Threshold"] == pytest.approx(function["Properties"]["Timeout"] * 1000 * 0.9)


def test_no_audit_of_the_whole_fleet_alarms_without_a_configured_cluster_list(synth: Synthesized) -> None:
    """Discovered clusters are covered: the fleet-wide series (no cluster dimension), missing data breaching."""
    fleet = [a["Properties"] for a in synth.resources("AWS::CloudWatch::Alarm").values()
             if a["Properties"].get("MetricName") == "AuditsCompleted"
             and a["Properties"]["Dimensions"] == [{"Name": "service", "Value": "gpuaudit"}]]
    (alarm,) = fleet
    assert alarm["TreatMissingData"] == "breaching" and alarm["ComparisonOperator"] == "LessThanThreshold"
    failed = alarm_on(synth, "AuditsFailed")
    assert failed["Dimensions"] == [{"Name": "service", "Value": "gpuaudit"}] and failed["Threshold"] == 0
