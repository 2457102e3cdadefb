"""Branch B reads CreateFleet's capacity errors too (RULES §8 B: every capacity-class error the run reads).

ParallelCluster launches compute nodes with EC2 CreateFleet as well as RunInstances. A CreateFleet call can fail as a
whole (its errorCode / errorMessage), or succeed while some launches it asked for could not be made: the API returns
those in `Errors`, which CloudTrail records in the response's XML form (`CreateFleetResponse.errorSet.item`, one item
or a list). Either is an `InsufficientInstanceCapacity` read, so B is not `Ruled out` and names it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuaudit import pipeline
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Branch
from gpuaudit.model.timeutil import parse_time
from tests.helpers.worlds import ACCOUNT, PClusterWorld, at

SINCE, UNTIL = at(8), at(12)
ICE = "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-west-2a)."


def _fleet(cluster: str, when: str, *, error: tuple[str, str] | None = None,
           response: dict[str, Any] | None = None) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "eventName": "CreateFleet", "responseElements": response,
        "requestParameters": {"CreateFleetRequest": {"LaunchTemplateConfigs": {"LaunchTemplateSpecification": {
            "LaunchTemplateName": f"{cluster}-gpu-p548xlarge"}}, "Type": "instant"}},
        "userIdentity": {"accountId": ACCOUNT}}
    if error:
        detail["errorCode"], detail["errorMessage"] = error
    return {"EventId": f"fleet-{when}", "EventName": "CreateFleet", "EventTime": when,
            "EventSource": "ec2.amazonaws.com", "Username": "i-0head", "Resources": [],
            "CloudTrailEvent": json.dumps(detail)}


def _partial(items: Any) -> dict[str, Any]:
    """A CreateFleet that succeeded, as CloudTrail keeps it, with `items` in its errorSet."""
    return {"CreateFleetResponse": {"requestId": "r-1", "fleetId": "fleet-0a1b2c3d4e5f60718",
                                    "errorSet": {"item": items}, "fleetInstanceSet": ""}}


def _world(*events: dict[str, Any]) -> PClusterWorld:
    w = PClusterWorld("fleet-pc", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(12, 25))
    w.healthy(w.head, at(-48), at(12, 25))
    w.section("cloudtrail", "events").extend(events)
    return w


def _b(w: PClusterWorld) -> Branch:
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    return next(b for b in result.branches if b.branch == "B")


ONE_ITEM = {"errorCode": "InsufficientInstanceCapacity", "errorMessage": ICE, "lifecycle": "on-demand",
            "launchTemplateAndOverrides": {"overrides": {"instanceType": "p5.48xlarge"}}}


@pytest.mark.parametrize("response", [_partial(ONE_ITEM), _partial([ONE_ITEM, {**ONE_ITEM, "errorMessage": ICE}]),
                                      {"errors": [{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": ICE}]}],
                         ids=["xml-one-item", "xml-list", "sdk-errors"])
def test_a_createfleet_that_succeeded_with_launch_errors_keeps_b_open_and_names_them(response: dict[str, Any]) -> None:
    w = _world(_fleet("fleet-pc", at(9, 10), response=response))
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    b = next(x for x in result.branches if x.branch == "B")
    # the cluster's own launch call is on the timeline with the launches it could not make
    assert any(t.source == "CloudTrail" and "CreateFleet" in t.event and "InsufficientInstanceCapacity" in t.event
               for t in result.timeline)
    assert b.status != "Ruled out"
    assert "capacity errors — Cleared" not in b.evidence
    assert "CreateFleet" in b.evidence and "InsufficientInstanceCapacity" in b.evidence and at(9, 10) in b.evidence


def test_a_createfleet_that_failed_on_capacity_keeps_b_open() -> None:
    b = _b(_world(_fleet("fleet-pc", at(9, 40), error=("InsufficientInstanceCapacity", ICE))))
    assert (
        b.status != "Ruled out" and "CreateFleet" in b.evidence and "failed: InsufficientInstanceCapacity" in b.evidence
    )


def test_a_createfleet_with_no_launch_error_leaves_capacity_errors_cleared() -> None:
    clean = {"CreateFleetResponse": {"requestId": "r-2", "fleetId": "fleet-0f", "errorSet": "",
                                     "fleetInstanceSet": {"item": {"instanceIds": {"item": "i-0abc"}}}}}
    w = _world(_fleet("fleet-pc", at(9, 10), response=clean))
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    b = next(x for x in result.branches if x.branch == "B")
    assert "capacity errors — Cleared" in b.evidence and "CreateFleet at" not in b.evidence


def test_createfleet_is_looked_up_by_name_through_the_shared_lookup() -> None:
    # The account's kept reads (collectors/trail.py) hold what was looked up, by event name
    w = _world()
    aws = w.aws()
    pipeline.collect(aws, AuditRequest(cluster=w.cluster, mode="incident", since=parse_time(SINCE),
                                       until=parse_time(UNTIL)))
    assert aws.trail_share is not None and "CreateFleet" in aws.trail_share.reads
