"""Hangs with idle GPUs (#21 item 5): "the job hangs with NCCL timeouts and the GPUs sit idle — is it the network?"

RULES §8 D layer 4: the EFA security group needs a self-referencing all-traffic rule inbound and outbound (a
missing one is a proven precondition failure); failed deep health checks (`InstanceConnectivity` runs a multi-node
NCCL all_reduce); §8 E recent cluster changes; and what AWS cannot see is named with its collection command (NCCL
debug logs; GPU activity on HyperPod needs the observability add-on) — never a network cause without evidence.
"""

from __future__ import annotations

from typing import Any

from gpuaudit.model.result import Finding, Result
from tests.helpers.worlds import HyperPodWorld, at

SINCE, UNTIL = at(6), at(10)
SG = "sg-0efa5e1f00000001"
TIMEOUT = ("[rank3]:[E1001 07:15:02.123 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
           "600023 milliseconds before timing out.")


def all_traffic(to_self: bool) -> list[dict[str, Any]]:
    if to_self:
        return [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}], "IpRanges": []}]
    return [{"IpProtocol": "-1", "UserIdGroupPairs": [], "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]


def hung(*, self_outbound: bool = True, deep_health_line: str | None = None) -> HyperPodWorld:
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    w.described["VpcConfig"] = {"SecurityGroupIds": [SG], "Subnets": ["subnet-0aaa1111bbbb2222c"]}
    w.section("ec2", "security_groups").append({
        "GroupId": SG, "GroupName": "hp-efa", "VpcId": "vpc-0abc", "IpPermissions": all_traffic(True),
        "IpPermissionsEgress": all_traffic(True) if self_outbound else all_traffic(False)})
    jobs = w.log_group(f"/aws/training/{w.cluster}/jobs")
    for n in w.gpu:
        w.lines(jobs, f"{n.instance_id}/train.log", at(5), at(7, 15), 300, "step 1200 loss 2.31")
    w.stream(jobs, f"{w.gpu[1].instance_id}/train.log", events=[(at(7, 15, 2), TIMEOUT)])
    if deep_health_line:
        w.stream(w.group, f"DeepHealthCheckResults/{w.gpu[1].instance_id}", events=[(at(5, 30), deep_health_line)])
    return w


def finding(result: Result) -> Finding:
    (f,) = [f for f in result.findings if f.id == "hang-idle-gpus"]
    return f


def test_a_missing_self_outbound_rule_is_the_proven_precondition_failure_named_by_group() -> None:
    result = hung(self_outbound=False).audit("hp-slurm", mode="incident", since=SINCE, until=UNTIL)
    f = finding(result)
    by = {s.name: s for s in f.steps}
    sg = by["EFA security group self-referencing rules"]
    assert sg.status == "Blocked" and f"`{SG}` (hp-efa)" in sg.evidence and "outbound" in sg.evidence
    assert "inbound" not in sg.evidence.split("no all-traffic")[1].split("rule")[0]  # inbound self rule is there
    assert f.label == "Proven" and "EFA precondition failure" in f.answer and "2026-10-01T07:15:02Z" in f.answer
    # what AWS cannot see, with the command that collects it
    assert by["NCCL debug logs"].status == "Not observable" and "NCCL_DEBUG=INFO" in by["NCCL debug logs"].evidence
    assert by["GPU activity at the hang"].status == "Not observable"
    assert "observability add-on" in by["GPU activity at the hang"].evidence
    assert by["recent cluster changes"].status == "Cleared"  # CloudTrail read, nothing changed
    assert by["deep health checks (InstanceConnectivity)"].status == "Not checked"


def test_a_failed_instance_connectivity_check_is_a_hypothesis_with_its_line() -> None:
    line = ("InstanceConnectivity: FAIL — NCCL all_reduce between ip-10-0-0-2 and ip-10-0-0-3 failed: "
            "bus bandwidth 0.0 GB/s")
    f = finding(hung(deep_health_line=line).audit("hp-slurm", mode="incident", since=SINCE, until=UNTIL))
    by = {s.name: s for s in f.steps}
    assert by["EFA security group self-referencing rules"].status == "Cleared"
    deep = by["deep health checks (InstanceConnectivity)"]
    assert deep.status == "Blocked" and "InstanceConnectivity: FAIL" in deep.evidence
    assert "DeepHealthCheckResults/" in deep.evidence
    assert f.label == "Hypothesis (to validate)" and "deep health checks" in f.answer


def test_no_evidence_names_no_network_cause() -> None:
    result = hung().audit("hp-slurm", mode="incident", since=SINCE, until=UNTIL)
    f = finding(result)
    assert f.label is None and "No network cause is shown" in f.answer
    assert "NCCL_DEBUG=INFO" in (f.action or "")
    d = next(b for b in result.branches if b.branch == "D")
    assert d.status not in ("Root cause", "Contributing")
    assert "Jobs hang with NCCL timeouts" in result.report_markdown


def test_no_timeout_asks_no_such_question() -> None:
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    assert not [f for f in w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL).findings
                if f.id == "hang-idle-gpus"]
