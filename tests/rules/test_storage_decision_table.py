"""Branch C as one decision table (#53 item 2), written from RULES §8 C and §0.5, not from the report's wording.

Each row of §8 C's table is driven to each outcome it can reach: `Proven` (a measured signal on the file system in
scope, before the onset, nothing competing), `Hypothesis (to validate)` (flagged but short of that bar, or a spike
without saturation, which FSx's metrics alone cannot prove: no client latency is published), and `Ruled out` (every
row read and clean). The onset is the operator's, or — where no other failure signal was read, as in an audit of the
file system alone — the drop of the file system's own client I/O. The branch names the file system it decided on,
and so does the headline; another file system of the account is never the one named.

The base world: FSx for Lustre FS (PERSISTENT_2, SSD, 2,400 GiB over two OSTs) with every row of the table read
and clean from 08:00 to 11:00 on Thursday 2026-10-01, its weekly maintenance on Monday (`1:03:00`), and, where a
test adds them, the signals of one row.
"""

from __future__ import annotations

import pytest

from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Branch, Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from tests.helpers.worlds import PCLUSTER_TAG, PClusterWorld, WorldBuilder, at

FS, OTHER = "fs-0123456789abcdef0", "fs-0fedcba9876543210"
SINCE, UNTIL = at(8), at(11)
GIB = 1024 ** 3
CLEAN: dict[str, tuple[tuple[str, str] | None, float]] = {  # every row below its flag
    "NetworkThroughputUtilization": (("FileServer", "OSS0000"), 30.0),
    "FileServerDiskThroughputUtilization": (("FileServer", "OSS0000"), 25.0),
    "DiskIopsUtilization": (("StorageTargetId", "OST0000"), 20.0),
    "CPUUtilization": (("FileServer", "MDS0000"), 35.0),
    "MetadataOperations": (None, 600.0),
    "DataReadBytes": (None, 6.0e9),
    "DataWriteBytes": (None, 1.2e9),
    "ClientConnections": (None, 1920.0),
}


def _series(start: tuple[int, int], count: int, value: float) -> dict[str, float]:
    return {at(start[0], start[1] + i): value for i in range(count)}


def _whole(value: float) -> dict[str, float]:
    return _series((8, 0), 180, value)


class Storage:
    """One file system's rows; `flag` replaces a metric's clean series with the given points."""

    def __init__(self, w: WorldBuilder, fs: str = FS, *, tagged_for: str | None = None,
                 maintenance: str = "1:03:00") -> None:
        self.w, self.fs = w, fs
        tags = [{"Key": PCLUSTER_TAG, "Value": tagged_for}] if tagged_for else []
        w.section("fsx", "file_systems").append({
            "FileSystemId": fs, "FileSystemType": "LUSTRE", "StorageType": "SSD", "StorageCapacity": 2400,
            "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "WeeklyMaintenanceStartTime": maintenance},
            "Tags": tags})
        self.series: dict[tuple[str, tuple[str, str] | None], dict[str, float]] = {
            (name, dim): _whole(value) for name, (dim, value) in CLEAN.items()}
        for ost in ("OST0000", "OST0001"):
            self.series[("FreeDataStorageCapacity", ("StorageTargetId", ost))] = _whole(600.0 * GIB)

    def flag(self, name: str, points: dict[str, float], dim: tuple[str, str] | None = None) -> Storage:
        key = next((k for k in self.series if k[0] == name and (dim is None or k[1] == dim)), (name, dim))
        self.series[key] = {**self.series.get(key, {}), **points}
        return self

    def done(self) -> None:
        for (name, dim), points in self.series.items():
            dims = [{"Name": "FileSystemId", "Value": self.fs}] + ([{"Name": dim[0], "Value": dim[1]}] if dim else [])
            self.w.section("cloudwatch", "metrics").append({
                "Namespace": "AWS/FSx", "MetricName": name, "Dimensions": dims,
                "Datapoints": [[t, v] for t, v in sorted(points.items())]})


def _cluster() -> PClusterWorld:
    w = PClusterWorld(n_compute=1, launch=at(-48))
    w.healthy(w.compute[0], at(-48), at(12, 25))
    return w


def _incident(w: PClusterWorld, onset: str | None = at(9)) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL, onset=onset)


