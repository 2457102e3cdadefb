"""RULES §8 D layer 4 lists failed deep health checks (`InstanceStress` includes EFA loopback, `InstanceConnectivity`
runs multi-node NCCL all_reduce), and the status rule: "Another layer-4 defect read (nodes of the job split across
subnets or AZs, a failed connectivity check) with layers 1–3 Not observable makes D `UNVERIFIED`, Hypothesis (to
validate), naming the defect and the layer-1 collection command as the confirming measurement — never `Not assessed`".

The world (tests/rules/test_hang_idle_gpus.py): a HyperPod Slurm cluster of two P5 nodes, EFA security group correct,
a job that hangs with an NCCL watchdog timeout, no NCCL INFO line anywhere, EFA counters not in CloudWatch (HyperPod).
"""

from __future__ import annotations

from tests.rules.test_hang_idle_gpus import SINCE, UNTIL, hung

FAILED = ("InstanceConnectivity: FAIL — NCCL all_reduce between ip-10-0-0-2 and ip-10-0-0-3 failed: "
          "bus bandwidth 0.0 GB/s")


def _d(world):
    result = world.audit("hp-slurm", mode="incident", since=SINCE, until=UNTIL)
    return result, next(b for b in result.branches if b.branch == "D")


def test_a_failed_connectivity_check_with_layers_1_to_3_not_observable_is_d_unverified() -> None:
    result, d = _d(hung(deep_health_line=FAILED))
    assert (d.status, d.label) == ("UNVERIFIED", "Hypothesis (to validate)")
    assert "InstanceConnectivity: FAIL" in d.evidence and "DeepHealthCheckResults/" in d.evidence  # the defect named
    assert "NCCL_DEBUG=INFO" in (d.confirming_measurement or "")  # the layer-1 collection command
    assert result.headline.startswith("Leading hypothesis: branch D")


def test_a_clean_deep_health_stream_is_named_and_d_stays_not_assessed() -> None:
    _, d = _d(hung(deep_health_line="InstanceConnectivity: PASS — NCCL all_reduce bus bandwidth 370.2 GB/s"))
    assert d.status == "Not assessed"
    assert "deep health checks (InstanceConnectivity) — Cleared" in d.evidence
