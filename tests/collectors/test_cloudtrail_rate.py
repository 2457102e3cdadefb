"""CloudTrail within its rate (#34 item 6): LookupEvents is "limited to two per second, per account, per Region" and
the embedded stand-in refuses a call past it (ThrottlingException); audits space their calls, back off with jitter when
throttled anyway, and read the account-wide events once for every cluster of the account (looked up by event name,
never by instance ID: RULES §5.7)."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from helpers.worlds import ACCOUNT, PClusterWorld, at

from gpuaudit import pipeline
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.trail import SETTLE, TrailShare
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import World
from gpuaudit.model.evidence import AuditRequest

CLUSTERS = 20
GONE_PER_CLUSTER = 3  # compute nodes each cluster launched in the window and lost since
OTHER_LAUNCHES = 50  # RunInstances of the account that are no cluster's (CI runners, notebooks)


def run_instances(template: str, iid: str, when: str) -> dict[str, Any]:
    detail = {"requestParameters": {"launchTemplate": {"launchTemplateName": template}},
              "responseElements": {"instancesSet": {"items": [
                  {"instanceId": iid, "instanceType": "p5.48xlarge", "privateDnsName": "ip-10-9-9-9.ec2.internal"}]}},
              "userIdentity": {"accountId": ACCOUNT}}
    return {"EventId": f"ev-{iid}", "EventName": "RunInstances", "EventTime": when, "EventSource": "ec2.amazonaws.com",
            "Username": "parallelcluster", "Resources": [{"ResourceType": "AWS::EC2::Instance", "ResourceName": iid}],
            "CloudTrailEvent": json.dumps(detail)}


def fleet(clusters: int = CLUSTERS) -> tuple[PClusterWorld, list[str], dict[str, set[str]]]:
    """`clusters` ParallelClusters of one account, each with a live node and GONE_PER_CLUSTER launched-and-gone nodes
    (their RunInstances in CloudTrail, 2 h apart), and launches that are no cluster's: (world, names, gone by name)."""
    names = [f"c{i:02d}" for i in range(clusters)]
    w = PClusterWorld(names[0], n_compute=1)
    for name in names[1:]:
        w.add_instance(cluster=name)
    trail = w.section("cloudtrail", "events")
    gone: dict[str, set[str]] = {}
    for i, name in enumerate(names):
        gone[name] = {f"i-0c{i:02d}{k:013x}" for k in range(GONE_PER_CLUSTER)}
        trail.extend(run_instances(f"{name}-gpu-p548xlarge", iid, at(2 * k - 8))
                     for k, iid in enumerate(sorted(gone[name])))
    trail.extend(run_instances("ci-runner", f"i-0ff{k:014x}", at(-10 + k % 20)) for k in range(OTHER_LAUNCHES))
    return w, names, gone


def world_aws(world: World, backend: WorldBackend | None = None, **kw: Any) -> tuple[Aws, WorldBackend]:
    backend = backend or WorldBackend(world)
    return Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
               monotonic=backend.monotonic, **kw), backend


def lookups(aws: Aws) -> int:
    return aws.counts[("cloudtrail", "LookupEvents")]


def launched(aws: Aws, name: str) -> set[str]:
    ev = pipeline.collect(aws, AuditRequest(cluster=name, since=at(8), until=at(11)))  # type: ignore[arg-type]
    assert not [g for g in ev.gaps if g.service == "cloudtrail"], ev.gaps
    return {n.instance_id for n in ev.nodes if n.discovered_by == "cloudtrail"}


def test_the_stand_in_refuses_a_third_lookup_within_a_second_and_takes_it_a_second_later() -> None:
    backend = WorldBackend(fleet(1)[0].world(), elapsed=lambda: 0.0)
    trail = backend.session().client("cloudtrail", region_name="us-west-2")
    trail.lookup_events()
    trail.lookup_events()
    with pytest.raises(ClientError) as refused:
        trail.lookup_events()
    assert refused.value.response["Error"]["Code"] == "ThrottlingException"
    backend.sleep(1.0)
    trail.lookup_events()
    assert backend.rejected[("cloudtrail", "LookupEvents")] == 1


