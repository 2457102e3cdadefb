"""Xid catalog, parser, classifier and node router (RULES §6, §7)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaudit.model.timeutil import UTC
from gpuaudit.rules.xid import (
    CATALOG_URL,
    ECC_CHECK,
    XID_CLASSES,
    NodeXid,
    catalog_by_code,
    classify,
    fleet_pattern,
    is_benign,
    load_catalog,
    parse_xid,
    route_node,
)

T0 = datetime(2026, 9, 25, 17, 0, tzinfo=UTC)
BUS = "0000:53:00"
APPLICATION_CODES = (11, 13, 25, 31, 32, 137, 94)

# RULES §6, written out by hand: code -> (class, first-occurrence verdict, verdict if it recurs).
# None for a verdict the rule or the node decides (48, 144-150, 154, sympathetic, qualifiers).
EXPECTED: dict[int, tuple[str, str | None, str | None]] = {
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
    71: ("hardware", "REBOOT", "REPLACE"),
    74: ("hardware", "REBOOT", "REPLACE"),
    79: ("hardware", "REBOOT", "REPLACE"),
    92: ("informational", "MONITOR", None),
    94: ("application", "LEAVE ALONE", None),
    95: ("hardware", "REBOOT", "REPLACE"),
    109: ("hardware", "REBOOT", "REPLACE"),
    110: ("driver-config", "REBOOT", None),
    119: ("driver-config", "LEAVE ALONE", None),
    120: ("driver-config", "LEAVE ALONE", None),
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
    155: ("informational", "MONITOR", None),
    156: ("informational", "MONITOR", None),
    157: ("hardware", "REPLACE", None),
    158: ("hardware", "REBOOT", "REPLACE"),
    171: ("hardware", None, None),
    172: ("hardware", None, None),
}

HMA_MESSAGE = (
    '{"level":"info","ts":"2026-09-25T17:03:00Z","msg":"NPD caught event: %v","details: ":'
    '{"severity":"warn","timestamp":"2026-09-25T17:02:59Z","reason":"XidUserAppError","message":'
    '"[ 3246.318002] NVRM: Xid (PCI:0000:00:1e): 31, pid=14760, name=oob, channel 0x00000008, '
    "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_T1_0 faulted @ 0x7c9d_19c00000. "
    'Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"},"HealthMonitoringAgentDetectionEvent":"HealthEvent"}'
)


def xid(code: int, minutes: float = 0, pci: str | None = BUS, text: str = "", **kw: str) -> NodeXid:
    return NodeXid(time=T0 + timedelta(minutes=minutes), code=code, pci=pci, text=text, **kw)


# --------------------------------------------------------------------------- catalog


def test_catalog_cites_its_source_and_date() -> None:
    catalog = load_catalog()
    assert CATALOG_URL in catalog.source
    assert "RULES.md §6" in catalog.source
    assert catalog.checked == "2026-12-02"


def test_catalog_and_expected_table_hold_the_same_codes() -> None:
    assert set(catalog_by_code()) == set(EXPECTED)


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_catalog_row_pins_class_and_verdict(code: int) -> None:
    entry = catalog_by_code()[code]
    assert (entry.class_, entry.verdict, entry.verdict_if_recurs) == EXPECTED[code]
    assert entry.meaning and entry.action_text


@pytest.mark.parametrize("code", sorted(c for c, e in catalog_by_code().items() if e.rule is None))
def test_classify_returns_the_catalog_row_for_codes_without_a_rule(code: int) -> None:
    result = classify(code, "")
    assert (result.class_, result.verdict, result.verdict_if_recurs) == EXPECTED[code]
    assert result.override is None


def test_every_class_is_reachable() -> None:
    reached = {entry.class_ for entry in catalog_by_code().values()} | {classify(999, "").class_}
    assert reached == XID_CLASSES


def test_gsp_and_qualifier_rows_carry_their_action() -> None:
    assert catalog_by_code()[119].action_text == "deactivate GSP (a reboot does not stop recurrence)"
    assert catalog_by_code()[171].qualifier_of == 48
    assert catalog_by_code()[172].qualifier_of == 48


@pytest.mark.parametrize("code", [999, 1, 200])
def test_unknown_code_is_unverified_never_replace(code: int) -> None:
    result = classify(code, "some new driver text")
    assert result.class_ == "unverified"
    assert result.meaning is None
    assert result.verdict is None and result.verdict_if_recurs is None
    assert result.unverified_reason and "'some new driver text'" in result.unverified_reason
    assert CATALOG_URL in result.unverified_reason


def test_unknown_code_on_a_node_gets_no_verdict_and_blocks_leave_alone() -> None:
    alone = route_node([xid(999, text="odd text")], node_running=True)
    assert alone.verdict is None and not alone.hardware
    assert "'odd text'" in alone.verdict_evidence
    with_app = route_node([xid(31, text="pid=1, name=x"), xid(999, 1)], node_running=True)
    assert with_app.verdict is None


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
        ("0x0 (None)", "informational", "MONITOR"),
        ("0x1 (GPU Reset Required)", "hardware", "REBOOT"),
        ("0x2 (Node Reboot Required)", "hardware", "REBOOT"),
        ("0x3 (Drain P2P)", "informational", "MONITOR"),
        ("0x4 (Drain and Reset)", "informational", "MONITOR"),
    ],
)
def test_rule_154_value_decides(value: str, klass: str, verdict: str) -> None:
    result = classify(154, f"GPU recovery action changed from 0x0 (None) to {value}")
    assert (result.class_, result.verdict) == (klass, verdict)
    assert result.recovery_action == value.split(" (")[1].rstrip(")")
    routing = route_node(
        [xid(154, text=f"GPU recovery action changed from 0x0 (None) to {value}")], node_running=True
    )
    assert routing.verdict == verdict and routing.hardware == (verdict == "REBOOT")


def test_rule_154_unreadable_value_is_unverified() -> None:
    result = classify(154, "GPU recovery action changed")
    assert result.class_ == "unverified" and result.verdict is None
    assert route_node([xid(154, text="GPU recovery action changed")], node_running=True).verdict is None


# --------------------------------------------------------------------------- rule NVLink5

FATAL_149 = "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000)"
NONFATAL_145 = "RLW_REMAP Nonfatal XC0 i0 Link 07 (0x00000000 0x00000000)"


def test_nvlink5_fatal_decode_and_reboot_candidate() -> None:
    result = classify(149, FATAL_149)
    assert (result.subcomponent, result.fatal, result.link) == ("NETIR_LINK_EVT", True, 1)
    assert result.resolution == "UNVERIFIED" and result.verdict == "REBOOT"
    routing = route_node([xid(149, text=FATAL_149)], node_running=True)
    assert routing.verdict == "REBOOT" and routing.hardware
    assert routing.deciding_check and "link 1 stays down" in routing.deciding_check
    assert "UNVERIFIED" in routing.verdict_evidence and CATALOG_URL in routing.verdict_evidence


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


@pytest.mark.parametrize("code", [119, 120])
def test_gsp_error_is_leave_alone_with_deactivate_gsp(code: int) -> None:
    routing = route_node(
        [xid(code, text="Timeout after 45s of waiting for RPC response from GPU0 GSP")], node_running=True
    )
    assert routing.verdict == "LEAVE ALONE" and not routing.hardware
    assert routing.action_text and "deactivate GSP" in routing.action_text


@pytest.mark.parametrize("code", [64, 157])
def test_remap_failure_and_retirement_failure_are_replace(code: int) -> None:
    routing = route_node([xid(code)], node_running=True)
    assert routing.verdict == "REPLACE" and routing.hardware


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
