"""Xid catalog, parser, classifier and node router (RULES §6 and §7).

Three separate steps, each pure (no boto3, no clock):

- `parse_xid` turns one log message (kernel syslog line, journald text, HMA JSON) into an
  `XidLine`; `is_benign` filters the two known-harmless lines before counting.
- `classify` is the one source-agnostic judge: a code and its message text in, an
  `XidClassification` out. The catalog it reads is data (`data/xid_catalog.json`).
- `route_node` applies the node-level routing rules to one node's Xids in time order and
  returns exactly one `NodeRouting`; `fleet_pattern` looks across nodes (branches E, F).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Literal, NamedTuple, cast, get_args

from pydantic import ConfigDict, Field, model_validator

from gpuaudit.domain.markers import FALLEN_OFF_BUS_MARKER
from gpuaudit.model.evidence import Frozen
from gpuaudit.model.result import Verdict, XidClass
from gpuaudit.model.timeutil import iso

Rule = Literal["48", "63", "154", "GSP", "NVLink5"]
Memory = Literal["DRAM", "SRAM", "UNVERIFIED"]
RecoveryAction = Literal["None", "GPU Reset Required", "Node Reboot Required", "Drain P2P", "Drain and Reset"]
DecodeAction = Literal["RESET_GPU", "IGNORE", "XID_154_EVAL"]

CATALOG_PATH = Path(__file__).parent.parent / "data" / "xid_catalog.json"
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/"

# RULES §6 rule 48: the one check that settles the DRAM/SRAM split when the log cannot.
ECC_CHECK = (
    "nvidia-smi -q -d ECC: SRAM Threshold Exceeded, SRAM Uncorrectable Parity, "
    "SRAM Uncorrectable SEC-DED, DRAM Uncorrectable"
)
SRAM_FLAG_CHECK = "nvidia-smi -q -d ECC: SRAM Threshold Exceeded (Yes → REPLACE, RULES §6 rule 48)"
# RULES §6 rule 48: whatever the split, the bar for REPLACE is stated.
REPLACE_BAR_48 = ("bar for REPLACE: Xid 64 or a remap failure, `SRAM Threshold Exceeded: Yes`, or the 48 "
                  "recurring on the same bus")
GSP_ACTION = (
    "deactivate GSP (`NVreg_EnableGpuFirmware=0`): the fault recurs after reboots, a driver/firmware fault, "
    "not the GPU"
)
GSP_BLACKWELL_ACTION = (
    "stop/start the instance and escalate to support: GSP cannot be disabled on Blackwell; a driver/firmware "
    "fault, not the GPU"
)
GSP_UNKNOWN_ACTION = (
    "GPU generation not read: before Blackwell, deactivate GSP (`NVreg_EnableGpuFirmware=0`); on Blackwell, "
    "stop/start the instance and escalate to support; never replace for this fault"
)

XID_CLASSES: frozenset[str] = frozenset(get_args(XidClass))
# The REBOOT bar's words (RULES §7); rules/history.py says how far "first" was checked (earlier audits or not).
FIRST_OCCURRENCE = "first occurrence of a hardware-class Xid"


class _Model(Frozen):
    model_config = ConfigDict(populate_by_name=True)


# --------------------------------------------------------------------------- catalog


class CatalogEntry(_Model):
    """One code of NVIDIA's catalog, with the class and verdict RULES §6 maps its action to."""

    code: int
    mnemonic: str
    meaning: str  # NVIDIA's description, verbatim
    nvidia_action: str | None  # NVIDIA's immediate action, verbatim; None where NVIDIA lists none
    class_: XidClass = Field(validation_alias="class", serialization_alias="class")
    verdict: Verdict | None
    verdict_if_recurs: Verdict | None
    action_text: str
    rule: Rule | None = None
    qualifier_of: int | None = None
    rules_override: bool = False  # the RULES §6 table's row, not the action mapping
    note: str | None = None


class Nvlink5Decode(_Model):
    """One row of NVIDIA's "XID 144-150 Decode" sheet: IntrInfo bit masks (MSB first, `-` = any bit)
    for drivers before R575 (v1) and from R575 (v2), the error status it needs, and the action."""

    xid: int
    subcode: str
    intrinfo_v1: str
    intrinfo_v2: str
    error_status: str | None  # "0x00000002", "0x00000000/0xFFFFFFFF", or None (any)
    action: DecodeAction
    action2_intrinfo_v1: str | None = None
    action2_intrinfo_v2: str | None = None
    action2: DecodeAction | None = None
    severity: str  # the sheet's word: Fatal, Link Fatal, Non-fatal (`*` promotable, `**`/`?` not always fatal)
    hw_sw: str  # whether the condition is generally HW, SW, FW related (HW/SW: not uniquely classified)


class XidCatalog(_Model):
    source: tuple[str, ...]
    catalog_version: str
    reference_sha256: str
    checked: str
    codes: tuple[CatalogEntry, ...]
    nvlink5_decode: tuple[Nvlink5Decode, ...]

    @model_validator(mode="after")
    def _one_entry_per_code(self) -> XidCatalog:
        codes = [entry.code for entry in self.codes]
        if len(codes) != len(set(codes)):
            raise ValueError("xid_catalog.json lists a code twice")
        return self


@cache
def load_catalog() -> XidCatalog:
    """The catalog, read and validated once per process."""
    return XidCatalog.model_validate_json(CATALOG_PATH.read_text(encoding="utf-8"))


@cache
def catalog_by_code() -> Mapping[int, CatalogEntry]:
    return {entry.code: entry for entry in load_catalog().codes}


# --------------------------------------------------------------------------- parsing


class XidLine(_Model):
    code: int
    pci: str | None  # None: the bus field is absent, redacted or not a PCI bus ID
    gpu_instance: int | None = None  # MIG: the GPU instance the driver attributes the Xid to (`GPU-I:05`)
    compute_instance: int | None = None  # MIG: and its compute instance (`GPU-CI:02`)
    pid: int | None
    process: str | None
    text: str  # what follows the code and its separator, verbatim
    raw: str  # from `NVRM: Xid` to the end of the logical message, verbatim
    fallen_off_bus: bool = False  # an Xid-less "fallen off the bus" message, read as Xid 79 (RULES §6)


