"""The Xid catalog and the one classifier (RULES §6): a code and its message text in, an `XidClassification`
out, from NVIDIA's catalog as data (`data/xid_catalog.json`) and the rules that need more than the catalog's
action (48, 63, 154, NVLink5, GSP). Source-agnostic and pure: the line forms are `rules/xid_lines.py`, the
routing of one node's Xids to a verdict `rules/xid_routing.py`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Literal, NamedTuple, cast, get_args

from pydantic import Field, model_validator

from gpuaudit.model.result import Verdict, XidClass
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.xid_lines import XidModel

Rule = Literal["48", "63", "154", "GSP", "NVLink5"]
FaultedMemory = Literal["DRAM", "SRAM", "UNVERIFIED"]  # which memory an ECC fault names (rule 48)
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



# --------------------------------------------------------------------------- catalog


class CatalogEntry(XidModel):
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


class Nvlink5Decode(XidModel):
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


class XidCatalog(XidModel):
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




# --------------------------------------------------------------------------- classify


class XidClassification(XidModel):
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
    memory: FaultedMemory | None = None  # rule 48 (and its qualifiers 171/172)
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


def memory_named(text: str) -> FaultedMemory:
    """RULES §6 rule 48: which memory the 48 message names, else UNVERIFIED."""
    return memory_words(text)[0]


def memory_words(text: str) -> tuple[FaultedMemory, str | None]:
    """Which memory the 48 message names, and the word that names it (None when neither or both are named)."""
    dram, sram = _DRAM_WORDS.search(text), _SRAM_WORDS.search(text)
    if (dram is None) != (sram is None):
        return ("DRAM", dram[0]) if dram else ("SRAM", sram[0] if sram else None)
    return "UNVERIFIED", None


class SramThreshold(XidModel):
    """nvidia-smi's aggregate `SRAM Threshold Exceeded` flag as a log read on the node shows it (RULES §6, rule 48):
    the newest reading, with where it was read."""

    exceeded: bool
    time: datetime
    where: str  # `<log group> / <log stream>`

    def said(self) -> str:
        return (f"`SRAM Threshold Exceeded: {'Yes' if self.exceeded else 'No'}` "
                f"read from nvidia-smi at {iso(self.time)} in {self.where}")


def _override_for(code: int, overrides: Mapping[int, str] | None) -> XidClass | None:
    value = (overrides or {}).get(code)
    if value is None:
        return None
    if value not in XID_CLASSES:
        # A mistyped class must not silently reclassify a code; the config loader reports it.
        raise ValueError(f"Xid {code} override {value!r} is not one of {sorted(XID_CLASSES)}")
    return cast(XidClass, value)


_NVLINK_FATAL_TEXT = re.compile(r"nvlink.{0,40}\bfatal\b|\bfatal\b.{0,40}nvlink", re.IGNORECASE)
# Xid 63 asking for the reset that activates a remapped row (`… reset gpu to activate`), or on page-retirement GPUs
# for the reboot that activates a retired page (`… reboot to activate`): a reboot resets the GPU.
_REMAP_PENDING = re.compile(r"(?:reset (?:the )?gpu|reboot) to activate|remap(?:ping)? pending|pending (?:row )?remap",
                            re.IGNORECASE)


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
    memory: FaultedMemory = "DRAM" if base.code == 171 else "SRAM" if base.code == 172 else memory_named(text)
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
        # They disagree where the printed word would act otherwise than the decode: a printed Fatal is a reboot
        # candidate, a printed Nonfatal is watched; the decode resets only on RESET_GPU (a `Link Fatal` row
        # whose action is IGNORE disagrees with a printed Fatal although both say fatal).
        if printed is not None and printed != (decoded.action == "RESET_GPU"):
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
            + ("the reboot → REPLACE" if hardware else "the reboot → a "
               "software/firmware fault: escalate, never REPLACE"),
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
