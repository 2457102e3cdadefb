"""Every edge the synthesized stack wires is allowed by AWS's rules (policy_eval), and the check catches a missing
grant (issue #33 items 1 and 2).

The edges are read from the template (stack_edges.py): alarm → topic → key, EventBridge rule → state machine /
dead-letter queue / topic, state machine → Lambda and its own child executions, each role's trust, each Lambda →
its log group, bucket prefixes, table, topic and key, and its Logs Insights queries. The mutation tests take the
synthesized template, remove what the fix added (or another grant an edge depends on) and show exactly the edges
that depend on it denied: the template before #33 failed every alarm → topic edge this way."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from cdk_synth import Synthesized
from policy_eval import Request, service
from stack_edges import StackPolicies, denied_edges, edges, without_statements

ALARM_GRANTS = {"CloudWatchAlarmsPublish", "CloudWatchAlarmsUseKey"}


def kind(name: str) -> str:
    if " assumes " in name:
        return "trust"
    first = name.split(" ", 1)[0]
    return "lambda" if first.startswith("Functions") else first.lower()


@pytest.fixture(params=["synth", "production_synth"])
def either(request: pytest.FixtureRequest) -> Synthesized:
    """The default synthesis and the production-shaped one (issue #47 item 2: discovery, 200 clusters, member
    roles, a private EKS endpoint, the MCP endpoint), whose Distributed Map writes its results to S3."""
    found: Synthesized = request.getfixturevalue(request.param)
    return found


def test_every_edge_the_stack_wires_is_allowed(either: Synthesized, capsys: Any) -> None:
    synth = either
    _, wired = edges(synth.template)
    requests = sum(len(e.requests) for e in wired)
    with capsys.disabled():
        print(f"\n{len(wired)} edges, {requests} requests evaluated: " +
              ", ".join(f"{k} {v}" for k, v in sorted(Counter(kind(e.name) for e in wired).items())))
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    assert len([e for e in wired if e.name.startswith("alarm ")]) == len(alarms) > 0
    names = " | ".join(e.name for e in wired)
    for wanted in ("→ states target", "→ dead-letter queue", "state Verdict → Lambda", "Distributed Map",
                   "→ sns:Publish", "→ dynamodb:PutItem", "→ s3:ListBucket", "→ logs:StartQuery", "→ its log group",
                   "state MarkAudited → DynamoDB dynamodb:UpdateItem", "state MarkFailedAudit → DynamoDB",
                   "assumes"):
        assert wanted in names, wanted
    # the encrypted topic's key is evaluated on every publishing edge
    assert all(any(what == "key" for _, what in e.requests) for e in wired if "Publish" in e.name or "alarm" in e.name)
    assert denied_edges(synth.template) == []


def test_without_the_alarm_grants_every_alarm_is_denied_the_topic_and_its_key(synth: Synthesized) -> None:
    """The template before #33: the topic policy held only enforce_ssl's Deny and the key policy only the account."""
    before = without_statements(synth.template, ALARM_GRANTS)
    denied = denied_edges(before)
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    assert len(denied) == 3 * len(alarms), "\n".join(denied)  # sns:Publish, kms:GenerateDataKey, kms:Decrypt each
    assert {d.split(":", 1)[0] for d in denied} == {f"alarm {a} → topic" for a in alarms}
    assert sum("sns:Publish on" in d and "implicit deny" in d for d in denied) == len(alarms)
    assert sum("kms:" in d for d in denied) == 2 * len(alarms)
    only_topic = without_statements(synth.template, {"CloudWatchAlarmsUseKey"})
    assert {d for d in denied_edges(only_topic)} == {d for d in denied if "kms:" in d}, \
        "a topic grant without the key grant still fails: SNS cannot encrypt the alarm's message"


def test_the_alarm_grants_are_scoped_to_this_accounts_alarms_of_this_stack(synth: Synthesized) -> None:
    policies = StackPolicies(synth.template)
    (topic,) = (policies.names.arn(t) for t in synth.resources("AWS::SNS::Topic"))
    key = policies.topic_keys[topic]
    ours = f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{_an_alarm_name(synth)}"
    for source, allowed in ((ours, True),
                            ("arn:aws:cloudwatch:us-west-2:123456789012:alarm:someone-elses-alarm", False),
                            ("arn:aws:cloudwatch:us-west-2:444455556666:alarm:" + _an_alarm_name(synth), False)):
        context = {"aws:SecureTransport": True, "aws:SourceArn": source, "aws:SourceAccount": source.split(":")[4]}
        cloudwatch = service("cloudwatch.amazonaws.com")
        assert bool(policies.decide(Request(cloudwatch, "sns:Publish", topic, context), "resource")) is allowed
        assert bool(policies.decide(Request(cloudwatch, "kms:GenerateDataKey", key, context), "key")) is allowed
    # without any source key (another service acting for no alarm), nothing
    assert not policies.decide(Request(service("cloudwatch.amazonaws.com"), "sns:Publish", topic,
                                       {"aws:SecureTransport": True}), "resource")