# `NVRM: Xid (PCI:0000:53:00): 31, …`; older drivers omit `PCI:`, some add the function `.0` or a
# non-zero domain; a redacted or odd bus field (`PCI:XXXX:XX:XX`, `<redacted>`) still has a code.
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[^()\n\"\\]{0,64})\)\s*[:,]?\s*(?P<code>\d+)\b\s*[:,]?\s*")
_PCI_ID = re.compile(r"(?:[0-9A-Fa-f]{1,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?")
# The parenthesis is the bus, then on a MIG GPU the instances the driver attributes the Xid to: the driver's
# three forms are `PCI:%04x:%02x:%02x`, `… GPU-I:%02u` and `… GPU-I:%02u GPU-CI:%02u` (kernel_rc.c).
_MIG_ATTRIBUTION = re.compile(r"(?P<key>GPU-C?I):(?P<value>\d+)")
_PID = re.compile(r"\bpid=(?:'?<unknown>'?|(?P<pid>\d+))")
_NAME = re.compile(r"\bname=(?P<name>[^,\s]+)")
_BUS = re.compile(r"(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{2}):(?P<device>[0-9a-f]{2})(?:\.[0-7])?$")


def _backslashes_before(message: str, index: int) -> int:
    count = 0
    while index - count - 1 >= 0 and message[index - count - 1] == "\\":
        count += 1
    return count


def _message_end(message: str, start: int, after: int) -> int:
    """Index where the logical message holding the Xid at `start` ends.

    A kernel line ends at its newline. Inside HMA or journald JSON the Xid sits in a string
    value (`"message":"[ 3246.3] NVRM: Xid …"`, escaped once more when that JSON was itself
    quoted), so it ends at the quote closing that string: a `"` behind exactly as many
    backslashes as the quote that opened it.
    """
    line_start = message.rfind("\n", 0, start) + 1
    line_end = message.find("\n", after)
    line_end = len(message) if line_end < 0 else line_end
    opening = message.rfind('"', line_start, start)
    if opening < 0:
        return line_end
    depth = _backslashes_before(message, opening)
    quote = message.find('"', after, line_end)
    while quote >= 0:
        if _backslashes_before(message, quote) == depth:
            return quote - depth
        quote = message.find('"', quote + 1, line_end)
    return line_end


def _process(text: str) -> tuple[str | None, int | None]:
    """Process name and PID named in the Xid text; `<unknown>` counts as not named."""
    pid_match = _PID.search(text)
    name_match = _NAME.search(text)
    pid = int(pid_match["pid"]) if pid_match and pid_match["pid"] else None
    name = name_match["name"].strip("'\"") if name_match else None
    return (None if name in (None, "", "<unknown>") else name), pid


def _bus_field(field: str) -> tuple[str | None, dict[str, int]]:
    """The parenthesis of an Xid line → the PCI bus ID (None when absent, redacted or odd) and the MIG
    instances named after it (`GPU-I`, `GPU-CI`). An unreadable bus never hides the instances, nor the reverse."""
    tokens = field.split()
    bus = tokens[0] if tokens and not _MIG_ATTRIBUTION.fullmatch(tokens[0]) else None
    instances = {m["key"]: int(m["value"]) for token in tokens if (m := _MIG_ATTRIBUTION.fullmatch(token))}
    return (bus if bus is not None and _PCI_ID.fullmatch(bus) else None), instances


def parse_xid(message: str) -> XidLine | None:
    """The first Xid in one log message, or None when it holds no `NVRM: Xid` line."""
    match = _XID.search(message)
    if match is None:
        return None
    end = _message_end(message, match.start(), match.end())
    text = message[match.end() : end].rstrip()
    process, pid = _process(text)
    pci, instances = _bus_field(match["bus"])
    return XidLine(
        code=int(match["code"]),
        pci=pci,
        gpu_instance=instances.get("GPU-I"),
        compute_instance=instances.get("GPU-CI"),
        pid=pid,
        process=process,
        text=text,
        raw=message[match.start() : end].rstrip(),
    )


# The driver's Xid-less report of a lost GPU, one message or split over several `NVRM:` lines:
# `NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.` and `NVRM: The NVIDIA GPU 0000:01:00.0
# / NVRM: (PCI ID: 10de:1b80) installed in this system has / NVRM: fallen off the bus and is not
# responding to commands.`
_FALLEN_START = re.compile(
    r"NVRM: (?:The NVIDIA GPU (?P<long>\S+)|GPU (?:at PCI:)?(?P<short>[0-9A-Fa-f:.]+):\s*GPU has fallen)"
)
_NVRM_PREFIX = re.compile(r"^.*?NVRM:\s?", re.DOTALL)
_FALLEN_CONTINUATION_LINES = 3  # the longest split the driver prints is three lines
SAME_EVENT = timedelta(seconds=60)  # an Xid 79 this close on the same bus is the same loss


def fallen_off_bus(stream: Sequence[tuple[datetime, str]]) -> dict[int, XidLine]:
    """RULES §6: the Xid-less "fallen off the bus" messages of one log stream, in time order, as Xid 79.

    Keyed by the index of the message that names the GPU (continuation lines are joined to it).
    A message that is itself the same loss as an `NVRM: Xid … 79` line on the same bus within a
    minute is not a second event: the newer drivers print both.
    """
    if not any(FALLEN_OFF_BUS_MARKER in message for _, message in stream):
        return {}  # the common case: a stream of ordinary NVRM lines costs one substring scan
    xid79 = [(time, bus_key(line.pci)) for time, message in stream if (line := parse_xid(message)) and line.code == 79]
    found: dict[int, XidLine] = {}
    for i, (time, message) in enumerate(stream):
        start = _FALLEN_START.search(message)
        if start is None or _XID.search(message):
            continue
        parts = [message[start.start() :]]
        for _, following in stream[i + 1 : i + 1 + _FALLEN_CONTINUATION_LINES]:
            if FALLEN_OFF_BUS_MARKER in " ".join(" ".join(parts).split()) or "NVRM:" not in following:
                break
            parts.append(_NVRM_PREFIX.sub("", following, count=1))
        joined = " ".join(" ".join(_NVRM_PREFIX.sub("", part, count=1) for part in parts).split())
        if FALLEN_OFF_BUS_MARKER not in joined:
            continue
        bus = (start["long"] or start["short"]).rstrip(".:,")
        pci = bus if _PCI_ID.fullmatch(bus) else None
        same_loss = any(
            abs(time - seen) <= SAME_EVENT and (pci is None or key in (None, bus_key(pci))) for seen, key in xid79
        )
        if same_loss:
            continue
        found[i] = XidLine(code=79, pci=pci, pid=None, process=None, text=joined, raw=f"NVRM: {joined}",
                           fallen_off_bus=True)
    return found


