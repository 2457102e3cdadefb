"""One node's log lines read once (RULES §6): each line parsed for its Xid and its health-agent detection, the
Xid-less "fallen off the bus" lines joined into the Xid 79 they are, and the GPU errors table's Xid rows
(collapsed per bus, code and message; the row a verdict rests on, even before the window)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from gpuaudit.domain.streams import HMA_PREFIX
from gpuaudit.model.evidence import GpuLine
from gpuaudit.model.result import GpuError
from gpuaudit.rules.hma import HmaDetection, parse_hma
from gpuaudit.rules.xid_catalog import classify
from gpuaudit.rules.xid_lines import XidLine, fallen_off_bus, is_benign, parse_xid
from gpuaudit.rules.xid_routing import NodeRouting, NodeXid

# Collapsing key: the same fault repeated differs only in timestamps, PIDs and addresses.
_NOISE = re.compile(r"^\S+\s+\d+\s[\d:]+\s\S+\s|\[\s*\d+\.\d+\]\s*|pid=\S+|0x[0-9a-fA-F_]+|\b\d{3,}\b")


@dataclass(frozen=True)
class ParsedLine:
    line: GpuLine
    xid: XidLine | None
    hma: HmaDetection | None


def parse_lines(lines: Sequence[GpuLine]) -> list[ParsedLine]:
    parsed = []
    for line in lines:
        if is_benign(line.message):
            continue
        hma = parse_hma(line.message) if line.log_stream.startswith(HMA_PREFIX) else None
        text = hma.message if hma and hma.message else line.message
        parsed.append(ParsedLine(line, parse_xid(text), hma))
    return _with_fallen_off_bus(parsed)


def _with_fallen_off_bus(parsed: list[ParsedLine]) -> list[ParsedLine]:
    """RULES §6: the Xid-less "fallen off the bus" messages, read per stream (they span several lines)."""
    streams: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, p in enumerate(parsed):
        if "NVRM" in p.line.message:
            streams[(p.line.log_group, p.line.log_stream)].append(i)
    for indexes in streams.values():
        ordered = sorted(indexes, key=lambda i: parsed[i].line.time)  # stable: shipped order within a time
        found = fallen_off_bus([(parsed[i].line.time, parsed[i].line.message) for i in ordered])
        for position, xid in found.items():
            parsed[ordered[position]] = replace(parsed[ordered[position]], xid=xid)
    return parsed


def _normalized(message: str) -> str:
    return _NOISE.sub("#", message).strip()


def collapse(node_lines: Sequence[ParsedLine], overrides: Mapping[int, str] | None,
             start: datetime, end: datetime) -> list[GpuError]:
    """One entry per (PCI bus, code, normalized message): a fleet can emit 100,000 identical Xid lines."""
    entries: dict[tuple[str | None, int | None, str], GpuError] = {}
    shipped: set[tuple[datetime, tuple[str | None, int | None, str]]] = set()
    for p in node_lines:
        if p.xid is None or not (start <= p.line.time <= end):
            continue
        if p.hma is not None and p.hma.is_dcgm_echo:
            continue  # the DCGM policy-violation line repeats the detection's own Xid
        key = (p.xid.pci, p.xid.code, _normalized(p.xid.raw))
        if (p.line.time, key) in shipped:
            continue  # the same kernel line shipped to two sources is one event, not two
        shipped.add((p.line.time, key))
        found = entries.get(key)
        if found is not None:
            entries[key] = found.model_copy(update={"count": found.count + 1, "last_time": p.line.time})
            continue
        c = classify(p.xid.code, p.xid.text, overrides)
        entries[key] = GpuError(
            time=p.line.time, last_time=p.line.time, code=p.xid.code, pci=p.xid.pci,
            gpu_instance=p.xid.gpu_instance, compute_instance=p.xid.compute_instance, class_=c.class_,
            log_group=p.line.log_group, log_stream=p.line.log_stream, message=p.xid.raw,
            meaning=c.meaning + (f" (class overridden to {c.override} by configuration)" if c.override else "")
            # RULES §6: where the line and the decode (or code and text) disagree, the row says so whatever decided
            # the node (NVLink5's register decode over the printed word, a 71 routed as 74, a 154 value's name).
            + (f" — {c.disagreement}" if c.disagreement else "")
            if c.meaning else ("unknown code: quoted verbatim, see https://docs.nvidia.com/deploy/xid-errors/"),
            source="hma" if p.hma else "kernel", hma_reason=p.hma.reason if p.hma else None)
    return sorted(entries.values(), key=lambda e: e.time)


def node_xids(node_lines: Sequence[ParsedLine], end: datetime) -> list[NodeXid]:
    out = []
    for p in node_lines:
        if p.xid is None or p.line.time > end or (p.hma is not None and p.hma.is_dcgm_echo):
            continue
        out.append(NodeXid(time=p.line.time, code=p.xid.code, pci=p.xid.pci, gpu_instance=p.xid.gpu_instance,
                           compute_instance=p.xid.compute_instance, text=p.xid.text,
                           hma_reason=p.hma.reason if p.hma else None,
                           hma_recommendation=(p.hma.recommendation or p.hma.repair_action) if p.hma else None))
    return out


def deciding_rows(lines: Sequence[ParsedLine], routing: NodeRouting | None, rows: list[GpuError],
                  overrides: Mapping[int, str] | None, window_start: datetime) -> list[GpuError]:
    """The Xid a verdict rests on can precede the window (the GPU lines are read from 30 min before it): its row
    joins the table, said to be before the window, so the verdict always shows the line it rests on."""
    code = routing.cause_code if routing is not None else None
    if code is None or any(e.code == code for e in rows):
        return []
    earlier = [p for p in lines if p.xid is not None and p.xid.code == code and p.line.time < window_start]
    if not earlier:
        return []
    found = collapse(earlier, overrides, min(p.line.time for p in earlier), window_start - timedelta(microseconds=1))
    return [e.model_copy(update={"meaning": f"{e.meaning} — before the window: the Xid the verdict rests on"})
            for e in found]
