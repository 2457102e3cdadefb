"""`--filesystem fs-…` (#15 item 1, part), from RULES §8 C and §0.4/§0.6: the named FSx for Lustre file systems are
audited with or without a cluster — details, the weekly maintenance window, and saturation metrics per dimension
ListMetrics discovers (never guessed), quoted as reported. Without `--cluster` the result's cluster is a labelled
fleet; a named file system that does not exist, or is not Lustre, is a named gap."""

from __future__ import annotations

import json
from pathlib import Path

from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from tests.helpers.worlds import PClusterWorld, WorldBuilder, at, calls, cli_audit

FS, OTHER, MISSING = "fs-0123456789abcdef0", "fs-0fedcba9876543210", "fs-0aaaabbbbccccdddd"


def _fs(w: WorldBuilder, fs: str, *, kind: str = "LUSTRE", maintenance: str = "4:09:30") -> None:
    w.section("fsx", "file_systems").append({"FileSystemId": fs, "FileSystemType": kind, "StorageType": "SSD",
                                             "LustreConfiguration": {"DeploymentType": "PERSISTENT_2",
                                                                     "WeeklyMaintenanceStartTime": maintenance}})


def _metric(w: WorldBuilder, fs: str, name: str, dim: tuple[str, str], first_minute: int, values: list[float]) -> None:
    w.section("cloudwatch", "metrics").append({
        "Namespace": "AWS/FSx", "MetricName": name,
        "Dimensions": [{"Name": "FileSystemId", "Value": fs}, {"Name": dim[0], "Value": dim[1]}],
        "Datapoints": [[at(9, first_minute + i), v] for i, v in enumerate(values)]})


def _world() -> WorldBuilder:
    w = WorldBuilder()
    _fs(w, FS)  # 2026-10-01 is a Thursday (day 4): maintenance starts 09:30 that day
    _fs(w, OTHER)
    _metric(w, FS, "NetworkThroughputUtilization", ("FileServer", "FS-1"), 35, [97.0] * 8)
    _metric(w, FS, "DiskIopsUtilization", ("StorageTargetId", "OST0003"), 35, [12.5] * 8)
    _metric(w, OTHER, "NetworkThroughputUtilization", ("FileServer", "FS-0"), 35, [99.0] * 8)
    return w


def _audit(w: WorldBuilder, *file_systems: str, mode: str = "coverage", cluster: str | None = None) -> Result:
    request = AuditRequest.model_validate({"cluster": cluster, "file_system_ids": list(file_systems), "mode": mode,
                                           "since": parse_time(at(8)), "until": parse_time(at(11))})
    return run_audit(w.aws(), request)


def test_a_file_system_alone_is_audited_as_a_labelled_fleet() -> None:
    result = _audit(_world(), FS)
    assert result.cluster.name == "fleet-of-1-file-systems"
    (line,) = [s for s in result.cluster_state if s.startswith("file system ")]
    assert line.startswith(f"file system {FS} (LUSTRE, PERSISTENT_2, SSD): weekly maintenance 4:09:30")
    assert f"starting {at(9, 30)} within the audit window" in line
    # the dimension ListMetrics found, the value as reported
    assert "NetworkThroughputUtilization {'FileSystemId': 'fs-0123456789abcdef0', 'FileServer': 'FS-1'} " \
           "Maximum 97.0 % (8 min ≥ 90 %)" in line
    assert f"Storage: {FS} saturated" in result.headline
    assert OTHER not in result.report_markdown  # only what the operator named
    assert calls(result, "logs", "DescribeLogGroups") == 0  # no node, no node log to search


def test_a_named_file_system_that_does_not_exist_or_is_not_lustre_is_a_named_gap() -> None:
    w = _world()
    _fs(w, OTHER.replace("fed", "abc"), kind="ONTAP")
    result = _audit(w, FS, MISSING, OTHER.replace("fed", "abc"))
    assert any(MISSING in g and "FileSystemNotFound" in g for g in result.visibility_gaps)
    assert any("ONTAP, not FSx for Lustre" in g for g in result.visibility_gaps)
    assert any(s.startswith(f"file system {FS}") for s in result.cluster_state)


def test_with_a_cluster_the_incident_judges_storage_on_the_named_file_system_only() -> None:
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-48), at(12, 25))
    _fs(w, FS)
    _fs(w, OTHER)
    _metric(w, OTHER, "NetworkThroughputUtilization", ("FileServer", "FS-0"), 0, [99.0] * 30)
    _metric(w, FS, "NetworkThroughputUtilization", ("FileServer", "FS-1"), 0, [40.0] * 30)
    result = _audit(w, FS, mode="incident", cluster=w.cluster)
    c = next(b for b in result.branches if b.branch == "C")
    assert FS in c.evidence and OTHER not in c.evidence
    assert c.status == "UNVERIFIED" and "not saturated" in c.evidence


def _cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    return cli_audit(_world().raw, tmp_path, *args)


def test_cli_filesystem_flag_and_its_bad_input(tmp_path: Path) -> None:
    code, out = _cli(tmp_path, "--filesystem", FS, "--since", at(8), "--until", at(11))
    assert code == 0 and json.loads(out)["cluster"]["name"] == "fleet-of-1-file-systems"
    code, out = _cli(tmp_path, "--filesystem", FS, "--filesystem", "fs-XYZ")
    assert code == 2 and "--filesystem[1]" in out and "fs-XYZ" in out
