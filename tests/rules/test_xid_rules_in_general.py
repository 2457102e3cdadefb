"""RULES §4/§6/§7 applied in general (issue #53 items 3–8), each from a world written from the rule:

3. a hardware-class Xid (48 with its DRAM qualifier 171) recurring on the same bus across a reboot, whichever
   form the kernel's boot banner takes → REPLACE, and the row keeps every occurrence and the reboot between;
4. every catalog row's action reaches the node (157: plan a replacement at the next maintenance window), and an
   unlisted code's text says the verdict its field carries;
5. NVLink5: where the register decode and the printed word would act differently, the decode decides and the
   node's row says they disagree, even when another Xid decides the node;
6. "fallen off the bus" in every driver form is the Xid 79 event, a lone line included;
7. the signal that decided the verdict leads the terminal XID column, NDJSON/CSV and event `xid_codes`, MCP and
   the alert.
(8, the current partial hour, is in tests/rules/test_coverage_rules.py beside the other window edges.)
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers.worlds import PClusterWorld, at, ms, node_of

from gpuaudit.agent.schema import node_row
from gpuaudit.collectors.log_queries import GPU_QUERY
from gpuaudit.model.evidence import GpuLine
from gpuaudit.model.timeutil import parse_time
from gpuaudit.report.alert import Change, lines_of
from gpuaudit.report.events import NEW_VERDICT, detail
from gpuaudit.report.records import records
from gpuaudit.report.terminal import summary
from gpuaudit.rules.node_lines import node_xids, parse_lines
from gpuaudit.rules.xid_lines import bus_key

CATALOG = "https://docs.nvidia.com/deploy/xid-errors/"


def one_gpu_node(*events: tuple[str, str]) -> tuple[PClusterWorld, str, str]:
    """One live GPU node (kernel stream from two days before the window to past now) with `events` in its stream."""
    w = PClusterWorld("train", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    w.stream(w.group, stream, events=[(t, f"{gpu.hostname} kernel: {m}") for t, m in events])
    return w, gpu.instance_id, stream


# -- 3. recurrence across a reboot ----------------------------------------------------------------------------
# A 48 whose own text names no memory: the 171 beside it says DRAM (RULES §6 rule 48).
XID48 = ("NVRM: Xid (PCI:0000:53:00): 48, pid=1234, name=python, "
         "An uncorrectable double bit error (DBE) has been detected")
XID171 = "NVRM: Xid (PCI:0000:53:00): 171, pid=1234, name=python, Uncorrectable DRAM error"
BANNERS = {"journald": "Linux version 6.8.0-1024-aws (buildd@lcy02-amd64-059) #25-Ubuntu SMP",
           "syslog": "[    0.000000] Linux version 6.8.0-1024-aws (buildd@lcy02-amd64-059) #25-Ubuntu SMP"}


@pytest.mark.parametrize("banner", BANNERS.values(), ids=BANNERS.keys())
def test_dram_48_recurring_on_its_bus_after_a_reboot_is_replace_and_its_row_keeps_every_occurrence(banner: str) -> None:
    # Given 48 + 171 on one bus, a reboot (the kernel's boot banner), then 48 + 171 again on that bus
    w, iid, _ = one_gpu_node((at(9, 10), XID48), (at(9, 10, 1), XID171), (at(9, 40), banner),
                             (at(10, 20), XID48), (at(10, 20, 1), XID171))
    # When the incident is audited
    node = node_of(w.audit("train", mode="incident", since=at(9), until=at(11)), iid)
    # Then the 48 recurred across a reboot: REPLACE (RULES §6 rule 48, §7), said with the reboot
    assert node.verdict == "REPLACE"
    assert "across a reboot" in (node.verdict_evidence or "")
    # and the row keeps the first and last occurrence, their count and the reboot between them
    (row,) = [e for e in node.gpu_errors if e.code == 48]
    assert (row.time, row.last_time, row.count) == (parse_time(at(9, 10)), parse_time(at(10, 20)), 2)
    assert row.reboots_between == [parse_time(at(9, 40))]


def test_the_gpu_lines_query_returns_the_boot_banner_in_its_syslog_form() -> None:
    # Given the banner behind the kernel's uptime stamp, as rsyslog ships it
    w, _, stream = one_gpu_node((at(9, 40), BANNERS["syslog"]))
    logs = w.aws().client("logs")
    qid = logs.start_query(logGroupNames=[w.group], startTime=ms(at(9)) // 1000, endTime=ms(at(10)) // 1000,
                           queryString=GPU_QUERY)["queryId"]
    rows = logs.get_query_results(queryId=qid)["results"]
    messages = [{c["field"]: c["value"] for c in row}["@message"] for row in rows]
    # Then the query the collectors run reads it (a reboot the rules never see cannot separate two occurrences)
    assert any("Linux version" in m for m in messages)


# -- 4. every catalog row's action ----------------------------------------------------------------------------
def test_xid_157_is_monitor_with_its_catalog_action_in_the_evidence_and_the_next_steps() -> None:
    w, iid, _ = one_gpu_node((at(10, 10), "NVRM: Xid (PCI:0000:53:00): 157, pid=0, Resource retirement failure"))
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    node = node_of(result, iid)
    # RULES §6: MONITOR, and plan a replacement (stop/start) at the next maintenance window
    assert node.verdict == "MONITOR"
    assert "plan a replacement (stop/start) at the next maintenance window" in (node.verdict_evidence or "")
    assert [a for a in result.actions if iid in a and "next maintenance window" in a]


def test_an_unlisted_code_says_the_monitor_its_field_carries_and_asks_for_the_catalog() -> None:
    w, iid, _ = one_gpu_node((at(10, 10), "NVRM: Xid (PCI:0000:53:00): 999, pid=0, something the catalog lacks"))
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    node = node_of(result, iid)
    evidence = node.verdict_evidence or ""
    assert node.verdict == "MONITOR"
    assert "→ no verdict" not in evidence and "→ MONITOR" in evidence  # field and text agree
    assert "'pid=0, something the catalog lacks'" in evidence  # quoted verbatim
    assert [a for a in result.actions if iid in a and CATALOG in a]


# -- 5. NVLink5: the decode decides, and the disagreement is said -----------------------------------------------
# Printed Fatal; NVIDIA's decode (v1 NETIR_LINK_EVT sub-code 38) says Link Fatal with the action IGNORE.
FATAL_DECODED_IGNORE = ("NVRM: Xid (PCI:0000:2b:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 "
                        "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")


def test_nvlink5_row_says_the_printed_word_and_the_decode_disagree_when_another_xid_decides_the_node() -> None:
    w, iid, _ = one_gpu_node((at(10, 0), "NVRM: Xid (PCI:0000:1b:00): 79, pid=0, GPU has fallen off the bus."),
                             (at(10, 10), FATAL_DECODED_IGNORE))
    node = node_of(w.audit("train", mode="incident", since=at(9), until=at(11)), iid)
    assert node.verdict == "REBOOT"  # the 79 decides the node
    (row,) = [e for e in node.gpu_errors if e.code == 149]
    assert row.class_ == "informational"  # the decode's IGNORE, not the printed Fatal
    assert "the line prints Fatal" in (row.meaning or "") and "the decode decides" in (row.meaning or "")


# -- 6. "fallen off the bus" in every driver form ---------------------------------------------------------------
# The driver's forms (open-gpu-kernel-modules prints the device-prefixed one; older drivers `GPU at …`), one
# message or split; each alone, with no Xid 79 beside it, is one Xid 79 on its bus.
FALLEN_FORMS = {
    "gpu-at-bus": (["[  412.331] NVRM: GPU at 0000:01:00.0 has fallen off the bus."], "0000:01:00"),
    "gpu-at-pci": (["[1234600.123] NVRM: GPU at PCI:0000:1a:00 has fallen off the bus"], "0000:1a:00"),
    "device-prefixed": (["NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."], "0000:3b:00"),
    "the-nvidia-gpu": (["NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:2330) installed in this system has fallen "
                        "off the bus and is not responding to commands."], "0000:b3:00"),
    "the-nvidia-gpu-split": (["NVRM: The NVIDIA GPU 0000:b3:00.0",
                              "NVRM: (PCI ID: 10de:26b5) installed in this system has",
                              "NVRM: fallen off the bus and is not responding to commands."], "0000:b3:00"),
    "gpu-at-split": (["NVRM: GPU at 0000:01:00.0 has", "NVRM: fallen off the bus."], "0000:01:00"),
    "no-bus-named": (["NVRM: GPU has fallen off the bus."], None),
}


@pytest.mark.parametrize(("lines", "bus"), FALLEN_FORMS.values(), ids=FALLEN_FORMS.keys())
def test_every_fallen_off_the_bus_form_is_one_xid_79_on_its_bus(lines: list[str], bus: str | None) -> None:
    t0 = parse_time(at(10))
    parsed = parse_lines([GpuLine(time=t0 + timedelta(microseconds=i), log_group="/g", log_stream="i-0a",
                                  message=f"kernel: {m}") for i, m in enumerate(lines)])
    assert [(x.code, bus_key(x.pci)) for x in node_xids(parsed, t0 + timedelta(hours=1))] == [(79, bus)]


def test_the_xid_79_preamble_naming_the_gpu_is_not_a_second_loss() -> None:
    # The driver names the GPU before its first Xid (`GPU at PCI:<bus>: GPU-<uuid>`, the board serial): one event
    lines = ["NVRM: GPU at PCI:0000:01:00: GPU-c4a80165-86e4-bfbb-ecfa-1d81a70b138a",
             "NVRM: GPU Board Serial Number: 0422318024689",
             "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."]
    t0 = parse_time(at(10))
    parsed = parse_lines([GpuLine(time=t0 + timedelta(microseconds=i), log_group="/g", log_stream="i-0a",
                                  message=f"kernel: {m}") for i, m in enumerate(lines)])
    assert [(x.code, bus_key(x.pci)) for x in node_xids(parsed, t0 + timedelta(hours=1))] == [(79, "0000:01:00")]


def test_a_lone_gpu_at_pci_fallen_off_line_reboots_the_node_like_xid_79() -> None:
    w, iid, _ = one_gpu_node((at(10, 5), "NVRM: GPU at PCI:0000:1a:00 has fallen off the bus"))
    node = node_of(w.audit("train", mode="incident", since=at(9), until=at(11)), iid)
    assert node.verdict == "REBOOT"
    assert [(e.code, bus_key(e.pci)) for e in node.gpu_errors] == [(79, "0000:1a:00")]


# -- 7. the deciding signal first, everywhere -------------------------------------------------------------------
REMAP_PENDING = ("NVRM: Xid (PCI:0000:53:00): 63, pid=0, Row Remapper: New row (0x00000000000a1b2c) marked for "
                 "remapping, reset gpu to activate.")
APP_31 = "NVRM: Xid (PCI:0000:53:00): 31, pid=2211, name=python3, Ch 00000008, intr 10000000. MMU Fault"


def test_a_reboot_for_a_pending_remap_leads_every_output_with_the_63() -> None:
    # Given an application 31 then a 63 asking for a reset to activate a remapped row (RULES §6: REBOOT)
    w, iid, _ = one_gpu_node((at(10, 0), APP_31), (at(10, 10), REMAP_PENDING))
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    node = node_of(result, iid)
    assert node.verdict == "REBOOT" and node.deciding_xid == 63
    # Then the terminal's XID column, the NDJSON/CSV record, the event, MCP and the alert lead with 63
    row = next(t.plain for t in summary(result) if t.plain.lstrip().startswith("↻ REBOOT") and iid in t.plain)
    assert "63 informational (+1 more)" in row
    (record,) = [r for r in records(result) if r["id"] == iid]
    assert record["xid_codes"] == [63, 31]
    change = Change(rank=3, kind="REBOOT", what="new verdict REBOOT", node=iid, code=NEW_VERDICT)
    assert detail(result, change, [change])["xid_codes"] == [63, 31]
    assert node_row(node, result.account_ids).xid_codes == [63, 31]
    (alert,) = lines_of(result, [change])
    assert f"{iid} Xid 63, 31" in alert.text
