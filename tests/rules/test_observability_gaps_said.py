"""Observability gaps are said (#35 item 9), from RULES §8 "Idle reserved GPUs": hours without any datapoint are
neither idle nor busy — Not observable, listed by UTC hour like the empty hours of §4, with what to collect; and
HyperPod exports no system metrics to CloudWatch, so its GPU activity is Not observable there: said as an
observability gap, pointing to the HyperPod observability add-on (RULES §4: a missing signal is a gap, never a
clean result)."""

from __future__ import annotations

from gpuaudit.model.result import Finding, Result
from tests.helpers.worlds import ACCOUNT, REGION, HyperPodWorld, PClusterWorld, at, node_of

SINCE, UNTIL = at(4), at(10)  # six whole hours, 04:00 → 10:00 UTC
BLOCK = "cr-0123abcd4567ef890"


def reserved(points: dict[int, float]) -> tuple[PClusterWorld, str]:
    """One p5 node on an active Capacity Block; each of its 8 GPUs reports `points` (hour → percent) at :15."""
    w = PClusterWorld(n_compute=1, launch=at(-24))
    node = w.compute[0]
    w.healthy(node, at(-24), at(12, 25))
    w.section("ec2", "capacity_reservations").append({
        "CapacityReservationId": BLOCK, "InstanceType": "p5.48xlarge", "State": "active",
        "ReservationType": "capacity-block", "StartDate": at(-48), "EndDate": at(24 * 4 + 11, 30),
        "TotalInstanceCount": 1, "AvailableInstanceCount": 0, "AvailabilityZone": "us-west-2a", "OwnerId": ACCOUNT})
    for gpu in range(8):
        w.section("cloudwatch", "metrics").append({
            "Namespace": "AWS/EC2", "MetricName": "GPUPowerUtilization", "Unit": "Percent",
            "Dimensions": [{"Name": "InstanceId", "Value": node.instance_id}, {"Name": "GpuId", "Value": str(gpu)}],
            "Datapoints": [[at(h, 15), v] for h, v in points.items()]})
    return w, node.instance_id


def idle(result: Result) -> Finding:
    (f,) = [f for f in result.findings if f.id == "idle-reserved-gpus"]
    return f


def test_hours_without_a_datapoint_are_listed_by_utc_hour_and_never_counted_idle() -> None:
    # 04 and 05 busy, 06 idle (0.4 %: a percent, as reported), 07–09 nothing published
    w, node = reserved({4: 88.0, 5: 91.5, 6: 0.4})
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    f = idle(result)
    step = next(s for s in f.steps if s.name == f"`{node}`")
    assert "1 h idle, 2 h busy, 3 h missing of 6 h" in step.evidence
    hours = ", ".join(at(h) for h in (7, 8, 9))
    assert hours in step.evidence and "neither idle nor busy" in step.evidence
    gap = [g for g in result.visibility_gaps if node in g and "GPUPowerUtilization" in g]
    assert gap, result.visibility_gaps
    assert hours in gap[0] and at(6) not in gap[0] and "nvidia_gpu" in gap[0]


def test_every_hour_measured_leaves_no_metric_gap() -> None:
    w, node = reserved({h: 50.0 for h in range(4, 10)})
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert not [g for g in result.visibility_gaps if "GPUPowerUtilization" in g and node in g]


def test_hyperpod_gpu_activity_is_a_visibility_gap_naming_the_add_on() -> None:
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    workers = next(g for g in w.described["InstanceGroups"] if g["InstanceGroupName"] == "gpu-workers")
    workers["TrainingPlanArn"] = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/plan-a"
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    gaps = [g for g in result.visibility_gaps if "GPU activity" in g]
    assert len(gaps) == 1, result.visibility_gaps
    assert "HyperPod observability add-on" in gaps[0] and "no system metrics" in gaps[0]
    assert all(n.instance_id in gaps[0] for n in w.gpu)
    assert "HyperPod observability add-on" in result.report_markdown.split("isibility gaps")[-1]


def test_nccl_transport_on_a_node_without_a_gpu_is_not_applicable_not_a_gap() -> None:
    # Given a ParallelCluster head node (c5.2xlarge, no GPU) and a GPU compute node, neither with an NCCL line
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=at(6), until=at(10))

    # Then RULES §4: each signal is Observable, Not observable or Not applicable per node: NCCL does not apply to a
    # node without a GPU, while the GPU node's missing NCCL lines stay a gap
    assert node_of(result, w.head.instance_id).signals.nccl == "Not applicable"
    assert node_of(result, w.compute[0].instance_id).signals.nccl == "Not observable"
