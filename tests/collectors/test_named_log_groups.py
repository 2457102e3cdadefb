"""Named log sources (#15 item 2): `--log-group` (and per cluster in cdk.json, and in the state machine input)
adds a group the substring discovery cannot find, e.g. a job's own stdout where NCCL prints its transport.

Written from the operator's question: "our job logs to /aws/batch/job, does the audit see it?".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from handlers.models import ScheduledEvent
from handlers.targets import PlanSettings, plan_for
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.model.evidence import NAMED_BY_OPERATOR, AuditRequest
from gpuaudit.pipeline import collect, run_audit
from infra.config import DeployConfig
from tests.helpers.worlds import PClusterWorld, at, audit, node_of

JOB_GROUP = "/aws/batch/job"  # none of the discovery keywords, not the cluster's name
SINCE, UNTIL = at(6), at(10)


def job_world() -> PClusterWorld:
    w = PClusterWorld(n_compute=1)
    (node,) = w.compute
    w.healthy(node, at(-48), at(12, 25))
    job = w.log_group(JOB_GROUP)
    w.stream(job, f"train-llm/{node.instance_id}", events=[
        (at(7), "ip-10-0-0-2:2211:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0")])
    return w


def test_a_named_group_is_searched_and_its_lines_reach_the_node() -> None:
    w = job_world()
    node = w.compute[0]
    unnamed = audit(w.aws(), w.cluster, since=SINCE, until=UNTIL)
    assert node_of(unnamed, node.instance_id).signals.nccl == "Not observable"  # never found by substring

    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL,
                           log_groups=[JOB_GROUP])  # type: ignore[arg-type]
    evidence = collect(w.aws(), request)
    named = next(g for g in evidence.log_groups if g.name == JOB_GROUP)
    assert named.matched_patterns == [NAMED_BY_OPERATOR]
    assert any("NET/Socket" in line.message and line.log_group == JOB_GROUP for line in evidence.gpu_lines)
    result = run_audit(w.aws(), request)
    assert node_of(result, node.instance_id).signals.nccl == "Observable"  # the job's NCCL line, on its node


def test_a_named_group_that_does_not_exist_is_a_gap_not_a_silent_skip() -> None:
    w = job_world()
    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL,  # type: ignore[arg-type]
                           log_groups=["/aws/batch/typo"])
    evidence = collect(w.aws(), request)
    assert all(g.name != "/aws/batch/typo" for g in evidence.log_groups)
    (gap,) = [g for g in evidence.gaps if g.target == "/aws/batch/typo"]
    assert "no such group" in gap.prose() and "--log-group" in gap.prose()


@pytest.mark.parametrize("value", ["bad name!", "", "x" * 513])
def test_a_bad_group_name_exits_2_naming_the_flag(value: str, tmp_path: Path) -> None:
    world = tmp_path / "w.json"
    world.write_text(json.dumps(job_world().raw), encoding="utf-8")
    run = CliRunner().invoke(app, ["audit", "--cluster", "llm-pretrain", "--world", str(world), "--log-group", value])
    assert run.exit_code == 2
    assert "--log-group[0]" in run.output


def test_configured_groups_reach_every_planned_audit_of_their_cluster() -> None:
    settings = PlanSettings.from_env({"GPUAUDIT_CLUSTERS": '["a", "b"]',
                                      "GPUAUDIT_LOG_GROUPS": '{"a": ["/aws/batch/job"]}'})
    event: dict[str, Any] = {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events",
                             "time": "2026-10-01T12:00:00Z",
                             "id": "e1", "account": "111122223333", "region": "us-west-2", "resources": [],
                             "detail": {}}
    plan = plan_for(ScheduledEvent.model_validate(event), settings, aws=None)  # type: ignore[arg-type]
    got = {t.request.cluster: t.request.log_groups for t in plan.targets}
    assert got == {"a": ["/aws/batch/job"], "b": []}


def test_cdk_config_rejects_groups_for_a_cluster_it_does_not_audit() -> None:
    with pytest.raises(ValueError, match="not configured: c"):
        DeployConfig(clusters=["a"], log_groups={"c": ["/aws/batch/job"]})
    with pytest.raises(ValueError):
        DeployConfig(clusters=["a"], log_groups={"a": ["bad name!"]})
    assert DeployConfig(clusters=["a"], log_groups={"a": ["/aws/batch/job"]}).log_groups["a"] == ["/aws/batch/job"]
