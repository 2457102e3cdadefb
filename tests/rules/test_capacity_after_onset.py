"""A capacity error read after the failure began is not branch B's evidence for it (RULES §0.5: Proven is a signal
before the failure with nothing competing; §8: report the branch whose evidence precedes the failure). The incident
(tests/fixtures/incidents/pcluster-p4d-fsx-network-saturation): FSx saturated before a job slowed; later, clustermgtd
could not launch a spot node of another queue (InsufficientInstanceCapacity). That launch neither leads the
headline nor keeps storage a hypothesis. Before the onset, or while a node is being replaced (RULES §8 A: a blocked
replacement, check B), the same error stays B's evidence."""

from __future__ import annotations

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import PClusterWorld, at

FS = "fs-0123456789abcdef0"
ONSET = at(9)  # the slowdown, as the operator states it
ICE = ("[slurm_plugin.instance_manager:_launch_instances] - ERROR - Encountered exception when launching instances "
       "for nodes (x1) ['spot-g5-dy-g5xl-1']: An error occurred (InsufficientInstanceCapacity) when calling the "
       "CreateFleet operation: We currently do not have sufficient g5.xlarge capacity in the Availability Zone you "
       "requested (us-west-2a).")


def _world(ice_at: str, *, vanished: bool = False) -> PClusterWorld:
    """One p5 node with a live kernel stream, its cluster's FSx saturated from 08:50, and the head node's clustermgtd
    logging a capacity error at `ice_at`; `vanished`: a second compute node's stream stops at 09:05 and the node
    list no longer returns it (a node being replaced)."""
    w = PClusterWorld(n_compute=1, launch=at(-48))
    w.healthy(w.compute[0], at(-48), at(12, 25))
    mgtd = w.other_log(w.head, "clustermgtd", at(-48), at(12, 25))
    w.stream(w.group, mgtd, events=[(ice_at, ICE)])
    if vanished:
        w.kernel_stream(w.group, "ip-10-0-77-7.i-0abcdef0123456789.system-messages", at(-48), at(9, 5), 600,
                        "ip-10-0-77-7")
    w.lustre(FS)
    w.fsx_metric(FS, "NetworkThroughputUtilization",
                 [[at(8, 50 + i) if i < 10 else at(9, i - 10), 97.0] for i in range(40)])
    return w


def _run(w: PClusterWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=at(8), until=at(11), onset=ONSET)


def _branch(result: Result, name: str) -> Branch:
    return next(b for b in result.branches if b.branch == name)


def test_a_capacity_error_after_the_onset_neither_leads_nor_keeps_storage_a_hypothesis() -> None:
    result = _run(_world(at(9, 40)))
    b, c = _branch(result, "B"), _branch(result, "C")
    assert (c.status, c.label) == ("Root cause", "Proven")
    assert result.headline.startswith("Root cause (Proven): branch C")
    assert b.status not in ("Root cause", "UNVERIFIED", "Contributing")
    # the error is still said, placed after the onset
    assert "InsufficientInstanceCapacity" in b.evidence and f"after the failure onset at {ONSET}" in b.evidence


def test_the_same_error_before_the_onset_is_evidence_for_b_and_competes() -> None:
    result = _run(_world(at(8, 40)))
    b, c = _branch(result, "B"), _branch(result, "C")
    assert b.status in ("Contributing", "UNVERIFIED") and "InsufficientInstanceCapacity" in b.evidence
    assert c.status != "Root cause"


def test_after_the_onset_while_a_node_is_being_replaced_the_error_stays_evidence_for_b() -> None:
    b = _branch(_run(_world(at(9, 40), vanished=True)), "B")
    assert b.status in ("Contributing", "UNVERIFIED") and "InsufficientInstanceCapacity" in b.evidence
