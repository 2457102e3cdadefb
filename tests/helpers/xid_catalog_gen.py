"""Regenerates `functions/gpuaudit/data/xid_catalog.json` from NVIDIA's Xid catalog (RULES §6).

    python -m tests.helpers.xid_catalog_gen ../shared/reference/nvidia-xid-catalog.json

Every code NVIDIA lists becomes one row: NVIDIA's mnemonic, description and immediate action
verbatim, and the class and verdict RULES §6 maps that action to. The codes the RULES table
says more about (48, 63, 71, 119/120, 144-150, 154-157, ...) take the table's row instead, and
say so in `rules_override`. The NVLink5 (144-150) register decode is copied as NVIDIA gives it.
`tests/unit/test_xid.py` checks the result against the reference both ways.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "data" / "xid_catalog.json"
CHECKED = "2026-12-02"

RESTART = ("restart the application; hand the process name and PID to the application owner; leave the node alone "
           "unless a hardware-class Xid is on the same node")
HW_REBOOT = "reboot the node; replace it if the same Xid returns on the same PCI bus after the reboot"
CASE = "open a case with support (NVIDIA: CONTACT_SUPPORT); keep the node under watch"

# RULES §6: what an NVIDIA immediate action means here (class, verdict, verdict if it recurs, action).
BY_ACTION: dict[str | None, tuple[str, str | None, str | None, str]] = {
    "RESTART_APP": ("application", "LEAVE ALONE", None, RESTART),
    "IGNORE": ("informational", "MONITOR", None, "no action (NVIDIA: IGNORE); keep the node under watch"),
    "RESET_GPU": ("hardware", "REBOOT", "REPLACE", HW_REBOOT),
    "RESTART_BM": ("hardware", "REBOOT", "REPLACE", HW_REBOOT),
    "RESTART_VM": ("hardware", "REBOOT", "REPLACE", HW_REBOOT),
    "CONTACT_SUPPORT": ("informational", "MONITOR", None, CASE),
    # Not in the RULES table's action list; the nearest reading, said in the row's note.
    "CHECK_MECHANICALS": ("informational", "MONITOR", None,
                          "NVIDIA: check the board's seating and auxiliary power; on a cloud instance only the "
                          "provider can, so open a case with support"),
    "UPDATE_SWFW": ("driver-config", "LEAVE ALONE", None,
                    "update the driver and firmware (NVIDIA: UPDATE_SWFW); a software fault, not the GPU"),
    "CHECK_UVM": ("informational", "MONITOR", None,
                  "if UVM or vGPU is in use, reset the GPU (reboot); otherwise no action (NVIDIA: CHECK_UVM)"),
    None: ("unverified", None, None,
           "NVIDIA lists no action for this code: quote the line, link the catalog, no verdict guessed"),
}
ACTION_NOTES = {
    "CHECK_MECHANICALS": "RULES §6 maps no verdict to CHECK_MECHANICALS; read as CONTACT_SUPPORT (MONITOR, open a "
                         "case) because the operator of a cloud instance cannot reseat a board",
    "UPDATE_SWFW": "RULES §6 maps no verdict to UPDATE_SWFW; read as a node configuration fault (§7 LEAVE ALONE)",
    "CHECK_UVM": "RULES §6 maps no verdict to CHECK_UVM; whether UVM/vGPU is in use is not in the log, so MONITOR "
                 "with the condition named",
    None: "NVIDIA lists the code without an immediate action: unverified, like a code NVIDIA does not list",
}

NVLINK5_TEXT = ("quote the line; NVIDIA's register decode (IntrInfo, error status) decides where the line carries "
                "it: RESET_GPU → reboot, replace if it returns on the same link after the reboot; IGNORE → monitor; "
                "otherwise the printed Fatal/Nonfatal word, resolution UNVERIFIED")


def _row(cls: str, verdict: str | None, recurs: str | None, action: str, **extra: Any) -> dict[str, Any]:
    return {"class": cls, "verdict": verdict, "verdict_if_recurs": recurs, "action_text": action, **extra}


# RULES §6 table rows that say more than NVIDIA's action (or differ from it).
RULES_ROWS: dict[int, dict[str, Any]] = {
    43: _row("sympathetic", None, None, "follow the Xid before it: that Xid is the candidate cause"),
    45: _row("sympathetic", None, None, "follow the other Xid: it is the candidate cause"),
    48: _row("hardware", None, None,
             "decide DRAM or SRAM first (rule 48, NVIDIA Xid-48 workflow): DRAM → reboot; SRAM → reboot and check "
             "SRAM Threshold Exceeded; undetermined → hypothesis, run nvidia-smi -q -d ECC", rule="48"),
    63: _row("informational", "MONITOR", None,
             "monitor; a row remap pending activation (the message asks for a GPU reset, or an Xid 48 came "
             "before) → reboot to activate it", rule="63"),
    64: _row("hardware", "REPLACE", None, "replace the node (stop/start): the row remapper failed"),
    71: _row("application", "LEAVE ALONE", None, RESTART,
             note="NVIDIA lists 71 as a copy-engine (CE4) error; some vendor pages print NVLink-fatal text under "
                  "71: a 71 whose own text names an NVLink fatal error is routed as 74, and the disagreement said"),
    74: _row("hardware", "REBOOT", "REPLACE", HW_REBOOT + " (NVLink; NVIDIA NVLink workflow)"),
    79: _row("hardware", "REBOOT", "REPLACE", "reboot first; replace (stop/start) if it persists after the reboot"),
    94: _row("application", "LEAVE ALONE", None,
             "restart the application; leave the node running and reset the GPU when convenient"),
    110: _row("driver-config", "REBOOT", None, "reboot; investigate software (not a hardware verdict)",
              note="RULES §6 gives REBOOT with no class; classed driver-config so it never reads as hardware"),
    119: _row("driver-config", "REBOOT", None,
              "first occurrence: reboot (GPU reset); recurring after reboots: a driver/firmware fault, never replace "
              "(deactivate GSP before Blackwell; stop/start and escalate on Blackwell)", rule="GSP"),
    120: _row("driver-config", "REBOOT", None,
              "first occurrence: reboot (GPU reset); recurring after reboots: a driver/firmware fault, never replace "
              "(deactivate GSP before Blackwell; stop/start and escalate on Blackwell)", rule="GSP"),
    137: _row("application", "LEAVE ALONE", None,
              "application fault, not NVLink hardware: hand the process to the application owner"),
    151: _row("driver-config", "REBOOT", None, "reboot (NVIDIA: restart the VM); not a hardware verdict",
              note="RULES §6 gives REBOOT with no class; classed driver-config so it never reads as hardware"),
    154: _row("informational", None, None,
              "the recovery action in the message decides: Drain and Reset, GPU Reset Required, Node Reboot Required "
              "→ reboot (after draining work, for Drain and Reset); Drain P2P → monitor; None → nothing", rule="154"),
    155: _row("driver-config", "REBOOT", None, "reboot (GPU reset); not a hardware verdict alone",
              note="Sources differ: the ECS GPU auto-repair page calls 155 an NVLink flit CRC error; this follows "
                   "NVIDIA"),
    156: _row("informational", "REBOOT", None, "reboot (GPU reset): the reset completes the retirement",
              note="Sources differ: the ECS GPU auto-repair page calls 156 an NVLink lane error; this follows NVIDIA"),
    157: _row("informational", "MONITOR", None,
              "workloads may still run; the GPU has run out of retirement capacity: plan a replacement (stop/start) "
              "at the next maintenance window"),
    171: _row("hardware", None, None, "not standalone: the Xid 48 was in DRAM → rule 48", qualifier_of=48),
    172: _row("hardware", None, None, "not standalone: the Xid 48 was in SRAM → rule 48", qualifier_of=48),
}
for _code in range(144, 151):
    RULES_ROWS[_code] = _row("hardware", None, None, NVLINK5_TEXT, rule="NVLink5")
for _code in (11, 13, 25, 31, 32):  # the RULES table names them; the action mapping gives the same row
    RULES_ROWS[_code] = _row("application", "LEAVE ALONE", None, RESTART)
for _code in (46, 62, 95, 109, 136, 140, 143, 158):
    RULES_ROWS[_code] = _row("hardware", "REBOOT", "REPLACE", HW_REBOOT)
RULES_ROWS[92] = _row("informational", "MONITOR", None, "monitor; watch for Xid 48 or 64")


def generate(reference_path: Path) -> dict[str, Any]:
    raw = reference_path.read_bytes()
    reference = json.loads(raw)
    codes = []
    for xid in reference["xids"]:
        action = xid["immediate_action"]
        row: dict[str, Any] = {
            "code": xid["code"],
            "mnemonic": xid["mnemonic"],
            "meaning": xid["description"],
            "nvidia_action": action,
        }
        if xid["code"] in RULES_ROWS:
            row |= RULES_ROWS[xid["code"]] | {"rules_override": True}
        else:
            cls, verdict, recurs, text = BY_ACTION[action]
            row |= _row(cls, verdict, recurs, text)
            if action in ACTION_NOTES:
                row["note"] = ACTION_NOTES[action]
        codes.append(row)
    decode = [
        {
            "xid": int(r["xid"]),
            "subcode": r["subcode"],
            "intrinfo_v1": r["intrinfo_v1_lt_r575"],
            "intrinfo_v2": r["intrinfo_v2_ge_r575"],
            "error_status": r["error_status_hex"],
            "action": r["recovery_action"],
            "action2_intrinfo_v1": r["action2_decode_v1"],
            "action2_intrinfo_v2": r["action2_decode_v2"],
            "action2": r["action2"],
            "severity": r["severity"],
            "hw_sw": r["hw_sw"],
        }
        for r in reference["nvlink5_decode_144_150"]
    ]
    return {
        "source": ["https://docs.nvidia.com/deploy/xid-errors/", "RULES.md §6", reference["source"]],
        "catalog_version": "Xid-Catalog.xlsx (NVIDIA/NVSentinel pkg/common copy; newest driver it names: R575, "
                           "CUDA 12.9), reference sha256 " + hashlib.sha256(raw).hexdigest()[:16],
        "reference_sha256": hashlib.sha256(raw).hexdigest(),
        "checked": CHECKED,
        "codes": codes,
        "nvlink5_decode": decode,
    }


def main(argv: list[str]) -> None:
    catalog = generate(Path(argv[1]))
    DATA.write_text(json.dumps(catalog, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{DATA}: {len(catalog['codes'])} codes, {len(catalog['nvlink5_decode'])} NVLink5 decode rows")


if __name__ == "__main__":
    main(sys.argv)
