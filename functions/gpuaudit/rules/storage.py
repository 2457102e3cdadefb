"""What the FSx for Lustre metrics say (RULES §8 C), as one statement: throughput-bound, metadata-bound or neither,
with the numbers behind it, quoted as the service reports them (§0.6: percents as percents, a Sum as Sum / period).

Throughput-bound: network, disk throughput or disk IOPS (not on Scratch or HDD) at or above 90 % for 5+ minutes.
Metadata-bound: the metadata server's CPU at or above 90 % for 5+ minutes while throughput stays below that.
Never both: saturated throughput decides, and a busy metadata server beside it is said as such. The other rows
(MetadataOperations, FreeDataStorageCapacity per OST, DataReadBytes / DataWriteBytes, ClientConnections) are read and
quoted: a sharp rise of metadata operations with the onset, one OST under 10 % free while others have room, and a
client I/O drop with a stall (the effect, not the cause). Pure: no AWS, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import FsxReading, MetricPeak
from gpuaudit.model.timeutil import iso

THROUGHPUT_METRICS = ("NetworkThroughputUtilization", "FileServerDiskThroughputUtilization", "DiskIopsUtilization")
SUSTAINED_MINUTES = 5
SATURATED = 90.0
OST_FULL = 10.0  # percent free on one OST while the others have room (RULES §8 C)
SHARP_RISE = 3.0  # MetadataOperations at or after the onset at least this many times its rate before it
GIB = 1024 ** 3

Bound = Literal["throughput-bound", "metadata-bound", "neither"]


@dataclass(frozen=True)
class StorageReading:
    bound: Bound
    statement: str  # the bound with its numbers
    saturated: list[MetricPeak]  # the sustained saturation the bound rests on (empty for "neither")
    signals: list[str]  # what else the table's rows show (a metadata rise, a full OST), each a hypothesis
    quoted: str  # every row read, as reported


def metadata_cpu(peaks: Sequence[MetricPeak]) -> list[MetricPeak]:
    """The metadata server's CPUUtilization: the FileServer values naming an MDS when any does, else every
    CPUUtilization series ListMetrics returned (the file system reports its servers under one name)."""
    cpu = [m for m in peaks if m.metric == "CPUUtilization"]
    mds = [m for m in cpu if "MDS" in m.dimensions.get("FileServer", "").upper()]
    return mds or cpu


def _no_iops(ev: Evidence) -> set[str]:
    return {f.file_system_id for f in ev.file_systems or []
            if (f.deployment_type or "").startswith("SCRATCH") or f.storage_type == "HDD"}


def usable_peaks(ev: Evidence) -> list[MetricPeak]:
    """Saturation series with datapoints; DiskIopsUtilization is no signal on Scratch or HDD (RULES §8 C)."""
    skip = _no_iops(ev)
    return [m for m in ev.fsx_metrics or [] if m.datapoints
            and not (m.metric == "DiskIopsUtilization" and m.file_system_id in skip)]


def _sustained(m: MetricPeak) -> bool:
    return m.minutes_at_or_above_90 >= SUSTAINED_MINUTES


def _pct(m: MetricPeak) -> str:
    return (f"{m.file_system_id} {m.metric} {m.dimensions} Maximum {m.peak} % ({m.minutes_at_or_above_90} min ≥ 90 %, "
            f"longest run {m.longest_run_at_or_above_90} min)")


def read_storage(ev: Evidence, onset: datetime | None) -> StorageReading:
    peaks = usable_peaks(ev)
    readings = [r for r in ev.fsx_readings or [] if r.datapoints]
    throughput = [m for m in peaks if m.metric in THROUGHPUT_METRICS]
    cpu = metadata_cpu(peaks)
    hot_throughput = [m for m in throughput if _sustained(m)]
    hot_cpu = [m for m in cpu if _sustained(m)]
    top_throughput = max((m.peak or 0.0 for m in throughput), default=None)
    top_cpu = max((m.peak or 0.0 for m in cpu), default=None)
    through = f"throughput peaked at {top_throughput} %" if top_throughput is not None else \
        "no throughput metric was reported"
    mds = f"the metadata server's CPUUtilization peaked at {top_cpu} %" if top_cpu is not None else \
        "no metadata-server CPUUtilization was reported"
    if hot_throughput:
        names = ", ".join(sorted({m.metric for m in hot_throughput}))
        also = (f"; the metadata server's CPUUtilization was also ≥ 90 % (Maximum {top_cpu} %), but throughput at "
                "its limit decides the bound") if hot_cpu else f"; {mds}"
        bound: Bound = "throughput-bound"
        statement = f"throughput-bound: {names} saturated (large sequential I/O at the limit){also}"
        saturated = hot_throughput
    elif hot_cpu:
        bound, saturated = "metadata-bound", hot_cpu
        statement = (f"metadata-bound: the metadata server's CPUUtilization saturated (Maximum {top_cpu} %) while "
                     f"{through} (many small files)")
    else:
        bound, saturated = "neither", []
        statement = f"neither: storage not saturated — {through}, {mds}"
    signals = [s for s in (_metadata_rise(readings, onset), *_full_osts(ev, readings)) if s]
    drop = _client_drop(readings, onset)
    quoted = "; ".join([*(_pct(m) for m in peaks), *(_row(r) for r in readings)]
                       + ([drop] if drop else []))
    return StorageReading(bound, statement, saturated, signals, quoted)


def _rate_unit(r: FsxReading) -> str:
    return {"MetadataOperations": "operations/s", "DataReadBytes": "bytes/s", "DataWriteBytes": "bytes/s",
            "ClientConnections": "per s (Sum / 60 s)"}.get(r.metric, "")


def _row(r: FsxReading) -> str:
    dims = {k: v for k, v in r.dimensions.items() if k != "FileSystemId"}
    where = f"{r.file_system_id} {r.metric}" + (f" {dims}" if dims else "")
    if r.statistic == "Minimum":
        return f"{where} Minimum {r.minimum:g} bytes ({(r.minimum or 0) / GIB:.1f} GiB free)"
    return (f"{where} Sum / {r.period_seconds} s: {r.minimum:g} to {r.maximum:g} {_rate_unit(r)} "
            f"({r.datapoints} datapoints)")


def _split(r: FsxReading, onset: datetime) -> tuple[list[float], list[float]]:
    before = [v for t, v in r.buckets if t < onset]
    after = [v for t, v in r.buckets if t >= onset]
    return before, after


def _metadata_rise(readings: Sequence[FsxReading], onset: datetime | None) -> str | None:
    """A sharp rise of MetadataOperations with the slowdown: its rate at or after the onset ≥ 3× the rate before."""
    if onset is None:
        return None
    for r in readings:
        if r.metric != "MetadataOperations":
            continue
        before, after = _split(r, onset)
        if not before or not after:
            continue
        base, top = sum(before) / len(before), max(after)
        if (base > 0 and top >= SHARP_RISE * base) or (base == 0 and top > 0):
            return (f"{r.file_system_id} MetadataOperations rose from {base:.1f} to {top:.1f} operations/s at the "
                    f"onset ({iso(onset)}): many metadata operations (small files, stat/open storms)")
    return None


def _full_osts(ev: Evidence, readings: Sequence[FsxReading]) -> list[str]:
    """One OST under 10 % free while the others have room (FreeDataStorageCapacity Minimum per StorageTargetId,
    against the file system's StorageCapacity shared by its OSTs)."""
    out = []
    capacity = {f.file_system_id: f.storage_capacity_gib for f in ev.file_systems or []}
    for fs_id, gib in capacity.items():
        osts = [r for r in readings if r.file_system_id == fs_id and r.metric == "FreeDataStorageCapacity"
                and "StorageTargetId" in r.dimensions and r.minimum is not None]
        if not gib or len(osts) < 2:
            continue
        share = gib * GIB / len(osts)
        free = {r.dimensions["StorageTargetId"]: 100.0 * (r.minimum or 0.0) / share for r in osts}
        full = [o for o, pct in free.items() if pct < OST_FULL]
        roomy = [o for o, pct in free.items() if pct >= OST_FULL]
        if full and roomy:
            out.append(f"{fs_id} OST {', '.join(sorted(full))} under {OST_FULL:g} % free ("
                       + ", ".join(f"{o} {free[o]:.1f} %" for o in sorted(free)) + f" of {share / GIB:.0f} GiB per "
                       "OST): writes striped onto it fill it while the others have room")
    return out


def _client_drop(readings: Sequence[FsxReading], onset: datetime | None) -> str | None:
    """Client reads and writes falling at the onset: the effect of a stall, not its cause (RULES §8 C)."""
    if onset is None:
        return None
    before = after = 0.0
    seen = False
    for r in readings:
        if r.metric not in ("DataReadBytes", "DataWriteBytes"):
            continue
        b, a = _split(r, onset)
        if b and a:
            seen = True
            before += sum(b) / len(b)
            after += sum(a) / len(a)
    if seen and before > 0 and after < before / 2:
        return (f"client I/O (DataReadBytes + DataWriteBytes) fell from {before:,.0f} to {after:,.0f} bytes/s at the "
                "onset: a drop with a stall is the effect, not the cause")
    return None
