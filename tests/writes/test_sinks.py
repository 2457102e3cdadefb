"""Findings table and alert topic (sinks.py) in moto: alerts on what an on-call engineer must hear,
idempotent writes (a repeated audit writes and publishes nothing), changes against the latest
state, and no account ID in any alert."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.worlds import PClusterWorld, at, aws_for, node_of
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sns.models import sns_backends

from gpuaudit.devtools.demo import ensure_findings_table
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.evidence import AuditRequest, Gap
from gpuaudit.model.history import FLAPPING
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report import alert
from gpuaudit.rules.what_changed import compare, read_gaps
from gpuaudit.writes import dynamo_batch
from gpuaudit.writes import sinks as sinks_module
from gpuaudit.writes.history import SqliteHistory
from gpuaudit.writes.sinks import ALERT_MAX_CHARS, alert_message, write_and_alert

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

    def latest(self, mode: str = "coverage") -> dict[str, dict[str, str]]:
        """The latest state the next audit of llm-pretrain in `mode` compares with, by sort key."""
        base = f"LATEST#llm-pretrain#{mode}"
        return {i["sk"]["S"]: {k: v["S"] for k, v in i.items() if "S" in v} for i in self.items()
                if re.fullmatch(re.escape(base) + r"(#\d\d)?", i["pk"]["S"]) and i["sk"]["S"] != "HEAD"}

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
        ensure_findings_table(ddb)
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
    # one line per node, leading with its verdict; the subject counts the kinds of change and names the mode
    lead = f"NOT OBSERVABLE {iid}: coverage Not observable; new verdict NOT OBSERVABLE — "
    assert [line for line in body["default"].split("\n") if line.startswith("- ") and iid in line] == [
        f"- {lead}" + alert.cut(node_of(result, iid).verdict_evidence, 240 - len(lead))]
    assert body["default"].split("\n")[0] == "Changes: 1 NOT OBSERVABLE"
    assert sent["subject"] == "[gpuaudit] llm-pretrain: 1 NOT OBSERVABLE (coverage)"
    chatbot = json.loads(body["chatbot"])
    assert chatbot["content"]["description"] == "```\n" + body["default"].split("\n", 1)[1].strip("\n") + "\n```"
    assert chatbot["metadata"]["summary"] == "Changes: 1 NOT OBSERVABLE"
    assert chatbot["id"] == outcome.attributes["dedup_key"]["StringValue"]
    keys = {(i["pk"]["S"], i["sk"]["S"]) for i in sinks.items()}
    assert (f"AUDIT#{result.audit_id}", "SUMMARY") in keys
    assert not any(pk.startswith("AUDIT#") and sk.startswith("NODE#") for pk, sk in keys)  # the S3 result holds them
    assert (sinks_module.latest_pk("llm-pretrain", "coverage", f"NODE#{iid}"), f"NODE#{iid}") in keys


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
    assert sinks.latest()[f"NODE#{iid}"]["xid_status"] == "Measured"


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
    assert sinks.latest()[f"NODE#{iid}"]["xid_status"] == "Measured"
    summary = next(i for i in sinks.items()
                   if i["pk"]["S"] == f"AUDIT#{complete.audit_id}" and i["sk"]["S"] == "SUMMARY")
    assert summary["gaps"]["N"] == str(len(complete.visibility_gaps))
    # and the degraded one arriving again after it is a duplicate
    assert sinks.write(degraded).duplicate


# Successive audits of one cluster (issue #18 item 4): each call is the next audit, the world's clock moved forward.

def audit_to(end: int, *, xid: int | None = None, code: int = 79, blind: bool = False, throttled: bool = False,
             mode: str = "coverage", nodes: int = 1, drop_last: bool = False,
             denied: tuple[str, str] | None = None, terminated_last: bool = False) -> Result:
    """llm-pretrain audited over the 4 hours to hour `end`, its clock 30 minutes later. Every GPU node ships kernel
    lines up to then unless `blind`; `xid`: the hour an Xid `code` is logged on the last GPU node; `throttled`: every
    Logs Insights query is refused (a gap of this audit, not of the node); `drop_last`: the last GPU node is no
    longer in the cluster (no instance, no stream); `terminated_last`: EC2 still lists it, terminated, and it logs no
    more; `denied`: a (service, operation) the audit may not call."""
    w = PClusterWorld(n_compute=nodes, now=at(end, 30))
    if drop_last:
        gone = w.compute.pop()
        w.raw["ec2"]["instances"] = [i for i in w.raw["ec2"]["instances"] if i["InstanceId"] != gone.instance_id]
    if terminated_last:
        last = next(i for i in w.raw["ec2"]["instances"] if i["InstanceId"] == w.compute[-1].instance_id)
        last["State"] = {"Code": 48, "Name": "terminated"}
    for node in w.compute:
        if blind or (terminated_last and node is w.compute[-1]):
            continue
        stream = w.healthy(node, at(-10), at(end, 25))
        if xid is not None and node is w.compute[-1]:
            w.stream(w.group, stream, events=[(at(xid), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, "
                                                        "pid=1234, name=python, Ch 00000008")])
    if throttled:
        w.fault("logs", "StartQuery", "ThrottlingException")
    if denied:
        w.fault(*denied, "AccessDeniedException")
    return w.audit(w.cluster, mode=mode, since=at(end - 4), until=at(end))


GPU = "i-00000000000000002"  # the first compute node of every audit_to world
SECOND = "i-00000000000000003"


def test_a_rerun_of_an_unchanged_state_publishes_nothing_and_rewrites_no_latest_state(sinks: Sinks):
    # Given a node found REBOOT (Xid 79 at 09:00) and alerted
    first = sinks.write(audit_to(10, xid=9))
    assert any(c.startswith(f"{GPU}: new verdict REBOOT — Xid 79") for c in first.changes)
    recorded = sinks.latest()

    # When the next audit, an hour later, finds the same Xid and verdict
    again = sinks.write(audit_to(11, xid=9))

    # Then nothing is published and the latest state is not even rewritten
    assert again.changes == [] and not again.published
    assert sinks.latest() == recorded
    assert len(sinks.published()) == 1


def test_coverage_lost_then_restored_is_each_alerted_once(sinks: Sinks):
    sinks.write(audit_to(10))  # Measured, nothing to say
    lost = sinks.write(audit_to(11, blind=True))
    still_lost = sinks.write(audit_to(12, blind=True))
    restored = sinks.write(audit_to(13))
    still_restored = sinks.write(audit_to(14))

    assert f"{GPU}: coverage lost (Measured → Not observable)" in lost.changes and lost.published
    assert still_lost.changes == []
    assert restored.changes == [f"{GPU}: coverage regained (Not observable → Measured)"]
    assert still_restored.changes == []
    sent = [json.loads(m["message"])["default"] for m in sinks.published()]
    assert len(sent) == 2 and "coverage lost" in sent[0] and "coverage regained" in sent[1]


def test_without_the_history_a_verdict_gone_is_never_said_recovered(sinks: Sinks):
    # Given a node found REBOOT on an Xid 79, audited with no history of earlier audits (nothing shows a reboot)
    sinks.write(audit_to(10, xid=9))

    # When a complete audit finds only an application Xid on it, and the next one no GPU line at all
    to_leave_alone = sinks.write(audit_to(14, xid=13, code=31))
    recorded = sinks.latest()[f"NODE#{GPU}"]["verdict"]
    quiet = sinks.write(audit_to(18))

    # Then neither says it recovered: whether the reboot was done is not known (issue #37, the action stays open)
    assert to_leave_alone.changes == [] and not to_leave_alone.published
    assert quiet.changes == []
    # and the new verdict is still recorded, so the next REBOOT is said again
    assert recorded == "LEAVE ALONE" and sinks.latest()[f"NODE#{GPU}"]["verdict"] == "none"
    assert any(c.startswith(f"{GPU}: new verdict REBOOT") for c in sinks.write(audit_to(22, xid=21)).changes)
    assert sinks.write(audit_to(26)).changes == []


def test_coverage_and_incident_audits_of_the_same_cluster_do_not_cross_talk(sinks: Sinks):
    # Given a coverage audit that cannot see the node
    assert sinks.write(audit_to(10, blind=True)).published

    # When an incident audit of the same cluster sees it, then the next coverage audit is blind again
    incident = sinks.write(audit_to(11, mode="incident"))
    coverage = sinks.write(audit_to(12, blind=True))

    # Then neither compares with the other's state: no "regained", no "lost", one alert in all
    assert incident.changes == [] and coverage.changes == []
    assert len(sinks.published()) == 1
    assert sinks.latest("coverage")[f"NODE#{GPU}"]["xid_status"] == "Not observable"
    assert sinks.latest("incident")[f"NODE#{GPU}"]["xid_status"] == "Measured"


def test_an_incomplete_audit_does_not_overwrite_a_complete_state_nor_flap_coverage(sinks: Sinks):
    # Given a complete audit: the node Measured
    complete = audit_to(10)
    sinks.write(complete)

    # When Logs Insights is throttled for the next audit (its node reads Not observable for want of a query)
    degraded = audit_to(11, throttled=True)
    assert node_of(degraded, GPU).xid_status == "Not observable"
    during = sinks.write(degraded)
    after = sinks.write(audit_to(12))

    # Then no coverage lost, nothing published, the complete state stands, and no "regained" after it
    assert during.changes == [] and not during.published
    assert sinks.latest()[f"NODE#{GPU}"]["xid_status"] == "Measured"
    assert sinks.latest()[f"NODE#{GPU}"]["audit_id"] == complete.audit_id
    assert after.changes == []
    assert sinks.published() == []


def test_an_incomplete_audit_never_alerts_a_false_recovery_and_says_not_re_checked_once(sinks: Sinks):
    # Given a node found REBOOT by a complete audit
    sinks.write(audit_to(10, xid=9))

    # When two throttled audits cannot read its logs
    first_gap = sinks.write(audit_to(11, xid=9, throttled=True))
    second_gap = sinks.write(audit_to(12, xid=9, throttled=True))

    # Then the first says once that the REBOOT was not re-checked and stands; neither says recovered or lost
    (line,) = first_gap.changes
    assert line.startswith(f"{GPU}: not re-checked this audit (logs StartQuery") and line.endswith(
        "REBOOT recorded by the audit to 2026-10-01T10:00:00Z stands")
    assert second_gap.changes == []
    assert sinks.latest()[f"NODE#{GPU}"]["verdict"] == "REBOOT"

    # and when a complete audit finds it REBOOT still, nothing is said; when one finds the Xid gone, no recovery
    # either (no history read: nothing shows the reboot done)
    assert sinks.write(audit_to(13, xid=9)).changes == []
    assert sinks.write(audit_to(17)).changes == []
    assert sinks.latest()[f"NODE#{GPU}"]["verdict"] == "none"


def test_what_an_incomplete_audit_did_read_still_counts_but_cannot_clear_a_verdict(sinks: Sinks):
    # Given a complete audit that could not see the node
    sinks.write(audit_to(10, blind=True))

    # When an audit that could not read CloudTrail (a gap the first did not have) reads the node's kernel stream
    partial = audit_to(11, xid=10, denied=("cloudtrail", "LookupEvents"))
    (gap,) = read_gaps(partial)
    assert gap.startswith("Not checked: cloudtrail LookupEvents failed — ")
    outcome = sinks.write(partial)

    # Then what it read is alerted and recorded: coverage regained, a new REBOOT
    assert f"{GPU}: coverage regained (Not observable → Measured)" in outcome.changes
    assert any(c.startswith(f"{GPU}: new verdict REBOOT (was NOT OBSERVABLE) — Xid 79") for c in outcome.changes)
    assert sinks.latest()[f"NODE#{GPU}"]["verdict"] == "REBOOT"
    # but the state keeps the complete audit's completeness: another audit missing CloudTrail (which holds the
    # reboots a REPLACE rests on) cannot clear the REBOOT, only an audit as complete as the first can
    (unchecked,) = sinks.write(audit_to(15, denied=("cloudtrail", "LookupEvents"))).changes
    assert unchecked.startswith(f"{GPU}: not re-checked this audit (cloudtrail LookupEvents failed — ")
    assert unchecked.endswith("; REBOOT recorded by the audit to 2026-10-01T11:00:00Z stands")
    assert sinks.write(audit_to(16)).changes == []  # as complete, the Xid gone: recorded, not said recovered
    assert sinks.latest()[f"NODE#{GPU}"]["verdict"] == "none"


def test_a_node_gone_from_the_cluster_is_said_once_and_never_called_a_recovery(sinks: Sinks):
    # Given two GPU nodes, the second REBOOT
    sinks.write(audit_to(10, nodes=2, xid=9))

    # When a complete audit no longer finds the second node (terminated or replaced), and the next one neither
    gone = sinks.write(audit_to(11, nodes=2, drop_last=True))
    later = sinks.write(audit_to(12, nodes=2, drop_last=True))

    # Then it is said gone (not recovered), once, and its state is kept only until the retention ends
    assert gone.changes == [f"{SECOND}: no longer in the cluster (was REBOOT): replaced or terminated, not a recovery"]
    assert later.changes == []
    pk = sinks_module.latest_pk("llm-pretrain", "coverage", f"NODE#{SECOND}")
    item = next(i for i in sinks.items() if i["pk"]["S"] == pk and i["sk"]["S"] == f"NODE#{SECOND}")
    assert item["gone"]["S"] and int(item["expires_at"]["N"]) > NOW_EPOCH


def test_a_node_listed_terminated_is_said_to_have_left_not_to_have_lost_coverage(sinks: Sinks):
    # Given two GPU nodes, the second REBOOT
    sinks.write(audit_to(10, nodes=2, xid=9))

    # When EC2 lists the second terminated, with no kernel line since
    outcome = sinks.write(audit_to(11, nodes=2, terminated_last=True))

    # Then it left the cluster: no "coverage lost", no NOT OBSERVABLE verdict, no recovery
    assert outcome.changes == [f"{SECOND}: terminated, left the cluster (was REBOOT): not a recovery"]
    assert sinks.write(audit_to(12, nodes=2, terminated_last=True)).changes == []


def test_a_node_first_seen_terminated_is_said_once(sinks: Sinks):
    # Given a first audit in which a GPU node already terminated (e.g. its Capacity Block expired in the window)
    first = sinks.write(audit_to(10, nodes=2, terminated_last=True))
    assert f"{SECOND}: coverage Not observable" in first.changes

    # When the next audit lists it terminated again, then a later one no longer lists it
    assert sinks.write(audit_to(11, nodes=2, terminated_last=True)).changes == []
    assert sinks.write(audit_to(12, nodes=2, drop_last=True)).changes == []


def test_a_node_missing_from_an_incomplete_audit_is_not_called_gone(sinks: Sinks):
    sinks.write(audit_to(10, nodes=2, xid=9))
    outcome = sinks.write(audit_to(11, nodes=2, drop_last=True, throttled=True))
    assert not any("no longer in the cluster" in c or "recovered" in c for c in outcome.changes)
    assert any(c.startswith(f"{SECOND}: not re-checked this audit") for c in outcome.changes)
    assert "gone" not in sinks.latest()[f"NODE#{SECOND}"]


def test_a_preflight_check_newly_fail_then_back_to_pass_is_each_said_once(sinks: Sinks):
    fail = sinks.write(audit_to(10, blind=True, mode="preflight"))
    assert any(c.startswith("P6 ") and ": FAIL — " in c for c in fail.changes)
    assert not any(c.startswith("P6 ") for c in sinks.write(audit_to(11, blind=True, mode="preflight")).changes)
    passing = audit_to(12, mode="preflight")
    back = sinks.write(passing)
    assert [c for c in back.changes if c.startswith("P6 ")] == [f"P6 {check_title(passing, 'P6')}: back to PASS (was "
                                                                f"FAIL)"]
    # P7 fails in every one of these worlds: said the first time only
    said = [c for m in sinks.published() for c in json.loads(m["message"])["default"].split("\n- ")]
    assert sum(c.startswith("P7 ") for c in said) == 1


def check_title(result: Result, check_id: str) -> str:
    return next(c.title for c in result.checks if c.id == check_id)


def test_a_self_contradicting_result_alerts_first_and_does_not_become_the_state_compared_with(sinks: Sinks):
    # Given a complete audit: the node Measured
    sinks.write(audit_to(10))

    # When a later result contradicts itself (a gpuaudit bug) and also reads the node Not observable
    blind = audit_to(11, blind=True)
    broken = blind.model_copy(update={"invariants_broken": ["one story: headline says no GPU errors while …"]})
    outcome = sinks.write(broken)

    # Then the alert leads with the self-check, still lists the change, and the trusted state is kept
    assert outcome.published and outcome.changes[0].startswith("SELF-CHECK FAILED (1 invariant(s) broken")
    assert f"{GPU}: coverage lost (Measured → Not observable)" in outcome.changes
    assert json.loads(sinks.published()[0]["message"])["default"].split("\n- ", 1)[1].startswith("SELF-CHECK FAILED")
    assert sinks.latest()[f"NODE#{GPU}"]["xid_status"] == "Measured"
    # the same contradiction in the next audit is not said again
    again = audit_to(12, blind=True).model_copy(update={"invariants_broken": broken.invariants_broken})
    assert sinks.write(again).changes == []


def test_the_alert_leads_with_the_worst_change_and_stays_bounded_at_ten_thousand_nodes(sinks: Sinks):
    # Given 10,000 GPU nodes recorded Measured, then an audit where all lose coverage and the last turns REPLACE
    base = audit_to(10)
    template = node_of(base, GPU)
    fleet = [template.model_copy(update={"instance_id": f"i-{k:017x}"}) for k in range(10_000)]
    before = compare(base.model_copy(update={"nodes": fleet}), {})
    previous = {write.sk: dict(write.attrs) for write in before.writes}
    blind = [n.model_copy(update={"xid_status": "Not observable", "verdict": "NOT OBSERVABLE"}) for n in fleet]
    blind[-1] = blind[-1].model_copy(update={"verdict": "REPLACE", "verdict_evidence": "Xid 64 on PCI 0000:53:00"})
    later = base.model_copy(update={"nodes": blind, "audit_id": "later"})

    records = compare(later, previous).records
    changes = [c.text for c in records]
    text = alert_message(later, records, "s3://bucket/report.html")

    # Then the REPLACE is the first line, one line per node, the rest counted, and the message stays one phone message
    assert changes[0] == f"{blind[-1].instance_id}: new verdict REPLACE — Xid 64 on PCI 0000:53:00"
    assert len(changes) == 2 * 10_000  # each node's coverage lost, and its new verdict
    lines = text.split("\n")
    assert lines[0] == "Changes: 1 REPLACE, 9,999 NOT OBSERVABLE"
    assert next(x for x in lines if x.startswith("- ")) == (
        f"- REPLACE {blind[-1].instance_id}: new verdict REPLACE; coverage lost (Measured → Not "
        "observable) — Xid 64 on PCI 0000:53:00"
    )
    assert len(text) <= ALERT_MAX_CHARS and "- … and 9,9" in text and "more (see the report)" in text
    blind_lines = [line.split()[3] for line in lines if line.startswith("- NOT OBSERVABLE i-")]
    assert len(set(blind_lines)) == len(blind_lines) > 10  # no node twice


def test_read_gaps_are_the_gaps_an_audit_could_not_read_named_without_their_error_message():
    # Given gaps as the collectors write them (Gap.prose): one call throttled at two rates, one truncated read,
    # and a capability limit (permanent, not a gap of the audit)
    throttled = [Gap(kind="throttled", service="logs", operation="StartQuery", error_code="ThrottlingException",
                     error_message=rate, unseen="kernel-streams query over /aws/x not run").prose()
                 for rate in ("Rate exceeded", "Rate exceeded (request 1f2e)")]
    truncated = [Gap(kind="truncated", service="logs", operation="GetLogEvents",
                     unseen=f"first/last event times of {n} of {n + 50} streams not read").prose() for n in (12, 345)]
    limit = Gap(kind="unsupported", service="fsx", operation="DescribeFileSystems", unseen="no FSx API here").prose()
    results = [audit_to(10).model_copy(update={"visibility_gaps": [gap, cut, limit]})
               for gap, cut in zip(throttled, truncated, strict=True)]

    # Then both audits lack the same sources: the query and the truncated read (whatever its counts), not the
    # capability limit
    assert read_gaps(results[0]) == read_gaps(results[1]) == {
        "Not checked: logs StartQuery failed — kernel-streams query over /aws/x not run",
        "Visibility gap: first/last event times of # of # streams not read"}


def test_a_latest_state_written_by_a_racing_audit_is_not_overwritten(sinks: Sinks, monkeypatch: pytest.MonkeyPatch):
    # Given a state read by one delivery (A's), then replaced by another audit (B) before the first writes
    first = audit_to(10)
    sinks.write(first)
    stale = sinks_module.latest_state(sinks.ddb, TABLE, "llm-pretrain", "coverage")
    racing = audit_to(11, blind=True)
    sinks.write(racing)
    monkeypatch.setattr(sinks_module, "latest_state", lambda *_args: stale)

    # When the first delivery writes what it found against the state it read
    sinks.write(audit_to(12, xid=11))

    # Then B's newer state stands: each put holds only over the item it was compared with
    assert sinks.latest()[f"NODE#{GPU}"]["audit_id"] == racing.audit_id
    assert sinks.latest()[f"NODE#{GPU}"]["xid_status"] == "Not observable"


# Fleet memory (items 1-3 of #18) read by the alerts: audits that keep a history (the CLI's SQLite store).

def remembered(tmp_path: Path, xids: dict[int, int], ends: tuple[int, ...], reboot: int | None = None) -> list[Result]:
    """One GPU node's kernel stream live for days, Xid `code` at each hour of `xids`, a reboot line at `reboot`,
    audited over the 4 hours to each of `ends` (clock moved forward), each audit reading the history of the last."""
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-48), at(max(ends) + 1), every_s=600)
    lines = [(at(h), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, pid=1234, name=python, "
                     "GPU has fallen off the bus.") for h, code in xids.items()]
    if reboot is not None:
        lines.append((at(reboot), f"{node.hostname} kernel: Linux version 6.1.112-124.190.amzn2023.x86_64 #1 SMP"))
    w.stream(w.group, stream, events=lines)
    store = SqliteHistory(tmp_path)
    results = []
    for end in ends:
        w.raw["now"] = at(end, 30)
        request = AuditRequest(cluster=w.cluster, since=parse_time(at(end - 4)), until=parse_time(at(end)))
        results.append(run_audit(aws_for(w.world()), request, history=store))
    return results


def test_a_replace_not_acted_on_is_alerted_once_as_escalated_never_as_a_recovery(sinks: Sinks, tmp_path: Path):
    # Given an Xid 79, a reboot, the same Xid on the same bus again (REPLACE from history), then quiet audits
    first, rebooted, recurring, quiet, quieter = remembered(tmp_path, {8: 79, 80: 79}, (10, 32, 82, 106, 110),
                                                             reboot=30)
    assert node_of(recurring, GPU).verdict == node_of(quiet, GPU).verdict == "REPLACE"
    said = [sinks.write(r).changes for r in (first, rebooted, recurring, quiet, quieter)]

    # Then the REPLACE is alerted when given, escalated once when the next audit finds it not acted on, and the
    # Xid leaving the window is no recovery
    assert any(c.startswith(f"{GPU}: new verdict REPLACE — ") for c in said[2])
    (escalated,) = said[3]
    assert escalated.startswith(f"{GPU}: REPLACE escalated (given earlier, not acted on) — REPLACE given at")
    assert said[4] == []


def test_a_flapping_node_says_so_on_its_alert_lines(sinks: Sinks, tmp_path: Path):
    # Given an Xid 79 every other audit: REBOOT, recovered, REBOOT, …
    results = remembered(tmp_path, {8: 79, 32: 79, 56: 79}, (10, 22, 34, 46, 58))
    said = [sinks.write(r).changes for r in results]
    assert FLAPPING in (node_of(results[-1], GPU).history or "")
    assert FLAPPING not in (node_of(results[2], GPU).history or "")

    # Then the lines of the audits that report the flapping name it, the earlier ones do not
    assert said[1] == []  # the Xid left the window, no reboot seen: the REBOOT is still open, never "recovered"
    (last,) = said[-1]
    assert last.startswith(f"{GPU} (flapping across audits): new verdict REBOOT — Xid 79")


def test_the_dynamodb_client_pools_a_connection_per_thread() -> None:
    # botocore pools 10 connections by default; 16 threads on it would drop and reopen connections
    import boto3

    from gpuaudit.writes.sinks import DYNAMODB_THREADS, dynamodb_client

    client = dynamodb_client(boto3.Session(region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"))
    assert client.meta.config.max_pool_connections == DYNAMODB_THREADS > 10


# -- at-least-once deliveries (issue #48 items 2 and 4) ---------------------------------------------------------
@contextmanager
def faulty_sinks(faults: list[dict[str, Any]]) -> Iterator[Sinks]:
    """The sinks with the table's own faults (embedded/backend.py): throttling, writes applied then failed."""
    with mock_aws():
        world = PClusterWorld().world()
        world.faults.extend(faults)
        session = WorldBackend(world).session()
        ddb, sns = session.client("dynamodb"), session.client("sns")
        ensure_findings_table(ddb)
        yield Sinks(ddb, sns, sns.create_topic(Name="gpuaudit-alerts")["TopicArn"])


