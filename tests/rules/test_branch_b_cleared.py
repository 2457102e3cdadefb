"""Branch B says what cleared it (#35 item 6), from RULES §8 B: B is `Ruled out` when each of its signals was read
and came back clean — no reservation ending near the window, the short group's reservation or training plan with
capacity available, enough free IPs, no capacity error — and the branch row says which reads cleared it. A signal
that was read and shows a problem is evidence for B; one that could not be read leaves B `Not assessed`.

The operator's case: a HyperPod P5 group on a training plan is one node short after a replacement; the report's
own finding reads the plan with capacity to spare, so branch B cannot be "Not assessed" beside it.
"""

from __future__ import annotations

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import ACCOUNT, REGION, HyperPodWorld, at

SINCE, UNTIL = at(4), at(12)
PLAN = "pretrain-plan-q4"
SUBNET = "subnet-0bbb2222cccc3333d"


def world(*, available: int = 2, spare: int = 1, free_ips: int = 180, plan_end: str = at(24 * 9),
          event: str | None = None) -> HyperPodWorld:
    """Two P5 workers on a training plan (Slurm: 32 IPs per node); one failed at 05:10 and left the node list, so
    the group is at CurrentCount 1 of TargetCount 2. CloudTrail holds no call; the cluster subnet has `free_ips`."""
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    gone = w.gpu[0]
    w.hma_detection(gone, at(5, 10), code=79, reason="XidHardwareFailure", condition="NvidiaErrorTerminate",
                    recommendation="Replace")
    w.described["Nodes"] = [n for n in w.described["Nodes"] if n["InstanceId"] != gone.instance_id]
    workers = next(g for g in w.described["InstanceGroups"] if g["InstanceGroupName"] == "gpu-workers")
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{PLAN}"
    workers.update(CurrentCount=1, TargetCount=2, TrainingPlanArn=arn)
    w.described["VpcConfig"] = {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": [SUBNET]}
    w.section("sagemaker", "training_plans").append({
        "TrainingPlanArn": arn, "TrainingPlanName": PLAN, "Status": "Active", "StartTime": at(-72),
        "EndTime": plan_end, "DurationHours": 312, "TotalInstanceCount": 3, "AvailableInstanceCount": available,
        "InUseInstanceCount": 1, "UnhealthyInstanceCount": 1, "AvailableSpareInstanceCount": spare})
    w.section("ec2", "subnets").append({"SubnetId": SUBNET, "VpcId": "vpc-0abc", "AvailabilityZone": "us-west-2a",
                                        "CidrBlock": "10.0.0.0/24", "AvailableIpAddressCount": free_ips})
    w.section("cloudtrail", "events")
    if event is not None:
        w.stream(w.group, "LifecycleConfig/gpu-workers/i-0feedfacecafe0002", events=[(at(5, 30), event)])
    return w


def _b(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "B")


def _run(w: HyperPodWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)


def test_short_group_with_plan_capacity_free_ips_and_no_capacity_error_is_ruled_out_naming_each_read() -> None:
    result = _run(world())
    b = _b(result)
    assert b.status == "Ruled out"
    assert f"`{PLAN}`" in b.evidence and "AvailableInstanceCount 2" in b.evidence  # the plan's capacity, read
    assert f"`{SUBNET}` AvailableIpAddressCount 180" in b.evidence and "32 IPs" in b.evidence  # one node's need
    assert "no InsufficientInstanceCapacity" in b.evidence and "CloudTrail" in b.evidence
    assert "DescribeCapacityReservations" in b.evidence  # no reservation ends near the window
    # the same report's finding says the capacity was cleared: the two agree
    (f,) = [f for f in result.findings if f.id == "why-no-replacement"]
    assert next(s for s in f.steps if s.name == "capacity to replace into").status == "Cleared"


def test_a_plan_with_nothing_left_is_evidence_for_b_never_ruled_out() -> None:
    b = _b(_run(world(available=0, spare=0)))
    assert b.status in ("UNVERIFIED", "Contributing") and b.label == "Hypothesis (to validate)"
    assert f"`{PLAN}`" in b.evidence and "no instance left to replace into" in b.evidence


def test_free_ips_below_one_nodes_need_is_evidence_for_b() -> None:
    b = _b(_run(world(free_ips=20)))  # HyperPod P5 on Slurm needs 32
    assert b.status != "Ruled out"
    assert f"`{SUBNET}` AvailableIpAddressCount 20" in b.evidence


def test_a_capacity_error_read_in_a_log_is_evidence_for_b() -> None:
    line = "[ERROR] CreateFleet failed: InsufficientInstanceCapacity: no p5.48xlarge capacity in us-west-2a"
    b = _b(_run(world(event=line)))
    assert b.status != "Ruled out"
    assert "InsufficientInstanceCapacity" in b.evidence and "LifecycleConfig/gpu-workers/" in b.evidence


def test_a_plan_ending_in_the_window_keeps_b_open() -> None:
    b = _b(_run(world(plan_end=at(9))))
    assert b.status != "Ruled out"
    assert f"`{PLAN}` ends {at(9)}" in b.evidence


def test_unread_subnets_leave_b_not_assessed_never_ruled_out() -> None:
    w = world()
    w.fault("ec2", "DescribeSubnets", "UnauthorizedOperation")
    b = _b(_run(w))
    assert b.status == "Not assessed"
    assert "free IPs in the cluster's subnets" in b.evidence and "describe-subnets" in b.evidence
