"""CloudTrail LookupEvents per execution (issue #34 item 6): N ParallelClusters of one account, audited one after
another as an execution's Finish steps run them, then again an hour later (the next hourly execution).

    PYTHONPATH=functions .venv/bin/python -m tests.benchmarks.cloudtrail_calls 1 20 [--launches 25] [--other 50]

Each cluster launched `--launches` compute nodes in the two days before `now` that DescribeInstances no longer
returns (one RunInstances each), and the account has `--other` launches of no cluster. Per fleet size it prints the
LookupEvents calls and the seconds they must take at CloudTrail's 2 requests per second per account and Region
(the embedded stand-in refuses faster calls; calls are spaced, and refused ones backed off, on its clock, with no real
wait; `throttled` counts the refused calls, included in the calls):

* `alone`: every cluster's Finish on a port of its own — one account-wide read per cluster, what each Finish did
  before the reads were shared (the same calls the code before this change makes);
* `shared`: the Finish steps sharing the account's reads (collectors/trail.py; deployed: handlers/trail_share.py);
* `next hour`: the next execution with the share kept, its clock an hour later (tail reads only).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "tests")]

from helpers.worlds import ACCOUNT, PClusterWorld, at  # noqa: E402

from gpuaudit import pipeline  # noqa: E402
from gpuaudit.collectors.aws import Aws  # noqa: E402
from gpuaudit.embedded.backend import WorldBackend  # noqa: E402
from gpuaudit.embedded.world import World  # noqa: E402
from gpuaudit.model.evidence import AuditRequest  # noqa: E402


def run_instances(template: str, iid: str, when: str) -> dict[str, Any]:
    detail = {"requestParameters": {"launchTemplate": {"launchTemplateName": template}},
              "responseElements": {"instancesSet": {"items": [{"instanceId": iid, "instanceType": "p5.48xlarge"}]}},
              "userIdentity": {"accountId": ACCOUNT}}
    return {"EventId": f"ev-{iid}", "EventName": "RunInstances", "EventTime": when, "EventSource": "ec2.amazonaws.com",
            "Resources": [{"ResourceType": "AWS::EC2::Instance", "ResourceName": iid}],
            "CloudTrailEvent": json.dumps(detail)}


def fleet_world(clusters: int, launches: int, other: int) -> tuple[World, list[str]]:
    names = [f"c{i:03d}" for i in range(clusters)]
    w = PClusterWorld(names[0], n_compute=1)
    for name in names[1:]:
        w.add_instance(cluster=name)
    trail = w.section("cloudtrail", "events")
    for i, name in enumerate(names):  # spread over the 47 h before `now` (12:30 on the world's day)
        trail.extend(run_instances(f"{name}-gpu-p548xlarge", f"i-0c{i:03d}{k:012x}",
                                   at(-34 + (47 * k) // max(launches, 1), k % 60)) for k in range(launches))
    trail.extend(run_instances("ci-runner", f"i-0ff{k:014x}",
                               at(-34 + (47 * k) // max(other, 1))) for k in range(other))
    return w.world(), names


def audit_all(world: World, names: list[str], backend: WorldBackend, aws: Aws | None) -> dict[str, Any]:
    """LookupEvents calls (of them refused: throttled and retried after a backoff) and the seconds they were spread
    over, for every cluster audited in turn (`aws` None: a port of its own per cluster)."""
    start, refused = backend.slept_s, backend.rejected.get(("cloudtrail", "LookupEvents"), 0)
    calls = 0
    for name in names:
        port = aws or Aws(session=backend.session(), region=world.region, clock=lambda: world.now,
                          sleep=backend.sleep, monotonic=backend.monotonic)
        before = port.counts[("cloudtrail", "LookupEvents")]
        pipeline.collect(port, AuditRequest(cluster=name, since=world.now - timedelta(hours=24)))
        calls += port.counts[("cloudtrail", "LookupEvents")] - before
    return {"lookup_events": calls, "throttled": backend.rejected.get(("cloudtrail", "LookupEvents"), 0) - refused,
            "seconds_at_rate": round(backend.slept_s - start, 1)}


def measure(clusters: int, launches: int, other: int) -> dict[str, Any]:
    world, names = fleet_world(clusters, launches, other)
    alone = audit_all(world, names, WorldBackend(world), None)
    backend = WorldBackend(world)
    shared_port = Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
                      monotonic=backend.monotonic)
    shared = audit_all(world, names, backend, shared_port)
    world.now += timedelta(hours=1)
    next_hour = audit_all(world, names, backend, shared_port)
    return {"clusters": clusters, "runinstances_events": clusters * launches + other,
            "alone": alone, "shared": shared, "next_hour": next_hour}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clusters", type=int, nargs="+")
    parser.add_argument("--launches", type=int, default=25)
    parser.add_argument("--other", type=int, default=50)
    args = parser.parse_args(argv)
    for n in args.clusters:
        print(json.dumps(measure(n, args.launches, args.other)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
