"""Branch C as one decision table (RULES §8 C, §0.5): every row of §8 C's table, per file system, decided
`Proven`, `Hypothesis`, `Ruled out` or `Not checked` on the same bar, and the branch decided on one named file
system — the one whose rows weigh most, the file systems in scope (named with `--filesystem`, else mounted by the
cluster) before the others of the account.

| Row | Flag (read from AWS/FSx, quoted as reported) | Proven when | Otherwise |
|-----|------|-------------|-----------|
| throughput saturation | Network / FileServerDisk throughput, an OST's DiskIops (not Scratch, HDD) ≥ 90 % for 5+ min |
the bar below | Hypothesis |
| metadata server | the MDS `CPUUtilization`, or an MDT's `DiskIopsUtilization`, ≥ 90 % for 5+ min | the bar below |
Hypothesis |
| metadata operations | `MetadataOperations` rising sharply (≥ 3×) with the slowdown | never: no client latency |
Hypothesis |
| OST free space | one OST < 10 % free while the others have room | never: no client latency | Hypothesis |
| maintenance window | the stall starts inside `WeeklyMaintenanceStartTime` (30 min) | client I/O drops in that window |
Hypothesis |

The bar (§0.5): the file system is in scope, a run of 5+ consecutive minutes ≥ 90 % began at or before the onset
(rules/onset.py), and no other branch holds evidence. A row read and not flagged is `Ruled out`; a row with nothing
read is `Not checked`. A file system is Ruled out only when every row was read and came back clean. Pure: no AWS,
no clock.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from gpuaudit.domain.timing import TIMELINE_MARGIN
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import MetricPeak
from gpuaudit.model.result import Branch
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.onset import Onset, failure_onset, onset_text
from gpuaudit.rules.storage import (
    BUCKET_MINUTES,
    SUSTAINED_MINUTES,
    StorageReading,
    client_io_drop,
    data_throughput,
    file_systems_in_scope,
    metadata_peaks,
    read_storage,
    usable_peaks,
)

if TYPE_CHECKING:
    from gpuaudit.rules.context import Judged

Outcome = Literal["Proven", "Hypothesis", "Ruled out", "Not checked"]
RANK: dict[Outcome, int] = {"Proven": 0, "Hypothesis": 1, "Ruled out": 2, "Not checked": 3}
MAINTENANCE_LENGTH = timedelta(minutes=30)  # FSx weekly maintenance window
BUCKET = timedelta(minutes=BUCKET_MINUTES)
STORAGE_CLIENT_CHECK = ("client-side: time a `stat` or small-file open on the mount during the slow period, or "
                        "Lustre client metrics")
MAINTENANCE_CHECK = ("the file system's client I/O at 1-minute grain (`DataReadBytes` + `DataWriteBytes`, Sum) "
                     "around the maintenance window, and a client-side `stat` timing on the mount during it")


@dataclass(frozen=True)
class Row:
    name: str
    outcome: Outcome
    evidence: str

    def text(self) -> str:
        return f"{self.name} — {self.outcome}: {self.evidence}"


@dataclass(frozen=True)
class FileSystemDecision:
    file_system_id: str
    in_scope: bool
    scope: str  # how the file system relates to the audit, said beside its ID
    reading: StorageReading
    rows: list[Row]

    @property
    def outcome(self) -> Outcome:
        if any(r.outcome == "Proven" for r in self.rows):
            return "Proven"
        if any(r.outcome == "Hypothesis" for r in self.rows):
            return "Hypothesis"
        return "Ruled out" if all(r.outcome == "Ruled out" for r in self.rows) else "Not checked"

    @property
    def deciding(self) -> list[Row]:
        return [r for r in self.rows if r.outcome == self.outcome]


def maintenance_starts(spec: str | None, start: datetime, end: datetime) -> list[datetime] | None:
    """Every start of the FSx weekly maintenance window (`d:HH:MM` UTC, 1 = Monday) between 30 minutes before
    `start` and `end`; None when the value was not returned or cannot be read."""
    m = re.fullmatch(r"([1-7]):([01]\d|2[0-3]):([0-5]\d)", spec or "")
    if m is None:
        return None
    out = []
    day = (start - TIMELINE_MARGIN).replace(hour=0, minute=0, second=0, microsecond=0)
    while day <= end:
        moment = day.replace(hour=int(m[2]), minute=int(m[3]))
        if day.isoweekday() == int(m[1]) and start - TIMELINE_MARGIN <= moment <= end:
            out.append(moment)
        day += timedelta(days=1)
    return out


def maintenance_in_window(spec: str | None, start: datetime, end: datetime) -> datetime | None:
    """The first start of the weekly maintenance window within the audit window (RULES §8 C)."""
    starts = maintenance_starts(spec, start, end)
    return starts[0] if starts else None


def decide(j: Judged, others: Sequence[Branch]) -> list[FileSystemDecision]:
    """Every file system read, decided row by row, the one the branch decides on first."""
    ev = j.evidence
    onset = failure_onset(j)
    in_scope, how = file_systems_in_scope(ev)
    competing = [b.branch for b in others if b.status in ("Root cause", "UNVERIFIED", "Contributing")]
    decisions = []
    for fs in ev.file_systems or []:
        fs_id = fs.file_system_id
        scoped = fs_id in in_scope
        scope = how if scoped else _outside(ev, in_scope)
        unmet_scope: str | None = None
        if not scoped:
            unmet_scope = f"{fs_id} is not one the cluster mounts ({', '.join(in_scope) or 'none found'})"
        elif not ev.named_file_systems and ev.cluster_file_system_ids is None:
            unmet_scope = "which file system the cluster mounts was not resolved"
        bar = _Bar(onset, unmet_scope, competing, ev.job_figure_unread_groups)
        reading = read_storage(ev, onset.time if onset else None, fs_id)
        peaks = [m for m in usable_peaks(ev) if m.file_system_id == fs_id]
        rows = [_saturation("throughput saturation", data_throughput(peaks), bar,
                            "NetworkThroughputUtilization, FileServerDiskThroughputUtilization, DiskIopsUtilization"),
                _saturation("metadata server", metadata_peaks(peaks), bar,
                            "CPUUtilization (FileServer), DiskIopsUtilization of an MDT"),
                _metadata_operations(ev, fs_id, reading),
                _ost_space(ev, fs_id, reading),
                _maintenance(ev, fs_id, fs.weekly_maintenance, bar)]
        decisions.append(FileSystemDecision(fs_id, scoped, scope, reading, rows))
    return sorted(decisions, key=lambda d: (RANK[d.outcome], not d.in_scope, d.file_system_id))


def _outside(ev: Evidence, in_scope: Sequence[str]) -> str:
    return ("not named with --filesystem" if ev.named_file_systems else
            f"not mounted by the cluster, which mounts {', '.join(in_scope) or 'none of the file systems read'}")


@dataclass(frozen=True)
class _Bar:
    """RULES §0.5 for one file system: what keeps a flagged row from Proven, given when its signal began."""

    onset: Onset | None
    scope: str | None
    competing: Sequence[str]
    unread_jobs: Sequence[str]

    def unmet(self, began: datetime | None) -> list[str]:
        out = [self.scope] if self.scope else []
        if self.onset is None:
            out.append(f"{onset_text(None, self.unread_jobs)}, so 'before the failure' cannot be shown (the window's "
                       "start is a search bound, not the onset)")
        elif began is not None and began > self.onset.time:
            out.append(f"the sustained saturation began {iso(began)}, after {onset_text(self.onset)}")
        if self.competing:
            out.append(f"branch(es) {', '.join(self.competing)} also hold evidence")
        return out


def _pct(m: MetricPeak) -> str:
    return (f"{m.metric} {m.dimensions} Maximum {m.peak} % ({m.minutes_at_or_above_90} min ≥ 90 %, longest run "
            f"{m.longest_run_at_or_above_90} min)")


def _saturation(name: str, peaks: list[MetricPeak], bar: _Bar, metrics: str) -> Row:
    if not peaks:
        return Row(name, "Not checked", f"no datapoint of {metrics} in the window")
    hot = [m for m in peaks if m.minutes_at_or_above_90 >= SUSTAINED_MINUTES]
    if not hot:
        top = max(peaks, key=lambda m: m.peak or 0.0)
        return Row(name, "Ruled out", f"below 90 % for 5+ min; highest {_pct(top)}")
    sustained = [m for m in hot if m.sustained_from is not None]
    if not sustained:
        return Row(name, "Hypothesis", "; ".join(_pct(m) for m in hot) + f". Not Proven: no run of "
                   f"{SUSTAINED_MINUTES}+ consecutive minutes ≥ 90 %")
    first = min(sustained, key=lambda m: m.sustained_from or datetime.max)
    began = first.sustained_from
    unmet = bar.unmet(began)
    said = (f"{_pct(first)} ≥ 90 % for {first.longest_run_at_or_above_90} consecutive minute(s) from "
            f"{iso(began) if began else '—'}")
    if unmet or bar.onset is None:  # (no unmet reason already means the onset is known)
        return Row(name, "Hypothesis", f"{said}. Not Proven: {'; '.join(unmet)}")
    return Row(name, "Proven", f"{said}, before {onset_text(bar.onset)}; no other branch holds evidence")


def _metadata_operations(ev: Evidence, fs_id: str, reading: StorageReading) -> Row:
    name = "metadata operations"
    if not any(r.file_system_id == fs_id and r.metric == "MetadataOperations" and r.datapoints
               for r in ev.fsx_readings or []):
        return Row(name, "Not checked", "no MetadataOperations datapoint in the window")
    rise = next((s for s in reading.signals if "MetadataOperations rose" in s), None)
    if rise is None:
        return Row(name, "Ruled out", "MetadataOperations read, no sharp rise (≥ 3×) with the slowdown")
    return Row(name, "Hypothesis", f"{rise}; FSx publishes no client latency, so a metadata spike without "
                                   "saturation stays a hypothesis")


def _ost_space(ev: Evidence, fs_id: str, reading: StorageReading) -> Row:
    name = "OST free space"
    osts = [r for r in ev.fsx_readings or [] if r.file_system_id == fs_id and r.metric == "FreeDataStorageCapacity"
            and r.datapoints]
    gib = next((f.storage_capacity_gib for f in ev.file_systems or [] if f.file_system_id == fs_id), None)
    if len(osts) < 2 or not gib:
        return Row(name, "Not checked", f"FreeDataStorageCapacity read for {len(osts)} OST(s), StorageCapacity "
                                        f"{gib or 'not returned'}: one OST cannot be compared with the others")
    full = next((s for s in reading.signals if " under " in s and " OST " in s), None)
    if full is None:
        return Row(name, "Ruled out", f"every one of {len(osts)} OSTs has 10 % or more free")
    return Row(name, "Hypothesis", full)


def _maintenance(ev: Evidence, fs_id: str, spec: str | None, bar: _Bar) -> Row:
    name = "maintenance window"
    starts = maintenance_starts(spec, ev.window.start, ev.window.end)
    if starts is None:
        return Row(name, "Not checked", f"WeeklyMaintenanceStartTime {spec or 'not returned'} (DescribeFileSystems)")
    said = (f"WeeklyMaintenanceStartTime {spec} (UTC, day 1 = Monday, "
            f"{int(MAINTENANCE_LENGTH.total_seconds() // 60)} min)")
    if not starts:
        return Row(name, "Ruled out", f"{said}: no maintenance window within the impact window")
    windows = ", ".join(f"{iso(m)}–{iso(m + MAINTENANCE_LENGTH)}" for m in starts)
    onset = bar.onset
    if onset is None:
        return Row(name, "Hypothesis", f"{said}: maintenance {windows} lies in the impact window, and the stall's "
                                       f"start is not known ({onset_text(None, bar.unread_jobs)})")
    # the onset at its own resolution: one read from 10-minute means may sit up to one bucket before the change
    inside = next((m for m in starts if m - onset.resolution < onset.time < m + MAINTENANCE_LENGTH
                   or onset.time == m), None)
    if inside is None:
        return Row(name, "Ruled out", f"{said}: the stall began outside the maintenance window(s) {windows} "
                                      f"({onset_text(onset)})")
    end = inside + MAINTENANCE_LENGTH
    drop = client_io_drop(ev, fs_id)
    within = drop is not None and inside - BUCKET < drop.time < end
    stall = f"{said}: the stall began inside maintenance {iso(inside)}–{iso(end)} ({onset_text(onset)})"
    if drop is None:
        unmet = ["no drop of the file system's client I/O was read"]
    elif not within:
        unmet = [f"its client I/O dropped at {iso(drop.time)}, not in the maintenance window"]
    else:
        unmet = []
    unmet += bar.unmet(None)
    if drop is not None and within:
        stall += (f"; its client I/O ({drop.metrics}) fell from {drop.before:,.0f} to {drop.after:,.0f} from "
                  f"{iso(drop.time)} (10-minute means), exactly in that window")
    if unmet:
        return Row(name, "Hypothesis", f"{stall}. Not Proven: {'; '.join(unmet)}")
    return Row(name, "Proven", f"{stall}; no other branch holds evidence: the FSx maintenance window")