def is_benign(message: str) -> bool:
    """RULES §6: lines filtered before counting (not Xids, not faults)."""
    if "NVRM: API mismatch" in message:
        return True
    # systemd's legacy-path warning about the nvidia-fabricmanager unit's PIDFile=.
    return "PIDFile=" in message and re.search(r"fabric[-_ ]?manager", message, re.IGNORECASE) is not None


def bus_key(pci: str | None) -> str | None:
    """PCI bus ID reduced to domain:bus:device, lower case, so `0000:53:00.0` == `0000:53:00`."""
    if pci is None:
        return None
    text = pci.strip().lower().removeprefix("pci:")
    match = _BUS.search(text)
    if match is None:
        return text
    return f"{int(match['domain'] or '0', 16):04x}:{match['bus']}:{match['device']}"


# --------------------------------------------------------------------------- classify


class XidClassification(_Model):
    code: int
    class_: XidClass = Field(validation_alias="class", serialization_alias="class")
    catalog_class: XidClass | None  # None: the code is not in the catalog
    meaning: str | None
    verdict: Verdict | None  # first-occurrence verdict; None: no verdict without more evidence
    verdict_if_recurs: Verdict | None
    nvidia_action: str | None
    action_text: str | None
    unverified_reason: str | None = None
    override: XidClass | None = None  # class set by deployment configuration, always named
    rule: Rule | None = None
    qualifier_of: int | None = None
    memory: Memory | None = None  # rule 48 (and its qualifiers 171/172)
    recovery_action: RecoveryAction | None = None  # rule 154
    subcomponent: str | None = None  # rule NVLink5
    fatal: bool | None = None  # rule NVLink5
    link: int | None = None  # rule NVLink5, and Xid 71
    resolution: Literal["UNVERIFIED"] | None = None  # rule NVLink5: needs NVIDIA's register decode
    decoded_action: DecodeAction | None = None  # rule NVLink5: what NVIDIA's register decode says
    decode_note: str | None = None  # rule NVLink5: which decode row, and a disagreement with the printed word
    remap_pending: bool = False  # Xid 63 whose message asks for a GPU reset to activate the remap
    routed_as: int | None = None  # Xid 71 whose text names an NVLink fatal error: routed as this code
    disagreement: str | None = None  # code and text (or sources) disagree, said in the evidence
    deciding_check: str | None = None


# Verdict a class carries when configuration overrides a code's class (§6 verdict column).
_CLASS_VERDICT: dict[str, Verdict | None] = {
    "application": "LEAVE ALONE",
    "hardware": "REBOOT",
    "sympathetic": None,
    "informational": "MONITOR",
    "driver-config": "LEAVE ALONE",
    "unverified": None,
}

# Rule 48: the message names the memory that faulted. Both or neither named → undetermined.
_DRAM_WORDS = re.compile(r"frame ?buffer|\bFB\b|\bDRAM\b|\bHBM\b", re.IGNORECASE)
# An SM (streaming multiprocessor) exception names an engine, not an SRAM: it is no SRAM word.
_SRAM_WORDS = re.compile(r"\bSRAM\b|\bL1C?\b|\bL2\b|\bLRF\b|\bSHM\b|register file|shared memory", re.IGNORECASE)
# nvidia-smi -q -d ECC prints the aggregate flag padded: `SRAM Threshold Exceeded           : Yes`.
SRAM_THRESHOLD = re.compile(r"SRAM Threshold Exceeded\s*:\s*(?P<value>Yes|No)\b", re.IGNORECASE)
_RECOVERY = re.compile(
    r"recovery action changed from \S+ \([^)]*\) to (?P<hex>0x[0-9a-f]+)(?: \((?P<name>[^)]*)\))?",
    re.IGNORECASE,
)
_RECOVERY_BY_HEX: dict[int, RecoveryAction] = {
    0: "None",
    1: "GPU Reset Required",
    2: "Node Reboot Required",
    3: "Drain P2P",
    4: "Drain and Reset",
}
_REBOOT_ACTIONS = ("GPU Reset Required", "Node Reboot Required", "Drain and Reset")
# NVLink5 lines: `149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 …)`.
_NVLINK5 = re.compile(r"\b(?P<sub>[A-Z][A-Z0-9_]+)\s+(?P<severity>(?i:non[-_ ]?fatal|fatal))\b")
_LINK = re.compile(r"\blink\s+(?P<link>\d+)", re.IGNORECASE)


def memory_named(text: str) -> Memory:
    """RULES §6 rule 48: which memory the 48 message names, else UNVERIFIED."""
    return memory_words(text)[0]


def memory_words(text: str) -> tuple[Memory, str | None]:
    """Which memory the 48 message names, and the word that names it (None when neither or both are named)."""
    dram, sram = _DRAM_WORDS.search(text), _SRAM_WORDS.search(text)
    if (dram is None) != (sram is None):
        return ("DRAM", dram[0]) if dram else ("SRAM", sram[0] if sram else None)
    return "UNVERIFIED", None


class SramThreshold(_Model):
    """nvidia-smi's aggregate `SRAM Threshold Exceeded` flag as a log read on the node shows it (RULES §6, rule 48):
    the newest reading, with where it was read."""

    exceeded: bool
    time: datetime
    where: str  # `<log group> / <log stream>`

    def said(self) -> str:
        return (f"`SRAM Threshold Exceeded: {'Yes' if self.exceeded else 'No'}` read from nvidia-smi at {iso(self.time)} "
                f"in {self.where}")


def _override_for(code: int, overrides: Mapping[int, str] | None) -> XidClass | None:
    value = (overrides or {}).get(code)
    if value is None:
        return None
    if value not in XID_CLASSES:
        # A mistyped class must not silently reclassify a code; the config loader reports it.
        raise ValueError(f"Xid {code} override {value!r} is not one of {sorted(XID_CLASSES)}")
    return cast(XidClass, value)


_NVLINK_FATAL_TEXT = re.compile(r"nvlink.{0,40}\bfatal\b|\bfatal\b.{0,40}nvlink", re.IGNORECASE)
# Xid 63 asking for the reset that activates a remapped row (`… reset gpu to activate`).
_REMAP_PENDING = re.compile(r"reset (?:the )?gpu to activate|remap(?:ping)? pending|pending (?:row )?remap", re.IGNORECASE)


