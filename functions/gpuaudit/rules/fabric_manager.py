"""Fabric Manager on NVSwitch types (RULES §2, §8 D layer 2): started, failed, restarting, absent, or not confirmed,
per boot of the node, and the verdict it asks for — REBOOT, REPLACE if it recurs after a reboot.

"Failed" and "restarting" are read (systemd `Failed to start`, `status=…/FAILURE`, `Failed with result`, a scheduled
restart, repeated starts in one boot). "Absent" needs the node's boot read: a boot banner inside the span the GPU
lines were read in full, in a stream that covers it (proven live hour by hour, Measured, not named for the kernel's
lines alone, and shown to ship Fabric Manager's lines by carrying one, e.g. its start at an earlier boot), with no
start line after it in that boot. A boot seen only by the since-launch look-back
(which reads the banner and the start line, nothing of the stream's liveness then) is not read: there Fabric Manager
is "not confirmed", never absent (docs/decisions.md). Pure: the node's lines in, a reading out."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from gpuaudit.domain.markers import BOOT_LINE, DRIVER_BANNER, FABRIC_MANAGER_STARTED
from gpuaudit.model.evidence import GpuLine
from gpuaudit.model.result import CoverageRow, GpuError, NodeResult, Verdict
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.signal_verdict import with_signal
from gpuaudit.rules.xid_routing import NodeRouting

FmState = Literal["started", "failed", "restarting", "absent", "not confirmed"]

_FM = r"(?:fabric ?manager|nvidia-fabricmanager|nv-fabricmanager)"
# systemd's words for a unit that did not come up, on a line naming Fabric Manager (the unit or its description).
FAILED = re.compile(rf"(?i)Failed to start\b[^\n]*{_FM}|{_FM}[^\n]*(?:status=\S+/FAILURE|Failed with result|"
                    r"Main process exited, code=(?:killed|dumped)|core-dump)")
FM_LINE = re.compile(rf"(?i){_FM}")
RESTARTING = re.compile(rf"(?i){_FM}[^\n]*Scheduled restart job")
# systemd's own start line of the unit: two in one boot are a restart. (The p6-b200/b300 `CX Bridge device … is usable
# for NVLink subnet management` lines also say Fabric Manager is up, but one is printed per bridge: never counted.)
STARTED_UNIT = re.compile(rf"(?i)\bStarted\b[^\n]*{_FM}")
# The daemon's own word for its start (the quoted service name), beside systemd's line for the same start.
DAEMON_START = re.compile(r'Started "Nvidia Fabric Manager"')
# The PIDFile= warning systemd prints for the unit is benign (RULES §6): never a failure.
BENIGN = re.compile(r"PIDFile=")
# Banners within this span are one boot (the kernel's `Linux version` and the driver's load line come seconds apart).
ONE_BOOT = timedelta(minutes=10)
# Fabric Manager starts within a minute or two of the driver: a boot read for less than this after its banner has not
# had the time to log the start, so a missing start line there is "not confirmed", not "absent".
START_GRACE = timedelta(minutes=10)
# A stream named for the kernel ring buffer ships no systemd line: no start line there says nothing.
KERNEL_ONLY = re.compile(r"(?i)dmesg|(?:^|[/._-])kernel(?:$|[/._-])")


@dataclass(frozen=True)
class Boot:
    """One boot of the node as read: its banner (None for the lines before the first banner read) and its state."""

    banner: GpuLine | None
    state: FmState
    line: GpuLine | None  # the line the state rests on (the failure, the restart, the start, or the banner)


@dataclass(frozen=True)
class FabricManagerReading:
    boots: tuple[Boot, ...]

    @property
    def faulty(self) -> list[Boot]:
        return [b for b in self.boots if b.state in ("failed", "restarting", "absent")]

    @property
    def state(self) -> FmState:
        """The current boot's state: the last boot read that says something."""
        return self.boots[-1].state if self.boots else "not confirmed"

    def verdict(self) -> tuple[Verdict, str] | None:
        """RULES §8 D layer 2: failed, restarting or absent → REBOOT; in two boots (it recurs after a reboot) →
        REPLACE. A fault of an earlier boot cleared by the reboot after it: MONITOR, said (docs/decisions.md)."""
        faulty = self.faulty
        if not faulty:
            return None
        said = "; ".join(_said(b) for b in faulty)
        current = self.boots[-1] in faulty
        if current and len(faulty) > 1:
            return "REPLACE", (f"Fabric Manager {said} — it recurs after a reboot → REPLACE (RULES §8 D layer 2: "
                               "REBOOT, REPLACE if it recurs)")
        if current:
            return (
                "REBOOT",
                f"Fabric Manager {said} → REBOOT (RULES §8 D layer 2; REPLACE if it recurs after the reboot)",
            )
        later = self.boots[-1]
        return "MONITOR", (f"Fabric Manager {said}; {_said(later)} — cleared by that reboot: watch the next boots "
                           "(REPLACE if it fails again)")


