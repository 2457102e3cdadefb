"""What the driver and nvidia-smi print decides the verdict (issue #35 items 3, 4, 5), on worlds written from RULES:

- §6 rule 48 and §7: `SRAM Threshold Exceeded: Yes` (nvidia-smi pads the field) is REPLACE, whichever memory the 48
  named; the result says which of SRAM/DRAM was read and from where; an SM exception names no SRAM.
- §6 rule NVLink5: where NVIDIA's register decode is in the catalog, it decides the class and the verdict, and a
  printed word that disagrees is said in the decode's own words.
- §6: `NVRM: Xid (PCI:<bus> GPU-I:<n>): …` (a MIG GPU) keeps its bus and names the GPU instance.

The operator's question in each: "this node logged a GPU error: what do I do with it?".
"""

from __future__ import annotations

from typing import Any

from gpuaudit.model.result import NodeResult, Result
from tests.helpers.worlds import PClusterWorld, at, node_of

SINCE, UNTIL = at(9), at(11)
B200: dict[str, Any] = {"InstanceType": "p6-b200.48xlarge",
                        "GpuInfo": {"Gpus": [{"Name": "B200", "Manufacturer": "NVIDIA", "Count": 8}]},
                        "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 8}}}


def one_node(*lines: tuple[str, str], compute_type: str = "p5.48xlarge") -> tuple[PClusterWorld, Result, NodeResult]:
    """One compute node with proven kernel coverage; `lines` are (time, text after `kernel: `) in its stream."""
    w = PClusterWorld("train", n_compute=0)
    if compute_type == B200["InstanceType"]:
        w.section("ec2", "instance_types").append(B200)
    gpu = w.add_instance(instance_type=compute_type)
    stream = w.healthy(gpu, at(-48), at(12, 20))
    w.stream(w.group, stream, events=[(t, f"{gpu.hostname} kernel: {text}") for t, text in lines])
    result = w.audit("train", mode="incident", since=SINCE, until=UNTIL)
    return w, result, node_of(result, gpu.instance_id)


# nvidia-smi -q -d ECC, shipped by the customer's agent: the aggregate flag, padded as nvidia-smi prints it
SRAM_YES = "nvidia-smi[4121]:         SRAM Threshold Exceeded           : Yes"
SRAM_NO = "nvidia-smi[4121]:         SRAM Threshold Exceeded           : No"
XID48_FB = ("NVRM: Xid (PCI:0000:53:00): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has "
            "been detected on GPU in the framebuffer at partition 6, subpartition 0.")
XID48_L2 = "NVRM: Xid (PCI:0000:53:00): 48, pid=4242, name=python3, DBE (double bit error) ECC error in L2 cache"
XID48_SM = ("NVRM: Xid (PCI:0000:53:00): 48, pid=4242, name=python3, Graphics SM Global Exception on (GPC 2, TPC 0, "
            "SM 1): Multiple Warp Errors")


def test_padded_sram_threshold_flag_with_a_48_is_replace_naming_what_was_read_and_where() -> None:
    w, result, n = one_node((at(10, 2), XID48_FB), (at(10, 5), SRAM_YES))
    assert n.verdict == "REPLACE"
    evidence = n.verdict_evidence or ""
    assert "SRAM threshold exceeded" in evidence and "`SRAM Threshold Exceeded: Yes` read from nvidia-smi" in evidence
    assert f"{w.group} / {n.coverage[0].log_stream}" in evidence  # where the flag was read
    assert "the 48 itself: DRAM (the 48's message names `framebuffer`)" in evidence  # which memory the 48 named
    assert any(e.code is None and "SRAM Threshold Exceeded" in e.message for e in n.gpu_errors)  # the line it rests on
    assert any(a.startswith(f"Replace {n.instance_id}") for a in result.actions)
    assert not result.invariants_broken


def test_a_48_naming_an_sram_unit_with_the_flag_read_no_is_reboot_and_says_the_flag_was_read() -> None:
    _, _, n = one_node((at(10, 2), XID48_L2), (at(10, 5), SRAM_NO))
    assert n.verdict == "REBOOT"
    evidence = n.verdict_evidence or ""
    assert "rule 48: SRAM (the 48's message names `L2`)" in evidence
    assert "`SRAM Threshold Exceeded: No` read from nvidia-smi" in evidence and "check SRAM Threshold" not in evidence


def test_a_48_naming_an_sram_unit_without_the_flag_is_reboot_and_names_the_check() -> None:
    _, result, n = one_node((at(10, 2), XID48_L2))
    assert n.verdict == "REBOOT" and "SRAM Threshold Exceeded" in (n.verdict_evidence or "")
    assert "REPLACE" not in {x.verdict for x in result.nodes}


def test_a_48_with_only_sm_exception_text_is_not_sram_the_split_stays_unverified() -> None:
    _, result, n = one_node((at(10, 2), XID48_SM))
    assert n.verdict == "MONITOR"  # a held hypothesis: neither REPLACE, nor REBOOT as if SRAM (or DRAM)
    evidence = n.verdict_evidence or ""
    assert "split UNVERIFIED" in evidence and "rule 48: SRAM" not in evidence
    assert any("nvidia-smi -q -d ECC" in a for a in result.actions)


# NVLink5 on a Blackwell node: `(<IntrInfo> <error status> …)` are the registers NVIDIA's decode reads
PRINTED_NONFATAL = ("NVRM: Xid (PCI:0000:1b:00): 144, SAW_MVB Nonfatal XC0 i0 Link 03 (0x00000001 0x00000002 "
                    "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")
PRINTED_FATAL_DECODED_IGNORE = ("NVRM: Xid (PCI:0000:1b:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 "
                                "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")


def test_nvlink5_decode_saying_fatal_hardware_over_a_printed_nonfatal_is_a_hardware_reboot() -> None:
    _, result, n = one_node((at(10, 2), PRINTED_NONFATAL), compute_type="p6-b200.48xlarge")
    assert n.verdict == "REBOOT"
    (row,) = [e for e in n.gpu_errors if e.code == 144]
    assert row.class_ == "hardware"  # the decode's class, not the printed word's
    evidence = n.verdict_evidence or ""
    assert "Fatal, RESET_GPU, HW" in evidence
    assert "the line prints Nonfatal, the decode says Fatal (RESET_GPU)" in evidence
    assert {b.branch: b.status for b in result.branches}["A"] == "Root cause"


def test_nvlink5_decode_saying_ignore_over_a_printed_fatal_is_monitor_and_quotes_the_decode_right() -> None:
    _, result, n = one_node((at(10, 2), PRINTED_FATAL_DECODED_IGNORE), compute_type="p6-b200.48xlarge")
    assert n.verdict == "MONITOR"
    (row,) = [e for e in n.gpu_errors if e.code == 149]
    assert row.class_ == "informational"
    evidence = n.verdict_evidence or ""
    assert "Link Fatal, IGNORE, HW/SW" in evidence and "nonfatal" not in evidence.lower().replace("fatal/nonfatal", "")
    assert not any(a.startswith("Reboot") for a in result.actions)


MIG_94 = ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, name=python3, Contained: CE User Channel (0x9). "
          "RST: No, D-RST: No")


def test_a_mig_line_keeps_its_bus_names_the_gpu_instance_and_hands_the_process_over() -> None:
    _, result, n = one_node((at(10, 2), MIG_94))
    assert n.verdict == "LEAVE ALONE"
    (row,) = n.gpu_errors
    assert (row.code, row.pci, row.gpu_instance, row.compute_instance) == (94, "0000:01:00", 5, None)
    assert "on PCI 0000:01:00, MIG instance GPU-I:05" in (n.verdict_evidence or "")
    assert any(n.instance_id in a and "process python3, PID 7194" in a and "application owner" in a
               for a in result.actions)
