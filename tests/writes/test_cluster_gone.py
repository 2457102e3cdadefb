"""A cluster deleted between runs (issue #33, bad input): its nodes' standing verdicts are closed in the history with
the reason, not left frozen at their last value; a name the history never knew is only an unknown cluster."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gpuaudit.collectors.inventory import UnknownCluster
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.history import CLUSTER_GONE, HistorySpan, latest_spans
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report.history import HistoryView, render_markdown
from gpuaudit.rules.history import actions_by_node
from gpuaudit.writes.history import SqliteHistory, _span_of_item, history_item
from tests.helpers.worlds import HyperPodWorld, at
from tests.rules.test_eks_node_health import SINCE, UNTIL, eks_world

LATER = at(34)  # the next day's run


def _audit(w: HyperPodWorld, cluster: str, store: SqliteHistory) -> None:
    request = AuditRequest(cluster=cluster, mode="incident", since=parse_time(SINCE), until=parse_time(UNTIL))
    run_audit(w.aws(), request, history=store)


def _latest(store: SqliteHistory, cluster: str) -> dict[str, HistorySpan]:
    now = parse_time(LATER)
    read = store.read(cluster, None, now - timedelta(days=30), now + timedelta(hours=1))
    return latest_spans(read)


def test_a_cluster_audited_then_gone_has_its_verdicts_closed_in_the_history(tmp_path: Path) -> None:
    store = SqliteHistory(tmp_path)
    audited = eks_world(["UnschedulablePendingReplacement", "Schedulable"])
    _audit(audited, audited.cluster, store)
    before = _latest(store, audited.cluster)
    assert len(before) == 2 and {s.verdict for s in before.values()} == {"REPLACE", None}

    gone = HyperPodWorld(cluster="some-other-cluster", now=LATER)  # the account no longer has the audited one
    with pytest.raises(UnknownCluster) as raised:
        _audit(gone, audited.cluster, store)
    assert "standing verdicts of its 2 node(s) are closed" in str(raised.value) and CLUSTER_GONE in str(raised.value)

    after = _latest(store, audited.cluster)
    assert set(after) == set(before)
    for span in after.values():
        assert span.closed == CLUSTER_GONE and span.verdict is None
        assert span.audit_time == parse_time(LATER)
    now = parse_time(LATER)
    read = store.read(audited.cluster, None, now - timedelta(days=30), now)
    shown = render_markdown(read, audited.cluster, HistoryView(since=read.since, until=read.until,
                                                               actions=actions_by_node(read.spans)))
    assert shown.count(f"closed: {CLUSTER_GONE}") >= 2 and "REPLACE" in shown  # the earlier verdict kept, ended

    with pytest.raises(UnknownCluster) as again:  # the next run closes nothing twice
        _audit(HyperPodWorld(cluster="some-other-cluster", now=at(35)), audited.cluster, store)
    assert "closed" not in str(again.value)
    spans = store.read(audited.cluster, None, now - timedelta(days=30), parse_time(at(36))).spans
    assert sum(1 for s in spans if s.closed) == 2


def test_a_name_the_history_never_knew_is_only_an_unknown_cluster(tmp_path: Path) -> None:
    store = SqliteHistory(tmp_path)
    with pytest.raises(UnknownCluster) as raised:
        _audit(HyperPodWorld(cluster="some-other-cluster", now=LATER), "never-audited", store)
    assert "closed" not in str(raised.value)
    assert _latest(store, "never-audited") == {}


def test_a_closed_span_survives_the_deployed_store_and_a_recreated_cluster_starts_anew(tmp_path: Path) -> None:
    store = SqliteHistory(tmp_path)
    w = eks_world(["UnschedulablePendingReboot"])
    _audit(w, w.cluster, store)
    with pytest.raises(UnknownCluster):
        _audit(HyperPodWorld(cluster="some-other-cluster", now=LATER), w.cluster, store)
    (closed,) = _latest(store, w.cluster).values()
    assert _span_of_item(closed.cluster, closed.instance_id,
                         history_item(closed, "0")) == closed
    # the same name created again: its first audit is a new span, not an extension of the closed one
    again = eks_world(["UnschedulablePendingReboot"])
    again.raw["now"] = at(40)
    request = AuditRequest(cluster=w.cluster, mode="incident", since=parse_time(at(36)), until=parse_time(at(39)))
    run_audit(again.aws(), request, history=store)
    spans = store.read(w.cluster, None, parse_time(at(0)), parse_time(at(41))).spans
    assert [s.closed for s in sorted(spans, key=lambda s: s.audit_time)] == [None, CLUSTER_GONE, None]