def test_an_incident_audit_paging_through_cloudtrail_keeps_to_two_lookups_a_second() -> None:
    # Given one cluster whose RunInstances take several pages (50 events each) and an incident audit, which reads
    # RunInstances for launched nodes and ten event names for the timeline (CreateFleet among them)
    w, (name,), gone = fleet(1)
    w.section("cloudtrail", "events").extend(run_instances("ci-runner", f"i-0ee{k:014x}", at(9)) for k in range(200))
    aws, backend = world_aws(w.world())
    # When audited
    ev = pipeline.collect(aws, AuditRequest(cluster=name, mode="incident", since=at(8), until=at(11)))  # type: ignore[arg-type]
    # Then CloudTrail never refused a call: no two calls beyond the rate in any second, every event name read
    assert backend.rejected.get(("cloudtrail", "LookupEvents"), 0) == 0
    times = backend.accepted[("cloudtrail", "LookupEvents")]
    assert all(later - earlier >= 0.5 - 1e-9 for earlier, later in zip(times, times[1:], strict=False))
    assert ev.cloudtrail_complete and not [g for g in ev.gaps if g.service == "cloudtrail"]
    assert {n.instance_id for n in ev.nodes if n.discovered_by == "cloudtrail"} == gone[name]
    # and RunInstances, read for the launched nodes, was not read again for the timeline
    assert lookups(aws) == len(backend.accepted[("cloudtrail", "LookupEvents")]) == 6 + 9


@pytest.mark.parametrize("jitter", [0.0, 0.99])
def test_a_throttled_lookup_backs_off_exponentially_with_jitter_and_then_succeeds(jitter: float) -> None:
    # Given another audit of the account that has just made two lookups (the account's clock moving only by sleeps)
    w, (name,), _ = fleet(1)
    backend = WorldBackend(w.world(), elapsed=lambda: 0.0)
    other = backend.session().client("cloudtrail", region_name="us-west-2")
    other.lookup_events()
    other.lookup_events()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        backend.sleep(seconds)

    aws = Aws(session=backend.session(), region="us-west-2", clock=lambda: w.world().now, sleep=sleep,
              monotonic=backend.monotonic, jitter=lambda: jitter)
    # When this audit looks up: it is refused, backs off and tries again
    aws.call("cloudtrail", "LookupEvents")
    # Then each wait is its step (0.5 s, doubling) shortened by at most half at random, and the call went through
    steps = [0.5 * 2 ** k for k in range(len(slept))]
    assert slept and all(step / 2 <= s <= step for s, step in zip(slept, steps, strict=True))
    assert slept == [step * (0.5 + 0.5 * jitter) for step in steps]
    assert backend.rejected[("cloudtrail", "LookupEvents")] == len(slept)


def test_twenty_clusters_of_one_account_read_runinstances_once() -> None:
    # Given 20 ParallelClusters of one account, each with nodes it launched and lost (CloudTrail RunInstances)
    w, names, gone = fleet()
    world = w.world()
    # When each is audited on its own port, as before: one account-wide read per cluster
    alone = {name: world_aws(world) for name in names}
    found_alone = {name: launched(aws, name) for name, (aws, _) in alone.items()}
    # and when all are audited with the account's reads kept between them
    shared, _ = world_aws(world)
    found_shared = {name: launched(shared, name) for name in names}
    # Then every cluster finds exactly its own launched nodes either way
    assert found_alone == found_shared == gone
    # and the account's RunInstances are read once (its pages of 50 events) instead of once per cluster
    pages = math.ceil((CLUSTERS * GONE_PER_CLUSTER + OTHER_LAUNCHES) / 50)
    assert sum(lookups(aws) for aws, _ in alone.values()) == CLUSTERS * pages
    assert lookups(shared) == pages == 3


def test_a_later_audit_reads_only_the_tail_and_still_sees_a_launch_that_arrived_since() -> None:
    # Given the account's RunInstances read by an audit at `now`
    w, (name,), gone = fleet(1)
    world = w.world()
    aws, backend = world_aws(world)
    assert launched(aws, name) == gone[name]
    first = lookups(aws)
    share = aws.trail_share
    assert isinstance(share, TrailShare) and share.reads["RunInstances"].end == world.now
    asked: list[Any] = []
    aws.client("cloudtrail").meta.events.register("before-parameter-build.cloudtrail.LookupEvents",
                                                  lambda params, **_: asked.append(params["StartTime"]))
    # When an hour later a new launch of the cluster is recorded (and lost) and the next audit runs
    late = "i-0aa00000000000001"
    kept_until = world.now
    world.data["cloudtrail"]["events"].append(run_instances(f"{name}-gpu-p548xlarge", late,
                                                            (world.now + timedelta(minutes=30)).isoformat()))
    world.now += timedelta(hours=1)
    ev = pipeline.collect(aws, AuditRequest(cluster=name, since=at(9), until=(world.now - timedelta(minutes=5))))
    # Then it made one lookup, for the tail from SETTLE before where the kept read stopped, and found the launch
    assert lookups(aws) == first + 1 and asked == [kept_until - SETTLE]
    read = share.reads["RunInstances"]
    assert read.end == world.now and read.start <= world.now - timedelta(hours=25)
    assert late in {n.instance_id for n in ev.nodes if n.discovered_by == "cloudtrail"}
    assert backend.rejected.get(("cloudtrail", "LookupEvents"), 0) == 0
