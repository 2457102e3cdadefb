"""What changed since the last audit, judged without I/O (rules/what_changed.py): a Result against a recorded state
given as a plain mapping, no table, no topic, no clock. Fail closed (RULES §0): a verdict, coverage or a check
holds only on evidence that was read, so an audit that read less than the one that recorded a state can neither
clear it nor be told a recovery; only what it did read can replace the state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuaudit.model.changes import CODE_NOT_RECHECKED, COVERAGE_LOST, NEW_VERDICT, NOT_RECHECKED, REPLACE
from gpuaudit.model.history import HistoryRead, HistorySpan
from gpuaudit.model.result import Check, ClusterRef, CoverageRow, NodeResult, Result, WindowOut
from gpuaudit.rules.what_changed import StateWrite, compare, previous_state, read_gaps

T0 = datetime(2026, 9, 27, 10, tzinfo=UTC)
IID = "i-0123456789abcdef0"
MEASURED = CoverageRow(log_group="/aws/parallelcluster/c1-202609010000", log_stream=f"ip-1.{IID}.system-messages",
                       status="Measured")
# A source this audit could not read, as Gap.prose says it (the numbers differ from run to run)
THROTTLED = ("Not checked: logs StartQuery failed (ThrottlingException: Rate exceeded, request 41) — the kernel "
             "lines of 3 log groups")


def result(audit_id: str = "a1", **fields: Any) -> Result:
    base: dict[str, Any] = {
        "audit_id": audit_id, "mode": "coverage", "generated_at": T0, "confidence": "High",
        "headline": "No GPU errors in the window",
        "cluster": ClusterRef(name="c1", kind="parallelcluster", region="us-west-2"),
        "window": WindowOut(start=T0, end=T0, source="user")}
    return Result(**(base | fields))


def gpu_node(**fields: Any) -> NodeResult:
    base: dict[str, Any] = {"instance_id": IID, "status": "running", "gpu_count": 8, "xid_status": "Measured",
                            "coverage": [MEASURED]}
    return NodeResult(**(base | fields))


def recorded(writes: list[StateWrite]) -> dict[str, dict[str, str]]:
    """The state the next audit compares with, as a store gives it back: each written item's attributes."""
    return {w.sk: dict(w.attrs) for w in writes}


def test_a_first_replace_is_a_new_verdict_and_recorded_for_the_next_audit() -> None:
    first = result(nodes=[gpu_node(verdict="REPLACE", verdict_evidence="Xid 79 at 09:12")])
    comparison = compare(first, {})
    (change,) = comparison.records
    assert (change.kind, change.code, change.node) == (REPLACE, NEW_VERDICT, IID)
    (write,) = comparison.writes
    assert write.sk == f"NODE#{IID}" and write.attrs["verdict"] == "REPLACE" and write.attrs["audit_id"] == "a1"
    assert not write.expires


def test_the_same_state_again_says_nothing_and_writes_nothing() -> None:
    audited = result(nodes=[gpu_node(verdict="REPLACE", verdict_evidence="Xid 79 at 09:12")])
    again = compare(audited.model_copy(update={"audit_id": "a2"}), recorded(compare(audited, {}).writes))
    assert again.records == [] and again.writes == []


def test_coverage_lost_on_a_complete_read_is_said() -> None:
    before = recorded(compare(result(nodes=[gpu_node(verdict="LEAVE ALONE")]), {}).writes)
    blind = result("a2", nodes=[gpu_node(xid_status="Not observable", verdict="NOT OBSERVABLE", coverage=[])])
    codes = {c.code for c in compare(blind, before).records}
    assert COVERAGE_LOST in codes


