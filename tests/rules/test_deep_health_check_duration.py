"""RULES §8 A and the HyperPod node-state thresholds (issue #53 item 12): `DeepHealthCheckInProgress` is normal for
45–90 min (DCGM level 4 alone) and flagged only well past 2 h — with how long it has run, and since what."""

from __future__ import annotations

import json

from helpers.worlds import HyperPodWorld, at

NOW_HOUR = 12  # the helper worlds' query time is 12:30


def world(launch: str) -> tuple[HyperPodWorld, str]:
    """A HyperPod cluster whose second P5 worker launched at `launch` and is still in its deep health check; the
    cluster log group is live."""
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge", statuses=["Running"])
    w.cluster_metrics(at(-10), at(12, 25))
    checking = w.gpu[1]
    node = next(n for n in w.described["Nodes"] if n["InstanceId"] == checking.instance_id)
    node.update(LaunchTime=launch, InstanceStatus={"Status": "DeepHealthCheckInProgress", "Message": ""})
    return w, checking.instance_id


def dhc_lines(result) -> list[str]:
    return [s for s in result.cluster_state if s.startswith("deep health check:")]


def test_a_deep_health_check_well_past_two_hours_is_flagged_with_its_duration() -> None:
    w, iid = world(launch=at(7, 15))  # 5 h 15 min before the query time
    result = w.audit(w.cluster, mode="incident", since=at(6), until=at(12))
    (line,) = dhc_lines(result)
    assert iid in line and "5 h 15 min" in line and "flagged" in line and "not flagged" not in line
    assert "since 2026-10-01T07:15:00Z" in line
    assert f"DeepHealthCheckResults/{iid}" in line
    # a node the service has not cleared for hours: hardware is not ruled out
    a = next(b for b in result.branches if b.branch == "A")
    assert a.status == "UNVERIFIED" and iid in a.evidence and "5 h 15 min" in a.evidence
    assert "5 h 15 min" in result.report_markdown


def test_an_hour_in_a_deep_health_check_is_normal_and_not_flagged() -> None:
    w, iid = world(launch=at(11, 30))  # 60 min
    result = w.audit(w.cluster, mode="incident", since=at(6), until=at(12))
    (line,) = dhc_lines(result)
    assert iid in line and "for 1 h 0 min" in line and "normal" in line and "flagged" not in line
    a = next(b for b in result.branches if b.branch == "A")
    assert iid not in a.evidence or "running long" not in a.evidence


def test_between_ninety_minutes_and_two_hours_is_long_but_not_flagged() -> None:
    w, iid = world(launch=at(10, 50))  # 1 h 40 min
    result = w.audit(w.cluster, mode="coverage")
    (line,) = dhc_lines(result)
    assert "1 h 40 min" in line and "not flagged" in line


def test_a_health_check_started_by_hand_counts_from_the_call_not_the_launch() -> None:
    w, iid = world(launch=at(-48))
    w.section("cloudtrail", "events").append({
        "EventId": "dhc1", "EventName": "StartClusterHealthCheck", "EventTime": at(10, 40),
        "EventSource": "sagemaker.amazonaws.com", "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": {"clusterName": w.cluster, "nodeIds": [iid]}})})
    result = w.audit(w.cluster, mode="incident", since=at(6), until=at(12))
    (line,) = dhc_lines(result)
    assert "1 h 50 min" in line and "StartClusterHealthCheck" in line and "not flagged" in line