def _unknown(code: int, text: str) -> XidClassification:
    # RULES §6 "any other": quote verbatim, link the catalog, never guess a verdict.
    return XidClassification(
        code=code,
        class_="unverified",
        catalog_class=None,
        meaning=None,
        verdict=None,
        verdict_if_recurs=None,
        nvidia_action=None,
        action_text=None,
        unverified_reason=f"Xid {code} is not in the catalog; message verbatim: {text!r}; see {CATALOG_URL}",
    )


def _decode_48(base: XidClassification, text: str) -> XidClassification:
    memory: Memory = "DRAM" if base.code == 171 else "SRAM" if base.code == 172 else memory_named(text)
    if base.code != 48:
        return base.model_copy(update={"memory": memory})  # a qualifier: decided at node level
    if memory == "DRAM":
        return base.model_copy(update={"memory": memory, "verdict": "REBOOT", "verdict_if_recurs": "REPLACE"})
    if memory == "SRAM":
        return base.model_copy(
            update={"memory": memory, "verdict": "REBOOT", "deciding_check": SRAM_FLAG_CHECK}
        )
    return base.model_copy(
        update={
            "memory": memory,
            "deciding_check": ECC_CHECK,
            "unverified_reason": "the DRAM/SRAM split could not be determined from the log "
            "(no Xid 171/172, the message names neither the framebuffer nor an SRAM unit)",
        }
    )


def _decode_154(base: XidClassification, text: str) -> XidClassification:
    match = _RECOVERY.search(text)
    action: RecoveryAction | None = None
    disagreement = None
    if match:
        named = (match["name"] or "").strip()
        action = next((value for value in _RECOVERY_BY_HEX.values() if value.lower() == named.lower()), None)
        if action is None:
            action = _RECOVERY_BY_HEX.get(int(match["hex"], 16))
            if action is not None and named:  # newer drivers name some values differently (`0x1 (PF FLR)`)
                disagreement = f"the line names {match['hex']} {named!r}; read by its value as {action}"
    if action is None:
        return base.model_copy(
            update={
                "class_": "unverified",
                "unverified_reason": f"Xid 154 recovery action not readable; message verbatim: {text!r}",
            }
        )
    reboot = action in _REBOOT_ACTIONS
    verdict: Verdict | None = "REBOOT" if reboot else "MONITOR" if action == "Drain P2P" else None
    return base.model_copy(
        update={
            "recovery_action": action,
            "disagreement": disagreement,
            "class_": "hardware" if reboot else "informational",
            "verdict": verdict,
            "action_text": "drain the node's work, then reboot (GPU reset)" if action == "Drain and Reset"
            else base.action_text,
        }
    )


# The registers in parentheses after the link: `(<intrInfo> <errorStatus> <errorDebugData[0..4]>)`.
_NVLINK5_REGISTERS = re.compile(r"\(\s*(?P<intr>0x[0-9A-Fa-f]{1,8})\s+(?P<status>0x[0-9A-Fa-f]{1,8})\b")


def _mask_matches(mask: str | None, value: int) -> bool:
    """A decode mask is 32 bits MSB first; `-` is any bit."""
    if mask is None or len(mask) != 32:
        return False
    bits = f"{value:032b}"
    return all(m in ("-", b) for m, b in zip(mask, bits, strict=True))


def _status_matches(status: str | None, value: int) -> bool:
    return status is None or any(int(option, 16) == value for option in status.split("/"))


class Nvlink5Reading(NamedTuple):
    """What NVIDIA's register decode says of one NVLink5 line: the row, its severity, action and HW/SW column."""

    action: DecodeAction
    row: str  # which row, and which register layout
    severity: str  # the sheet's word; "promoted by action 2" when the promotable decode applied
    hw_sw: str

    @property
    def fatal(self) -> bool:
        return self.action == "RESET_GPU" or ("fatal" in self.severity.lower() and "non" not in self.severity.lower())

    @property
    def xid_class(self) -> XidClass:
        """RULES §6: a reset on a HW (or HW/SW) condition is hardware; on a SW/FW condition a reboot that is not a
        hardware verdict; IGNORE and the 154 evaluation are informational."""
        if self.action == "RESET_GPU":
            return "hardware" if "HW" in self.hw_sw else "driver-config"
        return "informational"

    def said(self) -> str:
        return f"NVIDIA's register decode ({self.row}): {self.severity}, {self.action}, {self.hw_sw}"


def decode_nvlink5(code: int, intr_info: int, error_status: int) -> Nvlink5Reading | None:
    """NVIDIA's "XID 144-150 Decode" for one line's registers: the row that matches, or None when no row matches
    or the two register layouts (before R575, from R575) give different actions.

    The driver version is not in the line, so both layouts are tried: a layout's masks fix the
    sub-component bits, so a line matches at most one in practice, and a tie that disagrees is no decode.
    """
    found: dict[DecodeAction, Nvlink5Reading] = {}
    for row in load_catalog().nvlink5_decode:
        if row.xid != code or not _status_matches(row.error_status, error_status):
            continue
        for layout, mask, action2_mask in (
            ("v1 (before R575)", row.intrinfo_v1, row.action2_intrinfo_v1),
            ("v2 (R575 and later)", row.intrinfo_v2, row.action2_intrinfo_v2),
        ):
            status = f"status {row.error_status or 'any'}, {layout}"
            if _mask_matches(mask, intr_info):
                found.setdefault(row.action, Nvlink5Reading(row.action, f"{row.subcode}, {status}", row.severity,
                                                            row.hw_sw))
            elif row.action2 is not None and _mask_matches(action2_mask, intr_info):
                found.setdefault(row.action2, Nvlink5Reading(row.action2, f"{row.subcode} (action 2), {status}",
                                                             f"{row.severity} promoted by action 2", row.hw_sw))
    if len(found) != 1:
        return None
    return next(iter(found.values()))


