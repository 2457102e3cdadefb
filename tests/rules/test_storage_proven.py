"""FSx saturation meeting the Proven bar is the root cause (#15 item 4), from RULES §0.5 and §8 C: Proven means a
sustained signal (≥ 90 % for 5+ consecutive 1-minute datapoints), on the file system the cluster mounts, before the
slowdown, with nothing competing; then branch C is `Root cause` labelled Proven, and the report says whether the
file system was throughput-bound or metadata-bound. Anything short of the bar stays a hypothesis naming what is
missing."""

from __future__ import annotations

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import PCLUSTER_TAG, PClusterWorld, at

FS, OTHER_FS = "fs-0123456789abcdef0", "fs-0fedcba9876543210"
SINCE, UNTIL = at(8), at(11)
ONSET = at(9)  # the slowdown began at 09:00, as the operator states it (RULES §0.5: the window start is not it)


def _world(*, tagged: str | None = FS, xid: bool = False) -> PClusterWorld:
    w = PClusterWorld(n_compute=1, launch=at(-48))
    stream = w.healthy(w.compute[0], at(-48), at(12, 25))
    if xid:
        w.stream(w.group, stream, events=[(at(8, 55), f"{w.compute[0].hostname} kernel: NVRM: Xid (PCI:0000:53:00): "
                                                      "79, pid=0, GPU has fallen off the bus.")])
    for fs in (FS, OTHER_FS):
        tags = [{"Key": PCLUSTER_TAG, "Value": w.cluster}] if fs == tagged else []
        w.section("fsx", "file_systems").append({"FileSystemId": fs, "FileSystemType": "LUSTRE", "StorageType": "SSD",
                                                 "LustreConfiguration": {"DeploymentType": "PERSISTENT_2"},
                                                 "Tags": tags})
    return w


def _metric(w: PClusterWorld, name: str, dim: tuple[str, str], points: dict[str, float], fs: str = FS) -> None:
    w.section("cloudwatch", "metrics").append({
        "Namespace": "AWS/FSx", "MetricName": name,
        "Dimensions": [{"Name": "FileSystemId", "Value": fs}, {"Name": dim[0], "Value": dim[1]}],
        "Datapoints": [[t, v] for t, v in points.items()]})


def _minutes(hour: int, first: int, count: int, value: float) -> dict[str, float]:
    return {at(hour, first + i): value for i in range(count)}


def _c(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "C")


def _incident(w: PClusterWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL, onset=ONSET)


def test_sustained_network_saturation_on_the_mounted_fs_before_the_slowdown_is_proven_throughput_bound() -> None:
    w = _world()
    _metric(w, "NetworkThroughputUtilization", ("FileServer", "FS-0"),
            {**_minutes(8, 50, 8, 96.5), **_minutes(9, 0, 30, 99.0)})
    _metric(w, "CPUUtilization", ("FileServer", "FS-0"), _minutes(8, 50, 40, 35.0))
    result = _incident(w)
    c = _c(result)
    assert (c.status, c.label) == ("Root cause", "Proven")
    assert "throughput-bound" in c.evidence and "metadata-bound" not in c.evidence
    assert f"{FS} (mounted by the cluster)" in c.evidence and at(8, 50) in c.evidence
    assert "Maximum 99.0 %" in c.evidence  # quoted as reported, never rescaled
    assert result.headline.startswith("Root cause (Proven): branch C")
    assert "throughput-bound" in result.report_markdown


def test_metadata_server_cpu_saturated_with_throughput_low_is_metadata_bound() -> None:
    w = _world()
    _metric(w, "CPUUtilization", ("FileServer", "FS-0"), _minutes(8, 45, 30, 97.0))
    _metric(w, "NetworkThroughputUtilization", ("FileServer", "FS-0"), _minutes(8, 45, 30, 22.0))
    c = _c(_incident(w))
    assert (c.status, c.label) == ("Root cause", "Proven")
    assert "metadata-bound" in c.evidence and "throughput peaked at 22.0 %" in c.evidence


def test_saturation_on_a_file_system_the_cluster_does_not_mount_is_not_proven() -> None:
    w = _world(tagged=OTHER_FS)
    _metric(w, "NetworkThroughputUtilization", ("FileServer", "FS-0"), _minutes(8, 45, 30, 97.0))
    c = _c(_incident(w))
    assert c.status != "Root cause" and c.label == "Hypothesis (to validate)"
    assert "not one the cluster mounts" in c.evidence and OTHER_FS in c.evidence


def test_saturation_that_begins_after_the_slowdown_is_not_proven() -> None:
    w = _world()
    _metric(w, "NetworkThroughputUtilization", ("FileServer", "FS-0"), _minutes(9, 20, 20, 97.0))
    c = _c(_incident(w))
    assert c.status != "Root cause"
    assert f"began {at(9, 20)}, after the onset {ONSET}, stated by the operator" in c.evidence
    assert "throughput-bound" in c.evidence  # the kind of saturation is said either way


def test_scattered_minutes_above_90_are_not_sustained() -> None:
    w = _world()
    _metric(w, "NetworkThroughputUtilization", ("FileServer", "FS-0"),
            {at(8, m): (95.0 if m % 2 == 0 else 40.0) for m in range(30, 60)})
    c = _c(_incident(w))
    assert c.status != "Root cause"
    assert "no run of 5+ consecutive minutes" in c.evidence


def test_a_competing_hardware_signal_keeps_storage_from_being_the_root_cause() -> None:
    w = _world(xid=True)
    _metric(w, "NetworkThroughputUtilization", ("FileServer", "FS-0"), _minutes(8, 45, 30, 97.0))
    result = _incident(w)
    c = _c(result)
    assert c.status == "Contributing" and "A also hold" in c.evidence
    assert result.headline.startswith("Root cause (Proven): branch A")
