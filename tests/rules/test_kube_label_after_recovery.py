"""RULES §7: an EKS node's health label and the logs that disagree are said; a node that turned Ready again after the
signal shows its state after recovery, and a healthy label there is said as such, not as a disagreement."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuaudit.model.planned_reads import KubeCondition, KubeNode
from gpuaudit.rules.kube_labels import HEALTH_LABEL, kube_disagreement

SIGNAL = datetime(2026, 11, 18, 9, 14, tzinfo=UTC)


def _node(ready_since: datetime) -> KubeNode:
    return KubeNode(name="hyperpod-i-0d2f6b8a4c1e39572", instance_id="i-0d2f6b8a4c1e39572",
                    labels={HEALTH_LABEL: "Schedulable"},
                    conditions=[KubeCondition(type="Ready", status="True", last_transition=ready_since)])


def test_a_healthy_label_on_a_node_ready_again_after_the_signal_is_its_state_after_recovery() -> None:
    # Given a REBOOT on an Xid at 09:14 and the node Ready again, labelled Schedulable, since 09:23
    said = kube_disagreement(_node(datetime(2026, 11, 18, 9, 23, tzinfo=UTC)), "REBOOT", SIGNAL)
    # Then the label is said as the node after its recovery, not as a disagreement
    assert said is not None and "after its recovery" in said
    assert "the sources disagree" not in said


def test_a_healthy_label_on_a_node_ready_since_before_the_signal_still_disagrees() -> None:
    # Given the same REBOOT, but the node Ready (and Schedulable) since before the Xid
    said = kube_disagreement(_node(datetime(2026, 11, 17, 22, 0, tzinfo=UTC)), "REBOOT", SIGNAL)
    # Then the sources disagree, said
    assert said is not None and "the sources disagree" in said
