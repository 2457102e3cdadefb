"""The service's own word in a log line (RULES §7 precedence: it counts as read): a health-agent detection
asking to replace or reboot the node, or a failed deep health check, as a verdict and a GPU errors row."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuaudit.model.result import GpuError, Verdict
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.hma import HmaDetection
from gpuaudit.rules.node_lines import ParsedLine
from gpuaudit.rules.signal_verdict import STRENGTH
from gpuaudit.rules.xid_routing import NodeRouting

# The health agent's own word (RULES §7): a detection that asks to replace or reboot the node is that verdict.
HMA_REPLACE = ("NvidiaErrorTerminate",)
HMA_REBOOT = ("NvidiaErrorReboot",)
# A failed deep health check, as HyperPod writes it in `DeepHealthCheckResults/…` (and lifecycle logs quote it).
FAULTY_INSTANCE = re.compile(r"Encountered FaultyInstance\.?\s*Replace the Instance", re.IGNORECASE)


def hma_asks(d: HmaDetection) -> Verdict | None:
    """REPLACE or REBOOT when the agent's detection asks for it (its condition, repair action, recommendation or
    message); an application-caused detection (XidUserAppError) asks for neither."""
    if d.reason == "XidUserAppError" or d.is_dcgm_echo:
        return None
    said = " ".join(x for x in (d.repair_action, d.recommendation, d.message) if x).lower()
    if d.condition in HMA_REPLACE or "replace" in said:
        return "REPLACE"
    if d.condition in HMA_REBOOT or "reboot" in said:
        return "REBOOT"
    return None


@dataclass(frozen=True)
class ServiceWord:
    """What one of the service's own log lines asks for the node (RULES §7 precedence: the service's word counts
    as read), in the service's words."""

    verdict: Verdict
    said: str  # what the service wrote, named as it writes it
    source: str  # whose word: the health agent, the deep health check


def service_says(p: ParsedLine) -> ServiceWord | None:
    """The one reader of the service's own word in a log line: an HMA detection asking for a node action, or a
    deep health check reporting a faulty instance (in its results stream or quoted by a lifecycle log)."""
    if p.hma is not None:
        asked = hma_asks(p.hma)
        if asked is None:
            return None
        said = f"HealthMonitoringAgentDetectionEvent: {p.hma.words}" + (f": {p.hma.message[:200]}" if p.hma.message
                                                                          else "")
        return ServiceWord(asked, said, "the health agent's own recommendation")
    if FAULTY_INSTANCE.search(p.line.message):
        return ServiceWord("REPLACE", f"deep health check failed: `{p.line.message.strip()[:240]}`",
                           "a failed deep health check")
    return None


def service_routing(lines: Sequence[ParsedLine], end: datetime, routing: NodeRouting | None) -> NodeRouting | None:
    """The strongest line of the service's own word that asks for a node action, when it asks for more than the
    Xids do: an HMA detection whose condition is NvidiaErrorTerminate or whose recommendation says "Please Replace
    the Faulty Node", or a failed deep health check, is a REPLACE even when no Xid line carries it."""
    best: NodeRouting | None = None
    for p in lines:
        if p.line.time > end or (word := service_says(p)) is None:
            continue
        if best is not None and STRENGTH[best.verdict] >= STRENGTH[word.verdict]:
            continue
        best = NodeRouting(
            verdict=word.verdict, hardware=True,
            verdict_evidence=(f"{word.said} at {iso(p.line.time)} in {p.line.log_group} / {p.line.log_stream} → "
                              f"{word.verdict} ({word.source}, RULES §7)"))
    if best is None or (routing is not None and STRENGTH[routing.verdict] >= STRENGTH[best.verdict]):
        return routing
    return best


def service_rows(lines: Sequence[ParsedLine], start: datetime, end: datetime) -> list[GpuError]:
    """Lines of the service's own word asking for a node action without an Xid line are GPU error rows too (no
    code), named as the service writes them, so the verdict they decide shows the line it rests on."""
    rows = []
    for p in lines:
        if p.xid is not None or not (start <= p.line.time <= end) or (word := service_says(p)) is None:
            continue
        rows.append(GpuError(time=p.line.time, last_time=p.line.time, code=None, class_="hardware",
                             log_group=p.line.log_group, log_stream=p.line.log_stream, message=p.line.message,
                             count=1, source="hma" if p.hma else "kernel", hma_reason=p.hma.reason if p.hma else None,
                             meaning=word.said if p.hma else f"{word.source} (RULES §7)"))
    return rows
