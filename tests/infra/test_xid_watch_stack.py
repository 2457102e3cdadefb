"""The opt-in Xid watch in the stack (issue #51 items 1 and 5): nothing of it in the default synth; turned on, a
metric filter on exactly the configured groups (pattern from the catalog), an alarm per watched cluster, one rule
from the alarms' ALARM events to the state machine, its edges allowed, cdk-nag clean, and the audit path given no
new write."""

from __future__ import annotations

from typing import Any

import pytest
from cdk_synth import TEST_CONFIG, Synthesized, synthesize
from helpers.event_patterns import matches
from stack_edges import denied_edges, edges

from infra.config import BadConfig, load_config
from infra.xid_watch_pattern import filter_pattern

HP, PC = "research-hp-slurm", "train-pc"
HP_GROUP, PC_GROUP = f"/aws/sagemaker/Clusters/{HP}/k3m9x2pq7wla", "/aws/parallelcluster/train-pc-202610011200"
WATCH_CONFIG: dict[str, Any] = {**TEST_CONFIG, "clusters": [HP, PC], "log_groups": {PC: [PC_GROUP]},
                                "xid_watch": {"clusters": {HP: [HP_GROUP], PC: []}},
                                "xid_class_overrides": ["13=hardware"]}


@pytest.fixture(scope="module")
def watched() -> Synthesized:
    return synthesize(config=WATCH_CONFIG)


def alarm_event(name: str, state: str = "ALARM") -> dict[str, Any]:
    return {"source": "aws.cloudwatch", "detail-type": "CloudWatch Alarm State Change",
            "detail": {"alarmName": name, "state": {"value": state}}}


def test_the_default_synth_has_no_watch(synth: Synthesized) -> None:
    assert synth.resources("AWS::Logs::MetricFilter") == {}
    assert not [r for r in synth.resources("AWS::Events::Rule").values()
                if r["Properties"].get("EventPattern", {}).get("source") == ["aws.cloudwatch"]]
    assert not [a for a in synth.resources("AWS::CloudWatch::Alarm").values()
                if "xid-watch" in str(a["Properties"].get("AlarmName"))]


def test_a_filter_on_exactly_the_configured_groups_with_the_catalogs_pattern(watched: Synthesized) -> None:
    filters = [f["Properties"] for f in watched.resources("AWS::Logs::MetricFilter").values()]
    assert sorted(f["LogGroupName"] for f in filters) == sorted([HP_GROUP, PC_GROUP])
    assert {f["FilterPattern"] for f in filters} == {filter_pattern(["13=hardware"])}
    metrics = {f["LogGroupName"]: f["MetricTransformations"][0]["MetricName"] for f in filters}
    assert metrics[HP_GROUP] != metrics[PC_GROUP]  # one signal per cluster: the alarm names the cluster
    # the stack owns no log group of the clusters: it adds a filter to the named ones and nothing else
    assert not [g for g in watched.resources("AWS::Logs::LogGroup").values()
                if g["Properties"].get("LogGroupName") in (HP_GROUP, PC_GROUP)]


def test_an_alarm_per_cluster_whose_alarm_event_alone_starts_the_state_machine(watched: Synthesized) -> None:
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in watched.resources("AWS::CloudWatch::Alarm").values()
        if "xid-watch" in str(a["Properties"].get("AlarmName"))
    }
    assert sorted(alarms) == [f"GpuAudit-xid-watch-{HP}", f"GpuAudit-xid-watch-{PC}"]
    for alarm in alarms.values():
        assert (alarm["Period"], alarm["Threshold"], alarm["EvaluationPeriods"], alarm["Statistic"]) == (
            60,
            1,
            1,
            "Sum",
        )
        assert alarm["TreatMissingData"] == "notBreaching" and not alarm.get("AlarmActions")
    (machine,) = watched.resources("AWS::StepFunctions::StateMachine")
    (rule,) = [r["Properties"] for r in watched.resources("AWS::Events::Rule").values()
               if r["Properties"].get("EventPattern", {}).get("source") == ["aws.cloudwatch"]]
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Ref": machine} and "Input" not in target and "DeadLetterConfig" in target
    pattern = rule["EventPattern"]
    assert matches(pattern, alarm_event(f"GpuAudit-xid-watch-{HP}"))
    assert not matches(pattern, alarm_event(f"GpuAudit-xid-watch-{HP}", "OK"))
    assert not matches(pattern, alarm_event("GpuAudit-FindingsNotPublished"))  # the auditor's own alarms


def test_the_new_edges_are_allowed_and_cdk_nag_is_clean(watched: Synthesized) -> None:
    _, wired = edges(watched.template)
    (rule_id,) = [k for k, r in watched.resources("AWS::Events::Rule").items()
                  if r["Properties"].get("EventPattern", {}).get("source") == ["aws.cloudwatch"]]
    assert any(e.name == f"rule {rule_id} → states target" for e in wired)
    assert denied_edges(watched.template) == []
    (report,) = [r for r in watched.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert report["conclusion"] == "success" and report["violations"] == []


def test_the_audit_path_gets_no_new_permission(synth: Synthesized, watched: Synthesized) -> None:
    """The watch is deploy-time resources only: every function's policy is the default synth's."""
    def policies(s: Synthesized) -> dict[str, Any]:
        return {k: v["Properties"]["PolicyDocument"] for k, v in s.resources("AWS::IAM::Policy").items()
                if k.startswith("Functions")}
    assert policies(watched) == policies(synth)


@pytest.mark.parametrize(("config", "named"), [
    ({"clusters": [HP], "xid_watch": True}, f"no log group to watch for {HP}"),
    ({"clusters": [HP], "xid_watch": {"clusters": {"other": ["/x/y"]}}}, "not configured: other"),
    ({"discover": True, "xid_watch": True}, "names no configured cluster"),
    ({"clusters": [HP], "xid_watch": {"clusters": {HP: ["no spaces?allowed:"]}}}, "xid_watch.clusters"),
    ({"clusters": [HP], "xid_watch": {"clusters": {HP: ["/aws/lambda/GpuAudit-FunctionsVerdict"]}}},
     "would start an audit from an audit"),
], ids=["true-without-groups", "unknown-cluster", "discovery-only", "bad-group-name", "the-auditors-own-logs"])
def test_a_watch_that_cannot_be_built_stops_the_synth_naming_why(config: dict[str, Any], named: str) -> None:
    with pytest.raises(BadConfig) as raised:
        load_config({"gpuaudit": config})
    assert named in str(raised.value)


def test_true_watches_every_configured_cluster_on_its_log_groups() -> None:
    config = load_config({"gpuaudit": {"clusters": [HP, PC], "log_groups": {HP: [HP_GROUP], PC: [PC_GROUP]},
                                       "xid_watch": True}})
    assert config.xid_watch_groups == {HP: [HP_GROUP], PC: [PC_GROUP]}
    assert load_config({"gpuaudit": {"clusters": [HP]}}).xid_watch_groups == {}


def test_cfn_lint_finds_no_error_in_the_watched_template(watched: Synthesized) -> None:
    pytest.importorskip("cfnlint.api", reason="cfn-lint is not installed (pyproject.toml dev extra)")
    from test_stack_cfn_lint import errors

    assert errors(watched.template) == []
