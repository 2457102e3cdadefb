"""EC2 scheduled events, status checks and AWS Health reach the timeline and branch A (issue #53 item 13), from
RULES §5 (sources 4 and 5; "an event announced or updated inside that span whose own date lies later — a scheduled
`instance-retirement`, a Health event's future start — belongs in it, listed at its announcement with its date") and
§8 A ("EC2 status check failure; AWS Health hardware event"; `Ruled out` only on evidence read and clean).

The operator's case: two P5 nodes of a ParallelCluster, kernel logs live all day, no Xid; the job hung at 08:00.
"""

from __future__ import annotations

from typing import Any

from gpuaudit.model.result import Branch, Result, TimelineEntry
from gpuaudit.model.timeutil import parse_time
from tests.helpers.worlds import PClusterWorld, at

SINCE, UNTIL = at(6), at(10)
RETIREMENT = "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"


def _world() -> PClusterWorld:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    w.section("ec2", "instance_status").extend(
        {"InstanceId": n.instance_id, "InstanceState": {"Code": 16, "Name": "running"},
         "SystemStatus": {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]},
         "InstanceStatus": {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]}}
        for n in w.compute)
    w.section("health", "events")
    return w


def _status(w: PClusterWorld, index: int) -> dict[str, Any]:
    iid = w.compute[index].instance_id
    return next(s for s in w.section("ec2", "instance_status") if s["InstanceId"] == iid)


def _run(w: PClusterWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)


def _a(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "A")


def _entries(result: Result, resource: str) -> list[TimelineEntry]:
    return [t for t in result.timeline if resource in t.resource]


def test_a_clean_read_names_the_status_checks_and_health_that_cleared_it() -> None:
    result = _run(_world())
    a = _a(result)
    assert a.status == "Ruled out"
    assert "DescribeInstanceStatus" in a.evidence and "all ok, no scheduled event" in a.evidence
    assert "AWS Health: 0 EC2/SageMaker event(s) read" in a.evidence


def test_a_retirement_announced_in_the_window_is_in_the_timeline_at_its_announcement_and_keeps_a_open() -> None:
    w = _world()
    node = w.compute[0].instance_id
    retire_on = at(24 * 14)
    _status(w, 0)["Events"] = [{"Code": "instance-retirement", "NotBefore": retire_on,
                                "Description": "The instance is running on degraded hardware"}]
    w.section("health", "events").append({
        "arn": "arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/abc", "service": "EC2",
        "eventTypeCode": RETIREMENT, "eventTypeCategory": "scheduledChange", "statusCode": "upcoming",
        "startTime": retire_on, "lastUpdatedTime": at(7, 40), "AffectedEntities": [{"entityValue": node}]})
    result = _run(w)
    a = _a(result)
    assert a.status == "UNVERIFIED" and a.label == "Hypothesis (to validate)"  # never Ruled out beside it
    assert node in a.evidence and "instance-retirement" in a.evidence and RETIREMENT in a.evidence
    health = [t for t in _entries(result, node) if t.source == "AWS Health"]
    assert [t.time for t in health] == [parse_time(at(7, 40))]
    assert retire_on[:10] in health[0].event  # listed at its announcement, with its own (later) date


def test_an_impaired_status_check_stands_at_its_since_time_and_is_a_hypothesis_for_a() -> None:
    w = _world()
    node = w.compute[1].instance_id
    _status(w, 1)["SystemStatus"] = {"Status": "impaired", "Details": [
        {"Name": "reachability", "Status": "failed", "ImpairedSince": at(7, 15)}]}
    result = _run(w)
    checks = [t for t in _entries(result, node) if t.source == "EC2 status checks"]
    assert len(checks) == 1 and checks[0].time.isoformat().startswith(at(7, 15)[:16])
    assert "impaired" in checks[0].event
    a = _a(result)
    assert a.status == "UNVERIFIED" and node in a.evidence and "impaired since" in a.evidence


def test_a_maintenance_reboot_inside_the_window_is_listed_at_its_date_and_keeps_a_open() -> None:
    w = _world()
    node = w.compute[0].instance_id
    _status(w, 0)["Events"] = [{"Code": "system-reboot", "NotBefore": at(8), "NotAfter": at(9),
                                "Description": "[Completed] scheduled reboot"}]
    result = _run(w)
    entries = [t for t in _entries(result, node) if t.source == "EC2 scheduled events"]
    assert len(entries) == 1 and entries[0].time.isoformat().startswith(at(8)[:16])
    assert "system-reboot" in entries[0].event
    assert _a(result).status == "UNVERIFIED"