def _said(b: Boot) -> str:
    where = f"`{b.line.message.strip()[:200]}` at {iso(b.line.time)} in {b.line.log_group} / {b.line.log_stream}" \
        if b.line is not None else "no line"
    boot = f"in the boot of {iso(b.banner.time)}" if b.banner is not None else "before the first boot banner read"
    match b.state:
        case "absent":
            return (f"absent {boot}: no start line after the banner {where}")
        case "restarting":
            return f"restarting {boot}: {where}"
        case "failed":
            return f"failed {boot}: {where}"
        case "started":
            return f"started {boot}: {where}"
    return f"not confirmed {boot}"


def is_banner(line: GpuLine) -> bool:
    return BOOT_LINE in line.message or DRIVER_BANNER in line.message


def is_start(line: GpuLine) -> bool:
    return any(m in line.message for m in FABRIC_MANAGER_STARTED)


def covers_systemd(line: GpuLine) -> bool:
    """The banner's stream ships systemd's lines too (syslog, messages, the journal), not the kernel's alone."""
    return not (KERNEL_ONLY.search(line.log_stream) or KERNEL_ONLY.search(line.log_group.rsplit("/", 1)[-1]))


def boot_read(rows: Sequence[CoverageRow], read_start: datetime) -> Callable[[GpuLine], bool]:
    """Whether a banner's boot was read: inside the GPU lines' read span (from `read_start`), in a stream of the node
    proven live (Measured), which ships systemd's lines too."""
    proven = {(r.log_group, r.log_stream) for r in rows if r.status == "Measured"}
    return lambda banner: (banner.time >= read_start and (banner.log_group, banner.log_stream) in proven
                           and covers_systemd(banner))


def read_fabric_manager(lines: Sequence[GpuLine], read_end: datetime,
                        covered: Callable[[GpuLine], bool]) -> FabricManagerReading:
    """Every line the audit read of the node (the window's GPU lines and the boot-time lines since launch), split
    into boots at each banner; `read_end` is where the reading stops (the window's end, or the query time);
    `covered` says of a banner whether its boot was read (`boot_read`)."""
    ordered = sorted({(line.time, line.log_group, line.log_stream, line.message): line for line in lines}.values(),
                     key=lambda line: (line.time, not is_banner(line)))  # a banner opens its own second
    segments: list[tuple[GpuLine | None, list[GpuLine]]] = [(None, [])]
    for line in ordered:
        banner = segments[-1][0]
        if is_banner(line) and (banner is None or line.time - banner.time > ONE_BOOT):
            segments.append((line, []))
        elif not is_banner(line):
            segments[-1][1].append(line)
    # A stream shows it ships Fabric Manager's lines by having carried one (a start at an earlier boot, a failure):
    # only there can a boot without a start line be read as absent.
    carries = {
        (x.log_group, x.log_stream) for x in ordered if FM_LINE.search(x.message) and not BENIGN.search(x.message)
    }

    def shipped(banner: GpuLine) -> bool:
        return covered(banner) and (banner.log_group, banner.log_stream) in carries

    boots = []
    for i, (banner, body) in enumerate(segments):
        following = segments[i + 1][0] if i + 1 < len(segments) else None
        ends = following.time if following is not None else read_end
        boot = _boot(banner, body, ends, shipped)
        if boot is not None:
            boots.append(boot)
    return FabricManagerReading(tuple(boots))


