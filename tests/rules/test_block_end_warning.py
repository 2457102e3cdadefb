"""RULES §5.6 / §8 B: the per-instance `Capacity Reservation Instance Interruption Warning` proves that a node was
ended by the block — for the instance it names. A warning about an instance that is not one of the cluster's
nodes proves nothing about them: the expiry stays inferred from the EndDate window, a Hypothesis."""

from __future__ import annotations

import json

from helpers.worlds import PClusterWorld, at


def block_world(warned: str | None) -> tuple[PClusterWorld, list[str]]:
    """Two compute nodes whose streams stop at 11:00 when their Capacity Block ends at 11:30; the EventBridge
    warning (when given, for instance `warned`) retained as JSON in a stream of its own, not a node's."""
    w = PClusterWorld("blocky", n_compute=0)
    ids = []
    for i in range(2):
        iid, host = f"i-0{i + 0x10:016x}", f"ip-10-1-0-{i + 16}"
        w.stream(w.group, f"{host}.{iid}.system-messages",
                 events=[(at(-20), f"{host} kernel: NVRM: loading NVIDIA UNIX Open Kernel Module")],
                 periodic=[(at(-20), at(11, 0, 1), 300, f"{host} systemd[1]: Started sysstat-collect.service")])
        ids.append(iid)
    if warned is not None:
        event = {"version": "0", "detail-type": "Capacity Reservation Instance Interruption Warning",
                 "source": "aws.ec2", "time": at(10, 58),
                 "detail": {"capacity-reservation-id": "cr-0aaaabbbbccccdddd", "instance-id": warned,
                            "instance-termination-time": at(11)}}
        w.stream(w.group, "eventbridge-capacity-events", events=[(at(10, 58), json.dumps(event))])
    w.capacity_reservation("cr-0aaaabbbbccccdddd", "p5.48xlarge", at(11, 30))
    return w, ids


def branch_b(w: PClusterWorld, cluster: str = "blocky"):
    result = w.audit(cluster, mode="incident", since=at(10), until=at(12))
    return next(b for b in result.branches if b.branch == "B")


def test_a_warning_retained_for_one_of_the_clusters_instances_proves_the_block_end() -> None:
    w, ids = block_world(warned=f"i-0{0x10:016x}")
    b = branch_b(w)
    assert (b.status, b.label) == ("Root cause", "Proven")
    assert f"Interruption Warning retained for {ids[0]}" in b.evidence


def test_a_warning_for_an_instance_outside_the_cluster_leaves_the_expiry_a_hypothesis() -> None:
    w, _ = block_world(warned="i-0fffffffffffffff0")
    b = branch_b(w)
    assert (b.status, b.label) == ("UNVERIFIED", "Hypothesis (to validate)")
    assert "EndDate window" in b.evidence


def test_an_on_demand_capacity_reservation_ending_in_the_window_is_not_a_capacity_block_end() -> None:
    # RULES §8 B: the 30/60-min termination before EndDate, the 11:30/11:00 UTC times and the 40-min Expiration
    # Warning are a Capacity Block's; an On-Demand Capacity Reservation (ReservationType default) ending terminates
    # nothing. Ending near the window it is still no clean "no reservation ending near the window": B is not ruled out
    w = PClusterWorld("train", n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-48), at(13))
    w.capacity_reservation("cr-0d0c00000000000ab", "p5.48xlarge", at(11, 30), state="active",
                           reservation_type="default", EndDateType="limited")
    result = w.audit("train", mode="incident", since=at(10), until=at(12))
    b = next(x for x in result.branches if x.branch == "B")
    assert "Capacity Block" not in b.evidence and "terminated" not in b.evidence
    assert b.status not in ("Root cause", "Ruled out")
    assert "cr-0d0c00000000000ab" in b.evidence and "2026-10-01T11:30:00Z" in b.evidence
    said = [t.event for t in result.timeline if t.resource == "cr-0d0c00000000000ab"]
    assert said and not any("Capacity Block" in e or "terminated" in e for e in said)
    assert not any("Capacity Block" in a for a in result.actions)  # no block to extend or checkpoint before


