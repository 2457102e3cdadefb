"""RULES §8 D layer 1 names three bad transports (`via NET/Socket/` on EFA instances, `via SHM/direct/direct` on an
NVSwitch node, `Using network IB` on EC2), and "D is Proven only with a layer 1–3 signal on the affected nodes before
the hang"; §0.5: Proven is a measured signal before the failure with nothing competing. Each bad line of layer 1 read
on the nodes before the hang, nothing competing, proves D — not only the socket fallback; the same line with no hang
read stays a Hypothesis.

The world (tests/rules/test_nccl_transport.py): two p5 nodes (NVSwitch, EFA), EFA preconditions met, the transport
lines at 05:30, the watchdog's timeout at 07:15 when `hang`.
"""

from __future__ import annotations

import pytest

from tests.rules.test_nccl_transport import IB, SHM, branch, cluster, run


@pytest.mark.parametrize("line", [SHM, IB], ids=["shm-on-nvswitch", "ib-on-ec2"])
def test_a_bad_transport_before_the_hang_with_nothing_competing_is_proven(line: str) -> None:
    d = branch(run(cluster([line])), "D")
    assert (d.status, d.label) == ("Root cause", "Proven")
    assert "before the hang at 2026-10-01T07:15:02Z" in d.evidence


@pytest.mark.parametrize("line", [SHM, IB], ids=["shm-on-nvswitch", "ib-on-ec2"])
def test_the_same_line_without_a_hang_read_is_a_hypothesis(line: str) -> None:
    d = branch(run(cluster([line], hang=False)), "D")
    assert d.status != "Root cause" and d.label == "Hypothesis (to validate)" and d.confirming_measurement
