"""The self-check as rules (RULES §11): a claim that breaks a rule is fixed or downgraded before the result is
emitted, and the outcome line says which. The report only renders it (issue #12)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuaudit.model.evidence import ClusterInfo, Evidence, Gap, NodeInfo, StreamActivity, Window
from gpuaudit.model.result import (
    Branch,
    Call,
    Check,
    ClusterRef,
    CoverageRow,
    GpuError,
    NodeResult,
    Result,
    WindowOut,
)
from gpuaudit.report.markdown import finalize
from gpuaudit.rules import consistency
from gpuaudit.rules.what_changed import compare
from gpuaudit.writes.sinks import alert_message

T0 = datetime(2026, 9, 27, 10, tzinfo=UTC)
CALLS = [Call(service="ec2", operation="DescribeInstances", count=1)]


def result(**fields: Any) -> Result:
    base: dict[str, Any] = {
        "audit_id": "a1", "mode": "incident", "generated_at": T0, "confidence": "High",
        "headline": "No GPU errors in the window", "calls": CALLS,
        "cluster": ClusterRef(name="c1", kind="parallelcluster", region="us-west-2"),
        "window": WindowOut(start=T0, end=T0, source="user")}
    return Result(**(base | fields))


IID = "i-0123456789abcdef0"
MEASURED = CoverageRow(log_group="/aws/parallelcluster/c1-202609010000", log_stream=f"ip-1.{IID}.system-messages",
                       status="Measured")


def gpu_node(**fields: Any) -> NodeResult:
    return NodeResult(**({"instance_id": IID, "status": "running", "gpu_count": 8, "xid_status": "Measured",
                          "coverage": [MEASURED]} | fields))


def evidence(**fields: Any) -> Evidence:
    base: dict[str, Any] = {
        "mode": "incident", "cluster": ClusterInfo(name="c1", kind="parallelcluster", region="us-west-2"),
        "window": Window(start=T0, end=T0, source="user"), "now": T0,
        "capacity_reservations": [], "cloudtrail": [],
        "cloudtrail_complete": True, "hma_streams": []}
    return Evidence(**(base | fields))


def check_consistency(given: Result, ev: Evidence | None = None) -> Result:
    """Judged against the Evidence the result's own nodes came from, unless a case gives its own."""
    return consistency.check_consistency(given, ev or evidence(
        nodes=[NodeInfo(instance_id=n.instance_id, status=n.status) for n in given.nodes]))


def test_a_consistent_result_passes_unchanged() -> None:
    given = result(nodes=[gpu_node(verdict="LEAVE ALONE", verdict_evidence="no Xid on proven coverage")])
    checked = check_consistency(given)
    assert checked.self_check == "Self-check: passed — every claim rests on evidence read in this run"
    assert checked.model_dump(exclude={"self_check"}) == given.model_dump(exclude={"self_check"})


def test_an_unproven_gpu_node_without_verdict_becomes_not_observable() -> None:
    checked = check_consistency(result(nodes=[gpu_node(xid_status="Not observable")]))
    assert checked.nodes[0].verdict == "NOT OBSERVABLE"
    assert "1 claim(s) fixed or downgraded" in checked.self_check


def test_an_unproven_root_cause_is_downgraded_to_unverified() -> None:
    checked = check_consistency(result(branches=[Branch(branch="B", status="Root cause", label="Hypothesis "
                                                        "(to validate)", evidence="Capacity Block ended")]))
    assert (checked.branches[0].status, checked.branches[0].label) == ("UNVERIFIED", "Hypothesis (to validate)")
    assert "branch B: unproven root cause downgraded to UNVERIFIED" in checked.self_check


def test_hardware_in_the_headline_needs_a_replace_or_reboot_verdict() -> None:
    checked = check_consistency(result(headline="Hardware failure on the cluster"))
    assert checked.headline == "GPU signal on the cluster"


def test_an_hma_row_naming_another_stream_is_not_observable() -> None:
    row = CoverageRow(log_group="/aws/sagemaker/Clusters/c1/x", log_stream="i-0123456789abcdef0",
                      status="No HMA detections", source_kind="hma")
    checked = check_consistency(result(nodes=[gpu_node(verdict="LEAVE ALONE", verdict_evidence="e",
                                                       coverage=[row])]))
    assert checked.nodes[0].coverage[0].status == "Not observable"


def test_no_call_recorded_is_named() -> None:
    assert "no AWS call was recorded" in check_consistency(result(calls=[])).self_check


