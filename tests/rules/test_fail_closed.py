"""Fail closed (RULES §0, §11): a claim holds only on evidence that was read. Each case is one read call
failing (or one source the rules must not ignore), on a small world written from RULES."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.model.result import Result
from tests.helpers.worlds import HyperPodWorld, Node, PClusterWorld, at, node_of

SINCE = at(6)


def branches(result: Result) -> dict[str, str]:
    return {b.branch: b.status for b in result.branches}


def hyperpod_with_app_xid() -> HyperPodWorld:
    w = HyperPodWorld(gpu_nodes=2)
    w.cluster_metrics(at(0), at(12, 30))
    for n in w.gpu:
        w.kernel_stream(w.group, f"{n.group}/{n.instance_id}", at(0), at(12, 30), host=n.hostname)
    w.hma_detection(w.gpu[0], at(8), code=31)
    return w


def test_list_cluster_nodes_denied_rules_out_nothing_and_keeps_the_nodes_the_logs_name() -> None:
    w = hyperpod_with_app_xid()
    w.fault("sagemaker", "ListClusterNodes", "AccessDeniedException")
    result = w.audit("hp-slurm", mode="incident", since=SINCE)
    status = branches(result)
    assert status["A"] != "Ruled out" and status["F"] != "Ruled out", result.branches
    listed = {n.instance_id for n in result.nodes}
    assert {n.instance_id for n in w.gpu} <= listed, "nodes named by the cluster's own streams must stay"
    assert any("ListClusterNodes" in g for g in result.visibility_gaps)
    assert "passed" not in (result.self_check or "") or status["A"] != "Ruled out"


def test_insights_denied_keeps_vanished_nodes_from_stream_listing_and_rules_out_nothing() -> None:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(0), at(12, 30))
    gone = w.next_node("p5.48xlarge", "compute")
    w.kernel_stream(w.group, f"{gone.hostname}.{gone.instance_id}.system-messages", at(0), at(9), host=gone.hostname)
    w.fault("logs", "StartQuery", "AccessDeniedException")
    result = w.audit(w.cluster, mode="incident", since=SINCE)
    ids = {n.instance_id for n in result.nodes}
    assert gone.instance_id in ids, "a node found only from its log stream must not vanish when Insights fails"
    assert node_of(result, gone.instance_id).xid_status == "Not observable"
    status = branches(result)
    assert status["A"] != "Ruled out" and status["F"] != "Ruled out"
    assert any("DescribeLogStreams" in c.operation for c in result.calls)


def hyperpod_with_hma_xid_48() -> tuple[HyperPodWorld, Node]:
    """One GPU node, kernel stream live, and the health agent's Xid 48 (no 171/172, no memory named)."""
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(0), at(12, 30))
    node = w.gpu[0]
    w.kernel_stream(w.group, f"{node.group}/{node.instance_id}", at(0), at(12, 30), host=node.hostname)
    w.hma_detection(node, at(8), code=48, reason="XidHardwareFailure")
    return w, node


def test_hma_reported_hardware_xid_is_never_ruled_out_for_branch_a() -> None:
    w, node = hyperpod_with_hma_xid_48()
    result = w.audit("hp-slurm", mode="incident", since=SINCE)
    n = node_of(result, node.instance_id)
    assert any(e.code == 48 and e.class_ == "hardware" for e in n.gpu_errors)
    assert branches(result)["A"] != "Ruled out", result.branches


def test_undescribable_types_are_classified_by_family_and_head_nodes_are_not_gpu_nodes() -> None:
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(0), at(12, 30))
    node = w.gpu[0]
    w.kernel_stream(w.group, f"{node.group}/{node.instance_id}", at(0), at(12, 30), host=node.hostname)
    w.fault("ec2", "DescribeInstanceTypes", "AccessDeniedException")
    result = w.audit("hp-slurm", mode="coverage", since=SINCE)
    controller = node_of(result, w.controller.instance_id)
    assert controller.gpu_count == 0, "an m5 is not accelerated, whatever DescribeInstanceTypes said"
    assert node_of(result, node.instance_id).gpu_count != 0
    assert "1 GPU node" in result.headline, result.headline
    assert any("instance family" in g for g in result.visibility_gaps), result.visibility_gaps


def test_capacity_reservations_denied_never_makes_p10_pass() -> None:
    w = HyperPodWorld(gpu_nodes=1)
    w.fault("ec2", "DescribeCapacityReservations", "UnauthorizedOperation")
    result = w.audit("hp-slurm", mode="preflight")
    checks = {c.id: c for c in result.checks}
    assert checks["P10"].result == "Not checked", checks["P10"]
    assert "describe-capacity-reservations" in checks["P10"].evidence


