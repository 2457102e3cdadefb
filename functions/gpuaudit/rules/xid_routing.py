"""One node's Xids to exactly one routing (RULES §6 routing rules, §7 bars): in time order, the first
non-sympathetic Xid is the candidate cause; recurrence on the same bus after a reboot; rule 48's memory split;
GSP recurrence; and across nodes, the fleet pattern of branches E and F. Pure: no AWS, no clock."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuaudit.model.result import Verdict, XidClass
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.xid_catalog import (
    CATALOG_URL,
    ECC_CHECK,
    FIRST_OCCURRENCE,
    GSP_ACTION,
    GSP_BLACKWELL_ACTION,
    GSP_UNKNOWN_ACTION,
    REPLACE_BAR_48,
    SRAM_FLAG_CHECK,
    SramThreshold,
    XidClassification,
    classify,
    memory_words,
)
from gpuaudit.rules.xid_lines import XidModel, bus_key, process_of


class NodeXid(XidModel):
    """One Xid on one node, from any source (kernel line or HMA detection)."""

    time: datetime
    code: int
    pci: str | None = None
    gpu_instance: int | None = None  # MIG attribution, as the line names it
    compute_instance: int | None = None
    text: str = ""
    hma_reason: str | None = None  # e.g. "XidUserAppError", "XidHardwareFailure"
    hma_recommendation: str | None = None


class NodeRouting(XidModel):
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
        memory = "DRAM" if nearest.code == 171 else "SRAM"
        how = f"Xid {nearest.code} at {iso(nearest.time)} on the node"
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
            return _outcome(xid, "REBOOT",
                            f"rule 48: SRAM ({how}){flag}: below the threshold, REBOOT; {REPLACE_BAR_48}",
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
        # HMA and the catalog disagree on a code that asks for no node action: no verdict guessed, no LEAVE ALONE.
        # A code whose own action is a reset or restart (GSP 119/120, 110, 151, 155…) keeps its rule: both ask for it.
        if c.class_ != "hardware" and c.verdict not in ("REBOOT", "REPLACE"):
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
        # NVIDIA: a 154 "summarizes the recovery action required for other Xids". It asks for its action, but never
        # takes the place of the Xid it summarizes at the same verdict: that Xid (printed before or after it) is the
        # cause, and its own rule (GSP, NVLink5, rule 48) and class decide the node.
        return _outcome(
            xid,
            c.verdict,
            f"rule 154: recovery action {c.recovery_action}" + (f" ({c.disagreement})" if c.disagreement else ""),
            hardware=c.verdict == "REBOOT",
            action_text=c.action_text,
            rank=_RANK_REBOOT - 1 if c.verdict == "REBOOT" else None,
        )

    if c.class_ == "unverified":
        listed = "no immediate action in NVIDIA's catalog" if c.catalog_class else "not in the catalog"
        return _outcome(
            xid,
            None,
            f"{listed}, quoted verbatim: {event.text!r}; see {CATALOG_URL}; no verdict guessed",
            rank=_RANK_UNVERIFIED,
            action_text=f"look Xid {event.code} up in NVIDIA's catalog ({CATALOG_URL}) before acting on the node; "
            "keep it under watch meanwhile",
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

    # RULES §7 names 119/120 among the hardware-class Xids whose first occurrence meets the REBOOT bar; only their
    # recurrence after a reboot is read as a driver/firmware fault (`_gsp_recurrence`), so the catalog's
    # driver-config class speaks for the recurrence, not for a first GSP fault.
    hardware = (c.class_ == "hardware" or c.rule == "GSP") and c.verdict in ("REPLACE", "REBOOT")
    disagreement = f"; {c.disagreement}" if c.disagreement else ""
    if c.class_ == "hardware" and event.hma_reason == "XidUserAppError":
        disagreement += "; HMA says XidUserAppError, the catalog says hardware: hardware wins"
    if c.class_ != "hardware" and event.hma_reason == "XidHardwareFailure":
        disagreement += f"; HMA says XidHardwareFailure, the catalog says {c.class_}: both ask for {c.verdict}"
    finding = FIRST_OCCURRENCE if c.class_ == "hardware" else f"{c.class_} class"
    if c.class_ == "hardware" and c.verdict == "REPLACE":  # RULES §7: Xid 64 meets the REPLACE bar on its own
        finding = f"Xid {event.code} meets the REPLACE bar on its own (RULES §7), whatever came before"
    if c.rule == "GSP":
        finding = "first occurrence of a GSP fault: a GPU reset (reboot) clears it"
    # RULES §6: the row's action is part of the evidence (157: plan a replacement at the next maintenance window).
    action = f"; the catalog's action: {c.action_text}" if c.action_text else ""
    return _outcome(xid, c.verdict, finding + disagreement + action, hardware=hardware, action_text=c.action_text)


def _recurrence(xids: Sequence[_Xid], reboot_times: Sequence[datetime]) -> _Outcome | None:
    """RULES §6/§7: the same hardware-class Xid on the same PCI bus before and after a reboot."""
    reboots = sorted(reboot_times)
    for j, later in enumerate(xids):
        if (later.c.class_ != "hardware" or later.event.pci is None or later.c.qualifier_of is not None
                or later.c.rule == "154"):
            continue  # a 154 restates another Xid's action: that Xid's recurrence is the one that counts
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
        # and for the 154s on that GPU restating the reset each fault asked for (RULES §6 119/120: deactivate GSP)
        judged = [gsp] + [outcome for outcome in judged if outcome.xid.c.rule != "GSP" and not (
            outcome.xid.c.rule == "154" and _same_gpu(outcome.xid.event, gsp.xid.event))]
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
    process, pid = process_of(event.text)
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
    # RULES §6 rule 48: a 48 whose DRAM/SRAM split the log does not settle is said so, with the check that settles it,
    # even when another code decided the verdict (a 64 after it): the operator still reads which memory faulted
    undecided = next((o.xid.c for o in judged if o.xid.event.code == 48 != event.code and o.xid.c.memory == "UNVERIFIED"
                      and o.xid.c.deciding_check), None)
    if undecided is not None:
        parts.append(f"Xid 48 (rule 48): {undecided.unverified_reason}; the check that settles it: "
                     f"`{undecided.deciding_check}`; it does not change this verdict")
    if best.verdict != "LEAVE ALONE" and "Running" not in best.finding:
        parts.append(f"node {'Running' if node_running else 'not Running'}")
    conclusion = best.verdict or (
        "hypothesis, verdict held until the deciding check" if best.hypothesis
        # rules/node_verdict.py verdict_for shows such a node as MONITOR: the text says the verdict the field carries.
        else "MONITOR (no RULES §7 bar met on what was read)"
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
