"""Why no replacement (#21 item 1): "a node failed hours ago and auto-resume never replaced it — why?"

RULES §8 A: a node stuck or gone with CurrentCount < TargetCount means replacement is blocked; check capacity
to replace into (the training plan's spare: DescribeTrainingPlan), the replacement's lifecycle script
(`LifecycleConfig/<group>/<instance-id>`), the counts, subnet IPs (HyperPod P5 on Slurm needs 32 per node) and
NodeRecovery. Worlds written from those rules and the operator's question, not from the output.
"""

from __future__ import annotations

from typing import Any

from gpuaudit.model.result import Finding, Result
from tests.helpers.worlds import ACCOUNT, REGION, HyperPodWorld, at, calls

SINCE, UNTIL = at(4), at(12)
PLAN = "llm-plan-oct"
SUBNET = "subnet-0aaa1111bbbb2222c"
NEW = "i-0feedfacecafe0001"  # the replacement HyperPod launched; it never joined the group


def world(*, spare: int = 1, available: int = 1, free_ips: int = 200, recovery: str = "Automatic",
          lifecycle_error: bool = False) -> HyperPodWorld:
    """Two P5 workers on a training plan; one failed at 05:10 (the agent asked to replace it) and is gone from
    the node list, leaving the group at CurrentCount 1 of TargetCount 2."""
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    failed = w.gpu[0]
    w.hma_detection(failed, at(5, 10), code=79, reason="XidHardwareFailure", condition="NvidiaErrorTerminate",
                    recommendation="Replace")
    w.described["Nodes"] = [n for n in w.described["Nodes"] if n["InstanceId"] != failed.instance_id]
    workers = next(g for g in w.described["InstanceGroups"] if g["InstanceGroupName"] == "gpu-workers")
    workers.update(CurrentCount=1, TargetCount=2,
                   TrainingPlanArn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{PLAN}")
    w.described["NodeRecovery"] = recovery
    w.described["VpcConfig"] = {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": [SUBNET]}
    w.section("sagemaker", "training_plans").append({
        "TrainingPlanArn": workers["TrainingPlanArn"], "TrainingPlanName": PLAN, "Status": "Active",
        "StartTime": at(-72), "EndTime": at(24 * 10), "DurationHours": 312, "TotalInstanceCount": 3,
        "AvailableInstanceCount": available, "InUseInstanceCount": 1, "UnhealthyInstanceCount": 1,
        "AvailableSpareInstanceCount": spare})
    w.section("ec2", "subnets").append({"SubnetId": SUBNET, "VpcId": "vpc-0abc", "AvailabilityZone": "us-west-2a",
                                        "CidrBlock": "10.0.0.0/24", "AvailableIpAddressCount": free_ips})
    stream = f"LifecycleConfig/gpu-workers/{NEW}"
    w.stream(w.group, stream, events=[(at(5, 40), "[INFO] on_create.sh: mounting /fsx")])
    if lifecycle_error:
        w.stream(w.group, stream, events=[
            (at(5, 42), "[ERROR] on_create.sh: mount.lustre: mount fs-0123456789abcdef0@tcp:/abcd at /fsx failed: "
                        "No such file or directory"),
            (at(5, 43), "[ERROR] Lifecycle script exited with code 1")])
    return w


def finding(result: Result) -> Finding:
    (f,) = [f for f in result.findings if f.id == "why-no-replacement"]
    return f


def steps(f: Finding) -> dict[str, Any]:
    return {s.name: s for s in f.steps}


def test_a_failing_lifecycle_script_on_the_replacement_is_the_stated_cause() -> None:
    w = world(lifecycle_error=True)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    f = finding(result)
    by = steps(f)
    assert [s.name for s in f.steps] == ["capacity to replace into", "the replacement's lifecycle script",
                                         "CurrentCount against TargetCount", "free IPs in the cluster's subnets",
                                         "NodeRecovery"]
    life = by["the replacement's lifecycle script"]
    assert life.status == "Blocked"
    assert f"LifecycleConfig/gpu-workers/{NEW}" in life.evidence and "mount.lustre" in life.evidence
    assert "not in ListClusterNodes" in life.evidence
    assert f.label == "Proven" and f.answer.startswith("Replacement blocked by the replacement's lifecycle script")
    # the others: capacity read from the training plan, counts, IPs and NodeRecovery, each with its field names
    assert by["capacity to replace into"].status == "Cleared"
    assert "AvailableSpareInstanceCount 1" in by["capacity to replace into"].evidence
    assert by["CurrentCount against TargetCount"].status == "Blocked"
    assert "CurrentCount 1 below TargetCount 2" in by["CurrentCount against TargetCount"].evidence
    assert by["free IPs in the cluster's subnets"].status == "Cleared"
    assert "AvailableIpAddressCount 200" in by["free IPs in the cluster's subnets"].evidence
    assert by["NodeRecovery"].status == "Cleared"
    # the stated cause, not "Root cause: Not observable"
    assert "Root cause: Not observable" not in result.headline
    assert "Recovery blocked (Proven)" in result.headline and "lifecycle script" in result.headline
    assert any("LifeCycleConfig" in a for a in result.actions)
    assert "A node failed and was not replaced: why?" in result.report_markdown
    assert calls(result, "sagemaker", "DescribeTrainingPlan") == 1
    assert not result.invariants_broken


def test_a_training_plan_with_no_spare_blocks_the_replacement() -> None:
    w = world(spare=0, available=0)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    f = finding(result)
    cap = steps(f)["capacity to replace into"]
    assert cap.status == "Blocked"
    assert "AvailableInstanceCount 0" in cap.evidence and "AvailableSpareInstanceCount 0" in cap.evidence
    assert f"`{PLAN}`" in cap.evidence
    assert f.answer.startswith("Replacement blocked by capacity to replace into") and f.label == "Proven"
    # the replacement's stream logged no error: read and clean, not blamed
    assert steps(f)["the replacement's lifecycle script"].status == "Cleared"


def test_no_free_ips_for_one_p5_node_blocks_the_replacement() -> None:
    w = world(free_ips=12)  # HyperPod P5 on Slurm needs 32 IPs per node (RULES §8)
    f = finding(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    ips = steps(f)["free IPs in the cluster's subnets"]
    assert ips.status == "Blocked" and "AvailableIpAddressCount 12" in ips.evidence and "32 IPs" in ips.evidence
    assert f.answer.startswith("Replacement blocked by free IPs")


def test_node_recovery_off_blocks_the_replacement() -> None:
    w = world(recovery="None")
    f = finding(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert steps(f)["NodeRecovery"].status == "Blocked"
    assert f.answer.startswith("Replacement blocked by NodeRecovery") and "update-cluster" in (f.action or "")


def test_an_unread_training_plan_is_not_checked_and_blames_nothing() -> None:
    w = world(spare=0, available=0)
    w.fault("sagemaker", "DescribeTrainingPlan", "AccessDeniedException")
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    f = finding(result)
    cap = steps(f)["capacity to replace into"]
    assert cap.status == "Not checked" and "describe-training-plan --training-plan-name llm-plan-oct" in cap.evidence
    assert f.label is None and "not checked: capacity to replace into" in f.answer
    assert f.answer.startswith("Replacement not completed (")


def test_a_cluster_at_target_with_every_node_running_asks_no_such_question() -> None:
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert not [f for f in result.findings if f.id == "why-no-replacement"]
