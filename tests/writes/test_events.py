"""Findings as EventBridge events (issue #38): the entries built from the sinks' changes (report/events.py), sent
by eventbus.put_events through the world backend's strict PutEvents stand-in (embedded/eventbridge.py: ten entries
a call, the 256 KB limit, partial failures), and matched against the rules an operator would write
(tests/helpers/event_patterns.py, EventBridge's documented matching)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from helpers.event_patterns import matches
from helpers.worlds import ACCOUNT, REGION, PClusterWorld, at, aws_for, node_of
from moto import mock_aws

from gpuaudit.devtools.demo import demo_request, demo_worlds, ensure_findings_table
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.eventbridge import EventBridgeStandIn
from gpuaudit.embedded.world import load_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report import events
from gpuaudit.report.alert import Change
from gpuaudit.report.records import records
from gpuaudit.rules.what_changed import compare
from gpuaudit.writes import eventbus
from gpuaudit.writes.history import SqliteHistory
from gpuaudit.writes.sinks import SinkOutcome, write_and_alert

TABLE = "gpuaudit-findings"
NOW_EPOCH = 1_790_000_000
REPORT = "s3://gpuaudit-evidence/results/llm-pretrain/a.html"
# The rules of DEPLOY.md: page on REPLACE, a cluster's every change, a ticket on NOT OBSERVABLE.
PAGE_ON_REPLACE = {"source": ["gpuaudit"], "detail-type": ["GPU Audit Node Verdict Changed"],
                   "detail": {"verdict_code": ["REPLACE"], "change": ["new-verdict", "escalated"]}}
TICKET_ON_NOT_OBSERVABLE = {"source": ["gpuaudit"], "detail-type": ["GPU Audit Node Verdict Changed"],
                            "detail": {"verdict_code": ["NOT_OBSERVABLE"], "change": ["new-verdict"]}}


def cluster_rule(name: str) -> dict[str, Any]:
    return {"source": ["gpuaudit"], "detail": {"cluster": [name]}}


@dataclass
class Bus:
    """The findings table in moto; PutEvents answered by the world backend's EventBridge stand-in."""

    ddb: Any
    client: Any
    stand_in: EventBridgeStandIn
    sleeps: list[float]

    def write(self, result: Result, bus: str = "default") -> tuple[SinkOutcome, list[eventbus.Delivery]]:
        deliveries: list[eventbus.Delivery] = []

        def publish(changes: Any) -> None:
            deliveries.append(eventbus.publish(self.client, bus, result, changes, REPORT, sleep=self.sleeps.append))

        return write_and_alert(self.ddb, TABLE, None, None, result, NOW_EPOCH, publish_events=publish), deliveries

    def delivered(self) -> list[dict[str, Any]]:
        return self.stand_in.delivered


@pytest.fixture
def bus() -> Iterator[Bus]:
    with mock_aws():
        backend = WorldBackend(PClusterWorld().world())
        session = backend.session()
        ddb = session.client("dynamodb")
        ensure_findings_table(ddb)
        assert backend.eventbridge is not None
        yield Bus(ddb, session.client("events"), backend.eventbridge, [])


def one_node(kind: str) -> Result:
    """One GPU node: `blind` (no log stream: NOT OBSERVABLE), `healthy` (LEAVE ALONE), or an Xid code (`79`)."""
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    if kind != "blind":
        stream = w.healthy(node, at(-10), at(12, 25))
        if kind.isdigit():
            w.stream(w.group, stream, events=[(at(8), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {kind}, "
                                                      "pid=1234, name=python, GPU has fallen off the bus.")])
    return w.audit(w.cluster, since=at(6), until=at(10))


def compute_id(result: Result) -> str:
    return next(n.instance_id for n in result.nodes if n.role == "compute")


def details(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(e["Detail"]) for e in entries]


