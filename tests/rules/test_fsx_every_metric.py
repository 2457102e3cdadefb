"""FSx for Lustre: every row of RULES §8 C's table is read, and the file system is stated as exactly one of
throughput-bound / metadata-bound / neither, with the numbers (#35 item 7).

From RULES §8 C: `AWS/FSx` at a 1-minute period, dimensions discovered with ListMetrics — NetworkThroughputUtilization,
FileServerDiskThroughputUtilization (FileServer), DiskIopsUtilization (StorageTargetId), CPUUtilization of the
metadata server (FileServer), all Maximum; MetadataOperations (Sum: a sharp rise with the slowdown);
FreeDataStorageCapacity (Minimum per OST: one OST < 10 % free while the others have room); DataReadBytes,
DataWriteBytes, ClientConnections (Sum: a drop with a stall is the effect). Throughput-bound is network/disk
saturated; metadata-bound is MDS CPU high with throughput well below capacity. §0.6: percents as reported, a rate
from a Sum is Sum / period seconds.
"""

from __future__ import annotations

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import PCLUSTER_TAG, PClusterWorld, at, calls

FS = "fs-0123456789abcdef0"
SINCE, UNTIL, ONSET = at(8), at(11), at(9)
GIB = 1024 ** 3
ALL_ROWS = ("NetworkThroughputUtilization", "FileServerDiskThroughputUtilization", "DiskIopsUtilization",
            "CPUUtilization", "MetadataOperations", "FreeDataStorageCapacity", "DataReadBytes", "DataWriteBytes",
            "ClientConnections")


def world(capacity_gib: int = 2400) -> PClusterWorld:
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-48), at(12, 25))
    w.section("fsx", "file_systems").append({
        "FileSystemId": FS, "FileSystemType": "LUSTRE", "StorageType": "SSD", "StorageCapacity": capacity_gib,
        "LustreConfiguration": {"DeploymentType": "PERSISTENT_2"}, "Tags": [{"Key": PCLUSTER_TAG, "Value": w.cluster}]})
    return w


def metric(w: PClusterWorld, name: str, points: dict[str, float], dim: tuple[str, str] | None = None) -> None:
    dims = [{"Name": "FileSystemId", "Value": FS}] + ([{"Name": dim[0], "Value": dim[1]}] if dim else [])
    w.section("cloudwatch", "metrics").append({"Namespace": "AWS/FSx", "MetricName": name, "Dimensions": dims,
                                               "Datapoints": [[t, v] for t, v in points.items()]})


def minutes(start_h: int, start_m: int, count: int, value: float) -> dict[str, float]:
    return {at(start_h, start_m + i): value for i in range(count)}


def c_of(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "C")


def incident(w: PClusterWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL, onset=ONSET)


def bounds(text: str) -> set[str]:
    return {b for b in ("throughput-bound", "metadata-bound") if b in text} or ({"neither"} if "neither" in text
                                                                              else set())


def test_a_metadata_storm_at_the_onset_is_metadata_bound_with_its_numbers() -> None:
    w = world()
    # 08:00–09:00 a quiet 600 ops/min (10 ops/s); from 09:00 a storm of 30,000 ops/min (500 ops/s), MDS CPU at 96 %
    metric(w, "MetadataOperations", {**minutes(8, 0, 60, 600.0), **minutes(9, 0, 90, 30_000.0)})
    metric(w, "CPUUtilization", {**minutes(8, 0, 55, 30.0), **minutes(8, 55, 95, 96.0)}, ("FileServer", "MDS0000"))
    metric(w, "CPUUtilization", minutes(8, 0, 150, 40.0), ("FileServer", "OSS0000"))  # an object server: not the MDS
    metric(w, "NetworkThroughputUtilization", minutes(8, 0, 150, 18.5), ("FileServer", "OSS0000"))
    c = c_of(incident(w))
    assert bounds(c.evidence) == {"metadata-bound"}
    assert "throughput peaked at 18.5 %" in c.evidence and "Maximum 96.0 %" in c.evidence
    assert "MetadataOperations rose from 10.0 to 500.0 operations/s" in c.evidence  # Sum / 60 s, not the raw Sum
    assert (c.status, c.label) == ("Root cause", "Proven")  # sustained from 08:55, before the stated onset


