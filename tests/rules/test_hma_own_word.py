"""The health agent's own word (RULES §7, issue #21 item 3): a detection that asks to replace the node is a
REPLACE, one that asks for a reboot a REBOOT, named as the agent writes it, with the replace step in the actions.

Worlds are written from RULES and the operator's question ("the agent says replace this node: do we?"), not from
what the code prints.
"""

from __future__ import annotations

from typing import Any

from gpuaudit.model.result import Result
from tests.helpers.worlds import HyperPodWorld, at, node_of

SINCE, UNTIL = at(6), at(10)


def audited(**detection: Any) -> tuple[HyperPodWorld, Result]:
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    w.hma_detection(w.gpu[0], at(7, 3), **detection)
    return w, w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)


def test_terminate_condition_without_an_xid_line_is_replace_with_the_replace_step() -> None:
    w, result = audited(code=None, reason="NvidiaErrorTerminate", condition="NvidiaErrorTerminate",
                        message="GPU has fallen into an unrecoverable state. Please Replace the Faulty Node")
    flagged = node_of(result, w.gpu[0].instance_id)
    assert flagged.verdict == "REPLACE"
    evidence = flagged.verdict_evidence or ""
    assert "HealthMonitoringAgentDetectionEvent" in evidence and "condition NvidiaErrorTerminate" in evidence
    assert f"SagemakerHealthMonitoringAgent/gpu-workers/{w.gpu[0].instance_id}" in evidence
    # the line it rests on is in the GPU errors table, named as the agent writes it
    (row,) = flagged.gpu_errors
    assert row.code is None and row.source == "hma" and "NvidiaErrorTerminate" in (row.meaning or "")
    assert any("batch-replace-cluster-nodes" in a and w.gpu[0].instance_id in a
               for a in result.actions)
    assert "HealthMonitoringAgentDetectionEvent" in result.report_markdown
    # the other node is untouched
    assert node_of(result, w.gpu[1].instance_id).verdict is None


def test_hardware_failure_recommending_replace_over_an_xid_is_replace() -> None:
    w, result = audited(code=79, reason="XidHardwareFailure", recommendation="Replace")
    assert node_of(result, w.gpu[0].instance_id).verdict == "REPLACE"


def test_reboot_condition_is_reboot_not_replace() -> None:
    w, result = audited(code=119, reason="XidHardwareFailure", condition="NvidiaErrorReboot")
    flagged = node_of(result, w.gpu[0].instance_id)
    assert flagged.verdict == "REBOOT"
    assert any("batch-reboot-cluster-nodes" in a for a in result.actions)


def test_an_application_detection_asks_for_nothing() -> None:
    # XidUserAppError is the agent saying the application caused it (RULES §7 LEAVE ALONE), whatever else it says
    w, result = audited(code=31, reason="XidUserAppError", recommendation="Replace")
    assert node_of(result, w.gpu[0].instance_id).verdict == "LEAVE ALONE"


def test_a_gpu_signal_makes_a_gpu_node_whatever_the_type_profile_says() -> None:
    """DescribeInstanceTypes without GpuInfo (a new or odd type) must not leave branch A Not assessed beside a
    hardware verdict: the node's own Xid proves its GPU (one story, RULES §8)."""
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    for t in w.section("ec2", "instance_types"):
        t.pop("GpuInfo", None)
    w.cluster_metrics(at(-10), at(12, 25))
    w.hma_detection(w.gpu[0], at(7, 3), code=79, reason="XidHardwareFailure", recommendation="Replace")
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert node_of(result, w.gpu[0].instance_id).verdict == "REPLACE"
    assert {b.branch: b.status for b in result.branches}["A"] == "Root cause"
    assert not result.invariants_broken


def test_a_replaced_nodes_detection_still_counts_and_names_its_replacement() -> None:
    """HyperPod gives a replaced node a new instance ID: the old node's detection (its HMA stream) still counts
    for the window, and the old ID is named beside the node that replaced it (RULES §5.7)."""
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    old = w.gpu[0]
    w.hma_detection(old, at(7, 3), code=None, reason="NvidiaErrorTerminate", condition="NvidiaErrorTerminate",
                    message="Please Replace the Faulty Node")
    w.described["Nodes"] = [n for n in w.described["Nodes"] if n["InstanceId"] != old.instance_id]
    new = w.add_node("gpu-workers", "ml.p5.48xlarge", launch=at(7, 40))  # HyperPod's replacement, new ID
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    gone = node_of(result, old.instance_id)
    assert gone.discovered_by == "log-streams" and gone.verdict == "REPLACE"  # the detection still counts
    assert f"likely replaced by {new.instance_id}" in (gone.service_action or "")
    assert f"likely the replacement of {old.instance_id}" in (node_of(result, new.instance_id).service_action or "")


def test_an_xid_just_before_the_window_that_decides_the_verdict_is_in_the_table() -> None:
    """The GPU lines are read from 30 min before the window: a hardware Xid there that decides the verdict must
    be a row of the GPU errors table too (one story), said to be before the window."""
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    w.hma_detection(w.gpu[0], at(5, 45), code=79, reason="XidHardwareFailure", recommendation="Reboot")
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)  # window from 06:00
    n = node_of(result, w.gpu[0].instance_id)
    assert n.verdict == "REBOOT" and not result.invariants_broken
    (row,) = n.gpu_errors
    assert row.code == 79 and "before the window" in (row.meaning or "")
