"""RULES §6 rule 48: "decide which memory faulted before anything else … Neither → the split is UNVERIFIED: report
the 48, say the split could not be determined from the log, name the check that settles it". The incident
(tests/fixtures/incidents/pcluster-p4d-ubuntu-xid64-remap-failure): an older-form 48 (`DBE (0x00000002)`) then Xid
64 on the same bus. The 64 decides REPLACE on its own (§7), and the 48's undetermined split is still said, with its
check — it was only "also on the node: Xid 48"."""

from __future__ import annotations

from gpuaudit.model.result import NodeResult
from tests.helpers.worlds import PClusterWorld, at, node_of

XID48_BARE = "NVRM: Xid (PCI:0000:10:1c): 48, pid='<unknown>', name=<unknown>, DBE (0x00000002)"
XID48_FB = ("NVRM: Xid (PCI:0000:10:1c): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has "
            "been detected on GPU in the framebuffer at partition 6, subpartition 0.")
XID64 = "NVRM: Xid (PCI:0000:10:1c): 64, pid='<unknown>', name=<unknown>, Row Remapper: Failed to remap row"


def _node(*lines: tuple[str, str]) -> NodeResult:
    """One p4d compute node with proven kernel coverage; `lines` are (time, text after `kernel: `)."""
    w = PClusterWorld("ft", n_compute=0)
    gpu = w.add_instance(instance_type="p4d.24xlarge")
    stream = w.healthy(gpu, at(-48), at(12, 20))
    w.stream(w.group, stream, events=[(t, f"{gpu.hostname} kernel: {text}") for t, text in lines])
    return node_of(w.audit("ft", mode="incident", since=at(9), until=at(11)), gpu.instance_id)


def test_a_64_after_a_48_of_undetermined_memory_is_replace_and_still_says_the_split_and_its_check() -> None:
    n = _node((at(10, 2), XID48_BARE), (at(10, 2), XID64))
    evidence = n.verdict_evidence or ""
    assert n.verdict == "REPLACE"
    assert "DRAM/SRAM split could not be determined" in evidence and "nvidia-smi -q -d ECC" in evidence


def test_a_48_naming_the_framebuffer_before_a_64_adds_no_split_sentence() -> None:
    n = _node((at(10, 2), XID48_FB), (at(10, 2), XID64))
    assert n.verdict == "REPLACE"
    assert "could not be determined" not in (n.verdict_evidence or "")
