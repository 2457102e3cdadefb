"""Incident mode (RULES §5–§8) through the whole pipeline on small worlds: verdicts, branches, headline."""

from __future__ import annotations

import json
import re

import pytest
from helpers.worlds import ACCOUNT, PClusterWorld, at

from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit

HARDWARE_HEADLINE = re.compile(r"(?i)(?<!no )(?<!not a )hardware (error|fault|failure)")


def xid_line(host: str, code: int, pci: str = "0000:53:00", rest: str = "pid=4242, name=python3, Ch 00000008") -> str:
    return f"{host} kernel: NVRM: Xid (PCI:{pci}): {code}, {rest}"


def branches(result) -> dict[str, object]:
    return {b.branch: b for b in result.branches}


def node(result, iid: str):
    return next(n for n in result.nodes if n.instance_id == iid)


def world_with_xids(*xids: tuple[str, int, str]) -> tuple[PClusterWorld, str]:
    """One measured compute node with the given (time, code, pci) Xid lines in its kernel stream."""
    w = PClusterWorld("train", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    w.stream(w.group, stream, events=[(t, xid_line(gpu.hostname, code, pci)) for t, code, pci in xids])
    return w, gpu.instance_id


def test_single_xid_48_without_qualifier_is_held_not_replaced() -> None:
    # Given a lone Xid 48: no 171/172, no memory named
    w, iid = world_with_xids((at(10, 5), 48, "0000:53:00"))
    # When the incident is audited
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    n = node(result, iid)
    # Then the node is neither replaced nor silently rebooted; the deciding check is named
    assert n.verdict not in ("REPLACE", "REBOOT")
    assert n.verdict == "MONITOR"
    assert "UNVERIFIED" in (n.verdict_evidence or "") or "Hypothesis" in (n.verdict_evidence or "")
    assert "nvidia-smi -q -d ECC" in result.report_markdown
    assert not HARDWARE_HEADLINE.search(result.headline)


def test_xid_79_first_occurrence_reboots_and_is_the_proven_hardware_branch() -> None:
    w, iid = world_with_xids((at(10, 5), 79, "0000:53:00"))
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    assert node(result, iid).verdict == "REBOOT"
    a = branches(result)["A"]
    assert (a.status, a.label) == ("Root cause", "Proven")
    assert result.headline.startswith("Root cause (Proven): branch A")


def test_same_hardware_xid_on_same_bus_across_a_reboot_is_replace() -> None:
    w, iid = world_with_xids((at(9, 10), 79, "0000:53:00"), (at(10, 40), 79, "0000:53:00"))
    host = w.compute[0].hostname
    w.stream(w.group, w.stream_name(w.compute[0]), events=[(at(10), f"{host} kernel: Linux version 6.12.95")])
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    assert node(result, iid).verdict == "REPLACE"


def test_same_hardware_xid_on_another_bus_after_reboot_is_not_replace() -> None:
    w, iid = world_with_xids((at(9, 10), 79, "0000:53:00"), (at(10, 40), 79, "0000:64:00"))
    host = w.compute[0].hostname
    w.stream(w.group, w.stream_name(w.compute[0]), events=[(at(10), f"{host} kernel: Linux version 6.12.95")])
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    assert node(result, iid).verdict == "REBOOT"


def capacity_block_world(*, warning: bool) -> tuple[PClusterWorld, list[str]]:
    """Three compute nodes that vanished from DescribeInstances; their streams stop at 11:00, block ends 11:30."""
    w = PClusterWorld("blocky", n_compute=0)
    ids = []
    for i in range(3):
        iid, host = f"i-0{i + 1:016x}", f"ip-10-1-0-{i + 1}"
        stream = f"{host}.{iid}.system-messages"
        w.stream(w.group, stream, events=[(at(-20), f"{host} kernel: NVRM: loading NVIDIA UNIX Open Kernel Module")],
                 periodic=[(at(-20), at(11, 0, 1), 300, f"{host} systemd[1]: Started sysstat-collect.service")])
        if warning:
            w.stream(w.group, stream, events=[(at(10, 58), f"{host} Capacity Reservation Instance Interruption "
                                                         f"Warning: instance-id {iid}")])
        ids.append(iid)
    w.capacity_reservation("cr-0aaaabbbbccccdddd", "p5.48xlarge", at(11, 30), count=3)
    return w, ids


def test_mass_termination_at_block_end_is_capacity_lifecycle_hypothesis() -> None:
    w, ids = capacity_block_world(warning=False)
    result = w.audit("blocky", mode="incident", since=at(10), until=at(12))
    b = branches(result)["B"]
    assert (b.status, b.label) == ("UNVERIFIED", "Hypothesis (to validate)")
    report = result.report_markdown
    for text in ("cr-0aaaabbbbccccdddd", "2026-10-01T11:30:00Z", "30 min", *ids):
        assert text in report
    assert result.headline.startswith("Leading hypothesis: branch B")
    assert not HARDWARE_HEADLINE.search(result.headline)
    assert branches(result)["A"].status != "Root cause"


def test_retained_interruption_warning_proves_the_block_end() -> None:
    w, _ = capacity_block_world(warning=True)
    result = w.audit("blocky", mode="incident", since=at(10), until=at(12))
    b = branches(result)["B"]
    assert (b.status, b.label) == ("Root cause", "Proven")


def fsx_world(values: list[float]) -> PClusterWorld:
    w, _ = world_with_xids()
    fs = "fs-0123456789abcdef0"
    w.section("fsx", "file_systems").append({"FileSystemId": fs, "FileSystemType": "LUSTRE", "StorageType": "SSD",
                                             "LustreConfiguration": {"DeploymentType": "PERSISTENT_2"}})
    w.section("cloudwatch", "metrics").append({
        "Namespace": "AWS/FSx", "MetricName": "NetworkThroughputUtilization",
        "Dimensions": [{"Name": "FileSystemId", "Value": fs}, {"Name": "FileServer", "Value": "FS-0"}],
        "Datapoints": [[at(10, m), v] for m, v in enumerate(values)]})
    return w


def test_storage_below_saturation_is_a_hypothesis_with_raw_percent_and_client_check() -> None:
    w = fsx_world([0.9, 41.5, 63.25])
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    c = branches(result)["C"]
    assert c.status != "Root cause"
    assert c.label == "Hypothesis (to validate)"
    assert "fs-0123456789abcdef0" in c.evidence and "63.25" in c.evidence  # quoted as reported, never rescaled
    assert "stat" in (c.confirming_measurement or "")


def test_storage_saturated_for_five_minutes_alone_is_the_leading_hypothesis() -> None:
    # RULES §8: Contributing only beside a leading cause; alone, the saturated storage is the hypothesis itself
    w = fsx_world([95.0] * 6)
    c = branches(w.audit("train", mode="incident", since=at(9), until=at(11)))["C"]
    assert (c.status, c.label) == ("UNVERIFIED", "Hypothesis (to validate)")


def test_cluster_change_before_failure_and_denied_cloudtrail() -> None:
    w, _ = world_with_xids()
    w.section("cloudtrail", "events").append({
        "EventId": "e1", "EventName": "UpdateFileSystem", "EventTime": at(8, 30), "EventSource": "fsx.amazonaws.com",
        "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": {"clusterName": "train"}})})
    # the change alone (no other branch with evidence) is the leading hypothesis, not Contributing (RULES §8)
    assert branches(w.audit("train", mode="incident", since=at(9), until=at(11)))["E"].status == "UNVERIFIED"
    w.fault("cloudtrail", "LookupEvents", "AccessDeniedException")
    e = branches(w.audit("train", mode="incident", since=at(9), until=at(11)))["E"]
    assert e.status == "Not assessed"  # never Ruled out on evidence that could not be read