def test_a_verdict_change_is_one_event_with_the_previous_verdict_the_xid_and_the_reason_code(bus: Bus) -> None:
    # Given a node recorded LEAVE ALONE (Xid 31, application), then an audit where it logs Xid 64 (REPLACE)
    healthy, broken = one_node("31"), one_node("64")
    iid = compute_id(broken)
    assert node_of(healthy, iid).verdict == "LEAVE ALONE" and node_of(broken, iid).verdict == "REPLACE"
    bus.write(healthy)
    assert bus.delivered() == []  # nothing alerting: no event

    # When the second audit is written
    outcome, (delivery,) = bus.write(broken.model_copy(update={"audit_id": "second"}))

    # Then one Node Verdict Changed event says it, typed
    (event,) = bus.delivered()
    assert delivery.sent == 1 and not delivery.failed and delivery.calls == 1
    assert (event["source"], event["detail-type"]) == ("gpuaudit", "GPU Audit Node Verdict Changed")
    detail = event["detail"]
    assert {k: detail[k] for k in ("schema", "change", "cluster", "node", "verdict", "previous_verdict",
                                   "reason_code", "xid_codes", "coverage", "audit_id", "report", "severity")} == {
        "schema": "gpu-audit-event/1", "change": "new-verdict", "cluster": "llm-pretrain", "node": iid,
        "verdict": "REPLACE", "previous_verdict": "LEAVE ALONE", "reason_code": "hardware-xid", "xid_codes": [64],
        "coverage": node_of(broken, iid).xid_status, "audit_id": "second", "report": REPORT, "severity": "critical"}
    assert list(detail) == list(events.DETAIL_FIELDS)  # every field, in the documented order
    assert matches(PAGE_ON_REPLACE, event) and not matches(TICKET_ON_NOT_OBSERVABLE, event)
    assert [c.code for c in outcome.records] == [events.NEW_VERDICT]


def test_coverage_lost_with_the_verdict_is_one_event_and_regained_a_coverage_event(bus: Bus) -> None:
    # Given a node first seen with no log stream (Not observable, NOT OBSERVABLE), then seen logging again
    blind, healthy = one_node("blind"), one_node("healthy").model_copy(update={"audit_id": "back"})
    iid = compute_id(blind)
    bus.write(blind)
    first = list(bus.delivered())
    bus.write(healthy)
    second = bus.delivered()[len(first):]

    # Then the first audit sends one event for the node (issue #49 item 9: one per node per audit): the new verdict,
    # carrying the coverage it lost beside it
    (only,) = first
    assert (only["detail-type"], only["detail"]["change"], only["detail"]["changes"]) == (
        "GPU Audit Node Verdict Changed", "new-verdict", ["new-verdict", "coverage-lost"])
    assert only["detail"]["node"] == iid and only["detail"]["coverage"] == "Not observable"
    assert matches(TICKET_ON_NOT_OBSERVABLE, only)
    # the finding records' reason code, the same word in both schemas
    (record,) = [r for r in records(blind) if r["id"] == iid]
    assert next(e for e in first if e["detail-type"] == "GPU Audit Node Verdict Changed")["detail"][
        "reason_code"] == record["reason_code"] == "coverage-not-proven"
    # and the second the regained coverage, with what it was
    (back,) = second
    assert (back["detail-type"], back["detail"]["change"], back["detail"]["previous_coverage"],
            back["detail"]["coverage"]) == ("GPU Audit Coverage Changed", "coverage-regained", "Not observable",
                                            "Measured")
    assert not matches(TICKET_ON_NOT_OBSERVABLE, back)


def test_a_rerun_of_the_same_audit_sends_nothing_again(bus: Bus) -> None:
    result = one_node("79")
    bus.write(result)
    sent = len(bus.delivered())
    _, deliveries = bus.write(result)
    assert sent == 1 and deliveries == [] and len(bus.delivered()) == sent


def demo_result(entry: dict[str, Any]) -> Result:
    return run_audit(aws_for(load_world(entry["path"])), demo_request(entry))


