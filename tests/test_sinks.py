"""Findings table and alert topic (sinks.py) in moto: alerts on what an on-call engineer must hear,
idempotent writes (a repeated audit writes and publishes nothing), changes against the latest
state, and no account ID in any alert."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.worlds import PClusterWorld, at, node_of
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sns.models import sns_backends

from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.result import Result
from gpuaudit.sinks import write_and_alert

TABLE = "gpuaudit-findings"
NOW_EPOCH = 1_790_000_000
ACCOUNT_LIKE = re.compile(r"(?<![\w-])\d{12}(?!\w)")


@dataclass
class Sinks:
    ddb: Any
    sns: Any
    topic_arn: str

    def write(self, result: Result):
        return write_and_alert(self.ddb, TABLE, self.sns, self.topic_arn, result, NOW_EPOCH)

    def items(self) -> list[dict[str, Any]]:
        return self.ddb.scan(TableName=TABLE)["Items"]

    def published(self) -> list[dict[str, Any]]:
        """Every message the topic received, as moto's SNS backend recorded it."""
        topic = sns_backends[DEFAULT_ACCOUNT_ID]["us-west-2"].topics[self.topic_arn]
        return [{"message": m[1], "subject": m[2]} for m in topic.sent_notifications]


@pytest.fixture
def sinks() -> Iterator[Sinks]:
    # The product's clients come from a world session: DynamoDB and SNS pass through to moto
    with mock_aws():
        session = WorldBackend(PClusterWorld().world()).session()
        ddb, sns = session.client("dynamodb"), session.client("sns")
        ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                               {"AttributeName": "sk", "AttributeType": "S"}],
                         KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                    {"AttributeName": "sk", "KeyType": "RANGE"}])
        yield Sinks(ddb, sns, sns.create_topic(Name="gpuaudit-alerts")["TopicArn"])


def blind_audit(since: str = at(6), until: str = at(10)) -> Result:
    """One GPU compute node with no log stream at all: Not observable, verdict NOT OBSERVABLE."""
    w = PClusterWorld(n_compute=1)
    return w.audit(w.cluster, since=since, until=until)


def healthy_audit(since: str = at(6), until: str = at(10)) -> Result:
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))
    return w.audit(w.cluster, since=since, until=until)


def xid_audit(code: int = 79) -> Result:
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(12, 25))
    w.stream(w.group, stream, events=[(at(8), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, "
                                              "pid=1234, name=python, GPU has fallen off the bus.")])
    return w.audit(w.cluster, since=at(6), until=at(10))


def compute_id(result: Result) -> str:
    return next(n.instance_id for n in result.nodes if n.role == "compute")


def test_first_write_of_a_not_observable_gpu_node_publishes_an_alert(sinks: Sinks):
    # Given an audit whose GPU node is Not observable
    result = blind_audit()
    iid = compute_id(result)
    assert node_of(result, iid).verdict == "NOT OBSERVABLE"

    # When written for the first time
    outcome = sinks.write(result)

    # Then the findings are stored and one alert names the node and what changed
    assert outcome.published and not outcome.duplicate
    assert f"{iid}: coverage Not observable" in outcome.changes
    assert any(c.startswith(f"{iid}: new verdict NOT OBSERVABLE") for c in outcome.changes)
    (sent,) = sinks.published()
    body = json.loads(sent["message"])
    assert iid in body["default"]
    assert json.loads(body["chatbot"])["content"]["description"] == body["default"]
    keys = {(i["pk"]["S"], i["sk"]["S"]) for i in sinks.items()}
    assert (f"AUDIT#{result.audit_id}", "SUMMARY") in keys
    assert (f"AUDIT#{result.audit_id}", f"NODE#{iid}") in keys
    assert ("LATEST#llm-pretrain", f"NODE#{iid}") in keys


def test_first_write_of_a_hardware_verdict_publishes_an_alert(sinks: Sinks):
    # Given a Measured node with a hardware-class Xid (REBOOT)
    result = xid_audit()
    iid = compute_id(result)
    assert node_of(result, iid).verdict == "REBOOT"

    # When written
    outcome = sinks.write(result)

    # Then the new verdict is the alert
    assert outcome.published
    assert [c for c in outcome.changes if "new verdict" in c] == [
        c for c in outcome.changes if c.startswith(f"{iid}: new verdict REBOOT — Xid 79")]
    assert len(sinks.published()) == 1


def test_healthy_measured_audit_publishes_nothing(sinks: Sinks):
    # Given an audit with every GPU node Measured and no Xid
    outcome = sinks.write(healthy_audit())

    # Then it is stored, but nothing is worth waking anyone for
    assert outcome.items_written > 0
    assert outcome.changes == []
    assert not outcome.published
    assert sinks.published() == []


