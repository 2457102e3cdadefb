"""The alert and the events agree with the history on what is open (issue #37 item 4), written from RULES §7: a
REPLACE, REBOOT or NOT OBSERVABLE verdict asks the operator to do something, and that action stays open — also once
its Xid has left the audit window — until an audit's evidence shows it done (a reboot after the signal, a replacement
or relaunch, coverage Measured again). So an on-call engineer is never told a node "recovered" while its reboot was
never done, and is told when it was done. The deployed path (sinks.write_and_alert: SNS and EventBridge entries,
the DynamoDB latest state) is run over both history stores — the CLI's SQLite and the findings table's layout —
and the CLI's `--format events` over the SQLite history; all give the same changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers.worlds import PClusterWorld, at, aws_for, node_of
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sns.models import sns_backends
from test_fleet_memory import Fleet, reboot_line, xid_line

from gpuaudit.devtools.demo import ensure_findings_table
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.history import HistoryStore
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report import alert, events
from gpuaudit.writes.eventbus import RememberingHistory, local_entries
from gpuaudit.writes.history import DynamoHistory, SqliteHistory
from gpuaudit.writes.sinks import SinkOutcome, write_and_alert

TABLE = "gpuaudit-findings"
NOW_EPOCH = 1_790_000_000
STORES = ["sqlite", "dynamodb"]


@dataclass
class Said:
    """What one audit sent: the deployed path's alert and events, and the CLI's `--format events` entries."""

    outcome: SinkOutcome
    events: list[dict[str, Any]]
    local_events: list[dict[str, Any]]

    @property
    def changes(self) -> list[str]:
        return self.outcome.changes

    def codes(self) -> list[str]:
        """Every change code the events carry (one event per node: its other changes in `changes`)."""
        return [code for e in self.events for code in json.loads(e["Detail"])["changes"]]


@dataclass
class Deployed:
    """The Verdict step's sinks (findings table and topic in moto) with the history in `kind`'s store: the findings
    table itself (its deployed layout) or a SQLite file."""

    ddb: Any
    sns: Any
    topic: str
    store: HistoryStore
    said: list[Said] = field(default_factory=list)

    def audit(self, run: Any, end_hour: int) -> Result:
        """`run(end_hour, store)` audits the world; its result goes through the sinks and the local events."""
        remembering = RememberingHistory(self.store)
        result: Result = run(end_hour, remembering)
        sent: list[dict[str, Any]] = []
        outcome = write_and_alert(self.ddb, TABLE, self.sns, self.topic, result, NOW_EPOCH,
                                  publish_events=lambda changes: sent.extend(events.entries(result, changes)))
        self.said.append(Said(outcome, sent, local_entries(result, remembering.read_before)))
        return result

    def messages(self) -> list[str]:
        topic = sns_backends[DEFAULT_ACCOUNT_ID]["us-west-2"].topics[self.topic]
        return [json.loads(m[1])["default"] for m in topic.sent_notifications]


@pytest.fixture(params=STORES)
def deployed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployed]:
    with mock_aws():
        session = WorldBackend(PClusterWorld().world()).session()
        ddb, sns = session.client("dynamodb"), session.client("sns")
        ensure_findings_table(ddb)
        store: HistoryStore = DynamoHistory(ddb, TABLE) if request.param == "dynamodb" else SqliteHistory(tmp_path)
        yield Deployed(ddb, sns, sns.create_topic(Name="gpuaudit-alerts")["TopicArn"], store)


def no_recovery(said: Said) -> bool:
    everything = [*said.changes, *said.codes(), *(json.loads(e["Detail"])["change"] for e in said.local_events)]
    return not any("recovered" in c for c in everything)


def test_a_reboot_never_done_is_never_announced_recovered(deployed: Deployed) -> None:
    # Given an Xid 79 at 08:00 (REBOOT, RULES §7) and no reboot ever after it
    f = Fleet()
    iid = f.node.instance_id
    f.add(8, xid_line(f.node.hostname))

    # When the audits to 10:00 (REBOOT), 22:00 and 34:00 (the Xid out of their windows) run
    results = [deployed.audit(f.audit, end) for end in (10, 22, 34)]

    # Then the REBOOT is alerted once, and the audits after it say nothing: no "recovered" line, no event
    assert [node_of(r, iid).verdict for r in results] == ["REBOOT", None, None]
    given, *later = deployed.said
    assert any(c.startswith(f"{iid}: new verdict REBOOT") for c in given.changes) and given.outcome.published
    assert [s.changes for s in later] == [[], []] and [s.events for s in later] == [[], []]
    assert [s.local_events for s in later] == [[], []]
    assert all(no_recovery(s) for s in deployed.said)
    assert len(deployed.messages()) == 1 and "recovered" not in deployed.messages()[0]
    # and the node's result names the action still open, as `gpuaudit history` does
    (open_action,) = node_of(results[2], iid).actions_asked or []
    assert (open_action.verdict, open_action.status, open_action.signal) == ("REBOOT", "open", parse_time(at(8)))


def test_a_reboot_after_the_signal_is_announced_rebooted(deployed: Deployed) -> None:
    # Given an Xid 79 at 08:00 and the node's boot banner at 20:00
    f = Fleet()
    iid = f.node.instance_id
    f.add(8, xid_line(f.node.hostname))
    f.add(20, reboot_line(f.node.hostname))

    # When the audits to 10:00, 22:00 (which reads the reboot) and 34:00 run
    for end in (10, 22, 34):
        deployed.audit(f.audit, end)

    # Then the audit that saw the reboot says the REBOOT was done, with when and how; nothing is said recovered
    _, rebooted, after = deployed.said
    (done,) = rebooted.outcome.records
    assert done.kind == alert.DONE and done.node == iid
    assert done.what == (f"REBOOT done: already rebooted after the signal at "
                         f"{at(8)}: a boot at {at(20)} (kernel banner in the node's log)")
    assert done.detail == f"REBOOT given at {at(10)} on a signal at {at(8)}"
    assert rebooted.outcome.subject == "[gpuaudit] llm-pretrain: 1 DONE (coverage)"
    assert f"\n- DONE {iid}: REBOOT done: already rebooted after the signal" in deployed.messages()[1]
    assert rebooted.outcome.attributes["severity"]["StringValue"] == "info"
    (event,) = [json.loads(e["Detail"]) for e in rebooted.events]
    assert (event["change"], event["kind"], event["previous_verdict"], event["node"]) == (
        "action-done", "DONE", "REBOOT", iid)
    assert [e["DetailType"] for e in rebooted.events] == [events.NODE_VERDICT_CHANGED]
    # the CLI's events over the SQLite history say the same
    assert [json.loads(e["Detail"])["change"] for e in rebooted.local_events] == ["action-done"]
    # and once said, the next audit has nothing to say
    assert after.changes == [] and all(no_recovery(s) for s in deployed.said)


def test_a_replace_relaunched_is_announced_replaced(deployed: Deployed) -> None:
    # Given an Xid 79, a reboot, the same Xid on the same bus again (REPLACE across the reboot, RULES §7)
    f = Fleet()
    iid = f.node.instance_id
    f.add(8, xid_line(f.node.hostname))
    f.add(30, reboot_line(f.node.hostname))
    f.add(56, xid_line(f.node.hostname))
    results = [deployed.audit(f.audit, end) for end in (10, 32, 58)]
    assert node_of(results[2], iid).verdict == "REPLACE"

    # When the node is stopped and started on a new host at 60:00 and audited at 70:00
    (instance,) = [i for i in f.w.section("ec2", "instances") if i["InstanceId"] == iid]
    instance["LaunchTime"] = at(60)
    deployed.audit(f.audit, 70)

    # Then the reboot was announced done when seen, the REPLACE when relaunched; never a recovery
    rebooted, relaunched = deployed.said[1], deployed.said[3]
    assert [c.what.split(":")[0] for c in rebooted.outcome.records] == ["REBOOT done"]
    (done,) = relaunched.outcome.records
    assert done.kind == alert.DONE and done.what == f"REPLACE done: relaunched at {at(60)}, after the verdict's signal"
    assert relaunched.codes() == ["action-done"]
    assert all(no_recovery(s) for s in deployed.said)


def test_a_replace_never_done_says_nothing_recovered_when_its_xid_leaves(deployed: Deployed) -> None:
    # Given the REPLACE above, never acted on: the audits after it (the Xid out of their windows)
    f = Fleet()
    f.add(8, xid_line(f.node.hostname))
    f.add(30, reboot_line(f.node.hostname))
    f.add(56, xid_line(f.node.hostname))
    for end in (10, 32, 58, 70, 82):
        deployed.audit(f.audit, end)

    # Then it is escalated once and nothing says it was done or recovered
    assert deployed.said[3].changes[0].startswith(f"{f.node.instance_id}: REPLACE escalated")
    assert deployed.said[4].changes == []
    assert not any(c.kind == alert.DONE and c.was == "REPLACE" for s in deployed.said for c in s.outcome.records)
    assert all(no_recovery(s) for s in deployed.said)


def test_not_observable_is_announced_done_when_coverage_is_measured_again(deployed: Deployed) -> None:
    # Given a GPU node with no kernel log stream (NOT OBSERVABLE, RULES §7)
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]

    def run(end_hour: int, store: HistoryStore) -> Result:
        w.raw["now"] = at(end_hour, 30)
        request = AuditRequest(cluster=w.cluster, since=parse_time(at(end_hour - 4)), until=parse_time(at(end_hour)))
        return run_audit(aws_for(w.world()), request, history=store)

    blind = [deployed.audit(run, end) for end in (10, 22)]
    assert [node_of(r, node.instance_id).verdict for r in blind] == ["NOT OBSERVABLE", "NOT OBSERVABLE"]

    # When its kernel log ships from 23:00 on and the audit to 34:00 reads it
    w.healthy(node, at(23), at(40))
    measured = deployed.audit(run, 34)

    # Then that audit says the collection asked for is done, once (the coverage change is its own event)
    assert node_of(measured, node.instance_id).xid_status == "Measured"
    said = deployed.said[2]
    done = [c for c in said.outcome.records if c.kind == alert.DONE]
    assert [c.what for c in done] == ["NOT OBSERVABLE done: coverage Measured again"]
    assert sorted(said.codes()) == ["action-done", "coverage-regained"]
    assert f"- DONE {node.instance_id}: NOT OBSERVABLE done: coverage Measured again" in deployed.messages()[-1]
    assert deployed.said[1].changes == []  # still blind: nothing new


def test_a_replace_whose_node_was_terminated_is_announced_replaced_on_its_left_line(deployed: Deployed) -> None:
    # Given the REPLACE across a reboot
    f = Fleet()
    iid = f.node.instance_id
    f.add(8, xid_line(f.node.hostname))
    f.add(30, reboot_line(f.node.hostname))
    f.add(56, xid_line(f.node.hostname))
    for end in (10, 32, 58):
        deployed.audit(f.audit, end)

    # When the operator terminates the node (the fleet relaunches a new one) and the next audit runs
    (instance,) = [i for i in f.w.section("ec2", "instances") if i["InstanceId"] == iid]
    instance["State"] = {"Code": 48, "Name": "terminated"}
    deployed.audit(f.audit, 70)

    # Then its one line says it left the cluster and that the REPLACE was done by it; nothing says recovered
    said = deployed.said[3]
    assert sorted(c.kind for c in said.outcome.records) == [alert.DONE, alert.LEFT]
    (done,) = [c for c in said.outcome.records if c.kind == alert.DONE]
    assert done.what.startswith("REPLACE done: replaced: already terminated")
    assert f"\n- LEFT {iid}: terminated, left the cluster (was REPLACE): not a recovery; REPLACE done: replaced" in (
        deployed.messages()[-1])
    assert sorted(said.codes()) == ["action-done", "left-cluster"]
    assert all(no_recovery(s) for s in deployed.said)
