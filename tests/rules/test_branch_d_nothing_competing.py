"""RULES §0.5: `Proven` means a measured signal on the affected resource, before the failure, "with nothing
competing"; §8: "Confidence is High only when the root-cause signal is on the affected node, precedes the failure, and
nothing competes". A socket fallback before the hang on a node that also fell off the bus (Xid 79, hardware class,
before the hang) is not proven to be the cause: D stays a Hypothesis naming what competes.

The world (tests/rules/test_nccl_transport.py): two p5 nodes, EFA preconditions met, NCCL's socket transport on both
at 05:30, the watchdog's timeout at 07:15.
"""

from __future__ import annotations

from tests.helpers.worlds import at
from tests.rules.test_nccl_transport import P2P, SOCKET, branch, cluster, run


def test_a_socket_fallback_before_the_hang_with_a_hardware_xid_on_the_node_is_a_hypothesis() -> None:
    w = cluster([SOCKET, P2P])
    gpu = w.compute[0]
    w.stream(w.group, w.stream_name(gpu), events=[
        (at(6), f"{gpu.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, GPU has fallen off the bus.")])
    d = branch(run(w), "D")
    assert d.status != "Root cause" and d.label == "Hypothesis (to validate)" and d.confirming_measurement
    assert "competes" in d.evidence and gpu.instance_id in d.evidence and "Xid 79" in d.evidence


def test_the_same_fallback_with_nothing_competing_is_proven() -> None:
    d = branch(run(cluster([SOCKET, P2P])), "D")
    assert (d.status, d.label) == ("Root cause", "Proven")


def _fell_off_the_bus(w) -> str:
    gpu = w.compute[0]
    w.stream(w.group, w.stream_name(gpu), events=[
        (at(6), f"{gpu.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, GPU has fallen off the bus.")])
    return gpu.instance_id


def test_a_missing_self_rule_with_a_hardware_xid_before_the_hang_is_named_but_not_proven_the_cause() -> None:
    # no NCCL transport line: the hang and the security group's missing outbound self rule, and Xid 79 on one node
    w = cluster([], self_out=False)
    iid = _fell_off_the_bus(w)
    d = branch(run(w), "D")
    assert d.status != "Root cause" and d.label == "Hypothesis (to validate)" and d.confirming_measurement
    assert "precondition failure" in d.evidence and "competes" in d.evidence and iid in d.evidence


def test_a_socket_fallback_with_a_missing_self_rule_and_a_hardware_xid_is_not_proven_the_cause() -> None:
    w = cluster([SOCKET], self_out=False)
    iid = _fell_off_the_bus(w)
    d = branch(run(w), "D")
    assert d.status != "Root cause" and d.label == "Hypothesis (to validate)" and d.confirming_measurement
    assert "precondition failure" in d.evidence and "competes" in d.evidence and iid in d.evidence