def test_second_identical_write_is_a_duplicate_with_no_new_items_and_no_second_alert(sinks: Sinks):
    # Given a first write that alerted
    result = blind_audit()
    sinks.write(result)
    items_before = sinks.items()

    # When the same audit (same cluster, mode, window) is written again
    again = sinks.write(result)

    # Then nothing is written and nothing is published
    assert again.duplicate
    assert again.items_written == 0 and not again.published and again.alert is None
    assert sinks.items() == items_before
    assert len(sinks.published()) == 1


def test_coverage_regained_is_a_change(sinks: Sinks):
    # Given an earlier audit that found the node Not observable
    sinks.write(blind_audit(since=at(4), until=at(8)))

    # When a later window finds it Measured
    later = healthy_audit(since=at(6), until=at(10))
    outcome = sinks.write(later)

    # Then coverage regained is reported and alerted, and the latest state is Measured
    iid = compute_id(later)
    assert f"{iid}: coverage regained (Not observable → Measured)" in outcome.changes
    assert outcome.published
    assert len(sinks.published()) == 2
    latest = {i["sk"]["S"]: i["xid_status"]["S"] for i in sinks.items() if i["pk"]["S"] == "LATEST#llm-pretrain"}
    assert latest[f"NODE#{iid}"] == "Measured"


def test_coverage_lost_is_a_change(sinks: Sinks):
    sinks.write(healthy_audit(since=at(4), until=at(8)))
    later = blind_audit(since=at(6), until=at(10))
    outcome = sinks.write(later)
    assert f"{compute_id(later)}: coverage lost (Measured → Not observable)" in outcome.changes


def test_unchanged_problem_in_a_new_window_is_not_alerted_again(sinks: Sinks):
    # Given a node already reported Not observable
    sinks.write(blind_audit(since=at(4), until=at(8)))

    # When the next window finds it the same
    outcome = sinks.write(blind_audit(since=at(6), until=at(10)))

    # Then it is stored but not re-alerted
    assert not outcome.duplicate
    assert outcome.changes == []
    assert len(sinks.published()) == 1


def test_alert_and_stored_text_carry_no_account_id(sinks: Sinks):
    # Given a result whose headline and verdict evidence quote ARNs and an owner ID
    result = blind_audit()
    iid = compute_id(result)
    leaky = "see arn:aws:sagemaker:us-west-2:111122223333:cluster/abc, owner 123456789012"
    nodes = [n.model_copy(update={"verdict_evidence": f"{n.verdict_evidence} ({leaky})"}) if n.instance_id == iid
             else n for n in result.nodes]
    result = result.model_copy(update={"headline": f"{result.headline} {leaky}", "nodes": nodes})

    # When written
    sinks.write(result)

    # Then neither the published message nor the stored findings show an account ID
    (sent,) = sinks.published()
    stored = json.dumps(sinks.items())
    for text in (sent["message"], sent["subject"], stored):
        assert "111122223333" not in text and "123456789012" not in text
        assert ACCOUNT_LIKE.findall(text) == []
    assert "<account>" in json.loads(sent["message"])["default"]


def test_a_degraded_early_result_never_hides_a_complete_later_one_of_the_same_window(sinks: Sinks):
    # Given a first audit of a window during which Logs Insights was throttled (every query a gap)
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))
    complete = w.audit(w.cluster, since=at(6), until=at(10))
    w.fault("logs", "StartQuery", "ThrottlingException")
    degraded = w.audit(w.cluster, since=at(6), until=at(10))
    assert degraded.audit_id == complete.audit_id and len(degraded.visibility_gaps) > len(complete.visibility_gaps)
    sinks.write(degraded)

    # When the complete result of the same window arrives
    outcome = sinks.write(complete)

    # Then it replaces the degraded one (not a duplicate), and the node's state is Measured again
    assert not outcome.duplicate and outcome.superseded
    iid = compute_id(complete)
    nodes = {i["sk"]["S"]: i["xid_status"]["S"] for i in sinks.items() if i["pk"]["S"] == f"AUDIT#{complete.audit_id}"
             and i["sk"]["S"].startswith("NODE#")}
    assert nodes[f"NODE#{iid}"] == "Measured"
    summary = next(i for i in sinks.items() if i["pk"]["S"] == f"AUDIT#{complete.audit_id}" and i["sk"]["S"] == "SUMMARY")
    assert summary["gaps"]["N"] == str(len(complete.visibility_gaps))
    # and the degraded one arriving again after it is a duplicate
    assert sinks.write(degraded).duplicate
