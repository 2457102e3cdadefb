"""The alert an on-call engineer reads (report/alert.py through sinks.write_and_alert, SNS in moto), on the shipped
worlds: a subject SNS accepts that counts the kinds of change, the cluster-level answers that page (a newly Proven
root cause, a changed leading hypothesis, pre-flight Ready: No), one line per node worst first, and a dedup key
that is stable for the same change and new for a new one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.worlds import aws_for
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sns.models import sns_backends

from gpuaudit.devtools.demo import demo_request, demo_worlds, ensure_findings_table
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import load_world
from gpuaudit.model.result import Result
from gpuaudit.pipeline import run_audit
from gpuaudit.report import alert
from gpuaudit.writes.sinks import SinkOutcome, write_and_alert

TABLE = "gpuaudit-findings"
NOW_EPOCH = 1_790_000_000


def demo_result(world: str, mode: str | None = None) -> Result:
    entry = next(e for e in demo_worlds() if e["world"] == world and "name" not in e)
    return run_audit(aws_for(load_world(entry["path"])), demo_request(entry | ({"mode": mode} if mode else {})))


@dataclass
class Topic:
    ddb: Any
    sns: Any
    arn: str

    def write(self, result: Result) -> SinkOutcome:
        return write_and_alert(self.ddb, TABLE, self.sns, self.arn, result, NOW_EPOCH)

    def sent(self) -> list[dict[str, Any]]:
        topic = sns_backends[DEFAULT_ACCOUNT_ID]["us-west-2"].topics[self.arn]
        return [{"message": json.loads(m[1]), "subject": m[2], "attributes": m[3]} for m in topic.sent_notifications]


@pytest.fixture
def topic() -> Iterator[Topic]:
    with mock_aws():
        session = WorldBackend(load_world(demo_worlds()[0]["path"])).session()
        ddb, sns = session.client("dynamodb"), session.client("sns")
        ensure_findings_table(ddb)
        yield Topic(ddb, sns, sns.create_topic(Name="gpuaudit-alerts")["TopicArn"])


def test_a_newly_proven_root_cause_pages_and_the_alert_leads_with_it(topic: Topic) -> None:
    # Given the NCCL demo case: nothing alerting on the nodes' own verdicts, the root cause Proven (branch D)
    result = demo_result("pcluster-nccl-socket-fallback.world.json")
    assert [b.branch for b in result.branches if b.status == "Root cause"] == ["D"]

    # When written for the first time, then again for a later audit with the same answer
    first = topic.write(result)
    later = topic.write(result.model_copy(update={"audit_id": "later"}))

    # Then the first publishes, its first change line is the root cause, and the same answer is not said again
    assert first.published and not later.published
    (sent,) = topic.sent()
    text = sent["message"]["default"]
    lines = text.split("\n")
    assert lines[0].startswith("Changes: 1 ROOT CAUSE")
    assert next(x for x in lines if x.startswith("- ")).startswith(
        "- ROOT CAUSE (Proven): branch D (GPU communication) — NCCL fell back to TCP sockets"
    )
    assert sent["subject"].startswith("[gpuaudit] llm-pretrain: 1 ROOT CAUSE") and sent["subject"].endswith(
        " (incident)"
    )
    assert sent["attributes"]["severity"]["Value"] == "critical"


def test_a_leading_hypothesis_is_said_when_it_changes(topic: Topic) -> None:
    # Given the Xid 31 demo case: the leading hypothesis is branch F (application), nothing Proven
    result = demo_result("hyperpod-xid31-app-error.world.json")
    assert [b.branch for b in result.branches if b.label == "Hypothesis (to validate)"] == ["F"]
    first = topic.write(result)
    assert any(c.kind == alert.HYPOTHESIS and "branch F (application) (was none)" in c.what for c in first.records)

    # When a later audit leads with another branch, and a third keeps it
    moved = result.model_copy(update={"audit_id": "moved", "branches": [
        b.model_copy(update={"status": "UNVERIFIED", "label": "Hypothesis (to validate)"}) if b.branch == "A" else
        b.model_copy(update={"status": "Ruled out",
                             "label": None}) if b.branch == "F" else b for b in result.branches]})
    second = topic.write(moved)
    third = topic.write(moved.model_copy(update={"audit_id": "kept"}))

    # Then the change is said, naming the branch it replaced, and the unchanged one is not
    assert [c.what for c in second.records if c.kind == alert.HYPOTHESIS] == [
        "NEW HYPOTHESIS (to validate): branch A (GPU/node hardware) (was Hypothesis branch F)"]
    assert not [c for c in third.records if c.kind == alert.HYPOTHESIS]


def test_preflight_ready_no_pages_naming_the_failed_checks(topic: Topic) -> None:
    # Given the pre-flight demo world: Ready: No
    result = demo_result("hyperpod-preflight-risks.world.json")
    assert result.ready == "No"
    failed = [f"{c.id} {c.title}" for c in result.checks if c.result == "FAIL"]
    assert failed

    outcome = topic.write(result)

    (sent,) = topic.sent()
    lines = sent["message"]["default"].split("\n")
    assert lines[0].startswith("Changes: 1 NOT READY")
    assert next(x for x in lines if x.startswith("- ")) == f"- NOT READY (Ready: No): FAIL {', '.join(failed)}"
    assert outcome.subject is not None and outcome.subject.startswith("[gpuaudit] train-hp-p5: 1 NOT READY")
    # back to ready: a recovery, said once
    ready = result.model_copy(update={"audit_id": "ready", "ready": "Yes with risks"})
    assert [c.what for c in topic.write(ready).records if c.kind == alert.RECOVERED and "Ready" in c.what] == [
        "Ready: Yes with risks (was No)"]


def test_the_coverage_demo_alert_is_one_line_per_node_worst_first_with_verdict_node_and_xid(topic: Topic) -> None:
    # Given the coverage demo: two REBOOT nodes (Xid 63 beside an application Xid), one silent node
    result = demo_result("pcluster-silent-node.world.json")
    outcome = topic.write(result)
    text = outcome.alert or ""
    node_lines = [line for line in text.split("\n") if line.startswith("- ")]

    # Then each node is on one line, leading with its verdict, its ID and its Xids, NOT OBSERVABLE before REBOOT
    ids = [re.search(r"i-[0-9a-f]+", line)[0] for line in node_lines]  # type: ignore[index]
    assert len(ids) == len(set(ids)) == len({n.instance_id for n in result.nodes if n.verdict in alert.VERDICT_KINDS})
    kinds = [line[2:].split(" i-")[0] for line in node_lines]
    assert kinds == sorted(kinds, key=alert.KIND_ORDER.index)
    rebooted = [n for n in result.nodes if n.verdict == "REBOOT"]
    for n in rebooted:
        (line,) = [x for x in node_lines if n.instance_id in x]
        code = re.search(r"Xid (\d+)",
                         n.verdict_evidence or "")[1]  # type: ignore[index]  # the Xid the verdict rests on
        assert line.startswith(f"- REBOOT {n.instance_id} Xid {code}")
    counted = ", ".join(f"{n:,} {k}" for k, n in alert.counts(alert.lines_of(result, outcome.records)))
    assert text.split("\n")[0] == f"Changes: {counted}"
    assert outcome.subject == f"[gpuaudit] bench-pcluster: {counted} (coverage)"
    # plain text: no Markdown escape anywhere (the report's `\_` and `\|` are Markdown, not alert text)
    assert "\\_" not in text and "\\|" not in text and "\\[" not in text


def test_the_subject_is_printable_ascii_within_the_sns_limit_whatever_the_cluster_is_called() -> None:
    # Given a long cluster name with non-ASCII and control characters, and many kinds of change
    result = demo_result("pcluster-silent-node.world.json")
    named = result.model_copy(update={"cluster": result.cluster.model_copy(update={
        "name": "ünïcode-\x1b[31m-" + "x" * 80})})
    changes = [alert.Change(1, kind, f"change {i}", node=f"i-{i:017x}") for i, kind in enumerate(alert.KIND_ORDER)]

    text = alert.subject(named, changes)

    assert len(text) <= alert.SUBJECT_MAX and all(" " <= ch <= "~" for ch in text)
    assert text.endswith(" more (coverage)") and "+" in text
    assert text.startswith("[gpuaudit] ?n?code-??31m-xxx")  # `[` is Markdown: `?` too (issue #48 item 8)


def test_the_subject_is_under_100_characters_at_every_cluster_name_length() -> None:
    """SNS Publish: "Subjects must be ... less than 100 characters long" (issue #47 item 6): 100 is refused."""
    result = demo_result("pcluster-silent-node.world.json")
    for changed in (1, 3, len(alert.KIND_ORDER)):
        changes = [alert.Change(1, kind, f"change {i}", node=f"i-{i:017x}")
                   for i, kind in enumerate(alert.KIND_ORDER[:changed])]
        for length in range(1, 121):
            named = result.model_copy(update={"cluster": result.cluster.model_copy(update={"name": "c" * length})})
            assert len(alert.subject(named, changes)) < 100, (changed, length)


def test_the_dedup_key_is_stable_for_the_same_change_and_new_for_another(topic: Topic) -> None:
    result = demo_result("pcluster-silent-node.world.json")
    first = topic.write(result)
    key = first.attributes["dedup_key"]["StringValue"]
    records = first.records
    # the same change of the same cluster, mode and window: the same key, whatever the delivery
    assert alert.dedup_key(result, list(reversed(records))) == key
    # a different change, or another window: another key
    assert alert.dedup_key(result, records[1:]) != key
    later = result.model_copy(update={"window": result.window.model_copy(update={"end": result.window.start})})
    assert alert.dedup_key(later, records) != key
    attributes = topic.sent()[0]["attributes"]
    assert {k: v["Value"] for k, v in attributes.items() if k in ("cluster", "mode")} == {
        "cluster": "bench-pcluster", "mode": "coverage"}
    assert json.loads(attributes["kinds"]["Value"]) == [k for k, _ in alert.counts(alert.lines_of(result, records))]


def test_a_node_line_is_cut_at_a_word_with_the_verdict_and_node_kept() -> None:
    result = demo_result("pcluster-silent-node.world.json")
    node = next(n for n in result.nodes if n.verdict == "REBOOT")
    long = alert.Change(1, "REBOOT", "new verdict REBOOT", node=node.instance_id, detail="word " * 200)
    (line,) = alert.lines_of(result, [long])
    assert len(line.text) <= alert.ALERT_LINE_CHARS and line.text.endswith("word…")
    assert line.text.startswith(f"REBOOT {node.instance_id} Xid")