def _decode_nvlink5(base: XidClassification, text: str) -> XidClassification:
    match = _NVLINK5.search(text)
    link_match = _LINK.search(text)
    link = int(link_match["link"]) if link_match else None
    printed = None if match is None else match["severity"].lower() == "fatal"
    where = f"link {link}" if link is not None else "the link"
    registers = _NVLINK5_REGISTERS.search(text)
    decoded = decode_nvlink5(base.code, int(registers["intr"], 16), int(registers["status"], 16)) if registers else None
    update: dict[str, object] = {"subcomponent": match["sub"] if match else None, "fatal": printed, "link": link}
    if decoded is None:
        why = "the line carries no registers" if registers is None else "no row of the decode matches its registers"
        update |= {
            "resolution": "UNVERIFIED",
            "unverified_reason": f"precise resolution UNVERIFIED: {why} in NVIDIA's register decode ({CATALOG_URL})",
        }
        fatal = printed
    else:
        # RULES §6 rule NVLink5: where the decode is in the catalog data it decides (class and verdict), and a
        # printed word that disagrees with it is said, each side in its own words.
        fatal = decoded.fatal
        note = decoded.said()
        if printed is not None and printed != fatal:
            note += (f"; the line prints {match['severity'] if match else ''}, the decode says {decoded.severity} "
                     f"({decoded.action}): the decode decides")
            update["disagreement"] = note
        update |= {"decoded_action": decoded.action, "decode_note": note, "fatal": fatal,
                   "class_": decoded.xid_class}
        if decoded.action == "XID_154_EVAL":
            update |= {"verdict": "MONITOR", "deciding_check": "the decode says: follow the Xid 154 on this GPU"}
            return base.model_copy(update=update)
        if decoded.action == "IGNORE":
            update["verdict"] = "MONITOR"
            return base.model_copy(update=update)
    if fatal is True:
        hardware = update.get("class_", base.class_) == "hardware"
        update |= {
            "verdict": "REBOOT",
            "verdict_if_recurs": "REPLACE" if hardware else None,
            "deciding_check": f"nvidia-smi nvlink -s: {where} stays down → REBOOT; returns on the same link after "
            + ("the reboot → REPLACE" if hardware else "the reboot → a software/firmware fault: escalate, never REPLACE"),
        }
    elif fatal is False:
        update["verdict"] = "MONITOR"
    else:
        update["deciding_check"] = f"fatal/nonfatal flag not readable: decode the line with {CATALOG_URL}"
    return base.model_copy(update=update)


def _as_74(base: XidClassification, text: str) -> XidClassification:
    """RULES §6: a 71 whose own text names an NVLink fatal error is routed as 74, and the mismatch said."""
    entry = catalog_by_code()[74]
    link = _LINK.search(text)
    return base.model_copy(
        update={
            "class_": entry.class_,
            "verdict": entry.verdict,
            "verdict_if_recurs": entry.verdict_if_recurs,
            "action_text": entry.action_text,
            "routed_as": 74,
            "link": int(link["link"]) if link else None,
            "disagreement": "NVIDIA lists Xid 71 as a copy-engine (CE4) error, but this line's text names an NVLink "
            "fatal error: routed as Xid 74 (code and text disagree)",
        }
    )


def classify(code: int, text: str, overrides: Mapping[int, str] | None = None) -> XidClassification:
    """RULES §6: one code and its message text → class, verdict and the rule-specific decode.

    Source-agnostic: the same call judges a kernel line, a journald record or an HMA event.
    `overrides` maps a code to a class set by deployment configuration; the result names it
    in `override` (never silent) and takes that class's verdict instead of the rule's.
    Raises ValueError for an override that is not an XidClass.
    """
    entry = catalog_by_code().get(code)
    if entry is None:
        classification = _unknown(code, text)
    else:
        classification = XidClassification(
            code=code,
            class_=entry.class_,
            catalog_class=entry.class_,
            meaning=entry.meaning,
            verdict=entry.verdict,
            verdict_if_recurs=entry.verdict_if_recurs,
            nvidia_action=entry.nvidia_action,
            action_text=entry.action_text,
            rule=entry.rule,
            qualifier_of=entry.qualifier_of,
        )
        if entry.rule == "48" or entry.qualifier_of == 48:
            classification = _decode_48(classification, text)
        elif entry.rule == "154":
            classification = _decode_154(classification, text)
        elif entry.rule == "NVLink5":
            classification = _decode_nvlink5(classification, text)
        elif code == 71 and _NVLINK_FATAL_TEXT.search(text):
            classification = _as_74(classification, text)
        elif entry.rule == "63" and _REMAP_PENDING.search(text):
            classification = classification.model_copy(update={"remap_pending": True})
        elif entry.class_ == "unverified":
            classification = classification.model_copy(
                update={"unverified_reason": f"Xid {code} ({entry.meaning}) has no immediate action in NVIDIA's "
                        f"catalog; message verbatim: {text!r}; see {CATALOG_URL}"}
            )
    override = _override_for(code, overrides)
    if override is None or override == classification.class_:
        return classification
    return classification.model_copy(
        update={
            "class_": override,
            "override": override,
            "verdict": _CLASS_VERDICT[override],
            "verdict_if_recurs": "REPLACE" if override == "hardware" else None,
            "deciding_check": None,
            "unverified_reason": "class set to unverified by configuration"
            if override == "unverified"
            else None,
        }
    )


# --------------------------------------------------------------------------- node routing


class NodeXid(_Model):
    """One Xid on one node, from any source (kernel line or HMA detection)."""

    time: datetime
    code: int
    pci: str | None = None
    gpu_instance: int | None = None  # MIG attribution, as the line names it
    compute_instance: int | None = None
    text: str = ""
    hma_reason: str | None = None  # e.g. "XidUserAppError", "XidHardwareFailure"
    hma_recommendation: str | None = None


class NodeRouting(_Model):
    """Exactly one verdict for a node's Xids (RULES §7), with the evidence it rests on.

    `verdict` None means the Xids alone meet no §7 bar: rule 48 with the DRAM/SRAM split
    undetermined (`hypothesis` True and `deciding_check` names the check; the caller shows
    MONITOR with the hypothesis, never REPLACE and never REBOOT-as-if-DRAM), an unverified
    code, or an application Xid on a node that is not Running. `cause_code` is the Xid the
    verdict rests on. `hardware` is True only for REPLACE or REBOOT on hardware grounds
    (RULES §7: only then may the headline say "hardware error").
    """

    verdict: Verdict | None
    verdict_evidence: str
    cause_code: int | None = None
    cause_class: XidClass | None = None
    pci: str | None = None
    process: str | None = None
    pid: int | None = None
    hypothesis: bool = False
    deciding_check: str | None = None
    action_text: str | None = None
    hardware: bool = False


@dataclass(frozen=True)
class _Xid:
    event: NodeXid
    c: XidClassification


@dataclass(frozen=True)
class _Outcome:
    xid: _Xid
    verdict: Verdict | None
    rank: int
    finding: str  # the bar met, in words, for verdict_evidence
    hardware: bool = False
    hypothesis: bool = False
    deciding_check: str | None = None
    action_text: str | None = None


