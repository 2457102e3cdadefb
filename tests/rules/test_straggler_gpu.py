"""Straggler GPU (issue #53 item 9), from RULES §8: "one GPU clearly below its peers in the same job (CWAgent per
`index`: SM clock, temperature, power, PCIe width/gen) → MONITOR, REBOOT if it persists; Hypothesis unless it lines
up with the slowdown".

The operator's case: a ParallelCluster job on two p5.48xlarge nodes (16 H100s) runs slow from about 06:00; the
CloudWatch agent publishes `nvidia_gpu` metrics (namespace CWAgent, per `index`). Kernel logs are live and clean.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuaudit.model.result import NodeResult, Result
from tests.helpers.worlds import Node, PClusterWorld, at, node_of

SINCE, UNTIL = at(6), at(10)
SM = "nvidia_smi_clocks_current_sm"
WIDTH = "nvidia_smi_pcie_link_width_current"
Value = Callable[[Node, int, int], float]  # (node, GPU index, minute since 05:00) → value


def _world(metric: str, value: Value) -> PClusterWorld:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    for k, n in enumerate(w.compute):
        # the agent names one node by its host name and the other by an appended InstanceId
        who = {"Name": "host", "Value": n.hostname} if k == 0 else {"Name": "InstanceId", "Value": n.instance_id}
        for index in range(8):
            w.section("cloudwatch", "metrics").append({
                "Namespace": "CWAgent", "MetricName": metric,
                "Dimensions": [who, {"Name": "index", "Value": str(index)}, {"Name": "name", "Value": "NVIDIA H100"}],
                "Datapoints": [[at(5, m), value(n, index, m)] for m in range(0, 330, 10)]})
    return w


TARGET = PClusterWorld(n_compute=2).compute[0].instance_id  # every build numbers its nodes alike


def _slow(*, from_minute: int, to_minute: int = 10_000, low: float = 1100.0, usual: float = 1980.0) -> Value:
    """GPU index 3 of the first compute node at `low` from `from_minute` to `to_minute` (minutes since 05:00)."""
    return lambda n, i, m: low if n.instance_id == TARGET and i == 3 and from_minute <= m < to_minute else usual


def _run(w: PClusterWorld, onset: str | None = None) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL, onset=onset)


def _straggler(w: PClusterWorld, result: Result) -> NodeResult:
    return node_of(result, w.compute[0].instance_id)


def test_a_gpu_clock_below_its_peers_every_hour_persists_and_is_a_reboot_hypothesis() -> None:
    w = _world(SM, _slow(from_minute=60))
    result = _run(w)
    node = _straggler(w, result)
    assert node.verdict == "REBOOT"
    assert node.verdict_evidence is not None
    assert "GPU index 3" in node.verdict_evidence and "SM clock" in node.verdict_evidence
    assert "1100" in node.verdict_evidence and "1980" in node.verdict_evidence
    assert "Hypothesis (to validate)" in node.verdict_evidence and "nvidia-smi" in node.verdict_evidence
    assert node_of(result, w.compute[1].instance_id).verdict is None  # its peers are not blamed
    a = next(b for b in result.branches if b.branch == "A")  # a GPU below its peers is never hardware Ruled out
    assert a.status == "UNVERIFIED" and "GPU index 3" in a.evidence


def test_one_hour_below_is_monitor() -> None:
    w = _world(SM, _slow(from_minute=120, to_minute=180))
    node = _straggler(w, _run(w))
    assert node.verdict == "MONITOR"
    assert node.verdict_evidence is not None and "Hypothesis (to validate)" in node.verdict_evidence


def test_below_in_the_hour_of_the_slowdown_lines_up_and_is_proven() -> None:
    w = _world(SM, _slow(from_minute=120, to_minute=180))
    node = _straggler(w, _run(w, onset=at(7, 20)))
    assert node.verdict_evidence is not None and "Proven: it lines up with the slowdown" in node.verdict_evidence


def test_a_narrower_pcie_link_than_its_peers_is_a_straggler() -> None:
    w = _world(WIDTH, lambda n, i, m: 8.0 if n.instance_id == TARGET and i == 5 else 16.0)
    node = _straggler(w, _run(w))
    assert node.verdict == "REBOOT"
    assert node.verdict_evidence is not None and "GPU index 5" in node.verdict_evidence
    assert "PCIe link width 8" in node.verdict_evidence


def test_half_the_gpus_lower_is_the_job_not_a_straggler() -> None:
    w = _world(SM, lambda n, i, m: 1100.0 if i < 4 else 1980.0)
    result = _run(w)
    assert all(node_of(result, n.instance_id).verdict is None for n in w.compute)


def test_metrics_not_read_are_a_gap_never_a_clean_peer_check() -> None:
    w = _world(SM, lambda n, i, m: 1980.0)
    w.fault("cloudwatch", "ListMetrics", "AccessDeniedException")
    result = _run(w)
    assert any("CWAgent per-GPU metrics not read" in g for g in result.visibility_gaps)
