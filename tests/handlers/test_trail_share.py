"""The deployed Finish steps of one account share its CloudTrail reads through the evidence bucket (#34 item 6): the
account-wide RunInstances is read by the first cluster's Finish, and the next cluster's Finish looks up nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from handlers import payload, plan, trail_share
from lambda_harness import LambdaContext, scheduled_event, through_steps, world_account

from gpuaudit.model.evidence import Evidence
from tests.collectors.test_cloudtrail_rate import fleet


def test_the_second_clusters_finish_reads_the_accounts_runinstances_from_the_share(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given two ParallelClusters of one account, each with nodes it launched and lost since (CloudTrail RunInstances)
    w, names, gone = fleet(2)
    path = tmp_path / "two-clusters.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    with world_account(monkeypatch, world_path=path, clusters=tuple(names)) as account:
        targets = plan.handler(scheduled_event("2026-10-01T12:17:04Z"), LambdaContext())["targets"]
        s3 = account.session.client("s3")
        found: dict[str, set[str]] = {}
        calls: list[int] = []
        # When the state machine runs each cluster's steps in turn
        for target in targets:
            stored = through_steps(target)
            evidence = Evidence.model_validate(payload.load(stored["evidence"], s3))
            found[evidence.cluster.name] = {n.instance_id for n in evidence.nodes if n.discovered_by == "cloudtrail"}
            calls.append(len(account.backend.accepted.get(("cloudtrail", "LookupEvents"), [])))
        # Then each cluster finds its own launched nodes, the first Finish read RunInstances (two pages) and the
        # second read none: it was answered from the account's share in the bucket
        assert found == gone
        assert calls == [2, 2]
        kept = [k for k in account.object_keys() if k.startswith(f"{trail_share.PREFIX}/")]
        assert kept == [trail_share.key("own", account.world.region)]
        share: dict[str, Any] = account.read_json(kept[0])
        assert {e["EventName"] for e in share["reads"]["RunInstances"]["events"]} == {"RunInstances"}