@pytest.mark.parametrize("mode", ["incident"])
def test_all_six_branches_have_a_status_and_evidence(mode: str) -> None:
    w, _ = world_with_xids((at(10), 31, "0000:53:00"))
    result = w.audit("train", mode=mode, since=at(9), until=at(11))
    assert [b.branch for b in result.branches] == list("ABCDEF")
    assert all(b.evidence for b in result.branches)
    assert all(b.status != "Root cause" or b.label == "Proven" for b in result.branches)


def test_class_override_is_named_in_result_and_report() -> None:
    from helpers.worlds import aws_for

    from gpuaudit.model.evidence import AuditRequest
    from gpuaudit.model.timeutil import parse_time
    from gpuaudit.pipeline import run_audit
    from gpuaudit.rules.context import parse_overrides
    from gpuaudit.rules.judge import JudgeConfig

    w, iid = world_with_xids((at(10, 5), 31, "0000:53:00"))
    request = AuditRequest(cluster="train", mode="incident", since=parse_time(at(9)), until=parse_time(at(11)))
    plain = run_audit(aws_for(w.world()), request)
    overridden = run_audit(aws_for(w.world()), request,
                           JudgeConfig.from_request(request, parse_overrides(["31=hardware"])))
    assert node(plain, iid).verdict == "LEAVE ALONE" and plain.config_overrides == []
    assert node(overridden, iid).verdict == "REBOOT"
    assert overridden.config_overrides == ["Xid 31 class overridden to hardware by configuration"]
    assert "Xid 31 class overridden to hardware by configuration" in overridden.report_markdown


