"""ParallelCluster compute nodes gone from DescribeInstances are found from CloudTrail RunInstances too."""

from __future__ import annotations

import json

from helpers.worlds import ACCOUNT, PClusterWorld, at


def run_instances(cluster: str, iid: str, when: str, *, error: str | None = None, template: str | None = None) -> dict:
    detail = {"requestParameters": {"launchTemplate": {"launchTemplateName": template or f"{cluster}-gpu-p548xlarge"}},
              "responseElements": None if error else {"instancesSet": {"items": [
                  {"instanceId": iid, "instanceType": "p5.48xlarge", "privateDnsName": "ip-10-9-9-9.ec2.internal"}]}},
              "userIdentity": {"accountId": ACCOUNT}}
    if error:
        detail["errorCode"] = error
    return {"EventId": iid, "EventName": "RunInstances", "EventTime": when, "EventSource": "ec2.amazonaws.com",
            "Username": "i-0head", "Resources": [], "CloudTrailEvent": json.dumps(detail)}


def test_a_node_launched_by_the_cluster_and_gone_is_audited_with_its_type() -> None:
    # Given a compute node the cluster launched (its launch template), terminated, whose kernel stream
    # lives only in a customer group, not in /aws/parallelcluster/…
    w = PClusterWorld("ct", n_compute=0)
    w.instance_type("p5.48xlarge")
    gone = "i-0feedfacecafe0001"
    stream = f"ip-10-9-9-9.ec2.internal-{gone}"
    w.kernel_stream("/aws/pipeline/ct/kernel", stream, at(-30), at(10, 30), host="ip-10-9-9-9")
    w.section("cloudtrail", "events").extend([
        run_instances("ct", gone, at(-10)),
        run_instances("ct", "i-0feedfacecafe0002", at(-9), error="Client.InsufficientInstanceCapacity"),
        run_instances("other", "i-0feedfacecafe0003", at(-9), template="other-gpu-p548xlarge")])
    # When audited
    result = w.audit("ct", since=at(8), until=at(11))
    nodes = {n.instance_id: n for n in result.nodes}
    # Then the launched node is a node of the audit, with the type CloudTrail recorded; failed launches and
    # other clusters' launches are not
    assert gone in nodes and nodes[gone].discovered_by == "cloudtrail"
    assert nodes[gone].instance_type == "p5.48xlarge" and nodes[gone].gpu_count == 8
    assert nodes[gone].xid_status == "Not observable"  # its stream stopped at 10:30
    assert "i-0feedfacecafe0002" not in nodes and "i-0feedfacecafe0003" not in nodes