@pytest.fixture(scope="module")
def demo_events() -> dict[str, list[dict[str, Any]]]:
    """Every demo world's first audit as EventBridge would deliver it (no earlier state: its state is the change)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in demo_worlds():
        result = demo_result(entry)
        stand_in = EventBridgeStandIn("123456789012", result.cluster.region)
        delivery = eventbus.put_events(_Client(stand_in), eventbus.local_entries(result, None, REPORT))
        assert not delivery.failed, dict(delivery.failed)
        out[entry.get("name", entry["world"])] = stand_in.delivered
    return out


@dataclass
class _Client:
    """A PutEvents client straight onto the stand-in (the world-backed one is tested above)."""

    stand_in: EventBridgeStandIn

    def put_events(self, **params: Any) -> dict[str, Any]:
        return self.stand_in.put_events(params)


def test_the_operators_rules_fire_on_exactly_the_events_they_name_in_the_demo_worlds(
        demo_events: dict[str, list[dict[str, Any]]], capsys: Any) -> None:
    everything = [e for sent in demo_events.values() for e in sent]
    with capsys.disabled():
        for name, sent in demo_events.items():
            print(f"\n{name}: {dict(sorted(Counter(e['detail-type'] for e in sent).items()))}", end="")
    # Page on REPLACE: every node event whose new verdict is REPLACE, nothing else
    paged = [e for e in everything if matches(PAGE_ON_REPLACE, e)]
    assert paged and all(e["detail"]["verdict"] == "REPLACE" and e["detail"]["node"] for e in paged)
    assert len(paged) == sum(1 for e in everything if e["detail-type"] == "GPU Audit Node Verdict Changed"
                             and e["detail"]["verdict"] == "REPLACE")
    # A cluster's every change: all of that cluster's events, none of another cluster's
    for name, sent in demo_events.items():
        cluster = sent[0]["detail"]["cluster"] if sent else None
        if cluster is None:
            continue
        fired = [e for e in everything if matches(cluster_rule(cluster), e)]
        assert fired == [e for e in everything if e["detail"]["cluster"] == cluster] and set(map(id, sent)) <= set(
            map(id, fired)), name
    # A ticket on NOT OBSERVABLE: the silent node of the ParallelCluster coverage demo, and only NOT OBSERVABLE
    ticketed = [e for e in everything if matches(TICKET_ON_NOT_OBSERVABLE, e)]
    assert ticketed and {e["detail"]["verdict"] for e in ticketed} == {"NOT OBSERVABLE"}
    assert {e["detail"]["cluster"] for e in ticketed} >= {"bench-pcluster"}
    # The cluster-level answers: the NCCL demo's Proven root cause, the pre-flight demo's readiness
    nccl = demo_events["pcluster-nccl-socket-fallback.world.json"]
    assert [(e["detail-type"], e["detail"]["root_cause"], e["detail"]["branches"]) for e in nccl] == [
        ("GPU Audit Root Cause Changed", "Proven", ["D"])]
    ready = [e for e in demo_events["hyperpod-preflight-risks.world.json"] if e["detail-type"] ==
             "GPU Audit Readiness Changed"]
    assert all(e["detail"]["ready"] == "No" and e["detail"]["change"] == "not-ready" for e in ready)


def test_many_changes_go_ten_entries_a_call(bus: Bus) -> None:
    # Given 43 nodes first seen with no log stream: 86 changes (coverage and verdict per node), one event per node
    w = PClusterWorld(n_compute=43)
    result = w.audit(w.cluster, since=at(6), until=at(10))
    _, (delivery,) = bus.write(result)
    assert delivery.sent == 43 and bus.stand_in.calls == [10, 10, 10, 10, 3]
    assert len(bus.delivered()) == 43 and len({e["detail"]["event_key"] for e in bus.delivered()}) == 43


def test_refused_entries_are_retried_with_backoff_and_those_never_accepted_counted(bus: Bus) -> None:
    result = PClusterWorld(n_compute=6).audit("llm-pretrain", since=at(6), until=at(10))
    changes = compare(result, {}).records
    entries = events.entries(result, changes)
    assert len(entries) == 6  # one per node
    # Throttled three entries, then accepted: all delivered, three re-sent after one backoff
    bus.stand_in.refuse_next(3, "ThrottlingException")
    sleeps: list[float] = []
    first = eventbus.put_events(bus.client, entries, sleep=sleeps.append)
    assert (first.sent, first.retried, dict(first.failed), sleeps) == (6, 3, {}, [0.2])
    # Refused for good: not retried, counted by its code
    bus.stand_in.refuse_next(2, "AccessDeniedException")
    second = eventbus.put_events(bus.client, entries, sleep=sleeps.append)
    assert (second.sent, second.retried, dict(second.failed)) == (4, 0, {"AccessDeniedException": 2})
    # Throttled past every attempt: backoff doubling, then counted
    bus.stand_in.refuse_next(1 + 1 + 1 + 1, "InternalFailure")
    third = eventbus.put_events(bus.client, entries[:1], sleep=sleeps.append)
    assert (third.sent, dict(third.failed), sleeps[-3:]) == (0, {"RetriesExhausted": 1}, [0.2, 0.4, 0.8])
    # An unknown bus: refused per entry, counted
    fourth = eventbus.put_events(bus.client, events.entries(result, changes, bus="no-such-bus")[:2])
    assert dict(fourth.failed) == {"ResourceNotFoundException": 2}


def test_the_stand_in_refuses_what_eventbridge_refuses(bus: Bus) -> None:
    entry = {"Source": "gpuaudit", "DetailType": "GPU Audit Node Verdict Changed", "Detail": "{}"}
    with pytest.raises(ClientError, match="length"):
        bus.client.put_events(Entries=[entry] * 11)
    big = {**entry, "Detail": json.dumps({"x": "y" * 140_000})}
    with pytest.raises(ClientError, match="Total size of the entries in the request is over the limit"):
        bus.client.put_events(Entries=[big, big])
    answer = bus.client.put_events(Entries=[entry, {**entry, "Detail": "[1]"}, {**entry, "Detail": "not json"}])
    assert answer["FailedEntryCount"] == 2
    assert [e.get("ErrorCode") for e in answer["Entries"]] == [None, "MalformedDetail", "MalformedDetail"]


def test_batches_keep_each_call_under_the_size_limit_as_eventbridge_counts_it() -> None:
    # The documented count: Time 14 bytes, Source, DetailType, Detail and each resource in UTF-8 bytes
    entry = {"Time": 0, "Source": "gpuaudit", "DetailType": "é", "Detail": '{"a":"€"}', "Resources": ["r1", "ü"]}
    assert events.entry_size(entry) == 14 + 8 + 2 + len('{"a":"€"}'.encode()) + 2 + 2
    big = {"Source": "gpuaudit", "DetailType": "x", "Detail": json.dumps({"x": "y" * 100_000})}
    small = {"Source": "gpuaudit", "DetailType": "x", "Detail": "{}"}
    calls = events.batches([big, big, big, *[small] * 12])
    assert [len(c) for c in calls] == [2, 10, 3]
    assert all(sum(events.entry_size(e) for e in c) < events.MAX_ENTRY_BYTES for c in calls)
    with pytest.raises(ValueError, match="over EventBridge's limit"):
        events.batches([{**big, "Detail": json.dumps({"x": "y" * 300_000})}])


def test_account_text_is_redacted_shown_and_cut_and_the_entry_fits(bus: Bus) -> None:
    # Given a node whose verdict evidence quotes a hostile log line: an account ID, a terminal escape, 1 MB of text
    result = one_node("79")
    iid = compute_id(result)
    hostile = "owner 123456789012 \x1b]8;;http://evil\x07click\x1b[0m " + "A" * 1_000_000
    result = result.model_copy(update={"nodes": [n.model_copy(update={"verdict_evidence": hostile})
                                                 if n.instance_id == iid else n for n in result.nodes]})
    (entry,) = events.entries(result, compare(result, {}).records)
    text = entry["Detail"]
    assert events.entry_size(entry) < 4 * events.TEXT_CHARS * 2
    assert "123456789012" not in text and "\x1b" not in text and "\x07" not in text and text.isascii()
    reason = json.loads(text)["reason"]
    assert reason.startswith("owner <account> \\x1b]8;;http://evil\\x07click") and len(reason) <= events.TEXT_CHARS
    # and a cluster name as long as a world can make it still fits one entry
    named = result.model_copy(update={"cluster": result.cluster.model_copy(update={"name": "é" * 50_000})})
    for e in events.entries(named, compare(named, {}).records):
        assert events.entry_size(e) < events.MAX_ENTRY_BYTES


def test_a_change_without_an_event_code_is_named_not_sent() -> None:
    result = one_node("healthy")
    with pytest.raises(ValueError, match="carries no event code"):
        events.entries(result, [Change(1, "REPLACE", "new verdict REPLACE", node=compute_id(result))])


def test_local_history_is_the_previous_state_of_the_offline_events(tmp_path: Any) -> None:
    # Given one node audited twice with a local history: Xid 31 (application: LEAVE ALONE), then Xid 64 (REPLACE)
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(12, 25))
    w.stream(w.group, stream, events=[(at(hour), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, "
                                                 "pid=1234, name=python") for hour, code in ((4, 31), (8, 64))])

    def audited(since: str, until: str) -> tuple[Result, eventbus.RememberingHistory]:
        store = eventbus.RememberingHistory(SqliteHistory(tmp_path))
        request = AuditRequest(cluster=w.cluster, mode="coverage", since=parse_time(since), until=parse_time(until))
        return run_audit(aws_for(w.world()), request, history=store), store

    earlier, first_store = audited(at(2), at(6))
    later, store = audited(at(6), at(10))
    iid = compute_id(later)
    assert node_of(earlier, iid).verdict == "LEAVE ALONE" and node_of(later, iid).verdict == "REPLACE"
    assert first_store.read_before is not None and first_store.read_before.spans == []

    # Then the later audit's previous state is the history's latest span in the same mode
    assert eventbus.previous_state(later, store.read_before)[f"NODE#{iid}"]["verdict"] == "LEAVE ALONE"
    (entry,) = eventbus.local_entries(later, store.read_before)
    assert json.loads(entry["Detail"])["previous_verdict"] == "LEAVE ALONE"
    # and without history the audit's own state is the change: first seen, no previous verdict
    (first,) = eventbus.local_entries(later, None)
    assert json.loads(first["Detail"])["previous_verdict"] is None
    # another mode's history is not this mode's previous state
    assert eventbus.previous_state(later.model_copy(update={"mode": "incident"}), store.read_before) == {}


def test_every_change_the_sinks_find_carries_an_event_code() -> None:
    """Each Change what_changed.compare builds says its code (and so its detail-type): a new kind of change without one
    would make the Verdict step's events fail, so it is caught here, where the changes are built."""
    import ast
    import inspect

    from gpuaudit.rules import what_changed

    tree = ast.parse(inspect.getsource(what_changed))
    built = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Change"]
    assert len(built) >= 14
    assert [n.lineno for n in built if "code" not in {k.arg for k in n.keywords}] == []


