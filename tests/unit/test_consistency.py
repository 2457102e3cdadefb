"""The self-check as rules (RULES §11): a claim that breaks a rule is fixed or downgraded before the result is
emitted, and the outcome line says which. The report only renders it (issue #12)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuaudit.model.result import Branch, Call, ClusterRef, CoverageRow, NodeResult, Result, WindowOut
from gpuaudit.report.markdown import finalize
from gpuaudit.rules.consistency import check_consistency

T0 = datetime(2026, 9, 27, 10, tzinfo=UTC)
CALLS = [Call(service="ec2", operation="DescribeInstances", count=1)]


def result(**fields: Any) -> Result:
    base: dict[str, Any] = {
        "audit_id": "a1", "mode": "incident", "generated_at": T0, "confidence": "High",
        "headline": "No GPU errors in the window", "calls": CALLS,
        "cluster": ClusterRef(name="c1", kind="parallelcluster", region="us-west-2"),
        "window": WindowOut(start=T0, end=T0, source="user")}
    return Result(**(base | fields))


def gpu_node(**fields: Any) -> NodeResult:
    return NodeResult(**({"instance_id": "i-0123456789abcdef0", "status": "running", "gpu_count": 8,
                          "xid_status": "Measured"} | fields))


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
    checked = check_consistency(result(branches=[Branch(branch="A", status="Root cause", label="Hypothesis "
                                                        "(to validate)", evidence="Xid 79 on one node")]))
    assert (checked.branches[0].status, checked.branches[0].label) == ("UNVERIFIED", "Hypothesis (to validate)")
    assert "branch A: unproven root cause downgraded to UNVERIFIED" in checked.self_check


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
    from gpuaudit.model.evidence import ClusterInfo, Evidence, Window

    broken = result(nodes=[gpu_node(xid_status="Not observable")])  # not checked: the report must not fix it
    evidence = Evidence(mode="incident", cluster=ClusterInfo(name="c1", kind="parallelcluster", region="us-west-2"),
                        window=Window(start=T0, end=T0, source="user"), now=T0)
    rendered = finalize(broken, evidence)
    assert rendered.nodes[0].verdict is None and rendered.self_check == ""
