"""RULES §5.2: every HMA detection (`HealthMonitoringAgentDetectionEvent`) is a timeline entry with its node, reason,
node condition (`NvidiaErrorReboot`, `NvidiaErrorTerminate`) and Xid text — including a detection that names a
condition and no reason, with or without an Xid line."""

from __future__ import annotations

import json

from helpers.worlds import HyperPodWorld, PClusterWorld, at


def test_an_hma_detection_naming_only_its_node_condition_is_in_the_timeline_with_it() -> None:
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-2), at(13))
    node = w.gpu[0]
    w.hma_detection(node, at(10, 5), code=None, reason=None, condition="NvidiaErrorTerminate")
    w.hma_detection(node, at(10, 7), code=79, reason=None, condition="NvidiaErrorReboot")
    result = w.audit(w.cluster, mode="incident", since=at(9), until=at(11))
    hma = [t for t in result.timeline
           if t.resource == node.instance_id and "SagemakerHealthMonitoringAgent" in t.source]
    terminate = [t for t in hma if "NvidiaErrorTerminate" in t.event]
    reboot = [t for t in hma if "NvidiaErrorReboot" in t.event]
    assert [t.time.isoformat()[:16] for t in terminate] == [at(10, 5)[:16]]
    assert [t.time.isoformat()[:16] for t in reboot] == [at(10, 7)[:16]]
    assert "Xid (PCI:0000:00:1e): 79" in reboot[0].event  # the Xid text the detection carries


def test_an_hma_detection_quotes_both_its_repair_action_and_its_recommendation() -> None:
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-2), at(13))
    node = w.gpu[0]
    details = {"severity": "warn", "reason": "XidHardwareFailure", "condition": "NvidiaErrorTerminate",
               "message": "NVRM: Xid (PCI:0000:00:1e): 79, pid=0, GPU has fallen off the bus.",
               "repairAction": "Replace", "recommendation": "Replace the node"}
    line = json.dumps({"level": "info", "msg": "NPD caught event: %v", "details: ": details,
                       "HealthMonitoringAgentDetectionEvent": "HealthEvent"})
    w.stream(w.group, w.hma_stream_name(node), events=[(at(10, 5), line)])
    result = w.audit(w.cluster, mode="incident", since=at(9), until=at(11))
    said = [t.event for t in result.timeline if t.resource == node.instance_id and "HMA detection" in t.event]
    assert len(said) == 1
    for word in ('RepairAction "Replace"', 'Recommendation "Replace the node"', "NvidiaErrorTerminate", "Xid"):
        assert word in said[0]


def test_an_update_of_the_file_system_is_in_the_timeline_though_it_names_no_cluster() -> None:
    # RULES §5.7 lists fsx `UpdateFileSystem`; its request names the file system (`fileSystemId`), never a cluster,
    # so it is kept when it is about a file system of the audit (mounted, named, or — mounts unresolved — read)
    w = PClusterWorld("train", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(13))
    fs = "fs-0123456789abcdef0"
    w.section("fsx", "file_systems").append({"FileSystemId": fs, "FileSystemType": "LUSTRE", "StorageType": "SSD",
                                             "LustreConfiguration": {"DeploymentType": "PERSISTENT_2"}})
    w.section("cloudtrail", "events").append({
        "EventId": "e1", "EventName": "UpdateFileSystem", "EventTime": at(9, 40), "EventSource": "fsx.amazonaws.com",
        "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": {
            "fileSystemId": fs, "lustreConfiguration": {"perUnitStorageThroughput": 250}}})})
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    trail = [t for t in result.timeline if t.source == "CloudTrail" and "UpdateFileSystem" in t.event]
    assert [t.time.isoformat()[:16] for t in trail] == [at(9, 40)[:16]]
    assert fs in trail[0].resource or fs in trail[0].event


def test_calls_naming_no_cluster_are_kept_only_when_about_this_cluster() -> None:
    # RULES §5.7: keep events whose `requestParameters.clusterName` is this cluster. A ParallelCluster has no ARN:
    # a call whose request names no cluster at all (another file system's UpdateFileSystem, another instance's
    # TerminateInstances) is not about it
    w = PClusterWorld("train", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(13))
    w.section("fsx", "file_systems").append({"FileSystemId": "fs-0123456789abcdef0", "FileSystemType": "LUSTRE",
                                             "StorageType": "SSD",
                                             "LustreConfiguration": {"DeploymentType": "PERSISTENT_2"}})
    for name, source, params in (
            ("UpdateFileSystem", "fsx.amazonaws.com", {"fileSystemId": "fs-0fedcba98765432100"}),
            ("TerminateInstances", "ec2.amazonaws.com",
             {"instancesSet": {"items": [{"instanceId": "i-0fffffffffffffff0"}]}})):
        w.section("cloudtrail", "events").append({
            "EventId": name, "EventName": name, "EventTime": at(9, 40), "EventSource": source, "Username": "ops",
            "Resources": [], "CloudTrailEvent": json.dumps({"requestParameters": params})})
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    assert not [t for t in result.timeline if t.source == "CloudTrail"]
    e = next(b for b in result.branches if b.branch == "E")
    assert e.status == "Ruled out"


def _aggregated(host: str) -> tuple[PClusterWorld, str]:
    """One measured compute node; an Xid 79 line in a stream that names no node (a syslog aggregated from many
    hosts), its own syslog prefix naming `host` (the node's hostname, or another host's)."""
    w = PClusterWorld("train", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(13))
    w.stream(w.group, "aggregated-syslog", events=[(
        at(10, 5), f"Oct  1 10:05:00 {host or w.compute[0].hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=0, "
                   "GPU has fallen off the bus.")])
    return w, w.compute[0].instance_id


def test_an_xid_line_in_a_stream_naming_no_node_belongs_to_the_host_its_message_names() -> None:
    # RULES §5.1: Xid lines from every source, "node from the stream or message"
    w, iid = _aggregated("")
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    node = next(n for n in result.nodes if n.instance_id == iid)
    assert [e.code for e in node.gpu_errors] == [79]
    assert any(t.resource == iid and "first Xid 79" in t.event for t in result.timeline)
    assert next(b for b in result.branches if b.branch == "A").status != "Ruled out"


def test_a_hardware_xid_on_a_host_matched_to_no_node_is_in_the_timeline_and_keeps_a_open() -> None:
    # the line was read: it is listed (§5.1) and A, whose hardware-class Xid it is, cannot be ruled out (§8, §0.4)
    w, _ = _aggregated("ip-10-9-9-9")
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    assert any("first Xid 79" in t.event and "ip-10-9-9-9" in t.resource for t in result.timeline)
    a = next(b for b in result.branches if b.branch == "A")
    assert a.status != "Ruled out" and "ip-10-9-9-9" in a.evidence and "aggregated-syslog" in a.evidence