def test_the_cli_prints_the_entries_as_ndjson_against_its_local_history(tmp_path: Path) -> None:
    """`gpuaudit audit … --format events`: one PutEvents entry per line, what the deployed auditor would send; the
    local history (`--history`) is the previous state, and `.events.ndjson` names the format."""
    from typer.testing import CliRunner

    from gpuaudit.cli import app

    # Given one node audited twice into a local history: Xid 31 (LEAVE ALONE), then Xid 64 (REPLACE)
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(12, 25))
    w.stream(w.group, stream, events=[(at(hour), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, "
                                                 "pid=1234, name=python") for hour, code in ((4, 31), (8, 64))])
    world = tmp_path / "w.world.json"
    world.write_text(json.dumps(w.raw), encoding="utf-8")
    history = tmp_path / "history"

    def run(*extra: str) -> tuple[int, str, str]:
        out = CliRunner().invoke(app, ["audit", "--world", str(world), "--cluster", w.cluster, "-q", *extra])
        return out.exit_code, out.stdout, out.stderr

    code, first, _ = run("--since", at(2), "--until", at(6), "--history", str(history), "--format", "events")
    assert code == 0 and first == ""  # nothing alerting in the first window: no event
    code, later, _ = run("--since", at(6), "--until", at(10), "--history", str(history), "--format", "events")
    (line,) = later.splitlines()
    entry = json.loads(line)
    assert set(entry) == {"Time", "Source", "DetailType", "Resources", "Detail"} and line.isascii()
    # the instance's ARN (a ParallelCluster has no cluster ARN): what a rule or a target acts on
    assert entry["Resources"] == [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{node.instance_id}"]
    assert (entry["Source"], entry["DetailType"]) == ("gpuaudit", "GPU Audit Node Verdict Changed")
    detail = json.loads(entry["Detail"])
    assert (detail["verdict"], detail["previous_verdict"], detail["xid_codes"]) == ("REPLACE", "LEAVE ALONE", [64])
    # without a history, the audit's own state is the change; a file named .events.ndjson gets the same entries
    code, _, _ = run("--since", at(6), "--until", at(10), "--out", str(tmp_path / "x.events.ndjson"))
    (alone,) = (tmp_path / "x.events.ndjson").read_text(encoding="utf-8").splitlines()
    assert code == 0 and json.loads(json.loads(alone)["Detail"])["previous_verdict"] is None
    # a --format that contradicts the file's extension is refused, as for every format
    code, _, err = run("--format", "events", "--out", str(tmp_path / "x.ndjson"))
    assert code == 2 and "--format events conflicts with --out" in err


def test_the_rules_deploy_md_documents_are_the_ones_tested_here() -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    section = text.split("### Findings as EventBridge events", 1)[1].split("\n### ", 1)[0]
    rules = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.DOTALL)]
    assert rules == [PAGE_ON_REPLACE, TICKET_ON_NOT_OBSERVABLE]
    assert all(f"`{kind}`" in section for kind in set(events.DETAIL_TYPES.values()))
    assert all(f"`{code}`" in section for code in events.DETAIL_TYPES)
    plain = section.replace("`", "")
    assert [f for f in events.DETAIL_FIELDS if not re.search(rf"\b{f}\b", plain)] == []
