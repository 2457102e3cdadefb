"""Audit what the operator points at (#15 item 1, part): `--instances` alone (the result's cluster a labelled
fleet), and instances that no longer exist — audited from the streams that name them and CloudTrail
(RunInstances / TerminateInstances looked up by event name), their type from the RunInstances request (RULES §2:
'a node that vanished is still a node of the audit'; §5.7: by event name, never by instance ID)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from handlers.models import ScheduledEvent
from handlers.targets import PlanSettings, plan_for

from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from infra.config import DeployConfig
from tests.helpers.worlds import INSTANCE_TYPES, WorldBuilder, at, cli_audit, node_of

GROUP = "/aws/training-pipeline/kernel"  # a customer pipeline, found by the `kernel` substring
LIVE, GONE, UNKNOWN = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2", "i-0ccccccccccccccc3"


def _world() -> WorldBuilder:
    w = WorldBuilder()
    w.section("ec2", "instance_types").append(INSTANCE_TYPES["p5.48xlarge"])
    w.section("ec2", "instances").append({
        "InstanceId": LIVE, "InstanceType": "p5.48xlarge", "LaunchTime": at(-48),
        "State": {"Code": 16, "Name": "running"},
        "PrivateDnsName": "ip-10-1-0-5.us-west-2.compute.internal", "SubnetId": "subnet-0123456789abcdef0"})
    w.kernel_stream(GROUP, f"ip-10-1-0-5-{LIVE}", at(-48), at(12, 25), host="ip-10-1-0-5")
    w.kernel_stream(GROUP, f"ip-10-1-0-6-{GONE}", at(-48), at(8, 10), host="ip-10-1-0-6")  # ended at 08:10
    _trail(w, "RunInstances", at(-48), {"instanceType": "p5.48xlarge"},
           {"instancesSet": {"items": [{"instanceId": GONE, "instanceType": "p5.48xlarge", "launchTime": at(-48),
                                        "privateDnsName": "ip-10-1-0-6.us-west-2.compute.internal"}]}})
    _trail(w, "TerminateInstances", at(8, 12), {"instancesSet": {"items": [{"instanceId": GONE}]}}, {})
    return w


def _trail(w: WorldBuilder, name: str, time: str, request: dict, response: dict) -> None:
    w.section("cloudtrail", "events").append({
        "EventId": f"{name}-{time}", "EventName": name, "EventTime": time, "EventSource": "ec2.amazonaws.com",
        "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": request, "responseElements": response})})


def _audit(w: WorldBuilder, *ids: str, mode: str = "incident") -> Result:
    request = AuditRequest.model_validate({"instance_ids": list(ids), "mode": mode,
                                           "since": parse_time(at(7)), "until": parse_time(at(10))})
    return run_audit(w.aws(), request)


def test_instances_alone_audit_a_labelled_fleet() -> None:
    result = _audit(_world(), LIVE, mode="coverage")
    assert result.cluster.name == "fleet-of-1-instances" and result.cluster.kind == "ec2"
    assert node_of(result, LIVE).xid_status == "Measured"


def test_a_terminated_instance_is_audited_from_its_stream_and_cloudtrail() -> None:
    result = _audit(_world(), LIVE, GONE)
    gone = node_of(result, GONE)
    assert gone.instance_type == "p5.48xlarge"  # from the RunInstances request
    assert gone.status == "terminated" and gone.discovered_by == "cloudtrail"
    assert gone.gpu_count == 8
    assert gone.xid_status == "Not observable"  # its stream stops at 08:10, inside the window
    assert any(r.log_stream == f"ip-10-1-0-6-{GONE}" for r in gone.coverage)
    assert f"{GONE} (terminated: not returned by DescribeInstances; TerminateInstances at {at(8, 12)} (CloudTrail))" \
        in str(result.cluster_state)
    assert any(t.event.startswith("TerminateInstances") for t in result.timeline)  # by event name, then by ID


def test_an_instance_no_source_knows_is_still_a_node_of_the_audit_naming_what_was_searched() -> None:
    result = _audit(_world(), LIVE, UNKNOWN)
    n = node_of(result, UNKNOWN)
    assert n.status == "terminated" and n.xid_status == "Not observable"
    assert "no RunInstances for it in CloudTrail" in str(result.cluster_state)


def test_cloudtrail_denied_is_a_named_gap_and_the_instance_is_still_audited() -> None:
    w = _world()
    w.fault("cloudtrail", "LookupEvents", "AccessDeniedException")
    result = _audit(w, LIVE, GONE)
    assert node_of(result, GONE).instance_type is None
    assert any("CloudTrail RunInstances" in g and GONE in g and "AccessDenied" in g for g in result.visibility_gaps)


def _cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    return cli_audit(_world().raw, tmp_path, *args)


def test_cli_instances_without_cluster_and_bad_scope_inputs(tmp_path: Path) -> None:
    code, out = _cli(tmp_path, "--instances", f"{LIVE},{GONE}", "--since", at(7), "--until", at(10))
    assert code == 0 and json.loads(out)["cluster"]["name"] == "fleet-of-2-instances"
    code, out = _cli(tmp_path, "--since", at(7))
    assert code == 2
    assert "--cluster is required unless --instances, --filesystem or --eks-cluster is given" in " ".join(out.split())
    code, out = _cli(tmp_path, "--instances", f"{LIVE},i-0abc")
    assert code == 2 and "--instances[1]" in out and "i-0abc" in out


def test_cdk_json_entries_carry_the_same_scope_to_every_planned_audit() -> None:



    config = DeployConfig(clusters=["train-fleet", "llm-pretrain"], instances={"train-fleet": [LIVE, GONE]},
                          file_systems={"llm-pretrain": ["fs-0123456789abcdef0"]})
    settings = PlanSettings.from_env({"GPUAUDIT_CLUSTERS": json.dumps(config.clusters),
                                      "GPUAUDIT_INSTANCES": json.dumps(config.instances),
                                      "GPUAUDIT_FILE_SYSTEMS": json.dumps(config.file_systems)})
    event: dict[str, Any] = {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events",
                             "time": "2026-10-01T12:00:00Z", "id": "e1", "account": "111122223333",
                             "region": "us-west-2", "resources": [], "detail": {}}
    plan = plan_for(ScheduledEvent.model_validate(event), settings, aws=None)  # type: ignore[arg-type]
    got = {t.request.cluster: (t.request.instance_ids, t.request.file_system_ids) for t in plan.targets}
    assert got == {"train-fleet": ([LIVE, GONE], []), "llm-pretrain": ([], ["fs-0123456789abcdef0"])}
    with pytest.raises(ValueError, match="not configured: other"):
        DeployConfig(clusters=["train-fleet"], instances={"other": [LIVE]})
    with pytest.raises(ValueError):
        DeployConfig(clusters=["train-fleet"], instances={"train-fleet": ["i-0abc"]})
    with pytest.raises(ValueError):
        DeployConfig(clusters=["train-fleet"], file_systems={"train-fleet": ["fs-XYZ"]})