def test_the_report_renders_the_judged_result_without_changing_it() -> None:
    broken = result(nodes=[gpu_node(xid_status="Not observable")])  # not checked: the report must not fix it
    evidence = Evidence(mode="incident", cluster=ClusterInfo(name="c1", kind="parallelcluster", region="us-west-2"),
                        window=Window(start=T0, end=T0, source="user"), now=T0)
    rendered = finalize(broken, evidence)
    assert rendered.nodes[0].verdict is None and rendered.self_check == ""


# -- invariants: each broken on purpose, each named in the result and in the alert -------------------------
XID79 = GpuError(time=T0, code=79, pci="0000:53:00", class_="hardware", log_group=MEASURED.log_group,
                 log_stream=MEASURED.log_stream or "",
                 message="NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus")
XID31 = XID79.model_copy(update={"code": 31, "class_": "application", "message": "NVRM: Xid 31"})
RULED_OUT = {letter: Branch(branch=letter, status="Ruled out", evidence="clean") for letter in "ABF"}


@pytest.mark.parametrize(("given", "ev", "named"), [
    (result(branches=[RULED_OUT["A"]]), evidence(gaps=[Gap(kind="denied", service="sagemaker",
                                                             operation="ListClusterNodes", scope="node-list")]),
     "claims rest on reads: branch A Ruled out over an incomplete or empty node list"),
    (result(branches=[RULED_OUT["F"]], nodes=[]), evidence(nodes=[]),
     "claims rest on reads: branch F Ruled out over an incomplete or empty node list"),
    (result(nodes=[gpu_node(verdict="LEAVE ALONE", verdict_evidence="e")], branches=[RULED_OUT["B"]]),
     evidence(capacity_reservations=None), "claims rest on reads: branch B Ruled out without capacity"),
    (result(nodes=[gpu_node(verdict="LEAVE ALONE", verdict_evidence="e")],
            checks=[Check(id="P10", title="Capacity end alarmed", result="PASS", evidence="no block")]),
     evidence(capacity_reservations=None), "claims rest on reads: P10 PASS without capacity reservations read"),
    (result(nodes=[gpu_node(coverage=[MEASURED.model_copy(update={"status": "Not observable"})])]), None,
     "claims rest on reads: i-0123456789abcdef0 Measured with no Measured coverage row"),
    (result(nodes=[gpu_node(verdict="MONITOR", verdict_evidence="48 held", gpu_errors=[XID79])],
            branches=[RULED_OUT["A"]]), None, "no Ruled out beside a signal: branch A Ruled out beside a hardware"),
    (result(nodes=[gpu_node(verdict="LEAVE ALONE", verdict_evidence="app", gpu_errors=[XID31])],
            branches=[RULED_OUT["F"]]), None, "no Ruled out beside a signal: branch F Ruled out beside an application"),
    (result(nodes=[gpu_node(verdict="REBOOT", verdict_evidence="79", gpu_errors=[XID79])],
            headline="No GPU errors in the window, on proven coverage."), None,
     "one story: headline says no GPU errors while the GPU errors table lists"),
    (result(nodes=[gpu_node(verdict="REPLACE", verdict_evidence="recurring 79")]), None,
     "one story: i-0123456789abcdef0 REPLACE with no row in the GPU errors table"),
    (result(nodes=[gpu_node(verdict="REBOOT", verdict_evidence="79", gpu_errors=[XID79])],
            branches=[Branch(branch="A", status="Not assessed", evidence="x")]), None,
     "one story: branch A Not assessed beside REPLACE/REBOOT"),
    (result(nodes=[]), evidence(stream_activity=[StreamActivity(
        log_group=MEASURED.log_group, log_stream=MEASURED.log_stream or "", lines=3, live_hours=1)]),
     "no node dropped: node(s) read but missing from the result: i-0123456789abcdef0"),
])
def test_a_broken_invariant_fails_the_self_check_and_leads_the_alert(given: Result, ev: Evidence | None,
                                                                     named: str) -> None:
    checked = check_consistency(given, ev)
    assert any(b.startswith(named) for b in checked.invariants_broken), checked.invariants_broken
    assert checked.self_check.startswith("Self-check: FAILED")
    records = compare(checked, {}).records
    assert records[0].text.startswith("SELF-CHECK FAILED")
    alert = alert_message(checked, records)
    assert alert.startswith("Changes: 1 SELF-CHECK FAILED") and alert.split("\n")[4].startswith("- SELF-CHECK FAILED")


def test_every_invariant_has_a_case_that_breaks_it() -> None:
    names = {case.split(":")[0] for case in (
        "claims rest on reads", "no Ruled out beside a signal", "one story", "no node dropped")}
    assert names == set(consistency.INVARIANTS)