def test_throughput_and_metadata_cpu_both_saturated_is_throughput_bound_only() -> None:
    w = world()
    metric(w, "NetworkThroughputUtilization", minutes(8, 40, 60, 98.0), ("FileServer", "OSS0000"))
    metric(w, "CPUUtilization", minutes(8, 40, 60, 95.0), ("FileServer", "MDS0000"))
    c = c_of(incident(w))
    assert bounds(c.evidence) == {"throughput-bound"}
    assert "Maximum 98.0 %" in c.evidence and "Maximum 95.0 %" in c.evidence


def test_nothing_near_saturation_is_neither_with_the_peaks() -> None:
    w = world()
    metric(w, "NetworkThroughputUtilization", minutes(8, 0, 120, 41.0), ("FileServer", "OSS0000"))
    metric(w, "CPUUtilization", minutes(8, 0, 120, 12.0), ("FileServer", "MDS0000"))
    c = c_of(incident(w))
    assert bounds(c.evidence) == {"neither"} and "storage not saturated" in c.evidence
    assert "throughput peaked at 41.0 %" in c.evidence and "peaked at 12.0 %" in c.evidence
    assert c.status != "Root cause"


def test_every_row_of_the_table_is_listed_and_read_with_its_dimensions_and_quoted() -> None:
    w = world()
    metric(w, "NetworkThroughputUtilization", minutes(8, 0, 120, 30.0), ("FileServer", "OSS0000"))
    metric(w, "DataReadBytes", minutes(8, 0, 120, 6.0e9))  # 6 GB per minute: 100,000,000 bytes/s
    metric(w, "DataWriteBytes", minutes(8, 0, 120, 1.2e9))
    metric(w, "ClientConnections", minutes(8, 0, 120, 1920.0))
    for ost, free in (("OST0000", 500 * GIB), ("OST0001", 450 * GIB)):
        metric(w, "FreeDataStorageCapacity", minutes(8, 0, 120, float(free)), ("StorageTargetId", ost))
    result = incident(w)
    assert calls(result, "cloudwatch", "ListMetrics") >= len(ALL_ROWS)
    c = c_of(result)
    for text in ("DataReadBytes Sum / 60 s: 1e+08", "DataWriteBytes Sum / 60 s: 2e+07", "ClientConnections",
                 "FreeDataStorageCapacity {'StorageTargetId': 'OST0000'}", "500.0 GiB free", "450.0 GiB free"):
        assert text in c.evidence, text


def test_one_ost_nearly_full_while_the_others_have_room_is_said() -> None:
    w = world(capacity_gib=2400)  # two OSTs of 1,200 GiB
    metric(w, "NetworkThroughputUtilization", minutes(8, 0, 120, 25.0), ("FileServer", "OSS0000"))
    metric(w, "FreeDataStorageCapacity", minutes(8, 0, 120, 60.0 * GIB), ("StorageTargetId", "OST0000"))  # 5 %
    metric(w, "FreeDataStorageCapacity", minutes(8, 0, 120, 700.0 * GIB), ("StorageTargetId", "OST0001"))
    c = c_of(incident(w))
    assert "OST OST0000 under 10 % free" in c.evidence and "OST0001 58.3 %" in c.evidence
    assert c.status != "Ruled out" and c.label == "Hypothesis (to validate)"


def test_a_client_io_drop_at_the_onset_is_the_effect_not_the_cause() -> None:
    w = world()
    metric(w, "NetworkThroughputUtilization", minutes(8, 0, 150, 20.0), ("FileServer", "OSS0000"))
    metric(w, "DataWriteBytes", {**minutes(8, 0, 60, 6.0e9), **minutes(9, 0, 90, 6.0e7)})
    c = c_of(incident(w))
    assert "fell from 100,000,000 to 1,000,000 bytes/s at the onset" in c.evidence
    assert "the effect, not the cause" in c.evidence
