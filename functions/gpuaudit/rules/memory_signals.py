"""The non-Xid memory signals of RULES §6 (nvidia-smi fields and driver phrases): the verdict each carries,
escalated when it persists across a reboot, and their rows of the GPU errors table; rule 48's SRAM flag."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuaudit.model.result import GpuError, Verdict
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.node_lines import ParsedLine
from gpuaudit.rules.signal_verdict import STRENGTH
from gpuaudit.rules.xid_catalog import SRAM_THRESHOLD, SramThreshold
from gpuaudit.rules.xid_routing import NodeRouting

# Characters: the Remapped Rows section's fields and its bank histogram, as nvidia-smi -q prints them.
SECTION_REACH = 400


@dataclass(frozen=True)
class MemorySignal:
    """A non-Xid memory signal of RULES §6 as nvidia-smi or the driver prints it, and the verdicts it carries."""

    marker: str  # the words as printed (nvidia-smi's field name, or the driver's phrase)
    verdict: Verdict
    persisting: Verdict  # the verdict when it is seen again after a reboot
    flag: bool = True  # an nvidia-smi `Field : Yes` line; False: a phrase matched as it stands
    # What must follow the marker on the same line when the field is not `marker : Yes` itself (a section header
    # with its field after it, e.g. `Remapped Rows … Pending : Yes`); a regex, matched after the marker.
    then: str | None = None
    hardware: bool = True  # False: a trend to watch (MONITOR), not a hardware verdict (RULES §7)

    @functools.cached_property  # built once per signal, not once per line (10,000 nodes × 9 signals × their lines)
    def pattern(self) -> re.Pattern[str]:
        # nvidia-smi -q pads its fields (`SRAM Threshold Exceeded           : Yes`): any spacing around the colon.
        # A section header's field follows on its line, or (nvidia-smi -q shipped as one message, one field a line)
        # within the section's next lines: a bounded reach, so a field of a later section is never read as its own.
        tail = (rf"\b(?:.*?|[\s\S]{{0,{SECTION_REACH}}}?){self.then}" if self.then
                else (r"\s*:\s*Yes\b" if self.flag else ""))
        return re.compile(re.escape(self.marker) + tail, re.IGNORECASE)

    def seen_in(self, message: str) -> bool:
        return self.pattern.search(message) is not None


MEMORY_SIGNALS: tuple[MemorySignal, ...] = (
    MemorySignal("infoROM is corrupted", "REBOOT", "REPLACE", flag=False),
    MemorySignal("Remapping Failure Occurred", "REPLACE", "REPLACE"),
    MemorySignal("SRAM Threshold Exceeded", "REPLACE", "REPLACE"),
    MemorySignal("Unrepairable Memory", "REPLACE", "REPLACE"),
    MemorySignal("Pending Page Blacklist", "REBOOT", "REBOOT"),
    MemorySignal("Channel Repair Pending", "REBOOT", "REBOOT"),
    MemorySignal("TPC Repair Pending", "REBOOT", "REBOOT"),
    # The Remapped Rows section's own `Pending` field (not `Pending Page Blacklist`): a remap awaiting the reset that
    # activates it (RULES §6, §7 "a pending row remap").
    MemorySignal("Remapped Rows", "REBOOT", "REBOOT", then=r"\bPending\s*:\s*Yes\b"),
    # Bank remap availability drifting from Max toward Low/None: any bank counted at Partial, Low or None is an early
    # warning (MONITOR), never a hardware verdict (docs/decisions.md).
    MemorySignal("Bank Remap Availability", "MONITOR", "MONITOR",
                 then=r"\b(?:Partial|Low|None)\s*:\s*0*[1-9]", hardware=False),
)


# Any memory signal's marker, as its own pattern matches it (same case folding): a line none is in can hold no signal,
# so the nine patterns are tried only on the few lines that hold a marker (10,000 nodes × 9 × 2 scans before). An
# ASCII line is asked with substrings of its lower case (the markers are ASCII, and the regex engine folds an ASCII
# letter only to its own other case); any other line with the pattern, which also folds `ſ`, `K`, `İ` to ASCII.
ANY_MEMORY_MARKER = re.compile("|".join(re.escape(s.marker) for s in MEMORY_SIGNALS), re.IGNORECASE)
_MARKERS_LOWER = tuple(s.marker.lower() for s in MEMORY_SIGNALS)


def may_hold_memory_signal(message: str) -> bool:
    if message.isascii():
        lowered = message.lower()
        return any(marker in lowered for marker in _MARKERS_LOWER)
    return ANY_MEMORY_MARKER.search(message) is not None


def _may_hold_memory_signal(lines: Sequence[ParsedLine]) -> list[ParsedLine]:
    return [p for p in lines if may_hold_memory_signal(p.line.message)]


def sram_threshold(lines: Sequence[ParsedLine], end: datetime) -> SramThreshold | None:
    """The newest `SRAM Threshold Exceeded : Yes|No` reading among the node's lines up to `end` (rule 48)."""
    readings = [(p.line, m) for p in lines if p.line.time <= end and (m := SRAM_THRESHOLD.search(p.line.message))]
    if not readings:
        return None
    line, match = max(readings, key=lambda r: r[0].time)
    return SramThreshold(exceeded=match["value"].lower() == "yes", time=line.time,
                         where=f"{line.log_group} / {line.log_stream}")


def memory_signal_routing(lines: Sequence[ParsedLine], reboots: Sequence[datetime],
                          routing: NodeRouting | None) -> NodeRouting | None:
    """The strongest non-Xid memory signal, when it asks for more than the Xids do; persisting across a
    reboot (seen before and after one) escalates as §6 says."""
    best: NodeRouting | None = None
    lines = _may_hold_memory_signal(lines)
    for signal in MEMORY_SIGNALS if lines else ():
        found = [p.line for p in lines if signal.seen_in(p.line.message)]
        if not found:
            continue
        seen = sorted(line.time for line in found)
        persists = any(seen[0] < r < seen[-1] for r in reboots)
        chosen = signal.persisting if persists else signal.verdict
        where = found[0]
        candidate = NodeRouting(
            verdict=chosen,
            verdict_evidence=(f"`{where.message.strip()[:200]}` at {iso(seen[0])} in {where.log_group} / "
                              f"{where.log_stream}" + (f", again after a reboot at {iso(seen[-1])}" if persists else "")
                              + f" → {chosen} (non-Xid memory signal `{signal.marker}`, RULES §6)"),
            hardware=signal.hardware)
        if best is None or STRENGTH[candidate.verdict] > STRENGTH[best.verdict]:
            best = candidate
    if best is None or (routing is not None and STRENGTH[routing.verdict] >= STRENGTH[best.verdict]):
        return routing
    return best


def memory_signal_rows(lines: Sequence[ParsedLine], start: datetime, end: datetime) -> list[GpuError]:
    """Non-Xid memory signals in the window are rows of the GPU errors table too (no code): a verdict they
    decide must show the line it rests on beside the Xids."""
    rows = []
    lines = _may_hold_memory_signal(lines)
    for signal in MEMORY_SIGNALS if lines else ():
        seen = [p.line for p in lines if signal.seen_in(p.line.message) and start <= p.line.time <= end]
        if seen:
            first = seen[0]
            rows.append(GpuError(time=first.time, last_time=seen[-1].time, code=None,
                                 class_="hardware" if signal.hardware else "informational",
                                 log_group=first.log_group, log_stream=first.log_stream, message=first.message,
                                 count=len(seen), meaning=f"non-Xid memory signal `{signal.marker}` (RULES §6)"))
    return rows