def test_a_flood_of_identical_xids_does_not_hide_a_later_hardware_xid() -> None:
    # Given 10,500 identical Xid 31 lines (past Logs Insights' 10,000-row cap), then one Xid 79
    w = PClusterWorld("flood", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    w.stream(w.group, stream, periodic=[(at(9), at(9) .replace("09:00:00", "09:17:30"), 0.1,
                                         xid_line(gpu.hostname, 31))],
             events=[(at(10, 50), xid_line(gpu.hostname, 79, "0000:64:00"))])
    # When the incident is audited
    result = w.audit("flood", mode="incident", since=at(9), until=at(11))
    n = node(result, gpu.instance_id)
    # Then the GPU-lines query was re-read in slices: every 31 is counted once, and the 79 decides
    assert n.verdict == "REBOOT"
    assert next(e.count for e in n.gpu_errors if e.code == 31) == 10_500
    assert sum(1 for q in result.calls if q.operation == "StartQuery") == 1
    assert next(c.count for c in result.calls if c.operation == "StartQuery") > 3


@pytest.mark.parametrize(("lines", "verdict"), [
    ([(10, "WARNING: infoROM is corrupted at gpu 0000:53:00.0")], "REBOOT"),
    ([(9, "WARNING: infoROM is corrupted at gpu 0000:53:00.0"), (10, "kernel: Linux version 6.12"),
      (10.5, "WARNING: infoROM is corrupted at gpu 0000:53:00.0")], "REPLACE"),
    ([(10, "nvidia-smi: Remapping Failure Occurred: Yes")], "REPLACE"),
])
def test_non_xid_memory_signals_route_as_the_catalog_says(lines, verdict) -> None:
    w, iid = world_with_xids()
    host = w.compute[0].hostname
    w.stream(w.group, w.stream_name(w.compute[0]),
             events=[(at(int(h), int((h % 1) * 60)), f"{host} kernel: {text}") for h, text in lines])
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    assert node(result, iid).verdict == verdict
    assert branches(result)["A"].status == "Root cause"


def test_a_replaced_hyperpod_node_is_matched_to_its_replacement_and_explains_pending() -> None:
    from helpers.worlds import WorldBuilder

    w = WorldBuilder()
    w.instance_type("p5.48xlarge")
    new = {"InstanceGroupName": "gpu", "InstanceId": "i-0new0000000000001", "InstanceType": "ml.p5.48xlarge",
           "InstanceStatus": {"Status": "Pending", "Message": ""}, "LaunchTime": at(10, 5)}
    w.section("sagemaker", "clusters").append({
        "ClusterName": "hp", "ClusterArn": f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:cluster/abc123",
        "ClusterStatus": "InService", "NodeRecovery": "Automatic", "Orchestrator": {"Slurm": {}},
        "InstanceGroups": [{"InstanceGroupName": "gpu", "InstanceType": "ml.p5.48xlarge", "CurrentCount": 1,
                            "TargetCount": 1, "SlurmConfig": {"NodeType": "Compute"}}],
        "Nodes": [new]})
    w.lines("/aws/sagemaker/Clusters/hp/abc123", "ClusterMetrics/slurm", at(-24), at(13))
    w.section("cloudtrail", "events").append({
        "EventId": "r1", "EventName": "BatchReplaceClusterNodes", "EventTime": at(10), "EventSource":
        "sagemaker.amazonaws.com", "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": {"clusterName": "hp",
                                                             "nodeIds": ["i-0old0000000000001"]}})})
    e = branches(w.audit("hp", mode="incident", since=at(9), until=at(11)))["E"]
    assert e.status == "UNVERIFIED"  # the only branch with evidence: the leading hypothesis (RULES §8)
    assert "i-0old0000000000001 replaced by i-0new0000000000001" in e.evidence
    assert "not hardware, explains it being Pending" in e.evidence


def test_block_whose_termination_the_nodes_outlived_does_not_lead_b() -> None:
    # Given a Capacity Block of the nodes' type ending at 11:30 (termination 11:00), while both nodes' kernel streams
    # keep a line every 10 min until 13:00 (RULES §8 B, §0.5: evidence read contradicts the block ending them)
    w = PClusterWorld("outlive", n_compute=2)
    for gpu in w.compute:
        w.healthy(gpu, at(-48), at(13))
    w.capacity_reservation("cr-0eeeeffff00001111", "p5.48xlarge", at(11, 30))
    # When the incident is audited
    result = w.audit("outlive", mode="incident", since=at(10), until=at(12))
    b = branches(result)["B"]
    # Then B does not lead on that block, and the block is named as one whose end the nodes outlived
    assert not result.headline.startswith("Leading hypothesis: branch B")
    assert b.status not in ("Root cause", "UNVERIFIED")
    assert "cr-0eeeeffff00001111" in b.evidence and "outlived" in b.evidence
    for gpu in w.compute:
        assert gpu.instance_id in b.evidence


def test_short_storage_peak_at_90_is_near_saturation_in_the_headline_too() -> None:
    # Given a named file system whose network throughput is ≥ 90 % for 3 minutes only (RULES §8 C: saturated is
    # ≥ 90 % for 5+ min, so this is a peak near saturation, neither saturated nor "not saturated")
    w = fsx_world([40.0, 92.0, 95.0, 93.0, 40.0, 40.0])
    request = AuditRequest(cluster="train", mode="incident", since=parse_time(at(9)), until=parse_time(at(11)),
                           file_system_ids=["fs-0123456789abcdef0"])
    result = run_audit(w.aws(), request)
    # Then the headline's storage words agree with branch C's row: near saturation, never "not saturated"
    assert "near saturation" in branches(result)["C"].evidence
    storage = result.headline.split("Storage: ", 1)[1]
    assert "fs-0123456789abcdef0" in storage and "near saturation" in storage
    assert "not saturated" not in storage
