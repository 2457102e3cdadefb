"""Xid catalog, parser, classifier and node router (RULES §6, §7)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaudit.model.timeutil import UTC
from gpuaudit.rules.xid_catalog import (
    CATALOG_URL,
    ECC_CHECK,
    XID_CLASSES,
    catalog_by_code,
    classify,
    decode_nvlink5,
    load_catalog,
)
from gpuaudit.rules.xid_lines import bus_key, fallen_off_bus, is_benign, parse_xid
from gpuaudit.rules.xid_routing import NodeXid, fleet_pattern, is_blackwell, route_node

T0 = datetime(2026, 9, 25, 17, 0, tzinfo=UTC)
BUS = "0000:53:00"
APPLICATION_CODES = (11, 13, 25, 31, 32, 71, 137, 94)

# RULES §6 table rows, written out by hand: code -> (class, first-occurrence verdict, verdict if it recurs).
# None for a verdict the rule or the node decides (48, 144-150, 154, sympathetic, qualifiers).
RULES_ROWS: dict[int, tuple[str, str | None, str | None]] = {
    11: ("application", "LEAVE ALONE", None),
    13: ("application", "LEAVE ALONE", None),
    25: ("application", "LEAVE ALONE", None),
    31: ("application", "LEAVE ALONE", None),
    32: ("application", "LEAVE ALONE", None),
    43: ("sympathetic", None, None),
    45: ("sympathetic", None, None),
    46: ("hardware", "REBOOT", "REPLACE"),
    48: ("hardware", None, None),
    62: ("hardware", "REBOOT", "REPLACE"),
    63: ("informational", "MONITOR", None),
    64: ("hardware", "REPLACE", None),
    71: ("application", "LEAVE ALONE", None),
    74: ("hardware", "REBOOT", "REPLACE"),
    79: ("hardware", "REBOOT", "REPLACE"),
    92: ("informational", "MONITOR", None),
    94: ("application", "LEAVE ALONE", None),
    95: ("hardware", "REBOOT", "REPLACE"),
    109: ("hardware", "REBOOT", "REPLACE"),
    110: ("driver-config", "REBOOT", None),
    119: ("driver-config", "REBOOT", None),
    120: ("driver-config", "REBOOT", None),
    136: ("hardware", "REBOOT", "REPLACE"),
    137: ("application", "LEAVE ALONE", None),
    140: ("hardware", "REBOOT", "REPLACE"),
    143: ("hardware", "REBOOT", "REPLACE"),
    144: ("hardware", None, None),
    145: ("hardware", None, None),
    146: ("hardware", None, None),
    147: ("hardware", None, None),
    148: ("hardware", None, None),
    149: ("hardware", None, None),
    150: ("hardware", None, None),
    151: ("driver-config", "REBOOT", None),
    154: ("informational", None, None),
    155: ("driver-config", "REBOOT", None),
    156: ("informational", "REBOOT", None),
    157: ("informational", "MONITOR", None),
    158: ("hardware", "REBOOT", "REPLACE"),
    171: ("hardware", None, None),
    172: ("hardware", None, None),
}
# RULES §6 "any other code in NVIDIA's catalog": its immediate action decides. The last three actions
# are not in the RULES list; the catalog's note says how they are read (tested below).
BY_ACTION: dict[str | None, tuple[str, str | None, str | None]] = {
    "RESTART_APP": ("application", "LEAVE ALONE", None),
    "IGNORE": ("informational", "MONITOR", None),
    "RESET_GPU": ("hardware", "REBOOT", "REPLACE"),
    "RESTART_BM": ("hardware", "REBOOT", "REPLACE"),
    "RESTART_VM": ("hardware", "REBOOT", "REPLACE"),
    "CONTACT_SUPPORT": ("informational", "MONITOR", None),
    None: ("unverified", None, None),
    "CHECK_MECHANICALS": ("informational", "MONITOR", None),
    "CHECK_UVM": ("informational", "MONITOR", None),
    "UPDATE_SWFW": ("driver-config", "LEAVE ALONE", None),
}
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "nvidia-xid-catalog.json"
needs_reference = pytest.mark.skipif(not REFERENCE.exists(), reason="shared/reference is not beside this checkout")


def expected_row(code: int) -> tuple[str, str | None, str | None]:
    entry = catalog_by_code()[code]
    return RULES_ROWS[code] if code in RULES_ROWS else BY_ACTION[entry.nvidia_action]


HMA_MESSAGE = (
    '{"level":"info","ts":"2026-09-25T17:03:00Z","msg":"NPD caught event: %v","details: ":'
    '{"severity":"warn","timestamp":"2026-09-25T17:02:59Z","reason":"XidUserAppError","message":'
    '"[ 3246.318002] NVRM: Xid (PCI:0000:00:1e): 31, pid=14760, name=oob, channel 0x00000008, '
    "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_T1_0 faulted @ 0x7c9d_19c00000. "
    'Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"},"HealthMonitoringAgentDetectionEvent":"HealthEvent"}'
)


def xid(code: int, minutes: float = 0, pci: str | None = BUS, text: str = "", **kw: str | int) -> NodeXid:
    return NodeXid(time=T0 + timedelta(minutes=minutes), code=code, pci=pci, text=text, **kw)


# --------------------------------------------------------------------------- catalog


def test_catalog_cites_its_source_version_and_date() -> None:
    catalog = load_catalog()
    assert CATALOG_URL in catalog.source
    assert "RULES.md §6" in catalog.source
    assert catalog.checked == "2026-12-02"
    assert "Xid-Catalog.xlsx" in catalog.catalog_version and catalog.reference_sha256[:16] in catalog.catalog_version


def test_catalog_covers_every_code_nvidia_numbers() -> None:
    # NVIDIA's catalog numbers its codes 1..172 without a gap; a missing row would become `unverified`.
    assert sorted(catalog_by_code()) == list(range(1, 173))


@needs_reference
def test_catalog_data_and_nvidia_reference_agree_both_ways() -> None:
    reference = json.loads(REFERENCE.read_bytes())
    by_code = {xid["code"]: xid for xid in reference["xids"]}
    assert set(by_code) == set(catalog_by_code())  # every reference code in the data, and nothing else
    for code, entry in catalog_by_code().items():
        nvidia = by_code[code]
        assert (entry.mnemonic, entry.meaning, entry.nvidia_action) == (
            nvidia["mnemonic"], nvidia["description"], nvidia["immediate_action"]
        ), code
    assert load_catalog().reference_sha256 == hashlib.sha256(REFERENCE.read_bytes()).hexdigest()


@needs_reference
def test_nvlink5_decode_is_nvidias_table_row_for_row() -> None:
    reference = json.loads(REFERENCE.read_bytes())["nvlink5_decode_144_150"]
    ours = load_catalog().nvlink5_decode
    assert len(ours) == len(reference)
    for mine, theirs in zip(ours, reference, strict=True):
        assert (str(mine.xid), mine.subcode, mine.intrinfo_v1, mine.intrinfo_v2, mine.error_status, mine.action,
                mine.action2) == (theirs["xid"], theirs["subcode"], theirs["intrinfo_v1_lt_r575"],
                                  theirs["intrinfo_v2_ge_r575"], theirs["error_status_hex"],
                                  theirs["recovery_action"], theirs["action2"])


@pytest.mark.parametrize("code", range(1, 173))
def test_catalog_row_follows_rules_section_6(code: int) -> None:
    entry = catalog_by_code()[code]
    assert (entry.class_, entry.verdict, entry.verdict_if_recurs) == expected_row(code)
    assert entry.rules_override == (code in RULES_ROWS)
    assert entry.meaning and entry.action_text


@pytest.mark.parametrize("code",
                         sorted(c for c, e in catalog_by_code().items() if e.rule is None and not e.qualifier_of))
def test_classify_returns_the_catalog_row_for_codes_without_a_rule(code: int) -> None:
    result = classify(code, "")
    assert (result.class_, result.verdict, result.verdict_if_recurs) == expected_row(code)
    assert result.override is None


def test_actions_rules_does_not_map_are_said_in_the_row() -> None:
    for entry in catalog_by_code().values():
        if entry.nvidia_action in ("CHECK_MECHANICALS", "CHECK_UVM", "UPDATE_SWFW", None) and not entry.rules_override:
            assert entry.note
            assert "RULES §6 maps no verdict" in entry.note or "without an immediate action" in entry.note


def test_every_class_is_reachable() -> None:
    reached = {entry.class_ for entry in catalog_by_code().values()} | {classify(999, "").class_}
    assert reached == XID_CLASSES


def test_qualifier_rows_point_at_48() -> None:
    assert catalog_by_code()[171].qualifier_of == 48
    assert catalog_by_code()[172].qualifier_of == 48


def test_listed_code_without_nvidia_action_is_unverified_with_its_meaning() -> None:
    result = classify(167, "some text")
    assert result.class_ == "unverified" and result.meaning == "PCIE_FATAL_TIMEOUT"
    assert result.verdict is None and result.unverified_reason and "no immediate action" in result.unverified_reason


def test_missing_codes_from_the_issue_now_route_by_nvidias_action() -> None:
    # 13 + 69 on one node, both RESTART_APP per NVIDIA: LEAVE ALONE (was MONITOR while 69 was unknown).
    routed = route_node([xid(13, text="pid=7, name=python"), xid(69, 1, text="pid=7, name=python")], node_running=True)
    assert routed.verdict == "LEAVE ALONE" and routed.cause_code == 13


@pytest.mark.parametrize("code", [999, 0, 173, 200])
def test_unknown_code_is_unverified_never_replace(code: int) -> None:
    result = classify(code, "some new driver text")
    assert result.class_ == "unverified"
    assert result.meaning is None
    assert result.verdict is None and result.verdict_if_recurs is None
    assert result.unverified_reason and "'some new driver text'" in result.unverified_reason
    assert CATALOG_URL in result.unverified_reason


@pytest.mark.parametrize("code", [999, 167])  # not listed; listed without an action
def test_unverified_code_gets_no_verdict_and_never_outranks_an_application_xid(code: int) -> None:
    alone = route_node([xid(code, text="odd text")], node_running=True)
    assert alone.verdict is None and not alone.hardware and alone.cause_code == code
    assert "'odd text'" in alone.verdict_evidence
    for order in (0, -1):  # whichever comes first
        with_app = route_node([xid(31, text="pid=1, name=x"), xid(code, order, text="odd")], node_running=True)
        assert with_app.verdict == "LEAVE ALONE" and with_app.cause_code == 31
        assert f"also on the node: Xid {code}" in with_app.verdict_evidence


# --------------------------------------------------------------------------- parsing


def test_parse_kernel_line() -> None:
    line = parse_xid(
        "Sep 24 18:03:23 ip-172-31-0-64 kernel: NVRM: Xid (PCI:0000:53:00): 31, pid=14760, name=oob, "
        "channel 0x00000008, intr 00000000"
    )
    assert line is not None
    assert (line.code, line.pci, line.pid, line.process) == (31, "0000:53:00", 14760, "oob")
    assert line.text == "pid=14760, name=oob, channel 0x00000008, intr 00000000"
    assert line.raw.startswith("NVRM: Xid (PCI:0000:53:00): 31, pid=14760")


@pytest.mark.parametrize("message", [HMA_MESSAGE, json.dumps(HMA_MESSAGE)], ids=["hma-json", "escaped-again"])
def test_parse_xid_inside_hma_json(message: str) -> None:
    line = parse_xid(message)
    assert line is not None
    assert (line.code, line.pci, line.pid, line.process) == (31, "0000:00:1e", 14760, "oob")
    assert line.raw.startswith("NVRM: Xid (PCI:0000:00:1e): 31,")
    assert line.raw.endswith("Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")
    assert line.text.endswith("ACCESS_TYPE_VIRT_WRITE")


def test_parse_colon_separator_function_suffix_and_unknown_pid() -> None:
    line = parse_xid(
        "kernel: NVRM: Xid (PCI:0000:53:00.0): 79: pid='<unknown>', name=<unknown>, GPU has fallen"
    )
    assert line is not None
    assert (line.code, line.pci, line.pid, line.process) == (79, "0000:53:00.0", None, None)
    assert line.text == "pid='<unknown>', name=<unknown>, GPU has fallen"


@pytest.mark.parametrize(
    ("bus_field", "pci"),
    [("PCI:...", None), ("PCI:XXXX:XX:XX", None), ("<redacted>", None), ("PCI:0009:01:00", "0009:01:00"),
     ("PCI:0000:53:00.0", "0000:53:00.0"), ("0000:03:00", "0000:03:00"), ("PCI:18:00", "18:00")],
)
def test_odd_or_redacted_bus_field_keeps_the_code(bus_field: str, pci: str | None) -> None:
    line = parse_xid(f"kernel: NVRM: Xid ({bus_field}): 79, pid=12, name=x, GPU has fallen off the bus.")
    assert line is not None and (line.code, line.pci, line.pid) == (79, pci, 12)


@pytest.mark.parametrize(
    ("bus_field", "pci", "gpu_instance", "compute_instance"),
    [  # the driver's three forms (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c)
        ("PCI:0000:01:00", "0000:01:00", None, None),
        ("PCI:0000:01:00 GPU-I:05", "0000:01:00", 5, None),
        ("PCI:0000:3b:00 GPU-I:01 GPU-CI:02", "0000:3b:00", 1, 2),
        ("PCI:0009:01:00.0 GPU-I:12", "0009:01:00.0", 12, None),  # non-zero domain and a function suffix
        ("PCI:XXXX:XX:XX GPU-I:03", None, 3, None),  # a redacted bus keeps the instance, and the code
    ],
)
def test_mig_attribution_keeps_the_bus_and_reads_the_instances(
    bus_field: str, pci: str | None, gpu_instance: int | None, compute_instance: int | None
) -> None:
    line = parse_xid(f"kernel: NVRM: Xid ({bus_field}): 94, pid=7194, name=python, Contained: CE User Channel (0x9).")
    assert line is not None
    assert (line.code, line.pci, line.gpu_instance, line.compute_instance, line.pid) == (
        94, pci, gpu_instance, compute_instance, 7194)
    assert line.text.startswith("pid=7194, name=python, Contained")


def test_mig_instance_is_named_in_the_node_evidence() -> None:
    routing = route_node([xid(94, pci="0000:01:00", gpu_instance=5, text="pid=7194, name=python, Contained")],
                         node_running=True)
    assert routing.verdict == "LEAVE ALONE" and routing.pci == "0000:01:00"
    assert "on PCI 0000:01:00, MIG instance GPU-I:05" in routing.verdict_evidence


def test_bus_key_normalises_domain_and_function() -> None:
    assert bus_key("0000:53:00.0") == bus_key("PCI:0000:53:00") == bus_key("53:00") == "0000:53:00"
    assert bus_key("0009:01:00") == "0009:01:00" != bus_key("0008:01:00")


def _stream(*messages: str) -> list[tuple[datetime, str]]:
    return [(T0 + timedelta(microseconds=i), message) for i, message in enumerate(messages)]


def test_fallen_off_the_bus_over_three_lines_is_xid_79_for_that_bus() -> None:
    found = fallen_off_bus(_stream(
        "kernel: [ 9.1] NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
        "kernel: [ 9.2] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "kernel: [ 9.2] NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "kernel: [ 9.2] NVRM: fallen off the bus and is not responding to commands.",
    ))
    assert list(found) == [1]  # keyed by the line naming the GPU
    assert (found[1].code, found[1].pci, found[1].fallen_off_bus) == (79, "0000:b3:00.0", True)
    assert found[1].text.endswith("fallen off the bus and is not responding to commands.")
    assert "NVRM:" not in found[1].text


def test_fallen_off_the_bus_in_one_journald_message_and_single_line_forms() -> None:
    joined = fallen_off_bus(_stream(
        "[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n      NVRM: installed in this system has\n"
        "      NVRM: fallen off the bus and is not responding to commands."))
    single = fallen_off_bus(_stream("NVRM: GPU 0000:29:00.0: GPU has fallen off the bus."))
    assert [x.pci for x in joined.values()] == ["0000:b3:00.0"]
    assert [x.pci for x in single.values()] == ["0000:29:00.0"]


def test_fallen_off_the_bus_beside_its_xid_79_is_one_event() -> None:
    pair = _stream("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
                   "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.")
    assert fallen_off_bus(pair) == {}
    other_gpu = _stream("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
                        "NVRM: GPU 0000:02:00.0: GPU has fallen off the bus.")
    assert [x.pci for x in fallen_off_bus(other_gpu).values()] == ["0000:02:00.0"]
    later = [(T0, pair[0][1]), (T0 + timedelta(hours=2), pair[1][1])]  # not the same loss
    assert len(fallen_off_bus(later)) == 1


@pytest.mark.parametrize(
    "messages",
    [("NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: (PCI ID: 10de:26b5) installed in this system has"),
     ("NVRM: The NVIDIA GPU 0000:b3:00.0", "something else entirely", "NVRM: fallen off the bus"),
     ("NVRM: GPU 0000:29:00.0: GPU serial number is 1234.",)],
)
def test_incomplete_or_unrelated_nvrm_lines_are_not_a_lost_gpu(messages: tuple[str, ...]) -> None:
    assert fallen_off_bus(_stream(*messages)) == {}


def test_parse_stops_at_the_end_of_the_logical_line() -> None:
    line = parse_xid("NVRM: Xid (PCI:0000:53:00): 63, Row Remapper\nNVRM: next line")
    assert line is not None and line.raw == "NVRM: Xid (PCI:0000:53:00): 63, Row Remapper"


@pytest.mark.parametrize(
    "message",
    ["kernel: NVRM: knvlinkSendInbandData_IMPL: Failed to send inband data: 0", "plain text", ""],
)
def test_non_xid_lines_do_not_parse(message: str) -> None:
    assert parse_xid(message) is None


def test_benign_filter() -> None:
    assert is_benign(
        "kernel: NVRM: API mismatch: the client has the version 535.183.01, but this kernel module has "
        "the version 550.90.07."
    )
    assert is_benign(
        "systemd[1]: /lib/systemd/system/nvidia-fabricmanager.service:16: PIDFile= references a path below "
        "legacy directory /var/run/, updating /var/run/nvidia-fabricmanager/nv-fabricmanager.pid"
    )
    assert not is_benign(
        "systemd[1]: foo.service:3: PIDFile= references a path below legacy directory /var/run/"
    )
    assert not is_benign("NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.")


# --------------------------------------------------------------------------- rule 48


@pytest.mark.parametrize(
    ("text", "memory"),
    [
        (
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6",
            "DRAM",
        ),
        ("DBE detected in L2 cache slice 3", "SRAM"),
        ("pid=123, name=python, DBE", "UNVERIFIED"),
    ],
)
def test_rule_48_reads_the_memory_from_the_message(text: str, memory: str) -> None:
    result = classify(48, text)
    assert result.memory == memory
    assert result.verdict != "REPLACE"


def test_rule_48_with_171_is_dram_reboot() -> None:
    routing = route_node([xid(48), xid(171, 0.01)], node_running=True)
    assert routing.verdict == "REBOOT" and routing.hardware and not routing.hypothesis
    assert routing.cause_code == 48 and "DRAM" in routing.verdict_evidence


def test_rule_48_with_172_is_sram_reboot_and_check_the_flag() -> None:
    routing = route_node([xid(48), xid(172, 0.01)], node_running=True)
    assert routing.verdict == "REBOOT" and routing.hardware
    assert "SRAM" in routing.verdict_evidence
    assert routing.deciding_check and "SRAM Threshold Exceeded" in routing.deciding_check


def test_rule_48_qualifier_on_another_gpu_does_not_decide() -> None:
    # The 171 speaks for a 48 on its own GPU (outside the window); the 48 on 0000:53:00 stays undetermined.
    routing = route_node([xid(48), xid(171, 0.01, pci="0000:54:00")], node_running=True)
    assert (routing.cause_code, routing.pci, routing.verdict) == (171, "0000:54:00", "REBOOT")
    alone = route_node([xid(48)], node_running=True)
    assert alone.verdict is None and alone.hypothesis


def test_rule_48_split_unverified_is_a_hypothesis_not_replace_not_reboot() -> None:
    routing = route_node([xid(48, text="DBE")], node_running=True)
    assert routing.verdict not in ("REPLACE", "REBOOT")
    assert routing.verdict is None and routing.hypothesis and not routing.hardware
    assert routing.deciding_check == ECC_CHECK
    assert routing.deciding_check.startswith("nvidia-smi -q -d ECC")
    for field in (
        "SRAM Threshold Exceeded",
        "SRAM Uncorrectable Parity",
        "SRAM Uncorrectable SEC-DED",
        "DRAM Uncorrectable",
    ):
        assert field in routing.deciding_check
    assert "UNVERIFIED" in routing.verdict_evidence


def test_63_alone_is_monitor_and_63_after_48_is_reboot() -> None:
    alone = route_node([xid(63, text="Row Remapper: New row marked for remapping")], node_running=True)
    assert alone.verdict == "MONITOR" and not alone.hardware
    after = route_node([xid(48), xid(63, 1)], node_running=True)
    assert after.verdict == "REBOOT" and after.cause_code == 63 and after.hardware
    assert "remap is pending" in after.verdict_evidence


# --------------------------------------------------------------------------- rule 154


@pytest.mark.parametrize(
    ("value", "klass", "verdict"),
    [
        ("0x0 (None)", "informational", None),
        ("0x1 (GPU Reset Required)", "hardware", "REBOOT"),
        ("0x2 (Node Reboot Required)", "hardware", "REBOOT"),
        ("0x3 (Drain P2P)", "informational", "MONITOR"),
        ("0x4 (Drain and Reset)", "hardware", "REBOOT"),
    ],
)
def test_rule_154_value_decides(value: str, klass: str, verdict: str | None) -> None:
    result = classify(154, f"GPU recovery action changed from 0x0 (None) to {value}")
    assert (result.class_, result.verdict) == (klass, verdict)
    assert result.recovery_action == value.split(" (")[1].rstrip(")")
    routing = route_node(
        [xid(154, text=f"GPU recovery action changed from 0x0 (None) to {value}")], node_running=True
    )
    assert routing.verdict == verdict and routing.hardware == (verdict == "REBOOT")


def test_rule_154_none_says_nothing_about_the_node() -> None:
    routing = route_node([xid(154, text="GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)")],
                         node_running=True)
    assert routing.verdict is None and routing.cause_code is None and "nothing" in routing.verdict_evidence
    with_app = route_node([xid(13, text="pid=3, name=x"),
                           xid(154, 1, text="GPU recovery action changed from 0x0 (None) to 0x0 (None)")],
                          node_running=True)
    assert with_app.verdict == "LEAVE ALONE"


def test_rule_154_value_named_differently_is_read_by_its_value_and_said() -> None:
    text = "GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)"
    routing = route_node([xid(154, text=text)], node_running=True)
    assert routing.verdict == "REBOOT"
    assert "the line names 0x1 'PF FLR'; read by its value as GPU Reset Required" in routing.verdict_evidence


def test_rule_154_drain_and_reset_reboots_after_draining() -> None:
    routing = route_node([xid(13, text="pid=3, name=x"),
                          xid(154, 1, text="GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)")],
                         node_running=True)
    assert routing.verdict == "REBOOT" and routing.cause_code == 154
    assert routing.action_text and routing.action_text.startswith("drain")


def test_rule_154_unreadable_value_is_unverified() -> None:
    result = classify(154, "GPU recovery action changed")
    assert result.class_ == "unverified" and result.verdict is None
    assert route_node([xid(154, text="GPU recovery action changed")], node_running=True).verdict is None


# --------------------------------------------------------------------------- rule NVLink5

FATAL_149 = "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000)"
NONFATAL_145 = "RLW_REMAP Nonfatal XC0 i0 Link 07 (0x00000000 0x00000000)"


def test_nvlink5_fatal_line_decoded_by_nvidias_table() -> None:
    # 0x021425c6 = ...100001 (bits 25:20) ... 0111000110 (bits 9:0): v1 NETIR_LINK_EVT, RESET_GPU.
    result = classify(149, FATAL_149)
    assert (result.subcomponent, result.fatal, result.link) == ("NETIR_LINK_EVT", True, 1)
    assert result.decoded_action == "RESET_GPU" and result.resolution is None and result.verdict == "REBOOT"
    assert result.disagreement is None
    routing = route_node([xid(149, text=FATAL_149)], node_running=True)
    assert routing.verdict == "REBOOT" and routing.hardware
    assert routing.deciding_check and "link 1 stays down" in routing.deciding_check
    assert "NETIR_LINK_EVT/NETIR_LINK_DOWN, status any, v1 (before R575)" in routing.verdict_evidence


def test_nvlink5_fatal_line_without_registers_keeps_the_printed_word_unverified() -> None:
    text = "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01"
    result = classify(149, text)
    assert result.fatal is True and result.verdict == "REBOOT" and result.resolution == "UNVERIFIED"
    routing = route_node([xid(149, text=text)], node_running=True)
    assert "UNVERIFIED" in routing.verdict_evidence and CATALOG_URL in routing.verdict_evidence


def test_nvlink5_decode_overrules_the_printed_word_and_says_so() -> None:
    # v2 (R575+) SAW_MVB: IntrInfo bits 6:0 = 0000001, status 0x2 → RESET_GPU, while the line prints Nonfatal.
    text = "SAW_MVB Nonfatal XC0 i0 Link 03 (0x00000001 0x00000002 0x00000000 0x00000000 0x0 0x0 0x0)"
    result = classify(144, text)
    assert result.decoded_action == "RESET_GPU" and result.fatal is True and result.verdict == "REBOOT"
    assert result.disagreement and "prints Nonfatal" in result.disagreement
    routing = route_node([xid(144, text=text)], node_running=True)
    assert routing.verdict == "REBOOT" and "prints Nonfatal" in routing.verdict_evidence
    # the same registers with status 0x1 decode to IGNORE: MONITOR even though the line says Fatal
    ignore = classify(144, text.replace("Nonfatal", "Fatal").replace("0x00000002", "0x00000001"))
    assert ignore.decoded_action == "IGNORE" and ignore.verdict == "MONITOR" and ignore.fatal is False
    assert ignore.disagreement and "prints Fatal" in ignore.disagreement


def test_nvlink5_decode_class_is_the_decodes_and_the_disagreement_is_said_in_its_words() -> None:
    """RULES §6 rule NVLink5: the decode decides. NVIDIA's sheet gives each row a severity (Fatal, Link Fatal,
    Non-fatal), an action and whether the condition is HW, SW or FW: the class and verdict follow that row."""
    # printed Nonfatal; decode v2 SAW_MVB status 0x2: Fatal, RESET_GPU, HW → hardware, REBOOT
    nonfatal = "SAW_MVB Nonfatal XC0 i0 Link 03 (0x00000001 0x00000002 0x00000000 0x00000000 0x0 0x0 0x0)"
    hardware = classify(144, nonfatal)
    assert (hardware.class_, hardware.verdict, hardware.verdict_if_recurs) == ("hardware", "REBOOT", "REPLACE")
    assert hardware.disagreement and "prints Nonfatal, the decode says Fatal (RESET_GPU)" in hardware.disagreement
    routed = route_node([xid(144, text=nonfatal)], node_running=True)
    assert routed.verdict == "REBOOT" and routed.hardware and routed.cause_class == "hardware"
    assert "hardware class" in routed.verdict_evidence and "Fatal, RESET_GPU, HW" in routed.verdict_evidence
    # printed Fatal; decode v1 NETIR_LINK_EVT sub-code 38: Link Fatal, but IGNORE → informational, MONITOR, and the
    # decode is never misquoted as "nonfatal"
    link_fatal = "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x0 0x0 0x0)"
    ignored = classify(149, link_fatal)
    assert (ignored.class_, ignored.verdict, ignored.decoded_action) == ("informational", "MONITOR", "IGNORE")
    assert ignored.decode_note and "Link Fatal, IGNORE, HW/SW" in ignored.decode_note
    assert "nonfatal" not in (ignored.decode_note or "").lower()
    quiet = route_node([xid(149, text=link_fatal)], node_running=True)
    assert quiet.verdict == "MONITOR" and not quiet.hardware and "REBOOT candidate" not in quiet.verdict_evidence
    # a reset the sheet calls SW (v2 NETIR_LINK_DOWN sub-code 15): REBOOT, but not on hardware grounds, never REPLACE
    software = "NETIR_LINK_EVT/NETIR_LINK_DOWN Fatal XC0 i0 Link 03 (0x00f00011 0x00000000 0x0 0x0 0x0 0x0 0x0)"
    sw = classify(149, software)
    assert (sw.class_, sw.verdict, sw.verdict_if_recurs) == ("driver-config", "REBOOT", None)
    assert "Link Fatal, RESET_GPU, SW" in (sw.decode_note or "")
    sw_routed = route_node([xid(149, text=software)], node_running=True)
    assert sw_routed.verdict == "REBOOT" and not sw_routed.hardware
    reboot = [T0 + timedelta(minutes=30)]
    again = route_node([xid(149, text=software), xid(149, 60, text=software)], node_running=True, reboot_times=reboot)
    assert again.verdict == "REBOOT"  # a software condition returning is not a hardware recurrence


def test_nvlink5_decode_needs_an_exact_row() -> None:
    assert decode_nvlink5(144, 0x1, 0x3) is None  # two status bits at once: no row, no guess
    assert decode_nvlink5(149, 0x0, 0x0) is None
    assert decode_nvlink5(144, 0x1, 0x10) == (
        "RESET_GPU", "SAW_MVB, status 0x00000010, v2 (R575 and later)", "Fatal", "HW")


def test_nvlink5_promotable_error_takes_action_2() -> None:
    # RLW_RXPIPE v2: 0000110 → IGNORE; with bit 7 set (10000110) → action 2, RESET_GPU.
    assert decode_nvlink5(145, 0b0000110, 0x1) == (
        "IGNORE", "RLW_RXPIPE, status 0x00000001, v2 (R575 and later)", "Non-fatal*", "SW")
    assert decode_nvlink5(145, 0b10000110, 0x1) == (
        "RESET_GPU", "RLW_RXPIPE (action 2), status 0x00000001, v2 (R575 and later)",
        "Non-fatal* promoted by action 2", "SW"
    )


def test_nvlink5_decode_asking_for_154_follows_the_154() -> None:
    text = "RLW_REMAP Nonfatal XC0 i0 Link 02 (0x00000004 0x00000001 0x0 0x0 0x0 0x0 0x0)"  # v2 RLW_REMAP
    assert classify(145, text).decoded_action == "XID_154_EVAL"
    alone = route_node([xid(145, text=text)], node_running=True)
    assert alone.verdict == "MONITOR" and alone.deciding_check and "154" in alone.deciding_check
    with_154 = route_node([xid(145, text=text),
                           xid(154, 0.1,
                               text="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")],
                          node_running=True)
    assert with_154.verdict == "REBOOT" and with_154.cause_code == 154


def test_nvlink5_nonfatal_is_monitor() -> None:
    result = classify(145, NONFATAL_145)
    assert (result.subcomponent, result.fatal, result.link, result.verdict) == (
        "RLW_REMAP",
        False,
        7,
        "MONITOR",
    )
    routing = route_node([xid(145, text=NONFATAL_145)], node_running=True)
    assert routing.verdict == "MONITOR" and not routing.hardware


def test_nvlink5_unreadable_flag_has_no_verdict() -> None:
    routing = route_node([xid(147, text="0x1234")], node_running=True)
    assert routing.verdict is None and routing.hypothesis and not routing.hardware


def test_nvlink5_fatal_back_on_the_same_link_after_reboot_is_replace() -> None:
    reboot = [T0 + timedelta(minutes=30)]
    same = route_node(
        [xid(149, text=FATAL_149), xid(149, 60, text=FATAL_149)], node_running=True, reboot_times=reboot
    )
    assert same.verdict == "REPLACE"
    other_link = FATAL_149.replace("Link 01", "Link 02")
    moved = route_node(
        [xid(149, text=FATAL_149), xid(149, 60, text=other_link)], node_running=True, reboot_times=reboot
    )
    assert moved.verdict == "REBOOT"


# --------------------------------------------------------------------------- node routing


def test_sympathetic_43_follows_the_79_before_it() -> None:
    routing = route_node([xid(79), xid(43, 1)], node_running=True)
    assert (routing.verdict, routing.cause_code, routing.cause_class) == ("REBOOT", 79, "hardware")
    assert "Xid 43 follows it" in routing.verdict_evidence


def test_sympathetic_45_follows_an_application_xid() -> None:
    routing = route_node([xid(31, text="pid=9, name=train"), xid(45, 1)], node_running=True)
    assert (routing.verdict, routing.cause_code) == ("LEAVE ALONE", 31)


def test_recurrence_on_the_same_pci_across_a_reboot_is_replace() -> None:
    routing = route_node(
        [xid(79, pci="0000:53:00"), xid(79, 60, pci="0000:53:00.0")],
        node_running=True,
        reboot_times=[T0 + timedelta(minutes=30)],
    )
    assert routing.verdict == "REPLACE" and routing.hardware
    assert "0000:53:00" in routing.verdict_evidence and "reboot" in routing.verdict_evidence


def test_recurrence_on_a_different_pci_is_not_replace() -> None:
    routing = route_node(
        [xid(79, pci="0000:53:00"), xid(79, 60, pci="0000:64:00")],
        node_running=True,
        reboot_times=[T0 + timedelta(minutes=30)],
    )
    assert routing.verdict == "REBOOT"


def test_repeat_without_a_reboot_between_is_not_replace() -> None:
    routing = route_node([xid(46), xid(46, 10)], node_running=True, reboot_times=[T0 + timedelta(hours=2)])
    assert routing.verdict == "REBOOT"


def test_hardware_wins_over_application() -> None:
    routing = route_node([xid(31, text="pid=9, name=train"), xid(46, 5)], node_running=True)
    assert (routing.verdict, routing.cause_code, routing.hardware) == ("REBOOT", 46, True)
    assert "also on the node: Xid 31" in routing.verdict_evidence


def test_hma_user_app_error_on_running_node_is_leave_alone() -> None:
    line = parse_xid(HMA_MESSAGE)
    assert line is not None
    event = NodeXid(time=T0, code=line.code, pci=line.pci, text=line.text, hma_reason="XidUserAppError")
    routing = route_node([event], node_running=True)
    assert routing.verdict == "LEAVE ALONE" and routing.hardware is False
    assert (routing.process, routing.pid, routing.cause_class) == ("oob", 14760, "application")
    for named in ("Xid 31", "0000:00:1e", "oob", "14760", "XidUserAppError", "Running"):
        assert named in routing.verdict_evidence
    assert routing.verdict_evidence.endswith("→ LEAVE ALONE")


def test_hma_user_app_error_names_the_class_of_an_unlisted_code() -> None:
    routing = route_node([xid(999, hma_reason="XidUserAppError")], node_running=True)
    assert (routing.verdict, routing.cause_class) == ("LEAVE ALONE", "application")


def test_hma_user_app_error_does_not_lower_a_hardware_code() -> None:
    routing = route_node([xid(79, hma_reason="XidUserAppError")], node_running=True)
    assert routing.verdict == "REBOOT" and routing.hardware


def test_hma_hardware_failure_with_replace_recommendation_is_replace() -> None:
    event = xid(31, hma_reason="XidHardwareFailure", hma_recommendation="Replace")
    routing = route_node([event], node_running=True)
    assert routing.verdict == "REPLACE" and routing.hardware


def test_hma_hardware_failure_without_recommendation_blocks_leave_alone() -> None:
    routing = route_node([xid(31, hma_reason="XidHardwareFailure")], node_running=True)
    assert routing.verdict is None and "sources differ" in routing.verdict_evidence


def test_sympathetic_is_credited_to_the_xid_it_follows_only() -> None:
    routing = route_node([xid(79), xid(31, 1), xid(43, 2, pci="0000:64:00")], node_running=True)
    assert routing.cause_code == 79 and "follows it" not in routing.verdict_evidence


def test_application_xid_on_a_node_not_running_meets_no_bar() -> None:
    routing = route_node([xid(31, text="pid=1, name=x")], node_running=False)
    assert routing.verdict is None and not routing.hardware


GSP_TEXT = "Timeout after 45s of waiting for RPC response from GPU0 GSP"


@pytest.mark.parametrize("code", [119, 120])
def test_gsp_error_first_occurrence_reboots(code: int) -> None:
    # RULES §7 lists 119/120 among the hardware-class Xids whose first occurrence meets the REBOOT bar (branch A);
    # only their recurrence after a reboot is a driver/firmware fault (next test)
    routing = route_node([xid(code, text=GSP_TEXT)], node_running=True, blackwell=False)
    assert routing.verdict == "REBOOT" and routing.hardware


@pytest.mark.parametrize(
    ("blackwell", "verdict", "action"),
    [(False, "LEAVE ALONE", "NVreg_EnableGpuFirmware=0"), (True, "REBOOT", "escalate to support"),
     (None, None, "GPU generation not read")],
)
def test_gsp_error_recurring_after_a_reboot_is_never_replace(blackwell: bool | None, verdict: str | None,
                                                             action: str) -> None:
    events = [xid(119, text=GSP_TEXT), xid(120, 60, text=GSP_TEXT)]
    routing = route_node(events, node_running=True, reboot_times=[T0 + timedelta(minutes=30)], blackwell=blackwell)
    assert routing.verdict == verdict and not routing.hardware
    assert routing.action_text and action in routing.action_text
    assert "recurring after the reboot" in routing.verdict_evidence
    assert blackwell is None or routing.action_text in routing.verdict_evidence  # the action is in the evidence
    assert routing.hypothesis == (blackwell is None)


def test_gsp_error_twice_without_a_reboot_is_still_a_first_occurrence() -> None:
    events = [xid(119, text=GSP_TEXT), xid(119, 60, text=GSP_TEXT)]
    assert route_node(events, node_running=True, blackwell=False).verdict == "REBOOT"


@pytest.mark.parametrize(
    ("instance_type", "gpu_name", "expected"),
    [("p6-b200.48xlarge", None, True), ("p6e-gb200.36xlarge", None, True), ("p5.48xlarge", None, False),
     ("g6e.xlarge", "NVIDIA L40S", False), ("x9.large", "NVIDIA B200", True), ("x9.large", None, None),
     (None, None, None)],
)
def test_blackwell_is_read_from_the_gpu_name_or_the_type(instance_type: str | None, gpu_name: str | None,
                                                         expected: bool | None) -> None:
    assert is_blackwell(instance_type, gpu_name) is expected


def test_remap_failure_is_replace() -> None:
    routing = route_node([xid(64)], node_running=True)
    assert routing.verdict == "REPLACE" and routing.hardware


def test_retirement_failure_is_monitor_with_a_planned_replacement() -> None:
    routing = route_node([xid(157)], node_running=True)
    assert routing.verdict == "MONITOR" and not routing.hardware
    assert routing.action_text and "plan a replacement" in routing.action_text


@pytest.mark.parametrize(("code", "hardware"), [(155, False), (156, False), (46, True), (158, True)])
def test_reset_gpu_codes_reboot(code: int, hardware: bool) -> None:
    routing = route_node([xid(code)], node_running=True)
    assert routing.verdict == "REBOOT" and routing.hardware == hardware


def test_contained_memory_error_leaves_the_node_with_a_reset_when_convenient() -> None:
    routing = route_node([xid(94, text="pid=5, name=train, Contained: SM (0x1)")], node_running=True)
    assert routing.verdict == "LEAVE ALONE"
    assert routing.action_text and "reset the GPU when convenient" in routing.action_text


def test_xid_71_is_a_copy_engine_error_unless_its_text_names_nvlink_fatal() -> None:
    plain = route_node([xid(71, text="pid=9, name=python, CE4 error")], node_running=True)
    assert plain.verdict == "LEAVE ALONE"
    text = "NVLink: fatal error detected on link 3"
    result = classify(71, text)
    assert (result.class_, result.verdict, result.routed_as, result.link) == ("hardware", "REBOOT", 74, 3)
    routed = route_node([xid(71, text=text)], node_running=True)
    assert routed.verdict == "REBOOT" and routed.hardware and "code and text disagree" in routed.verdict_evidence
    again = route_node([xid(71, text=text), xid(71, 60, text=text)], node_running=True,
                       reboot_times=[T0 + timedelta(minutes=30)])
    assert again.verdict == "REPLACE"


@pytest.mark.parametrize(
    "text",
    ["pid=7, name=python, Row Remapper: New row (0x00000000000f4b62) marked for remapping, reset gpu to activate.",
     "Row remapping pending"],
)
def test_xid_63_pending_activation_reboots(text: str) -> None:
    routing = route_node([xid(63, text=text)], node_running=True)
    assert routing.verdict == "REBOOT" and routing.hardware


def test_xid_63_alone_without_pending_is_monitor() -> None:
    assert route_node([xid(63, text="Row Remapper: remapped row")], node_running=True).verdict == "MONITOR"


def test_security_fault_reboots_without_hardware_grounds() -> None:
    routing = route_node([xid(110)], node_running=True)
    assert routing.verdict == "REBOOT" and not routing.hardware


def test_no_events_gives_no_verdict() -> None:
    routing = route_node([], node_running=True)
    assert routing.verdict is None and "coverage" in routing.verdict_evidence


# --------------------------------------------------------------------------- overrides


def test_override_is_named_in_the_classification() -> None:
    result = classify(31, "", overrides={31: "hardware"})
    assert (result.class_, result.override, result.catalog_class) == ("hardware", "hardware", "application")
    assert result.verdict == "REBOOT"
    assert classify(31, "", overrides={13: "hardware"}).override is None


def test_override_is_named_in_the_node_evidence() -> None:
    routing = route_node([xid(92)], node_running=True, overrides={92: "hardware"})
    assert routing.verdict == "REBOOT" and routing.cause_class == "hardware"
    assert "overridden to hardware by configuration (catalog: informational)" in routing.verdict_evidence


def test_override_with_an_unknown_class_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of"):
        classify(31, "", overrides={31: "fatal"})


# --------------------------------------------------------------------------- fleet


def test_fleet_pattern_f_application_on_many_nodes_no_hardware() -> None:
    classes = {"i-1": {"application"}, "i-2": {"application", "sympathetic"}}
    assert fleet_pattern(classes, {"i-1": {31}, "i-2": {13, 43}}, image_changed=False) == "F"
    assert fleet_pattern({"i-1": {"application"}}, {"i-1": {31}}, image_changed=False) is None
    with_hw = {**classes, "i-3": {"hardware"}}
    assert fleet_pattern(with_hw, {"i-1": {31}, "i-2": {13}, "i-3": {79}}, image_changed=False) is None


def test_fleet_pattern_e_gsp_on_several_nodes_after_an_image_change() -> None:
    classes = {"i-1": {"driver-config"}, "i-2": {"driver-config"}}
    codes = {"i-1": {119}, "i-2": {120}}
    assert fleet_pattern(classes, codes, image_changed=True) == "E"
    assert fleet_pattern(classes, codes, image_changed=False) is None
    assert fleet_pattern({"i-1": {"driver-config"}}, {"i-1": {119}}, image_changed=True) is None


# --------------------------------------------------------------------------- properties

_application_xid = st.builds(
    NodeXid,
    time=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)
    ),
    code=st.sampled_from(APPLICATION_CODES),
    pci=st.sampled_from([None, "0000:53:00", "0000:53:00.0", "0000:64:00"]),
    text=st.sampled_from(["", "pid=14760, name=oob, channel 0x8", "pid='<unknown>', name=<unknown>"]),
    hma_reason=st.sampled_from([None, "XidUserAppError"]),
)
_reboots = st.lists(
    st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)),
    max_size=3,
)


@given(events=st.lists(_application_xid, min_size=1, max_size=8), reboots=_reboots)
def test_application_xids_on_a_running_node_never_reboot_or_replace(
    events: list[NodeXid], reboots: list[datetime]
) -> None:
    routing = route_node(events, node_running=True, reboot_times=reboots)
    assert routing.verdict == "LEAVE ALONE"
    assert routing.verdict not in ("REPLACE", "REBOOT")
    assert routing.hardware is False
    assert routing.cause_class == "application"