def _an_alarm_name(synth: Synthesized) -> str:
    alarm = next(iter(synth.resources("AWS::CloudWatch::Alarm").values()))
    return str(alarm["Properties"]["AlarmName"])


def test_an_alarm_named_outside_the_stacks_prefix_would_be_denied(synth: Synthesized) -> None:
    mutated = copy.deepcopy(synth.template)
    alarm_id, alarm = next(iter((k, v) for k,
                                v in mutated["Resources"].items() if v["Type"] == "AWS::CloudWatch::Alarm"))
    alarm["Properties"]["AlarmName"] = "renamed-alarm"
    denied = denied_edges(mutated)
    assert denied and {d.split(":", 1)[0] for d in denied} == {f"alarm {alarm_id} → topic"}


def test_the_production_shapes_map_result_writer_is_evaluated_and_needs_its_grant(
        production_synth: Synthesized) -> None:
    """The edge the evaluator crashed on (a ResultWriter in JSONPath's Parameters): read, allowed, and denied without
    the state machine's grant on the results bucket."""
    _, wired = edges(production_synth.template)
    (writer,) = [e for e in wired if e.name.endswith("→ ResultWriter bucket")]
    ((request, _what),) = writer.requests
    assert request.action == "s3:PutObject" and "/map-results/" in request.resource
    mutated = copy.deepcopy(production_synth.template)
    for r in mutated["Resources"].values():
        document = r.get("Properties", {}).get("PolicyDocument") if r["Type"] == "AWS::IAM::Policy" else None
        if document:
            document["Statement"] = [s for s in document["Statement"]
                                     if "MapResults" not in json.dumps(s.get("Resource"))]
    assert [d for d in denied_edges(mutated) if "ResultWriter" in d], "the writer's edge cannot fail"


@pytest.mark.parametrize(("mutation", "denied_edge"), [
    ("the state machine may not invoke Verdict", "state Verdict → Lambda"),
    ("the dead-letter queue policy admits no rule", "→ dead-letter queue"),
    ("the key policy no longer enables IAM", "FunctionsVerdict"),
    ("the events role may not start the state machine", "→ states target"),
    ("a Deny on the bucket for plain HTTP becomes a Deny for all", "→ s3:"),
])
def test_removing_a_grant_an_edge_depends_on_denies_that_edge(synth: Synthesized, mutation: str,
                                                              denied_edge: str) -> None:
    mutated = copy.deepcopy(synth.template)
    resources = mutated["Resources"]
    for logical_id, r in resources.items():
        props = r.get("Properties", {})
        document = props.get("PolicyDocument") or props.get("KeyPolicy") or {}
        statements = document.get("Statement", [])
        text = json.dumps(statements)
        if mutation.startswith("the state machine") and logical_id.startswith("WorkflowStateMachineRole") and \
                "FunctionsVerdict" in text:
            document["Statement"] = [s for s in statements if "FunctionsVerdict" not in json.dumps(s.get("Resource"))]
        if mutation.startswith("the dead-letter") and r["Type"] == "AWS::SQS::QueuePolicy":
            document["Statement"] = [s for s in statements if s["Effect"] == "Deny"]
        if mutation.startswith("the key policy") and r["Type"] == "AWS::KMS::Key":
            document["Statement"] = [s for s in statements if ":root" not in json.dumps(s.get("Principal"))]
        if mutation.startswith("the events role") and r["Type"] == "AWS::IAM::Policy" and "EventsRole" in logical_id:
            document["Statement"] = []
        if mutation.startswith("a Deny on the bucket") and r["Type"] == "AWS::S3::BucketPolicy":
            for s in statements:
                s.pop("Condition", None)
    denied = denied_edges(mutated)
    assert denied, mutation
    assert all(denied_edge in d for d in denied if not d.startswith("alarm ")), "\n".join(denied)
