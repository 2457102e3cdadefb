"""RULES §6, §7 (issue #53 item 10): fewer GPUs than the type has — distinct `GpuId` of `AWS/EC2` metrics, or `index`
of `CWAgent`, against the type's GPU count — is REPLACE; a node with no GPU metric is Not observable, never "0 GPUs"."""

from __future__ import annotations

from collections.abc import Iterable

from helpers.worlds import PClusterWorld, at

SINCE, UNTIL = at(9), at(11)


def every_5_min(start_hour: int, end_hour: int) -> list[list[object]]:
    return [[at(h, m), 40.0] for h in range(start_hour, end_hour) for m in range(0, 60, 5)]


def world() -> tuple[PClusterWorld, str]:
    """One P5 compute node (8 H100s by DescribeInstanceTypes), its kernel log Measured through the window."""
    w = PClusterWorld("train", n_compute=1)
    gpu = w.compute[0]
    w.healthy(gpu, at(-48), at(13))
    return w, gpu.instance_id


def ec2_gpus(w: PClusterWorld, iid: str, gpu_ids: Iterable[int], until_hour: int = 13) -> None:
    for g in gpu_ids:
        w.section("cloudwatch", "metrics").append({
            "Namespace": "AWS/EC2", "MetricName": "GPUPowerUtilization", "Unit": "Percent",
            "Dimensions": [{"Name": "InstanceId", "Value": iid}, {"Name": "GpuId", "Value": str(g)}],
            "Datapoints": every_5_min(6, until_hour)})


def audit(w: PClusterWorld, iid: str, **kw: str):
    result = w.audit("train", mode="incident", since=kw.get("since", SINCE), until=kw.get("until", UNTIL))
    return result, next(n for n in result.nodes if n.instance_id == iid), {b.branch: b for b in result.branches}


def test_seven_gpus_on_an_eight_gpu_type_is_replace() -> None:
    w, iid = world()
    ec2_gpus(w, iid, range(7))
    _, node, branches = audit(w, iid)
    assert node.verdict == "REPLACE"
    assert "7 of the 8 GPUs" in (node.verdict_evidence or "")
    assert any(e.class_ == "hardware" and "fewer GPUs" in (e.meaning or "") for e in node.gpu_errors)
    assert branches["A"].status != "Ruled out"


def test_a_listed_gpu_silent_in_the_window_is_not_observable_not_missing() -> None:
    # GpuId 7 stopped reporting at 08:00, before the window: listed by ListMetrics (two weeks), silent since
    w, iid = world()
    ec2_gpus(w, iid, range(7))
    ec2_gpus(w, iid, [7], until_hour=8)
    result, node, _ = audit(w, iid)
    assert node.verdict is None
    (gap,) = [g for g in result.visibility_gaps if "GPU 7 listed" in g]
    assert iid in gap and "Not observable" in gap


def test_every_gpu_reporting_is_no_signal() -> None:
    w, iid = world()
    ec2_gpus(w, iid, range(8))
    result, node, branches = audit(w, iid)
    assert node.verdict is None
    assert branches["A"].status == "Ruled out"
    assert not [g for g in result.visibility_gaps if "GPU count" in g]


def test_no_gpu_metric_is_not_observable_never_zero_gpus() -> None:
    w, iid = world()
    result, node, _ = audit(w, iid)
    assert node.verdict is None
    (gap,) = [g for g in result.visibility_gaps if "GPU count" in g]
    assert iid in gap and "Not observable" in gap and "not a low count" in gap


def test_cwagent_index_per_host_counts_too() -> None:
    w, iid = world()
    host = w.compute[0].hostname
    for index in range(6):
        w.section("cloudwatch", "metrics").append({
            "Namespace": "CWAgent", "MetricName": "nvidia_smi_utilization_gpu",
            "Dimensions": [{"Name": "host", "Value": host}, {"Name": "index", "Value": str(index)},
                           {"Name": "name", "Value": "NVIDIA H100 80GB HBM3"}, {"Name": "arch", "Value": "Hopper"}],
            "Datapoints": every_5_min(6, 13)})
    _, node, _ = audit(w, iid)
    assert node.verdict == "REPLACE"
    assert "6 of the 8 GPUs" in (node.verdict_evidence or "") and "CWAgent" in (node.verdict_evidence or "")


def test_one_source_listing_every_gpu_outweighs_one_that_misses_some() -> None:
    w, iid = world()
    ec2_gpus(w, iid, range(5))
    for index in range(8):
        w.section("cloudwatch", "metrics").append({
            "Namespace": "CWAgent", "MetricName": "nvidia_smi_utilization_gpu",
            "Dimensions": [{"Name": "InstanceId", "Value": iid}, {"Name": "index", "Value": str(index)}],
            "Datapoints": every_5_min(6, 13)})
    _, node, _ = audit(w, iid)
    assert node.verdict is None
