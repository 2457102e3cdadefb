"""NCCL transport per node (RULES §8 D layer 1, §10 P12): which transport(s) NCCL used, read from its `NCCL INFO`
lines in any source, and whether each is what the node's hardware calls for.

The one parser of NCCL transport lines: branch D, P12 and the report's capability table all read its result.
Pure: no AWS, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Transport = Literal["EFA/OFI", "IB", "Socket", "NVLS", "P2P", "SHM"]
# good: what the hardware calls for; bad: a RULES §8 D layer 1 bad line on this node; expected: a transport that is
# fine on this node (Socket on a type without EFA); unverified: the node's capability is unknown, so it cannot be told.
Assessment = Literal["good", "bad", "expected", "unverified"]

# (transport, the exact marker of RULES §8 D layer 1 or NCCL's own wording of the same transport)
MARKERS: tuple[tuple[Transport, str], ...] = (
    ("EFA/OFI", "NET/OFI Selected Provider is efa"),
    ("EFA/OFI", "Using network AWS Libfabric"),
    ("Socket", "via NET/Socket/"),
    ("Socket", "Using network Socket"),
    ("IB", "Using network IB"),
    ("IB", "via NET/IB/"),
    ("NVLS", "NVLS Creating Multicast group"),
    ("P2P", "via P2P/CUMEM"),
    ("P2P", "via P2P/IPC"),
    ("P2P", "via P2P/direct pointer"),
    ("SHM", "via SHM/direct/direct"),
)
NCCL_LINE = re.compile(r"NCCL (?:INFO|WARN)")
# NCCL's debug prefix: `<hostname>:<pid>:<tid> [<cuda device>] NCCL INFO …` — names the host in a job's own stdout,
# whose stream may name neither the instance nor its host.
HOST_PREFIX = re.compile(r"(?<![\w.-])(?P<host>[A-Za-z0-9][\w-]*)(?:\.[\w.-]+)?:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)")


@dataclass(frozen=True)
class NodeFabric:
    """What the node's type calls for: EFA (None: unknown), NVSwitch (None: unknown)."""

    efa_capable: bool | None
    nvswitch: bool | None


@dataclass(frozen=True)
class TransportLine:
    """A line that names a transport, with where it was read."""

    transport: Transport
    marker: str
    time: datetime
    log_group: str
    log_stream: str
    message: str


@dataclass(frozen=True)
class TransportUse:
    """One transport (by marker) a node's NCCL used: the first line that says so, how many lines did, and its
    assessment for this node."""

    transport: Transport
    marker: str
    assessment: Assessment
    why: str
    first: TransportLine
    count: int


def transport_of(message: str) -> tuple[Transport, str] | None:
    """The transport an NCCL line names, by the first marker in MARKERS it holds; None for any other line."""
    if not NCCL_LINE.search(message):
        return None
    # Case-blind: aws-ofi-nccl wrote `Selected Provider is efa` and, from its efa-direct releases on, `Selected
    # provider is efa, fabric is …`; one marker, two spellings.
    folded = message.casefold()
    return next(((t, m) for t, m in MARKERS if m.casefold() in folded), None)


def line_host(message: str) -> str | None:
    """The host NCCL's debug prefix names (first DNS label), or None."""
    m = HOST_PREFIX.search(message)
    return m["host"] if m else None


def assess(transport: Transport, fabric: NodeFabric) -> tuple[Assessment, str]:
    """RULES §8 D layer 1: good and bad per node."""
    if transport == "Socket":
        if fabric.efa_capable is None:
            return "unverified", "EFA support of the type unknown: a TCP fallback cannot be told from a design choice"
        if fabric.efa_capable:
            return "bad", ("silent TCP fallback on an EFA-capable type (roughly a third of EFA bus bandwidth)")
        return "expected", "the type has no EFA: TCP sockets are its network transport"
    if transport == "SHM":
        if fabric.nvswitch is None:
            return "unverified", "NVSwitch of the type unknown"
        if fabric.nvswitch:
            return "bad", "shared memory between GPUs on an NVSwitch node: GPU peer access unused"
        return "expected", "no NVSwitch on the type"
    if transport == "IB":
        return "bad", "InfiniBand verbs on EC2 (unexpected: EC2 has EFA, not InfiniBand)"
    return "good", {"EFA/OFI": "EFA through the aws-ofi-nccl plugin", "NVLS": "NVLink SHARP on the NVSwitch",
                    "P2P": "GPU peer-to-peer over NVLink/PCIe"}[transport]


def transports(lines: Iterable[TransportLine], fabric: NodeFabric) -> list[TransportUse]:
    """One entry per marker the node's lines hold, first line kept; bad first, then by first time."""
    first: dict[str, TransportLine] = {}
    count: dict[str, int] = {}
    for line in sorted(lines, key=lambda x: x.time):
        first.setdefault(line.marker, line)
        count[line.marker] = count.get(line.marker, 0) + 1
    out = []
    for marker, line in first.items():
        assessment, why = assess(line.transport, fabric)
        out.append(TransportUse(line.transport, marker, assessment, why, line, count[marker]))
    rank = {"bad": 0, "unverified": 1, "good": 2, "expected": 3}
    return sorted(out, key=lambda u: (rank[u.assessment], u.first.time))