def test_an_ultraserver_block_ends_its_instances_60_minutes_before_and_says_so() -> None:
    # RULES §8 B: 30 min before EndDate on instance types, 60 min on UltraServers — an 11:30 end terminates an
    # UltraServer block's instances from 10:30, and the row must not state the instance types' 11:00
    w = PClusterWorld("ultra", n_compute=0)
    for i in range(2):
        iid, host = f"i-0{i + 0x10:016x}", f"ip-10-1-0-{i + 16}"
        w.stream(w.group, f"{host}.{iid}.system-messages",
                 events=[(at(-20), f"{host} kernel: NVRM: loading NVIDIA UNIX Open Kernel Module")],
                 periodic=[(at(-20), at(10, 30, 1), 300, f"{host} systemd[1]: Started sysstat-collect.service")])
    w.capacity_reservation("cr-0aaaabbbbccccdddd", "p6e-gb200.36xlarge", at(11, 30))
    b = branch_b(w, "ultra")
    assert "60 min" in b.evidence and "2026-10-01T10:30:00Z" in b.evidence
    assert "11:00" not in b.evidence


def test_a_spot_interruption_warning_on_a_node_is_not_the_block_ends_warning() -> None:
    # RULES §5.6 names the `Capacity Reservation Instance Interruption Warning`; EC2's `Spot Instance Interruption
    # Warning` for the same instance says nothing about the block
    w, ids = block_world(warned=None)
    event = {"version": "0", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
             "time": at(10, 58), "detail": {"instance-id": ids[0], "instance-action": "terminate"}}
    w.stream(w.group, "eventbridge-spot-events", events=[(at(10, 58), json.dumps(event))])
    b = branch_b(w)
    assert (b.status, b.label) == ("UNVERIFIED", "Hypothesis (to validate)")


def test_another_workloads_capacity_error_on_another_instance_type_is_not_this_clusters() -> None:
    # RULES §8 B reads capacity errors for the cluster's capacity: a RunInstances of c5.large by another workload of
    # the account failing with InsufficientInstanceCapacity says nothing about the cluster's p5 nodes
    w = PClusterWorld("train", n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-48), at(13))
    message = "We currently do not have sufficient c5.large capacity in the Availability Zone you requested."
    w.section("cloudtrail", "events").append({
        "EventId": "ice", "EventName": "RunInstances", "EventTime": at(10, 20), "EventSource": "ec2.amazonaws.com",
        "Username": "web-team", "Resources": [], "CloudTrailEvent": json.dumps({
            "eventName": "RunInstances", "errorCode": "Server.InsufficientInstanceCapacity", "errorMessage": message,
            "requestParameters": {"instanceType": "c5.large", "instancesSet": {"items": [{"minCount": 1}]}}})})
    result = w.audit("train", mode="incident", since=at(10), until=at(12))
    b = next(x for x in result.branches if x.branch == "B")
    assert "c5.large" not in b.evidence
    assert b.status not in ("Root cause", "UNVERIFIED", "Contributing")
    assert not result.headline.startswith("Leading hypothesis: branch B")


def test_a_launch_failing_on_the_network_interface_limit_is_a_capacity_signal() -> None:
    # RULES §8 B / non-GPU causes: "Subnet IP / ENI exhaustion" — the cluster's launch refused because the Region's
    # network interfaces are used up keeps B open, named; it is never "no capacity error"
    from tests.rules.test_createfleet_capacity import _b, _fleet, _world
    eni = ("NetworkInterfaceLimitExceeded", "The maximum number of network interfaces has been reached.")
    b = _b(_world(_fleet("fleet-pc", at(9, 40), error=eni)))
    assert b.status not in ("Ruled out", "Not assessed") and "NetworkInterfaceLimitExceeded" in b.evidence


def test_a_clustermgtd_line_naming_the_network_interface_limit_keeps_b_open() -> None:
    from tests.rules.test_createfleet_capacity import _b, _world
    w = _world()
    w.stream(w.group, f"{w.head.hostname}.{w.head.instance_id}.clustermgtd", events=[(
        at(9, 40), "2026-10-01 09:40:00,000 - [slurm_plugin.instance_manager:_launch_instances] - ERROR - Failed "
                   "RunInstances request: NetworkInterfaceLimitExceeded: The maximum number of network interfaces "
                   "has been reached.")])
    b = _b(w)
    assert b.status not in ("Ruled out", "Not assessed") and "NetworkInterfaceLimitExceeded" in b.evidence