def test_a_held_xid_48_states_the_bar_for_replace() -> None:
    # RULES §6 rule 48: neither 171/172 nor a named memory → held as a hypothesis, the REPLACE bar stated
    w, node = hyperpod_with_hma_xid_48()
    n = node_of(w.audit("hp-slurm", mode="incident", since=SINCE), node.instance_id)
    assert n.verdict == "MONITOR"
    assert "bar for REPLACE: Xid 64 or a remap failure, `SRAM Threshold Exceeded: Yes`, or the 48 recurring on the " \
           "same bus" in (n.verdict_evidence or "")


def test_a_branch_with_evidence_and_no_leading_cause_is_the_hypothesis_not_contributing() -> None:
    # RULES §8: Contributing only beside a leading cause. Only NCCL fell back to sockets (branch D), nothing else.
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(0), at(12, 30))
    w.stream(w.group, stream, events=[(at(9), f"{node.hostname} python[77]: NCCL INFO Channel 00/0 : 0[0] -> 1[0] "
                                              "[send] via NET/Socket/0")])
    result = w.audit(w.cluster, mode="incident", since=SINCE)
    d = next(b for b in result.branches if b.branch == "D")
    assert d.status == "UNVERIFIED" and d.label == "Hypothesis (to validate)", d
    assert not any(b.status == "Contributing" for b in result.branches)
    assert result.headline.startswith("Leading hypothesis: branch D")


def test_p3_quota_read_but_absent_is_unverified_not_not_checked() -> None:
    # The quota listing was read (the call succeeded) and does not hold the instance type's quota
    w = HyperPodWorld(gpu_nodes=1)
    w.raw.setdefault("servicequotas", {})["quotas"] = [
        {"ServiceCode": "sagemaker", "QuotaCode": "L-0000TEST", "QuotaName": "some other quota", "Value": 4}]
    checks = {c.id: c for c in w.audit("hp-slurm", mode="preflight").checks}
    assert checks["P3"].result == "UNVERIFIED", checks["P3"]
    assert "not among the quotas read" in checks["P3"].evidence


def _refuse_queries(monkeypatch: pytest.MonkeyPatch, *markers: str) -> None:
    """Logs Insights refuses the queries whose text holds one of `markers` (a read of a batch); the others answer."""
    call = Aws.call

    def refusing(self: Aws, service: str, operation: str, **params: Any) -> dict[str, Any]:
        if operation == "StartQuery" and any(m in params.get("queryString", "") for m in markers):
            raise CallFailed("logs", "StartQuery", "AccessDeniedException", "not authorized to query")
        return call(self, service, operation, **params)

    monkeypatch.setattr(Aws, "call", refusing)


def _live_nodes() -> PClusterWorld:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(0), at(12, 30))
    return w


def test_a_kernel_streams_read_that_failed_proves_no_node_ships_no_kernel_lines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given live nodes whose kernel-streams query is refused, while the stream summary answers
    w = _live_nodes()
    _refuse_queries(monkeypatch, "kernel_lines")
    result = w.audit(w.cluster, since=SINCE)
    # Then no node is said to carry zero kernel lines or to ship "other logs, not kernel messages": the kernel lines
    # were not read, and the row says so
    assert any("kernel-streams" in g for g in result.visibility_gaps)
    for n in w.compute:
        (row,) = node_of(result, n.instance_id).coverage
        assert row.status == "Not observable" and row.kernel_lines_ever is None
        assert "ships other logs" not in (row.note or "") and "not read" in (row.note or "")


def test_a_stream_summary_that_failed_is_never_read_as_empty_hours(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given live nodes whose stream-summary query is refused, while the kernel streams answer
    w = _live_nodes()
    _refuse_queries(monkeypatch, "live_hours")
    result = w.audit(w.cluster, since=SINCE)
    # Then each kernel stream's hours are read by name instead (a detail query), and prove what they prove
    for n in w.compute:
        (row,) = node_of(result, n.instance_id).coverage
        assert row.status == "Measured" and row.empty_hours == [] and row.live_hours > 0


def test_a_stream_summary_and_detail_that_failed_list_no_empty_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the same nodes, with the stream-summary query and the detail queries by name both refused
    w = _live_nodes()
    _refuse_queries(monkeypatch, "live_hours", "@logStream in [")
    result = w.audit(w.cluster, since=SINCE)
    # Then no hour is listed as empty, no stream is said to have died, and liveness is not proven
    for n in w.compute:
        (row,) = node_of(result, n.instance_id).coverage
        assert row.status == "Not observable" and row.empty_hours == []
        assert "could not be read" in (row.note or "") and "DescribeLogStreams" not in (row.note or "")
        assert "not a query error" not in (row.note or "")


def test_per_stream_reads_that_failed_never_say_no_stream_names_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given both per-stream queries refused (the GPU lines answer)
    w = _live_nodes()
    _refuse_queries(monkeypatch, "live_hours", "kernel_lines")
    result = w.audit(w.cluster, since=SINCE)
    # Then no node is said to have no stream: what was not read may hold it
    for n in w.compute:
        rows = node_of(result, n.instance_id).coverage
        assert rows and all(r.status == "Not observable" for r in rows)
        assert not any("no stream names this node in the log groups searched" in (r.note or "") for r in rows)