def test_a_latest_state_claim_applied_then_failed_is_this_audits_own_and_the_state_lands() -> None:
    # Given DynamoDB applying the claim on the latest state (the first PutItem), then answering 500: the retried
    # conditional put meets the head this audit just wrote
    applied = {"service": "dynamodb", "operation": "PutItem", "error": "InternalServerError", "applied": True,
               "times": 1}
    with faulty_sinks([applied]) as sinks:
        first = blind_audit()
        outcome = sinks.write(first)
        latest = sinks.latest()
        # When the next window finds the same blind node
        later = sinks.write(blind_audit(since=at(7), until=at(11)))
        alerts = sinks.published()
    # Then the claim was recognised as its own: the state is written, so the unchanged problem is not alerted again
    assert not outcome.latest_kept and latest[f"NODE#{compute_id(first)}"]["verdict"] == "NOT OBSERVABLE"
    assert not later.published and len(alerts) == 1


def test_a_verdict_retried_after_its_state_writes_failed_publishes_the_alert_and_events_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given every attempt of the first delivery's state writes throttled (the step fails after publishing)
    monkeypatch.setattr(dynamo_batch, "pause", lambda _s: None)
    throttled = {"service": "dynamodb", "operation": "BatchWriteItem",
                 "error": "ProvisionedThroughputExceededException", "times": dynamo_batch.ATTEMPTS}
    sent: list[int] = []
    with faulty_sinks([throttled]) as sinks:
        result = blind_audit()

        def deliver() -> Any:
            return write_and_alert(sinks.ddb, TABLE, sinks.sns, sinks.topic_arn, result, NOW_EPOCH,
                                   publish_events=lambda changes: sent.append(len(changes)))

        with pytest.raises(dynamo_batch.WritesNotDone):
            deliver()
        # When Step Functions retries the step, and its writes now land
        retry = deliver()
        alerts, latest = sinks.published(), sinks.latest()
    # Then the alert and the events went out once, the retry says it did not send them, and the state landed
    assert len(alerts) == 1 and len(sent) == 1
    assert retry.already_published and retry.events_already_sent and not retry.published
    assert latest[f"NODE#{compute_id(result)}"]["verdict"] == "NOT OBSERVABLE"
