"""A cluster deleted between runs, in the deployed stack (issue #33, bad input): the local state machine run (moto's
ASL interpreter running the SYNTHESIZED definition, tests/deployed/test_state_machine.py) routes Inventory's
UnknownCluster
through its Catch to RecordFailure, which closes the cluster's standing verdicts in the findings table's history
with the reason, once; a cluster created again under the name starts anew (tests/writes/test_cluster_gone.py: the
CLI)."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path[:0] = [str(Path(__file__).parents[1] / "handlers"), str(Path(__file__).parents[1] / "infra")]

from cdk_synth import Synthesized, synthesize  # noqa: E402
from lambda_harness import HYPERPOD_WORLD, TABLE, scheduled_event  # noqa: E402
from test_state_machine import SCHEDULED, audits, deployed  # noqa: E402

from gpuaudit.embedded.world import load_world  # noqa: E402
from gpuaudit.model.history import CLUSTER_GONE, HistorySpan, latest_spans  # noqa: E402
from gpuaudit.model.timeutil import iso  # noqa: E402
from gpuaudit.writes.history import DynamoHistory  # noqa: E402


@pytest.fixture(scope="module")
def synth() -> Synthesized:
    return synthesize()


def _deployed_latest(account: Any, cluster: str, now: datetime) -> dict[str, HistorySpan]:
    read = DynamoHistory(account.session.client("dynamodb"), TABLE).read(cluster, None, now - timedelta(days=30), now)
    return latest_spans(read)


def test_a_cluster_deleted_between_deployed_runs_has_its_standing_verdicts_closed_once_in_the_table(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = "research-hp-slurm"
    with deployed(synth, monkeypatch) as machine:
        world = machine.account.world
        # Given an hourly audit of the cluster, recorded in the findings table's history
        (audited,) = audits(machine.run(SCHEDULED))
        assert audited["audited"] is True
        before = _deployed_latest(machine.account, cluster, world.now)
        assert before and all(s.closed is None for s in before.values())

        # When the cluster is deleted (DescribeCluster: not found; no instance tagged with its name) and the next
        # hourly audit runs
        world.data["sagemaker"]["clusters"] = [c for c in world.data["sagemaker"]["clusters"]
                                               if c["ClusterName"] != cluster]
        world.now += timedelta(hours=1)
        (gone,) = audits(machine.run(scheduled_event(iso(world.now - timedelta(minutes=9)))))

        # Then Inventory's failure is recorded and every node's standing verdict is closed with the reason
        assert (gone["failure"]["step"], gone["failure"]["error"]) == ("Inventory", "UnknownCluster")
        assert gone["history_closed"] == len(before)
        after = _deployed_latest(machine.account, cluster, world.now)
        assert set(after) == set(before)
        assert all(s.closed == CLUSTER_GONE and s.verdict is None and s.audit_time == world.now
                   for s in after.values())
        items = machine.account.findings()
        # the items: each node's earlier span kept as a closed span item, the closing span in the snapshot
        earlier = [i for i in items if i["pk"].startswith(f"HIST#{cluster}#")]
        assert sorted(i["sk"].split("#")[1] for i in earlier) == sorted(before)
        assert all("closed" not in i for i in earlier)
        (snapshot,) = [i for i in items if i["pk"] == f"HISTSNAP#{cluster}" and i["sk"].startswith("GEN#")]
        assert snapshot["spans"].count(f'"closed":"{CLUSTER_GONE}"') == len(before)

        # and the next run closes nothing twice
        world.now += timedelta(hours=1)
        (again,) = audits(machine.run(scheduled_event(iso(world.now - timedelta(minutes=9)))))
        assert again["failure"]["error"] == "UnknownCluster" and again["history_closed"] == 0
        assert _deployed_latest(machine.account, cluster, world.now) == after

        # A cluster created again under the name starts anew: new spans, the closed ones left as they are
        world.data["sagemaker"]["clusters"] = load_world(HYPERPOD_WORLD).data["sagemaker"]["clusters"]
        world.now += timedelta(hours=1)
        (recreated,) = audits(machine.run(scheduled_event(iso(world.now - timedelta(minutes=9)))))
        assert recreated["audited"] is True
        spans = DynamoHistory(machine.account.session.client("dynamodb"), TABLE).read(
            cluster, None, world.now - timedelta(days=30), world.now).spans
        for node in before:
            mine = sorted((s for s in spans if s.instance_id == node), key=lambda s: s.audit_time)
            assert [s.closed for s in mine] == [None, CLUSTER_GONE, None]


def test_an_inventory_failure_that_is_not_a_deleted_cluster_closes_nothing(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    with deployed(synth, monkeypatch) as machine:
        audits(machine.run(SCHEDULED))
        world = machine.account.world
        # SageMaker refuses the read: the cluster may well exist, so nothing is closed
        world.faults.append({"service": "sagemaker", "operation": "DescribeCluster", "error": "AccessDeniedException"})
        world.now += timedelta(hours=1)
        (failed,) = audits(machine.run(scheduled_event(iso(world.now - timedelta(minutes=9)))))
        assert failed["audited"] is False and "history_closed" not in failed
        latest = _deployed_latest(machine.account, "research-hp-slurm", world.now)
        assert latest and all(s.closed is None for s in latest.values())
