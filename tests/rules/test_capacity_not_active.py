"""Branch B stays open on every capacity-class error the run reads (#53 item 1), written from RULES §8 B and §0.5.

RULES §8 B: reservation states are payment-pending, payment-failed, scheduled, active, expired; a Capacity Block
`scheduled` with a future StartDate means nodes cannot launch yet (expected); `InsufficientInstanceCapacity`, a
reservation with nothing available and subnet IP exhaustion are B's signals; B is `Ruled out` only when each signal
was read and came back clean — "no capacity error" among them. §0.4/§11: the verdict names the reservation, and the
headline is labelled (Proven, or `Leading hypothesis`).

The operator's case: a ParallelCluster queue on a Capacity Block bought for later today. The head node keeps trying to
launch the compute nodes and every RunInstances fails with `Capacity Reservation cr-… is not active.`; no reservation
ends in the window, so the old branch B said `Ruled out`.
"""

from __future__ import annotations

import json

import pytest

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import ACCOUNT, PClusterWorld, at

BLOCK, ELSEWHERE = "cr-0a1b2c3d4e5f60718", "cr-0f0e0d0c0b0a09080"
START = at(14)  # the block's StartDate: after the query time (12:30)
SINCE, UNTIL = at(8), at(12)


def _launch(cluster: str, when: str, code: str, message: str, event: str = "RunInstances") -> dict[str, object]:
    detail = {"eventName": event, "errorCode": code, "errorMessage": message, "responseElements": None,
              "requestParameters": {"launchTemplate": {"launchTemplateName": f"{cluster}-gpu-p548xlarge"}},
              "userIdentity": {"accountId": ACCOUNT}}
    return {"EventId": f"e-{when}", "EventName": event, "EventTime": when, "EventSource": "ec2.amazonaws.com",
            "Username": "i-0head", "Resources": [], "CloudTrailEvent": json.dumps(detail)}


def _block(rid: str, state: str, instance_type: str = "p5.48xlarge", start: str = START) -> dict[str, object]:
    return {"CapacityReservationId": rid, "InstanceType": instance_type, "State": state,
            "ReservationType": "capacity-block", "StartDate": start, "EndDate": at(14 + 72),
            "TotalInstanceCount": 2, "AvailableInstanceCount": 2, "OwnerId": ACCOUNT}


def _world(*, trail: bool = True, state: str = "scheduled") -> PClusterWorld:
    """The head node alone (no compute node ever came up) and the block in `state`."""
    w = PClusterWorld("wait-cb", n_compute=0)
    w.instance_type("p5.48xlarge")
    w.healthy(w.head, at(-48), at(12, 25))
    w.section("ec2", "capacity_reservations").append(_block(BLOCK, state))
    w.section("cloudtrail", "events")
    if trail:
        w.section("cloudtrail", "events").extend(
            _launch("wait-cb", at(9, m), "Client.InvalidParameterValue", f"Capacity Reservation {BLOCK} is not active.")
            for m in (5, 35))
    return w


def _b(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "B")


def _incident(w: PClusterWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)


def test_launches_failing_on_a_scheduled_block_prove_b_naming_the_block_its_state_and_start() -> None:
    result = _incident(_world())
    b = _b(result)
    assert (b.status, b.label) == ("Root cause", "Proven")
    assert f"`{BLOCK}`" in b.evidence and "State scheduled" in b.evidence and f"StartDate {START}" in b.evidence
    assert "is not active" in b.evidence and at(9, 5) in b.evidence  # the launch error, as read
    assert any(t.source == "CloudTrail" and "is not active" in t.event for t in result.timeline)  # the same read
    assert result.headline.startswith("Root cause (Proven): branch B")
    assert BLOCK in result.headline and "scheduled" in result.headline and START in result.headline


def test_a_scheduled_block_of_the_clusters_type_without_a_launch_error_keeps_b_open_as_a_hypothesis() -> None:
    w = _world(trail=False)
    w.add_instance(instance_type="p5.48xlarge")  # one compute node runs (on demand): the type is the cluster's
    result = _incident(w)
    b = _b(result)
    assert b.status != "Ruled out" and b.label == "Hypothesis (to validate)"
    assert f"`{BLOCK}`" in b.evidence and "State scheduled" in b.evidence and f"StartDate {START}" in b.evidence
    assert result.headline.startswith("Leading hypothesis: branch B") and BLOCK in result.headline
    assert START in result.headline


@pytest.mark.parametrize("state", ["payment-pending", "payment-failed"])
def test_launch_errors_on_a_block_in_any_state_but_active_keep_b_open(state: str) -> None:
    b = _b(_incident(_world(state=state)))
    assert b.status in ("Root cause", "UNVERIFIED", "Contributing")
    assert f"State {state}" in b.evidence


@pytest.mark.parametrize(("where", "message"), [
    ("slurm_resume", "Failed to launch instances: An error occurred (ReservationCapacityExceeded) when calling the "
                     "RunInstances operation: Insufficient capacity in the Capacity Reservation"),
    ("clustermgtd", "Found the following unhealthy dynamic nodes; InsufficientFreeAddressesInSubnet when launching"),
])
def test_a_capacity_class_error_in_the_head_nodes_logs_keeps_b_open_and_is_named(where: str, message: str) -> None:
    w = PClusterWorld("logs-cb", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(12, 25))
    w.healthy(w.head, at(-48), at(12, 25))
    w.stream(w.group, w.stream_name(w.head, where),
             events=[(at(9, 10), f"2026-10-01 09:10:00,000 - [{where}] - ERROR - {message}")])
    b = _b(_incident(w))
    assert b.status != "Ruled out" and b.label == "Hypothesis (to validate)"
    assert where in b.evidence and message.split(" when ")[0][-30:] in b.evidence


def test_a_launch_error_of_another_kind_and_a_block_of_another_type_are_not_capacity_evidence() -> None:
    w = PClusterWorld("clean-cb", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(12, 25))
    w.section("ec2", "capacity_reservations").append(_block(ELSEWHERE, "scheduled", instance_type="g5.xlarge"))
    w.section("cloudtrail", "events").append(
        _launch("clean-cb", at(9), "Client.UnauthorizedOperation", "You are not authorized to perform this operation."))
    b = _b(_incident(w))
    assert "capacity errors — Cleared" in b.evidence and "UnauthorizedOperation" not in b.evidence
    assert f"`{ELSEWHERE}` (g5.xlarge" in b.evidence  # listed among the reservations read, not as a signal
    assert "State scheduled" not in b.evidence and b.status not in ("Root cause", "Contributing", "UNVERIFIED")