def _file_system_alone(w: WorldBuilder) -> Result:
    request = AuditRequest.model_validate({"cluster": None, "file_system_ids": [FS], "mode": "incident",
                                           "since": parse_time(SINCE), "until": parse_time(UNTIL)})
    return run_audit(w.aws(), request)


def _c(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "C")


def _verdict(result: Result) -> tuple[str, str | None]:
    c = _c(result)
    return c.status, c.label


HYPOTHESIS = "Hypothesis (to validate)"


# -- every row read and clean: Ruled out, naming what cleared it -------------------------------------------------------
def test_every_row_read_and_clean_rules_storage_out_naming_each_row() -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).done()
    c = _c(_incident(w))
    assert (c.status, c.label) == ("Ruled out", None)
    for row in ("throughput saturation", "metadata server", "metadata operations", "OST free space",
                "maintenance window"):
        assert f"{row} — Ruled out" in c.evidence, row
    assert FS in c.evidence and "storage not saturated" in c.evidence


def test_a_row_not_read_keeps_storage_from_ruled_out() -> None:
    w = _cluster()
    s = Storage(w, tagged_for=w.cluster)
    del s.series[("CPUUtilization", ("FileServer", "MDS0000"))]
    s.done()
    c = _c(_incident(w))
    assert c.status != "Ruled out" and c.label == HYPOTHESIS
    assert "metadata server — Not checked" in c.evidence


# -- throughput saturation
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("start", "onset", "want"), [
    ((8, 50), at(9), ("Root cause", "Proven")),          # sustained from 08:50, before the stated onset
    ((9, 20), at(9), ("UNVERIFIED", HYPOTHESIS)),         # began after the onset
    ((8, 50), None, ("UNVERIFIED", HYPOTHESIS)),          # no onset read: 'before the failure' cannot be shown
])
def test_throughput_saturation_row(start: tuple[int, int], onset: str | None, want: tuple[str, str]) -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).flag("NetworkThroughputUtilization", _series(start, 40, 97.0)).done()
    result = _incident(w, onset)
    assert _verdict(result) == want
    c = _c(result)
    assert "throughput-bound" in c.evidence and f"throughput saturation — {want[1].split(' ')[0]}" in c.evidence
    assert FS in result.headline


# -- metadata server (CPU, MDT disk IOPS)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("cpu", "want"), [
    (96.0, ("Root cause", "Proven")),
    (60.0, ("Ruled out", None)),
])
def test_metadata_server_cpu_row(cpu: float, want: tuple[str, str | None]) -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).flag("CPUUtilization", _series((8, 45), 60, cpu), ("FileServer", "MDS0000")).done()
    c = _c(_incident(w))
    assert (c.status, c.label) == want
    assert ("metadata-bound" in c.evidence) is (cpu >= 90)


def test_the_metadata_targets_disk_iops_saturated_is_metadata_bound_not_throughput_bound() -> None:
    # FSx's metadata IOPS utilization is the MDT's disk IOPS: a small-file storm, not large sequential I/O
    w = _cluster()
    Storage(w, tagged_for=w.cluster).flag("DiskIopsUtilization", _series((8, 45), 60, 98.0),
                                          ("StorageTargetId", "MDT0000")).done()
    c = _c(_incident(w))
    assert (c.status, c.label) == ("Root cause", "Proven")
    assert "metadata-bound" in c.evidence and "throughput-bound" not in c.evidence
    assert "metadata server — Proven" in c.evidence and "throughput saturation — Ruled out" in c.evidence


def test_metadata_server_cpu_saturated_after_the_onset_is_a_hypothesis() -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).flag("CPUUtilization", _series((9, 30), 60, 96.0),
                                          ("FileServer", "MDS0000")).done()
    c = _c(_incident(w))
    assert (c.status, c.label) == ("UNVERIFIED", HYPOTHESIS)
    assert "metadata-bound" in c.evidence and f"after the onset {at(9)}" in c.evidence