def test_maintenance_dated_after_the_failure_is_named_but_does_not_hold_a_open() -> None:
    w = _world()
    node = w.compute[0].instance_id
    _status(w, 0)["Events"] = [{"Code": "system-maintenance", "NotBefore": at(24 * 3),
                                "Description": "scheduled network maintenance"}]
    a = _a(_run(w))
    assert a.status == "Ruled out"
    assert "dated after the failure" in a.evidence and node in a.evidence and "system-maintenance" in a.evidence


def test_health_not_read_is_said_in_a_row() -> None:
    w = _world()
    w.fault("health", "DescribeEvents", "SubscriptionRequiredException")
    a = _a(_run(w))
    assert "AWS Health not read" in a.evidence


def test_a_health_event_announced_in_the_window_with_a_later_start_is_listed_at_its_announcement_whatever_it_names(
) -> None:
    # RULES §5: "An event announced or updated inside that span whose own date lies later (… a Health event's future
    # start) belongs in it, listed at its announcement with its date" — source 4 is every EC2/SageMaker Health event
    # with its affected entities, not only those branch A judges
    w = _world()
    starts = at(24 * 5)
    w.section("health", "events").append({
        "arn": "arn:aws:health:us-west-2::event/SAGEMAKER/AWS_SAGEMAKER_OPERATIONAL_NOTIFICATION/def",
        "service": "SAGEMAKER", "eventTypeCode": "AWS_SAGEMAKER_OPERATIONAL_NOTIFICATION",
        "eventTypeCategory": "accountNotification", "statusCode": "upcoming", "startTime": starts,
        "lastUpdatedTime": at(7, 40), "AffectedEntities": [{"entityValue": "arn:aws:sagemaker:us-west-2:endpoint/x"}]})
    result = _run(w)
    health = [t for t in result.timeline if t.source == "AWS Health"]
    assert [t.time for t in health] == [parse_time(at(7, 40))]
    assert "AWS_SAGEMAKER_OPERATIONAL_NOTIFICATION" in health[0].event and starts[:10] in health[0].event


def test_status_checks_not_returned_or_not_conclusive_are_named_never_all_ok() -> None:
    # RULES §0.4 / §8 A: what cleared A is named; a node DescribeInstanceStatus did not return, or whose check is
    # `insufficient-data`, was not read clean — the row says so instead of "all ok"
    w = _world()
    first, second = (n.instance_id for n in w.compute)
    _status(w, 0)["SystemStatus"] = {"Status": "insufficient-data", "Details": []}
    w.section("ec2", "instance_status").remove(_status(w, 1))
    a = _a(_run(w))
    assert "all ok" not in a.evidence
    assert f"not returned for {second}" in a.evidence
    assert f"{first}: system status check insufficient-data" in a.evidence


def test_a_retiring_or_impaired_host_gets_a_stop_and_start_action_and_maintenance_does_not() -> None:
    # Given one node whose host AWS retires in two weeks, the other with a completed maintenance reboot
    w = _world()
    retiring, maintained = w.compute[0].instance_id, w.compute[1].instance_id
    retire_on = at(24 * 14)
    _status(w, 0)["Events"] = [{"Code": "instance-retirement", "NotBefore": retire_on,
                                "Description": "The instance is running on degraded hardware"}]
    _status(w, 1)["Events"] = [{"Code": "system-reboot", "NotBefore": at(8), "NotAfter": at(9),
                                "Description": "[Completed] scheduled reboot"}]
    # When the incident is audited
    actions = _run(w).actions
    # Then the retiring node is to be stopped and started before the retirement date, with the exact commands
    stop = [a for a in actions if a.startswith("Stop and start")]
    assert len(stop) == 1 and retiring in stop[0] and retire_on[:16] in stop[0]
    assert f"aws ec2 stop-instances --instance-ids {retiring}" in stop[0]
    # And a maintenance reboot (not failing hardware) asks for none
    assert not [a for a in actions if "stop-instances" in a and maintained in a]
