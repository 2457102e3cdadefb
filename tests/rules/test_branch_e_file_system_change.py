"""RULES §8 E: "CloudTrail `UpdateCluster`, `UpdateClusterSoftware`, `UpdateFileSystem` … shortly before the
failure". FSx writes `UpdateFileSystem` with the file system's ID (`requestParameters.fileSystemId`), never a cluster
name: the change to the file system the cluster mounts is found by that ID, and a change to another file system is
not this cluster's.
"""

from __future__ import annotations

import json

from tests.rules.test_storage_decision_table import FS, OTHER, Storage, _cluster, _incident


def _with_update(file_system: str) -> list:
    w = _cluster()
    Storage(w, tagged_for=w.cluster).done()
    w.section("cloudtrail", "events").append({
        "EventId": "fsx-1", "EventName": "UpdateFileSystem", "EventTime": "2026-10-01T08:30:00Z",
        "EventSource": "fsx.amazonaws.com", "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": {
            "fileSystemId": file_system, "lustreConfiguration": {"perUnitStorageThroughput": 125}}})})
    return _incident(w).branches  # stated onset 09:00


def test_an_update_of_the_mounted_file_system_before_the_onset_is_evidence_for_e() -> None:
    e = next(b for b in _with_update(FS) if b.branch == "E")
    assert (e.status, e.label) == ("UNVERIFIED", "Hypothesis (to validate)")
    assert "UpdateFileSystem at 2026-10-01T08:30:00Z" in e.evidence


def test_an_update_of_another_file_system_is_not_this_clusters_change() -> None:
    e = next(b for b in _with_update(OTHER) if b.branch == "E")
    assert e.status == "Ruled out"