# Node-level precedence: the more decisive outcome wins, so hardware beats application (the
# §7 LEAVE ALONE bar needs "no hardware-class Xid"); a code NVIDIA gives no action for never
# outranks an application-class explanation (§6). Ties go to the earliest Xid, the candidate cause.
_RANK_REPLACE, _RANK_REBOOT, _RANK_HYPOTHESIS, _RANK_MONITOR = 70, 60, 50, 40
_RANK_NO_VERDICT, _RANK_DRIVER_CONFIG, _RANK_APPLICATION, _RANK_UNVERIFIED, _RANK_ORPHAN = 30, 20, 10, 5, 0
_RANK_NOTHING = -1  # Xid 154 "None": says nothing about the node


def _outcome(
    xid: _Xid,
    verdict: Verdict | None,
    finding: str,
    *,
    hardware: bool = False,
    hypothesis: bool = False,
    deciding_check: str | None = None,
    action_text: str | None = None,
    rank: int | None = None,
) -> _Outcome:
    if rank is None:
        if hypothesis:
            rank = _RANK_HYPOTHESIS
        elif verdict == "LEAVE ALONE":
            rank = _RANK_DRIVER_CONFIG if xid.c.class_ == "driver-config" else _RANK_APPLICATION
        else:
            rank = {"REPLACE": _RANK_REPLACE, "REBOOT": _RANK_REBOOT, "MONITOR": _RANK_MONITOR}.get(
                verdict or "", _RANK_NO_VERDICT
            )
    return _Outcome(xid, verdict, rank, finding, hardware, hypothesis, deciding_check, action_text)


def _same_gpu(a: NodeXid, b: NodeXid) -> bool:
    """Same GPU when the bus IDs agree; an unknown bus ID cannot tell GPUs apart."""
    return a.pci is None or b.pci is None or bus_key(a.pci) == bus_key(b.pci)


def _followed(i: int, xids: Sequence[_Xid]) -> _Xid | None:
    """RULES §6: a sympathetic Xid follows the latest non-sympathetic Xid before it on its GPU."""
    return next(
        (o for o in reversed(xids[:i]) if o.c.class_ != "sympathetic" and _same_gpu(o.event, xids[i].event)),
        None,
    )


def _rule_48(xid: _Xid, xids: Sequence[_Xid], sram: SramThreshold | None = None) -> _Outcome:
    """RULES §6 rule 48: decide which memory faulted before anything else, and say from what it was read."""
    event = xid.event
    qualifiers = [q.event for q in xids if q.c.qualifier_of == 48 and _same_gpu(q.event, event)]
    memory, word = memory_words(event.text) if event.code == 48 else (xid.c.memory or "UNVERIFIED", None)
    how = f"the 48's message names `{word}`" if word else "the message names it"
    if qualifiers:
        # The driver's own qualifier beats reading the text; the nearest one belongs to this 48.
        nearest = min(qualifiers, key=lambda q: abs((q.time - event.time).total_seconds()))
        memory, how = ("DRAM" if nearest.code == 171 else "SRAM"), f"Xid {nearest.code} at {iso(nearest.time)} on the node"
    if sram is not None and sram.exceeded:
        # The REPLACE bar (RULES §7 "SRAM threshold exceeded"): nvidia-smi's own flag, whichever memory the 48 named.
        named = {"DRAM": f"the 48 itself: DRAM ({how})", "SRAM": f"the 48 itself: SRAM ({how})",
                 "UNVERIFIED": "the 48's own DRAM/SRAM split not in the log (no Xid 171/172, no memory named)"}[memory]
        return _outcome(xid, "REPLACE", f"rule 48: SRAM threshold exceeded, {sram.said()}; {named}", hardware=True)
    flag = f"; {sram.said()}" if sram is not None else ""
    if memory == "DRAM":
        return _outcome(
            xid,
            "REBOOT",
            f"rule 48: DRAM ({how}), REBOOT retires the page / activates the "
            f"remapped row{flag}; {REPLACE_BAR_48}",
            hardware=True,
        )
    if memory == "SRAM":
        if sram is not None:  # the flag was read: No
            return _outcome(xid, "REBOOT", f"rule 48: SRAM ({how}){flag}: below the threshold, REBOOT; {REPLACE_BAR_48}",
                            hardware=True)
        return _outcome(
            xid,
            "REBOOT",
            f"rule 48: SRAM ({how}), REBOOT and check SRAM Threshold Exceeded; {REPLACE_BAR_48}",
            hardware=True,
            deciding_check=SRAM_FLAG_CHECK,
        )
    # Never REPLACE by default, nor REBOOT as if DRAM: a hypothesis with the check that settles it.
    return _outcome(
        xid,
        None,
        "rule 48: DRAM/SRAM split UNVERIFIED (no Xid 171/172 on the node, the "
        f"message names neither the framebuffer nor an SRAM unit){flag}; {REPLACE_BAR_48}",
        hypothesis=True,
        deciding_check=ECC_CHECK,
    )


