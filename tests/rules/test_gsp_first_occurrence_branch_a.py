"""A first GSP fault (Xid 119/120) is a hardware-class Xid at the REBOOT bar (RULES §7 lists 119 and 120 there; only
their recurrence after a reboot is a driver/firmware fault, §6): before the failure it is branch A's Proven cause, and
after it, like any hardware signal, it is not (§0.5). The catalog classes 119/120 driver-config for the recurrence, so
branch A must time the routed cause itself, not only the hardware-class rows.

The world: one ParallelCluster GPU node with a live kernel stream, a job whose NCCL watchdog times out at 09:30."""

from __future__ import annotations

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import at, one_node_world

SINCE, UNTIL = at(8), at(11)
TIMEOUT = ("[rank0]:[E1001 09:30:00.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE) ran for 600012 milliseconds before timing out.")
GSP = ("NVRM: Xid (PCI:0000:53:00): 119, pid=2211, name=python3, Timeout after 6s of waiting for RPC response from "
       "GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).")


def audit(gsp_at: str) -> Result:
    w = one_node_world()
    node = w.compute[0]
    w.stream(w.group, f"{node.hostname}.{node.instance_id}.system-messages",
             events=[(gsp_at, f"{node.hostname} kernel: {GSP}")])
    w.stream(f"/aws/batch/{w.cluster}-jobs", "train/run-7", events=[(at(9, 30), TIMEOUT)])
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)


def branch_a(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "A")


def test_a_first_gsp_fault_before_the_hang_is_branch_a_proven() -> None:
    result = audit(at(9, 10))
    assert [n.verdict for n in result.nodes if n.role == "compute"] == ["REBOOT"]
    a = branch_a(result)
    assert (a.status, a.label) == ("Root cause", "Proven")


def test_a_first_gsp_fault_after_the_hang_is_not_proven() -> None:
    result = audit(at(9, 50))
    a = branch_a(result)
    # alone, the unproven branch leads as the hypothesis (RULES §8), never Root cause
    assert a.status == "UNVERIFIED" and a.label == "Hypothesis (to validate)"
    assert "is after" in a.evidence
