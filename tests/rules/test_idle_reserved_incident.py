"""Idle reserved GPUs in incident mode (#21 item 2): "are we actually using the reserved GPUs?"

RULES §8: on reserved capacity, count the hours of the window where every GPU of a node stayed below 5 % of
`GPUPowerUtilization` (AWS/EC2, dimensions InstanceId and GpuId); §0.6: the values are percentages already (0.3
is 0.3 %); §0.2: a missing datapoint is missing, never idle or busy. Reported per node and per reservation `cr-…`.
HyperPod exports no system metrics: Not observable there, pointing to the observability add-on.
"""

from __future__ import annotations

from gpuaudit.model.result import Finding, Result
from tests.helpers.worlds import ACCOUNT, REGION, HyperPodWorld, PClusterWorld, at, calls

SINCE, UNTIL = at(4), at(12)  # 8 whole hours
BLOCK = "cr-0a1b2c3d4e5f60718"
GPUS = [str(i) for i in range(8)]


def reserved_world() -> tuple[PClusterWorld, str, str]:
    w = PClusterWorld(n_compute=2, launch=at(-24))
    busy_then_idle, idle_then_gap = w.compute
    for n in w.compute:
        w.healthy(n, at(-24), at(12, 25))
    w.section("ec2", "capacity_reservations").append({
        "CapacityReservationId": BLOCK, "InstanceType": "p5.48xlarge", "State": "active",
        "ReservationType": "capacity-block", "StartDate": at(-48), "EndDate": at(24 * 5 + 11, 30),
        "TotalInstanceCount": 2, "AvailableInstanceCount": 0, "AvailabilityZone": "us-west-2a",
        "OwnerId": ACCOUNT})
    metrics = w.section("cloudwatch", "metrics")

    def series(node_id: str, gpu: str, points: list[tuple[int, float]]) -> None:
        metrics.append({"Namespace": "AWS/EC2", "MetricName": "GPUPowerUtilization", "Unit": "Percent",
                        "Dimensions": [{"Name": "InstanceId", "Value": node_id}, {"Name": "GpuId", "Value": gpu}],
                        "Datapoints": [[at(h, 20), v] for h, v in points]})

    for gpu in GPUS:
        # 04–07: training (one GPU at 97.5 % is enough to make the hour busy; 5.0 % is not below 5 %);
        # 08–11: every GPU at 0.3 % — 0.3 percent, idle (never rescaled to 30 %).
        busy = 97.5 if gpu == "0" else (5.0 if gpu == "1" else 0.3)
        series(busy_then_idle.instance_id, gpu, [(h, busy) for h in range(4, 8)] + [(h, 0.3) for h in range(8, 12)])
        # 04–09 idle (4.9 % is still below 5 %); 10–11: GPU 7 published nothing, the others 0.5 % → missing hours
        hours = range(4, 10) if gpu == "7" else range(4, 12)
        series(idle_then_gap.instance_id, gpu, [(h, 4.9 if gpu == "3" else 0.5) for h in hours])
    return w, busy_then_idle.instance_id, idle_then_gap.instance_id


def idle_finding(result: Result) -> Finding:
    (f,) = [f for f in result.findings if f.id == "idle-reserved-gpus"]
    return f


def test_idle_hours_per_node_and_per_reservation_with_missing_hours_kept_apart() -> None:
    w, first, second = reserved_world()
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    f = idle_finding(result)
    by = {s.name: s for s in f.steps}
    a, b = by[f"`{first}`"], by[f"`{second}`"]
    assert a.status == b.status == "Measured"
    assert "4 h idle, 4 h busy, 0 h missing of 8 h" in a.evidence
    assert "6 h idle, 0 h busy, 2 h missing of 8 h" in b.evidence
    assert f"`{BLOCK}`" in a.evidence and "GpuId 0, 1, 2, 3, 4, 5, 6, 7" in a.evidence
    # per reservation: 10 idle node-hours = 80 GPU-hours on the 8-GPU nodes
    assert f"`{BLOCK}`: 10 idle node-hours (80 GPU-hours), 4 busy, 2 missing" in f.answer
    assert "values as reported in percent" in f.answer
    assert "Are the reserved GPUs being used?" in result.report_markdown
    # one per reserved node for the idle hours, and one for the GPUs each node has (RULES §6, the gpu-count read)
    assert calls(result, "cloudwatch", "GetMetricData") == 3
    assert not result.invariants_broken


def test_hyperpod_gpu_activity_is_not_observable_in_cloudwatch() -> None:
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    workers = next(g for g in w.described["InstanceGroups"] if g["InstanceGroupName"] == "gpu-workers")
    workers["TrainingPlanArn"] = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/p"
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    f = idle_finding(result)
    assert f.answer.startswith("Not observable") and w.gpu[0].instance_id in f.answer
    assert "observability add-on" in (f.action or "")
    assert calls(result, "cloudwatch", "GetMetricData") == 0


def test_unread_metrics_are_not_checked_never_idle() -> None:
    w, _, _ = reserved_world()
    w.fault("cloudwatch", "GetMetricData", "AccessDeniedException")
    f = idle_finding(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert f.answer.startswith("Not checked") and not f.steps
