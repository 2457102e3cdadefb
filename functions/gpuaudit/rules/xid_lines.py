"""Xid line forms (RULES §6): an `NVRM: Xid` message from any source (kernel syslog, journald text, HMA JSON)
parsed into an `XidLine` (code, PCI bus, MIG GPU instance, process); the driver's "fallen off the bus" lines
joined into the Xid 79 they are; the benign lines filtered before counting. Parsing only: what a code means is
`rules/xid_catalog.py`, what a node should do is `rules/xid_routing.py`. Pure: no AWS, no clock."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import ConfigDict

from gpuaudit.domain.markers import FALLEN_OFF_BUS_MARKER
from gpuaudit.model.frozen import Frozen


class XidModel(Frozen):
    model_config = ConfigDict(populate_by_name=True)


class XidLine(XidModel):
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


def process_of(text: str) -> tuple[str | None, int | None]:
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
    process, pid = process_of(text)
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


# The driver's Xid-less report of a lost GPU, one family of forms, one message or split over several `NVRM:` lines:
# `NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.` (the device-prefixed print), `NVRM: GPU at 0000:01:00.0 has
# fallen off the bus.` and `NVRM: GPU at PCI:0000:1a:00 has fallen off the bus` (older drivers), and `NVRM: The NVIDIA
# GPU 0000:01:00.0 / NVRM: (PCI ID: 10de:1b80) installed in this system has / NVRM: fallen off the bus and is not
# responding to commands.` A message saying a GPU has fallen off with no bus named (`NVRM: GPU has fallen off the
# bus.`) is the same event on an unknown bus.
_FALLEN_START = re.compile(r"(?:NVRM: )?The NVIDIA GPU (?:at )?(?:PCI:)?(?P<long>\S+)"
                           r"|NVRM: GPU (?:at )?(?:PCI:)?(?P<short>[0-9A-Fa-f]+:[0-9A-Fa-f:.]*[0-9A-Fa-f])")
# A whole message saying a GPU fell off with no bus named; the bare tail of a split message is not one on its own.
_GPU_FELL = re.compile(r"NVRM: .*\bGPU\b.*\bhas " + FALLEN_OFF_BUS_MARKER)
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
    joined_to_earlier: set[int] = set()
    for i, (time, message) in enumerate(stream):
        if i in joined_to_earlier or _XID.search(message):
            continue
        start = _FALLEN_START.search(message)
        if start is None and not _GPU_FELL.search(message):
            continue
        parts = [message[start.start():] if start else message]
        for j in range(i + 1, min(len(stream), i + 1 + _FALLEN_CONTINUATION_LINES)):
            following = stream[j][1]
            if (FALLEN_OFF_BUS_MARKER in " ".join(" ".join(parts).split()) or "NVRM:" not in following
                    or _XID.search(following) or _FALLEN_START.search(following)):
                break  # complete, or the next line is another message (an Xid, another GPU's report)
            parts.append(_NVRM_PREFIX.sub("", following, count=1))
            joined_to_earlier.add(j)
        joined = " ".join(" ".join(_NVRM_PREFIX.sub("", part, count=1) for part in parts).split())
        if FALLEN_OFF_BUS_MARKER not in joined:
            joined_to_earlier -= set(range(i + 1, i + len(parts)))
            continue
        bus = (start["long"] or start["short"]).rstrip(".:,") if start else ""
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