# -- metadata operations: a storm without saturation is metadata-bound, a hypothesis
# ------------------------------------
def test_a_metadata_storm_below_saturation_is_called_metadata_bound_and_stays_a_hypothesis() -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).flag("MetadataOperations", _series((9, 0), 120, 30_000.0)) \
        .flag("CPUUtilization", _series((9, 0), 120, 70.0), ("FileServer", "MDS0000")).done()
    c = _c(_incident(w))
    assert (c.status, c.label) == ("UNVERIFIED", HYPOTHESIS)
    assert "metadata-bound" in c.evidence and "throughput-bound" not in c.evidence
    assert "metadata operations — Hypothesis" in c.evidence and "MetadataOperations rose from 10.0" in c.evidence
    assert "stat" in (c.confirming_measurement or "")


# -- OST free space ----------------------------------------------------------------------------------------------------
def test_one_ost_nearly_full_is_a_hypothesis_never_proven() -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).flag("FreeDataStorageCapacity", _whole(60.0 * GIB),
                                          ("StorageTargetId", "OST0000")).done()
    c = _c(_incident(w))
    assert (c.status, c.label) == ("UNVERIFIED", HYPOTHESIS)
    assert "OST free space — Hypothesis" in c.evidence and "OST0000 under 10 % free" in c.evidence


# -- the weekly maintenance window (Thursday 09:30 = `4:09:30`) --------------------------------------------------------
def _io_drop_from(start: tuple[int, int]) -> dict[str, float]:
    minutes = (start[0] - 8) * 60 + start[1]
    return {**_series((8, 0), minutes, 6.0e9), **_series(start, 180 - minutes, 6.0e7)}


def test_a_stall_inside_the_maintenance_window_with_client_io_dropping_in_it_is_proven_on_the_file_system_alone() -> None:  # noqa: E501
    # No cluster, no stated onset: the file system's own client I/O drop at 09:30 is the stall's onset (RULES §8 C)
    w = WorldBuilder()
    Storage(w, maintenance="4:09:30").flag("DataReadBytes", _io_drop_from((9, 30))) \
        .flag("DataWriteBytes", _io_drop_from((9, 30))).done()
    result = _file_system_alone(w)
    assert result.window.onset is not None and result.window.onset.isoformat().startswith("2026-10-01T09:30")
    assert _verdict(result) == ("Root cause", "Proven")
    c = _c(result)
    assert "maintenance window — Proven" in c.evidence and at(9, 30) in c.evidence
    assert result.headline.startswith("Root cause (Proven): branch C") and FS in result.headline


def test_a_stall_inside_the_maintenance_window_without_a_client_io_drop_in_it_is_a_hypothesis() -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster, maintenance="4:09:30").done()  # client I/O steady
    c = _c(_incident(w, onset=at(9, 40)))
    assert (c.status, c.label) == ("UNVERIFIED", HYPOTHESIS)
    assert "maintenance window — Hypothesis" in c.evidence and "no drop of the file system's client I/O" in c.evidence


def test_a_stall_outside_the_maintenance_window_rules_that_row_out() -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster, maintenance="4:10:30").done()
    c = _c(_incident(w, onset=at(9, 40)))
    assert "maintenance window — Ruled out" in c.evidence and c.status == "Ruled out"


# -- the file system decided on is the one named -----------------------------------------------------------------------
def test_saturation_on_the_mounted_file_system_alone_is_proven_and_the_headline_names_it_not_another() -> None:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).flag("NetworkThroughputUtilization", _series((8, 50), 40, 97.0)).done()
    Storage(w, OTHER).flag("NetworkThroughputUtilization", _series((8, 0), 60, 99.0)).done()  # not mounted
    result = _incident(w)
    assert _verdict(result) == ("Root cause", "Proven")
    assert FS in result.headline and OTHER not in result.headline
    assert _c(result).evidence.startswith(f"Storage {FS} (mounted by the cluster)")


def test_saturation_before_the_file_systems_own_client_io_drop_is_proven_when_audited_alone() -> None:
    w = WorldBuilder()
    Storage(w).flag("NetworkThroughputUtilization", _series((8, 50), 60, 97.0)) \
        .flag("DataReadBytes", _io_drop_from((9, 0))).flag("DataWriteBytes", _io_drop_from((9, 0))).done()
    result = _file_system_alone(w)
    assert _verdict(result) == ("Root cause", "Proven")
    assert "drop of fs-0123456789abcdef0's own client I/O" in (result.window.onset_source or "")
    assert FS in result.headline