def _judge(i: int, xids: Sequence[_Xid], node_running: bool, sram: SramThreshold | None = None) -> _Outcome | None:
    """One Xid's outcome on its node; None when another Xid on the node speaks for it."""
    xid = xids[i]
    event, c = xid.event, xid.c
    earlier = xids[:i]

    if event.hma_reason == "XidHardwareFailure":  # RULES §7 REPLACE bar (HMA's own judgement)
        recommendation = (event.hma_recommendation or "").lower()
        said = f"HMA XidHardwareFailure with recommendation {event.hma_recommendation!r}"
        if "replace" in recommendation:
            return _outcome(xid, "REPLACE", said, hardware=True)
        if "reboot" in recommendation:
            return _outcome(xid, "REBOOT", said, hardware=True)
        if c.class_ != "hardware":  # HMA and the catalog disagree: no verdict guessed, no LEAVE ALONE
            return _outcome(xid, None, f"{said}, while the catalog class is {c.class_}: the sources differ")

    if c.override is not None:
        hardware = c.class_ == "hardware" and c.verdict in ("REPLACE", "REBOOT")
        verdict = None if c.verdict == "LEAVE ALONE" and not node_running else c.verdict
        return _outcome(
            xid,
            verdict,
            f"class overridden to {c.override} by configuration (catalog: {c.catalog_class or 'not listed'})",
            hardware=hardware,
        )

    if c.class_ == "sympathetic":
        # RULES §6: 43/45 follow the Xid before them, which is the candidate cause.
        if _followed(i, xids) is not None:
            return None
        return _outcome(
            xid, "MONITOR", "sympathetic, and the Xid it follows is not in the window", rank=_RANK_ORPHAN
        )

    if c.qualifier_of == 48:
        if any(o.event.code == 48 and _same_gpu(o.event, event) for o in xids):
            return None  # rule 48 reads it for that Xid 48
        return _rule_48(xid, xids, sram)  # the 48 itself fell outside the window

    if c.rule == "48":
        return _rule_48(xid, xids, sram)

    if c.rule == "63":
        if c.remap_pending:
            return _outcome(xid, "REBOOT", "the message asks for a GPU reset to activate a remapped row", hardware=True)
        before = [
            o.event
            for o in earlier
            if (o.c.rule == "48" or o.c.qualifier_of == 48) and _same_gpu(o.event, event)
        ]
        if before:
            return _outcome(
                xid,
                "REBOOT",
                f"after Xid {before[-1].code} at {iso(before[-1].time)} a row remap is pending",
                hardware=True,
            )
        return _outcome(xid, "MONITOR", "63 alone is never a root cause")

    if c.rule == "NVLink5":
        flag = {True: "fatal", False: "nonfatal", None: "fatal/nonfatal flag not readable"}[c.fatal]
        link = c.link if c.link is not None else "not readable"
        resolution = c.decode_note or f"precise resolution UNVERIFIED ({CATALOG_URL})"
        finding = f"rule NVLink5: {c.subcomponent or 'sub-component not readable'}, {flag}, link {link}; {resolution}"
        if c.verdict == "REBOOT":
            finding += "; REBOOT candidate if the link stays down"
        return _outcome(
            xid,
            c.verdict,
            finding,
            hardware=c.class_ == "hardware" and c.verdict == "REBOOT",
            hypothesis=c.fatal is None,
            deciding_check=c.deciding_check,
        )

    if c.rule == "154":
        if c.recovery_action is None:
            return _outcome(xid, None, c.unverified_reason or "rule 154: recovery action not readable")
        if c.verdict is None:  # recovery action None: nothing to do
            return _outcome(xid, None, "rule 154: recovery action None, nothing to do", rank=_RANK_NOTHING)
        return _outcome(
            xid,
            c.verdict,
            f"rule 154: recovery action {c.recovery_action}" + (f" ({c.disagreement})" if c.disagreement else ""),
            hardware=c.verdict == "REBOOT",
            action_text=c.action_text,
        )

    if c.class_ == "unverified":
        listed = "no immediate action in NVIDIA's catalog" if c.catalog_class else "not in the catalog"
        return _outcome(
            xid,
            None,
            f"{listed}, quoted verbatim: {event.text!r}; see {CATALOG_URL}; no verdict guessed",
            rank=_RANK_UNVERIFIED,
        )

    if c.class_ == "application":
        source = "HMA reason XidUserAppError; " if event.hma_reason == "XidUserAppError" else ""
        if not node_running:
            return _outcome(
                xid,
                None,
                f"{source}application class, but the node is not Running: the "
                "LEAVE ALONE bar is not met and the Xid does not explain the node's state",
            )
        return _outcome(
            xid, "LEAVE ALONE", f"{source}node Running; no hardware-class Xid", action_text=c.action_text
        )

    if c.class_ == "driver-config" and c.verdict == "LEAVE ALONE":
        if not node_running:
            return _outcome(
                xid,
                None,
                "driver configuration fault, but the node is not Running: the LEAVE ALONE bar is not met",
            )
        return _outcome(xid, "LEAVE ALONE", f"driver configuration: {c.action_text}", action_text=c.action_text)

    hardware = c.class_ == "hardware" and c.verdict in ("REPLACE", "REBOOT")
    disagreement = f"; {c.disagreement}" if c.disagreement else ""
    if c.class_ == "hardware" and event.hma_reason == "XidUserAppError":
        disagreement += "; HMA says XidUserAppError, the catalog says hardware: hardware wins"
    finding = FIRST_OCCURRENCE if c.class_ == "hardware" else f"{c.class_} class"
    if c.rule == "GSP":
        finding = "first occurrence of a GSP fault: a GPU reset (reboot) clears it"
    return _outcome(xid, c.verdict, finding + disagreement, hardware=hardware, action_text=c.action_text)


def _recurrence(xids: Sequence[_Xid], reboot_times: Sequence[datetime]) -> _Outcome | None:
    """RULES §6/§7: the same hardware-class Xid on the same PCI bus before and after a reboot."""
    reboots = sorted(reboot_times)
    for j, later in enumerate(xids):
        if later.c.class_ != "hardware" or later.event.pci is None or later.c.qualifier_of is not None:
            continue
        for first in xids[:j]:
            if first.event.code != later.event.code or bus_key(first.event.pci) != bus_key(later.event.pci):
                continue
            if later.c.rule == "NVLink5" and not (
                first.c.fatal and later.c.fatal and first.c.link is not None and first.c.link == later.c.link
            ):
                continue  # NVLink5: only a fatal error returning on the same link counts
            reboot = next((r for r in reboots if first.event.time < r < later.event.time), None)
            if reboot is not None:
                return _outcome(
                    later,
                    "REPLACE",
                    f"also at {iso(first.event.time)}, before the reboot at "
                    f"{iso(reboot)}: a hardware-class Xid recurring on the same PCI bus across a "
                    "reboot",
                    hardware=True,
                )
    return None


_BLACKWELL_GPU = re.compile(r"\bG?B[1-3]\d\d\b|Blackwell", re.IGNORECASE)
_BLACKWELL_TYPES = ("p6-", "p6e-", "g7e.")
_EARLIER_TYPES = ("p3", "p4", "p5", "g4", "g5", "g6")


def is_blackwell(instance_type: str | None, gpu_name: str | None) -> bool | None:
    """Whether the node's GPUs are Blackwell (GSP cannot be disabled there); None when not read."""
    if gpu_name:
        return _BLACKWELL_GPU.search(gpu_name) is not None
    if instance_type and instance_type.startswith(_BLACKWELL_TYPES):
        return True
    if instance_type and instance_type.startswith(_EARLIER_TYPES):
        return False
    return None


