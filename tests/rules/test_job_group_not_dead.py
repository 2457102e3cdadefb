"""RULES §3: every candidate source is evaluated and dead ones are reported, "because the operator believes they
work". A job's log group whose streams name nodes by hostname (`job-48213/ip-10-0-…`) carries no kernel coverage,
but its NCCL lines were read as those nodes' (incident tests/fixtures/incidents/pcluster-p5-xid48-row-remap-*):
calling it "dead or unrelated" in the same report that quotes its lines is false."""

from __future__ import annotations

from tests.helpers.worlds import PClusterWorld, at


def test_a_job_group_whose_lines_were_read_as_a_nodes_is_not_listed_as_dead() -> None:
    w = PClusterWorld("llm-train", n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(12, 25))
    jobs = w.log_group("/aws/llm-train/jobs")
    w.stream(jobs, f"job-48213/{node.hostname}", events=[
        (at(9, 5), f"{node.hostname}:48213:48213 [0] NCCL INFO NET/OFI Selected Provider is efa, fabric is efa")])
    dead = w.log_group("/aws/llm-train/gpu-health")
    w.stream(dead, "ip-10-9-9-9-i-0ffffffffffffffff", events=[(at(9, 5), "health: ok")])
    result = w.audit(w.cluster, mode="incident", since=at(8), until=at(11))
    # its NCCL line was read as the node's
    assert any(jobs in line for line in result.report_markdown.splitlines() if "NCCL INFO" in line)
    gaps = [g for g in result.visibility_gaps if "dead or unrelated" in g]
    assert gaps and dead in gaps[0] and jobs not in gaps[0]