def test_an_audit_that_read_less_never_clears_a_verdict_and_says_so_once() -> None:
    # Given a REBOOT recorded by a complete audit
    before = recorded(compare(result(nodes=[gpu_node(verdict="REBOOT", verdict_evidence="Xid 79")]), {}).writes)
    # When an audit that could not read the logs sees the node Not observable
    unread = result("a2", visibility_gaps=[THROTTLED],
                    nodes=[gpu_node(xid_status="Not observable", verdict="NOT OBSERVABLE", coverage=[])])
    first = compare(unread, before)
    # Then no recovery and no coverage loss: the REBOOT stands, marked not re-checked, said once
    (change,) = first.records
    assert (change.kind, change.code, change.was) == (NOT_RECHECKED, CODE_NOT_RECHECKED, "REBOOT")
    (write,) = first.writes
    assert write.attrs["verdict"] == "REBOOT" and write.attrs["unchecked"] == "a2"
    later = compare(unread.model_copy(update={"audit_id": "a3"}), {**before, **recorded(first.writes)})
    assert later.records == []


def test_read_gaps_are_the_same_for_the_same_source_whatever_the_numbers() -> None:
    other_run = THROTTLED.replace("request 41", "request 97").replace("3 log groups", "4 log groups")
    assert read_gaps(result(visibility_gaps=[THROTTLED])) == read_gaps(result(visibility_gaps=[other_run]))
    # a capability limit is an observation of the world, not a gap of the audit
    assert read_gaps(result(visibility_gaps=["No EFA counters on this instance type"])) == frozenset()


def test_a_check_that_was_not_read_leaves_a_recorded_fail_standing() -> None:
    failing = Check(id="P4", title="Automatic recovery on", result="FAIL", evidence="NodeRecovery = None")
    before = recorded(compare(result(mode="preflight", checks=[failing]), {}).writes)
    unread = failing.model_copy(update={"result": "Not checked", "evidence": "DescribeCluster denied"})
    comparison = compare(result("a2", mode="preflight", checks=[unread]), before)
    assert comparison.records == [] and [w for w in comparison.writes if w.sk == "CHECK#P4"] == []


def test_a_node_gone_from_the_cluster_is_recorded_gone_and_expires() -> None:
    before = recorded(compare(result(nodes=[gpu_node(verdict="REPLACE", verdict_evidence="Xid 79")]), {}).writes)
    comparison = compare(result("a2", nodes=[]), before)
    (change,) = comparison.records
    assert change.node == IID and change.was == "REPLACE" and "not a recovery" in change.what
    (write,) = comparison.writes
    assert write.attrs["gone"] == "a2" and write.expires


def test_an_audit_narrowed_to_other_nodes_says_nothing_of_the_nodes_it_did_not_judge() -> None:
    """An Xid watch audit judges the nodes its lines name (issue #51): a REPLACE recorded on another node is neither
    gone from the cluster nor cleared, and stays recorded; a node it did judge is compared as ever."""
    other = "i-0fedcba9876543210"
    before = recorded(compare(result(nodes=[gpu_node(verdict="REPLACE", verdict_evidence="Xid 79")]), {}).writes)
    narrowed = compare(result("a2", nodes=[gpu_node(instance_id=other, verdict="REBOOT", verdict_evidence="Xid 79")],
                              narrowed_to=[other]), before)
    assert [(c.node, c.code) for c in narrowed.records] == [(other, NEW_VERDICT)]
    assert [w.sk for w in narrowed.writes] == [f"NODE#{other}"]
    # the same result as a whole-cluster audit: the REPLACE node is gone (the rule the narrowing holds back)
    whole = compare(result("a2", nodes=[gpu_node(instance_id=other, verdict="REBOOT", verdict_evidence="Xid 79")]),
                    before)
    assert {c.node for c in whole.records} == {other, IID}


def test_the_local_history_is_the_previous_state_of_the_same_mode_only() -> None:
    def span(audit_id: str, mode: str, verdict: str) -> HistorySpan:
        return HistorySpan(cluster="c1", instance_id=IID, mode=mode, audit_id=audit_id, last_audit_id=audit_id,
                           audit_time=T0, through=T0, xid_status="Measured", verdict=verdict)

    read = HistoryRead(store="sqlite test", since=T0, until=T0,
                       spans=[span("c0", "coverage", "REBOOT"), span("i0", "incident", "REPLACE")])
    assert previous_state(result("a1"), read)[f"NODE#{IID}"]["verdict"] == "REBOOT"
    assert previous_state(result("a1"), None) == {}