def _gsp_recurrence(
    xids: Sequence[_Xid], reboot_times: Sequence[datetime], blackwell: bool | None
) -> _Outcome | None:
    """RULES §6 119/120: recurring after a reboot is a driver/firmware fault, never the GPU (never REPLACE)."""
    gsp = [x for x in xids if x.c.rule == "GSP" and x.c.override is None]
    for j, later in enumerate(gsp):
        for first in gsp[:j]:
            reboot = next((r for r in sorted(reboot_times) if first.event.time < r < later.event.time), None)
            if reboot is None or not _same_gpu(first.event, later.event):
                continue
            said = (
                f"GSP fault (Xid {first.event.code} at {iso(first.event.time)}) recurring after the reboot at "
                f"{iso(reboot)}: a driver/firmware fault, not the GPU, never REPLACE"
            )
            if blackwell is False:
                return _outcome(later, "LEAVE ALONE", f"{said}; GPU before Blackwell: {GSP_ACTION}",
                                action_text=GSP_ACTION, rank=_RANK_DRIVER_CONFIG)
            if blackwell is True:
                return _outcome(later, "REBOOT", f"{said}; Blackwell GPU: {GSP_BLACKWELL_ACTION}",
                                action_text=GSP_BLACKWELL_ACTION)
            return _outcome(later, None, f"{said}; GPU generation not read", hypothesis=True,
                            deciding_check="GPU generation (instance type, `nvidia-smi --query-gpu=name`): "
                            "before Blackwell → deactivate GSP (LEAVE ALONE); Blackwell → stop/start and escalate",
                            action_text=GSP_UNKNOWN_ACTION)
    return None


def route_node(
    events: Sequence[NodeXid],
    *,
    node_running: bool,
    reboot_times: Sequence[datetime] = (),
    overrides: Mapping[int, str] | None = None,
    blackwell: bool | None = None,
    sram_threshold: SramThreshold | None = None,
) -> NodeRouting:
    """RULES §6 routing rules and §7 bars over one node's Xids → exactly one NodeRouting.

    `blackwell` (see `is_blackwell`) decides the action for a GSP fault (119/120) that recurs;
    `sram_threshold`, nvidia-smi's flag as read on the node, settles rule 48.
    """
    if not events:
        return NodeRouting(
            verdict=None,
            verdict_evidence="no Xid on this node in the window; whether that "
            "means no errors depends on proven log coverage (RULES §4)",
        )
    xids = [
        _Xid(event, _with_hma(event, classify(event.code, event.text, overrides)))
        for event in sorted(events, key=lambda event: event.time)
    ]
    judged = [outcome for i in range(len(xids)) if (outcome := _judge(i, xids, node_running, sram_threshold))
              is not None]
    gsp = _gsp_recurrence(xids, reboot_times, blackwell)
    if gsp is not None:  # the recurrence, not each first occurrence, speaks for the node's GSP faults
        judged = [gsp] + [outcome for outcome in judged if outcome.xid.c.rule != "GSP"]
    recurring = _recurrence(xids, reboot_times)
    if recurring is not None:
        judged.insert(0, recurring)  # the strongest REPLACE evidence, named first among equals
    best = max(judged, key=lambda outcome: outcome.rank)  # max keeps the first among equals
    if best.rank == _RANK_NOTHING:
        return NodeRouting(verdict=None, verdict_evidence=f"Xid {best.xid.event.code}: {best.finding}")
    return _routing(best, xids, judged, node_running)


def _with_hma(event: NodeXid, c: XidClassification) -> XidClassification:
    """HMA's XidUserAppError names the class of a code the catalog does not list (RULES §7
    LEAVE ALONE bar). It never lowers a catalog class: hardware wins over application."""
    if event.hma_reason == "XidUserAppError" and c.class_ == "unverified" and c.override is None:
        return c.model_copy(
            update={"class_": "application", "verdict": "LEAVE ALONE", "unverified_reason": None}
        )
    return c


def mig_text(gpu_instance: int | None, compute_instance: int | None) -> str:
    """The MIG instance an Xid is attributed to, as the driver numbers it (`GPU-I:05 GPU-CI:02`), or ''."""
    named = [f"{key}:{value:02d}" for key, value in (("GPU-I", gpu_instance), ("GPU-CI", compute_instance))
             if value is not None]
    return f", MIG instance {' '.join(named)}" if named else ""


def _routing(
    best: _Outcome, xids: Sequence[_Xid], judged: Sequence[_Outcome], node_running: bool
) -> NodeRouting:
    event, c = best.xid.event, best.xid.c
    process, pid = _process(event.text)
    where = f" on PCI {event.pci}" if event.pci else " (PCI bus not in the message)"
    where += mig_text(event.gpu_instance, event.compute_instance)
    owner = ""
    if process or pid is not None:
        owner = f", process {process or '<unknown>'} pid {pid if pid is not None else '<unknown>'}"
    parts = [
        f"Xid {event.code} ({c.meaning or 'not in the catalog'}, {c.class_} class){where}{owner}",
        best.finding,
    ]
    followers = sorted(
        {
            x.event.code
            for i, x in enumerate(xids)
            if x.c.class_ == "sympathetic" and _followed(i, xids) is best.xid
        }
    )
    if followers:
        parts.append(f"Xid {', '.join(map(str, followers))} follow{'s' if len(followers) == 1 else ''} it")
    others = sorted({o.xid.event.code for o in judged} - {event.code})
    if others:
        parts.append(f"also on the node: Xid {', '.join(map(str, others))}")
    if best.verdict != "LEAVE ALONE" and "Running" not in best.finding:
        parts.append(f"node {'Running' if node_running else 'not Running'}")
    conclusion = best.verdict or (
        "hypothesis, verdict held until the deciding check" if best.hypothesis else "no verdict"
    )
    return NodeRouting(
        verdict=best.verdict,
        verdict_evidence="; ".join(parts) + f" → {conclusion}",
        cause_code=event.code,
        cause_class=c.class_,
        pci=event.pci,
        process=process,
        pid=pid,
        hypothesis=best.hypothesis,
        deciding_check=best.deciding_check,
        action_text=best.action_text,
        hardware=best.hardware and best.verdict in ("REPLACE", "REBOOT"),
    )


# --------------------------------------------------------------------------- fleet


def fleet_pattern(
    per_node_classes: Mapping[str, set[str]],
    codes_by_node: Mapping[str, set[int]],
    image_changed: bool,
) -> str | None:
    """RULES §6 routing across nodes: "E" (119/120 on several nodes after an AMI or driver
    change) or "F" (application class on many nodes, no hardware class anywhere), else None.

    E is checked first: a driver change explains the application crashes that GSP faults cause.
    """
    gsp_nodes = [node for node, codes in codes_by_node.items() if codes & {119, 120}]
    if image_changed and len(gsp_nodes) >= 2:
        return "E"
    app_nodes = [node for node, classes in per_node_classes.items() if "application" in classes]
    hardware_anywhere = any("hardware" in classes for classes in per_node_classes.values())
    if len(app_nodes) >= 2 and not hardware_anywhere:
        return "F"
    return None
