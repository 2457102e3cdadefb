"""RULES §8 D layer 1 ("NCCL transport, from NCCL INFO/NCCL WARN lines in any source … No NCCL lines → Not
observable") is read per node, and §8's status rule says `Ruled out` needs evidence that was read and came back clean.
Clean NCCL lines on one node of the job say nothing about the other: with a GPU node whose transport was never read,
D is not ruled out, and the row names that node and the collection command.
"""

from __future__ import annotations

from tests.rules.test_nccl_transport import JOB_GROUP, OFI, P2P, branch, cluster, run


def test_clean_nccl_lines_on_one_node_do_not_rule_d_out_on_a_node_with_none() -> None:
    # Given two p5 nodes of one job, EFA preconditions met, the hang line read, and NCCL's transport lines (EFA,
    # P2P: both good) written by the first node only
    w = cluster([OFI, P2P])
    first, second = w.compute
    job = next(g for g in w.section("logs", "groups") if g["logGroupName"] == JOB_GROUP)
    for s in job["streams"]:
        s["events"] = [e for e in s["events"] if "NCCL INFO" not in e[1] or e[1].startswith(f"{first.hostname}:")]
    d = branch(run(w), "D")
    # Then D is not cleared: the second node's transport is Not observable, named with what to collect
    assert d.status == "Not assessed"
    assert second.instance_id in d.evidence and "Not observable" in d.evidence
    assert "NCCL_DEBUG=INFO" in d.evidence
    assert f"{first.instance_id}: EFA/OFI (good)" in d.evidence  # what was read clean is still said


def test_clean_nccl_lines_on_every_node_rule_d_out() -> None:
    assert branch(run(cluster([OFI, P2P])), "D").status == "Ruled out"