def _boot(banner: GpuLine | None, body: list[GpuLine], ends: datetime,
          covered: Callable[[GpuLine], bool]) -> Boot | None:
    relevant = [x for x in body if not BENIGN.search(x.message)]
    failed = [x for x in relevant if FAILED.search(x.message)]
    restarts = [x for x in relevant if RESTARTING.search(x.message)]
    starts = [x for x in relevant if is_start(x)]
    if failed:  # quote systemd's own verdict on the unit where it was shipped, else the first failure line
        return Boot(banner, "failed", next((x for x in failed if "Failed to start" in x.message), failed[0]))
    unit_starts = [x for x in starts if STARTED_UNIT.search(x.message)]
    # Repeated starts are counted in one stream: a node shipping its journal to two log groups shows each start
    # twice, and that is one start (docs/decisions.md).
    # Each writer's starts are counted apart: systemd's unit line and the daemon's own `Started "Nvidia Fabric
    # Manager"` in the same stream are one start told twice (docs/decisions.md).
    per_stream: dict[tuple[str, str, bool], list[GpuLine]] = {}
    for x in unit_starts:
        per_stream.setdefault((x.log_group, x.log_stream, bool(DAEMON_START.search(x.message))), []).append(x)
    again = next((lines[1] for lines in per_stream.values() if len(lines) > 1), None)
    if restarts or (banner is not None and again is not None):
        return Boot(banner, "restarting", restarts[0] if restarts else again)
    if starts:
        return Boot(banner, "started", starts[0])
    if banner is None:
        return None  # nothing read of a boot before the first banner: no claim
    if covered(banner) and ends - banner.time >= START_GRACE:
        return Boot(banner, "absent", banner)
    return Boot(banner, "not confirmed", banner)


def fabric_manager_row(reading: FabricManagerReading) -> GpuError | None:
    """The line a Fabric Manager verdict rests on, as a row of the GPU errors table (no Xid code)."""
    faulty = reading.faulty
    b = faulty[-1] if faulty else None
    line = b.line if b is not None else None
    if b is None or line is None:
        return None
    return GpuError(time=line.time, code=None, class_="driver-config", log_group=line.log_group,
                    log_stream=line.log_stream, message=line.message, count=len(faulty),
                    meaning=f"Fabric Manager {b.state} on an NVSwitch type (RULES §8 D layer 2)")


def fabric_manager_of(lines: Sequence[GpuLine], boot_lines: Sequence[GpuLine], expected: bool,
                      read_start: datetime, read_end: datetime,
                      coverage: Sequence[CoverageRow]) -> FabricManagerReading | None:
    """The node's Fabric Manager reading where its type calls for one (RULES §2 table), else None."""
    if not expected:
        return None
    return read_fabric_manager([*lines, *boot_lines], read_end, boot_read(coverage, read_start))


def with_fabric_manager(result: NodeResult, routing: NodeRouting | None,
                        reading: FabricManagerReading | None) -> tuple[NodeResult, NodeRouting | None]:
    """The node's result with what Fabric Manager asks (rules/signal_verdict.py), and its signal Observable where
    what it did was read."""
    if reading is None:
        return result, routing
    signals = result.signals
    if signals.fabric_manager == "Not observable" and reading.state != "not confirmed":
        signals = signals.model_copy(update={"fabric_manager": "Observable"})  # what it did was read
    asked = reading.verdict()
    row = fabric_manager_row(reading)
    result = result.model_copy(update={"signals": signals})
    if asked is None or row is None:
        return result, routing
    return with_signal(result, routing, asked[0], asked[1], row, hardware=False)
