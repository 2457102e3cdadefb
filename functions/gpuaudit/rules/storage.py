"""What the FSx for Lustre metrics say (RULES §8 C), as one statement: throughput-bound, metadata-bound or neither,
with the numbers behind it, quoted as the service reports them (§0.6: percents as percents, a Sum as Sum / period).

Throughput-bound: network, disk throughput or disk IOPS (not on Scratch or HDD) at or above 90 % for 5+ minutes.
Metadata-bound: the metadata server's CPU at or above 90 % for 5+ minutes while throughput stays below that; or,
below saturation, a sharp rise of MetadataOperations with throughput below it (a hypothesis: rules/storage_decision.py).
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

from gpuaudit.domain.timing import FSX_BUCKET
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import FsxReading, MetricPeak
from gpuaudit.model.timeutil import iso

THROUGHPUT_METRICS = ("NetworkThroughputUtilization", "FileServerDiskThroughputUtilization", "DiskIopsUtilization")
SUSTAINED_MINUTES = 5
OST_FULL = 10.0  # percent free on one OST while the others have room (RULES §8 C)
SHARP_RISE = 3.0  # MetadataOperations at or after the onset at least this many times its rate before it
GIB = 1024 ** 3
BUCKET_MINUTES = int(FSX_BUCKET.total_seconds() // 60)

Bound = Literal["throughput-bound", "metadata-bound", "neither"]


@dataclass(frozen=True)
class StorageReading:
    bound: Bound
    statement: str  # the bound with its numbers
    saturated: list[MetricPeak]  # the sustained saturation the bound rests on (empty for "neither")
    signals: list[str]  # what else the table's rows show (a metadata rise, a full OST), each a hypothesis
    quoted: str  # every row read, as reported


METADATA_SERVER_WORDS = ("MDS", "MDT", "META")  # how a FileServer value names a metadata server


def metadata_cpu(peaks: Sequence[MetricPeak]) -> list[MetricPeak]:
    """The metadata server's CPUUtilization: the FileServer values naming an MDS when any does, else every
    CPUUtilization series ListMetrics returned (the file system reports its servers under one name)."""
    cpu = [m for m in peaks if m.metric == "CPUUtilization"]
    mds = [m for m in cpu if any(word in m.dimensions.get("FileServer", "").upper() for word in METADATA_SERVER_WORDS)]
    return mds or cpu


def metadata_target(m: MetricPeak) -> bool:
    """DiskIopsUtilization of a metadata target (StorageTargetId `MDT…`): the metadata server's disk, not data
    throughput (FSx's metadata IOPS utilization is the MDT disk IOPS)."""
    return m.metric == "DiskIopsUtilization" and "MDT" in m.dimensions.get("StorageTargetId", "").upper()


def metadata_peaks(peaks: Sequence[MetricPeak]) -> list[MetricPeak]:
    """What says the metadata server is at its limit: its CPUUtilization, and its MDT disk IOPS."""
    return metadata_cpu(peaks) + [m for m in peaks if metadata_target(m)]


def data_throughput(peaks: Sequence[MetricPeak]) -> list[MetricPeak]:
    return [m for m in peaks if m.metric in THROUGHPUT_METRICS and not metadata_target(m)]


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


def read_storage(ev: Evidence, onset: datetime | None, file_system_id: str | None = None) -> StorageReading:
    """The statement over every file system read, or over the one named by `file_system_id`."""
    peaks = [m for m in usable_peaks(ev) if file_system_id in (None, m.file_system_id)]
    readings = [r for r in ev.fsx_readings or [] if r.datapoints and file_system_id in (None, r.file_system_id)]
    throughput = data_throughput(peaks)
    cpu = metadata_cpu(peaks)
    hot_throughput = [m for m in throughput if _sustained(m)]
    hot_cpu = [m for m in metadata_peaks(peaks) if _sustained(m)]
    top_throughput = max((m.peak or 0.0 for m in throughput), default=None)
    top_cpu = max((m.peak or 0.0 for m in cpu), default=None)
    through = f"throughput peaked at {top_throughput} %" if top_throughput is not None else \
        "no throughput metric was reported"
    mds = f"the metadata server's CPUUtilization peaked at {top_cpu} %" if top_cpu is not None else \
        "no metadata-server CPUUtilization was reported"
    if hot_throughput:
        names = ", ".join(sorted({m.metric for m in hot_throughput}))
        also = (f"; the metadata server was also ≥ 90 % ({_limits(hot_cpu)}), but throughput at its limit decides "
                "the bound") if hot_cpu else f"; {mds}"
        bound: Bound = "throughput-bound"
        statement = f"throughput-bound: {names} saturated (large sequential I/O at the limit){also}"
        saturated = hot_throughput
    elif hot_cpu:
        bound, saturated = "metadata-bound", hot_cpu
        statement = (f"metadata-bound: the metadata server saturated ({_limits(hot_cpu)}) while {through} (many "
                     "small files)")
    elif (rise := _metadata_rise(readings, onset)) is not None:
        # RULES §8 C: many small files, throughput well below capacity — metadata-bound without saturation, which
        # FSx's metrics alone leave a hypothesis (no client latency is published)
        bound, saturated = "metadata-bound", []
        statement = f"metadata-bound, below saturation: {rise}, while {through} and {mds}"
    elif near := [m for m in peaks if (m.peak or 0.0) >= 90.0]:
        # at or above 90 % for less than 5 minutes: not flagged, but near saturation, so never "not saturated"
        bound, saturated = "neither", []
        statement = (f"neither: near saturation, not for {SUSTAINED_MINUTES}+ min — {_limits(near)} "
                     f"({', '.join(f'{m.longest_run_at_or_above_90} min' for m in near)} at ≥ 90 %); {through}, {mds}")
    else:
        bound, saturated = "neither", []
        statement = f"neither: storage not saturated — {through}, {mds}"
    signals = [s for s in (_metadata_rise(readings, onset), *_full_osts(ev, readings, file_system_id)) if s]
    drop = _client_drop(readings, onset)
    quoted = "; ".join([*(_pct(m) for m in peaks), *(_row(r) for r in readings)]
                       + ([drop] if drop else []))
    return StorageReading(bound, statement, saturated, signals, quoted)


def _limits(peaks: Sequence[MetricPeak]) -> str:
    return ", ".join(f"{m.metric} {m.dimensions.get('FileServer') or m.dimensions.get('StorageTargetId') or ''} "
                     f"Maximum {m.peak} %" for m in peaks)


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
    """A sharp rise of MetadataOperations with the slowdown: its rate at or after the onset ≥ 3× the rate before;
    with no onset known, the first 10-minute bucket at ≥ 3× the mean of the buckets before it (the rise is then
    said with its own time, never called the onset)."""
    for r in readings:
        if r.metric != "MetadataOperations":
            continue
        if onset is None:
            rise = first_rise(r.buckets)
            if rise is not None:
                return (f"{r.file_system_id} MetadataOperations rose from {rise[1]:.1f} to {rise[2]:.1f} operations/s "
                        f"from {iso(rise[0])}: many metadata operations (small files, stat/open storms)")
            continue
        before, after = _split(r, onset)
        if not before or not after:
            continue
        base, top = sum(before) / len(before), max(after)
        if (base > 0 and top >= SHARP_RISE * base) or (base == 0 and top > 0):
            return (f"{r.file_system_id} MetadataOperations rose from {base:.1f} to {top:.1f} operations/s at the "
                    f"onset ({iso(onset)}): many metadata operations (small files, stat/open storms)")
    return None


def _full_osts(ev: Evidence, readings: Sequence[FsxReading], file_system_id: str | None = None) -> list[str]:
    """One OST under 10 % free while the others have room (FreeDataStorageCapacity Minimum per StorageTargetId,
    against the file system's StorageCapacity shared by its OSTs)."""
    out = []
    capacity = {f.file_system_id: f.storage_capacity_gib for f in ev.file_systems or []
                if file_system_id in (None, f.file_system_id)}
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


def first_rise(buckets: Sequence[tuple[datetime, float]]) -> tuple[datetime, float, float] | None:
    """(when, rate before, rate at the rise): the first bucket at ≥ SHARP_RISE × the mean of the buckets before it."""
    for i in range(1, len(buckets)):
        base = sum(v for _, v in buckets[:i]) / i
        if (base > 0 and buckets[i][1] >= SHARP_RISE * base) or (base == 0 and buckets[i][1] > 0):
            return buckets[i][0], base, buckets[i][1]
    return None


DROP_FRACTION = 0.5  # client I/O below half its level before: a drop (the same bar as _client_drop)
CLIENT_IO = ("DataReadBytes", "DataWriteBytes")


@dataclass(frozen=True)
class IoDrop:
    """A file system's own client I/O falling (RULES §8 C): when, from what and to what, and which rows it read."""

    file_system_id: str
    time: datetime  # the first 10-minute bucket below the bar (the readings' resolution)
    before: float
    after: float
    metrics: str


def client_io_drop(ev: Evidence, file_system_id: str) -> IoDrop | None:
    """The first drop of the file system's client I/O in the window: DataReadBytes + DataWriteBytes, else (neither
    read) MetadataOperations — a bucket and the next (when there is one) both below DROP_FRACTION of the mean of
    the buckets before it."""
    readings = [r for r in ev.fsx_readings or [] if r.file_system_id == file_system_id and r.datapoints]
    for metrics in (CLIENT_IO, ("MetadataOperations",)):
        summed: dict[datetime, float] = {}
        for r in readings:
            if r.metric in metrics:
                for t, v in r.buckets:
                    summed[t] = summed.get(t, 0.0) + v
        series = sorted(summed.items())
        for i in range(1, len(series)):
            base = sum(v for _, v in series[:i]) / i
            bar = DROP_FRACTION * base
            if base > 0 and series[i][1] < bar and all(v < bar for _, v in series[i + 1:i + 2]):
                unit = "bytes/s" if metrics == CLIENT_IO else "operations/s"
                return IoDrop(file_system_id, series[i][0], base, series[i][1],
                              f"{' + '.join(m for m in metrics)} ({unit})")
        if series:
            return None  # the bytes were read and did not drop: metadata operations do not stand in for them
    return None


def file_systems_in_scope(ev: Evidence) -> tuple[list[str], str]:
    """(the file systems branch C decides on, how they were chosen): those named with `--filesystem`, else those
    the cluster mounts, else — the mounts not resolved — every FSx for Lustre file system read."""
    ids = [f.file_system_id for f in ev.file_systems or []]
    if ev.named_file_systems:
        return [i for i in ids if i in ev.named_file_systems], "named with --filesystem"
    if ev.cluster_file_system_ids is not None:
        return [i for i in ids if i in ev.cluster_file_system_ids], "mounted by the cluster"
    return ids, "which file system the cluster mounts was not resolved"
