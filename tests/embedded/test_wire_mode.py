"""The wire-faithful embedded mode (issue #34 item 1): the backend answers at botocore's `before-send` with the
HTTP response AWS would send, and botocore's own parser reads it. Per protocol (EC2 query/XML, JSON, REST-JSON,
RPC v2 CBOR) the parsed answer equals the before-call answer, the bytes on the wire are the protocol's, and
errors come back as the protocol's error documents with AWS's status and code."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError
from helpers.worlds import HyperPodWorld, PClusterWorld, WorldBuilder, at

from gpuaudit.devtools.worldgen import WorldSpec, generate
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import parse_world
from gpuaudit.embedded.world_schema import WorldError


def both(raw: dict[str, Any]) -> tuple[WorldBackend, WorldBackend]:
    return WorldBackend(parse_world(json.loads(json.dumps(raw)))), WorldBackend(parse_world(raw), wire=True)


def answer(backend: WorldBackend, service: str, operation: str, **params: Any) -> dict[str, Any]:
    out = getattr(backend.session().client(service), operation)(**params)
    out.pop("ResponseMetadata")
    return out


class Sent:
    """The raw HTTP bodies botocore received (after-call cannot see them; before-parse can)."""

    def __init__(self, backend: WorldBackend) -> None:
        self.bodies: list[bytes] = []
        self.session = backend.session()
        self.session.events.register("before-parse", self.keep)

    def keep(self, response_dict: dict[str, Any], **_: Any) -> None:
        self.bodies.append(response_dict["body"])


def test_ec2_query_xml_parsed_by_botocore_equals_the_before_call_answer():
    # Given a generated ParallelCluster world whose p5 instances carry 32 EFA interfaces each
    raw = generate(WorldSpec(nodes=3, days=1))
    plain, wired = both(raw)

    # When DescribeInstances is answered both ways
    direct = answer(plain, "ec2", "describe_instances")
    parsed = answer(wired, "ec2", "describe_instances")

    # Then botocore's XML parser yields the same reservations, datetimes and all
    assert parsed == direct
    compute = [i for r in parsed["Reservations"] for i in r["Instances"] if i["InstanceType"] == "p5.48xlarge"]
    assert len(compute) == 3 and all(len(i["NetworkInterfaces"]) == 32 for i in compute)
    assert isinstance(compute[0]["LaunchTime"], datetime)
    assert compute[0]["BlockDeviceMappings"][0]["Ebs"]["VolumeId"].startswith("vol-0")
    # and what crossed the wire is EC2's XML: tens of KB per p5 instance
    sent = Sent(wired)
    sent.session.client("ec2").describe_instances()
    body = sent.bodies[0]
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstancesResponse xmlns=')
    assert b"<reservationSet><item>" in body and b"<networkInterfaceSet>" in body
    assert len(body) > 3 * 25_000


def test_json_protocol_parsed_equals_before_call_and_timestamps_travel_as_epoch_seconds():
    # Given a HyperPod cluster (SageMaker speaks JSON 1.1) and a log group (CloudWatch Logs, JSON 1.1)
    w = HyperPodWorld(gpu_nodes=3)
    w.lines("/aws/x/kernel", "s1", at(1), at(3))
    plain, wired = both(w.raw)

    for service, operation, params in (("sagemaker", "list_cluster_nodes", {"ClusterName": "hp-slurm"}),
                                       ("sagemaker", "describe_cluster", {"ClusterName": "hp-slurm"}),
                                       ("logs", "describe_log_streams", {"logGroupName": "/aws/x/kernel"})):
        # When answered both ways; Then the parsed answers are equal
        direct = answer(plain, service, operation, **params)
        assert answer(wired, service, operation, **params) == direct, operation
    sent = Sent(wired)
    sent.session.client("sagemaker").list_cluster_nodes(ClusterName="hp-slurm")
    document = json.loads(sent.bodies[0])
    assert isinstance(document["ClusterNodeSummaries"][0]["LaunchTime"], float)


def test_rest_json_eks_parsed_equals_before_call_and_its_error_names_the_code_in_the_header():
    # Given an EKS cluster in the world
    w = WorldBuilder()
    w.section("eks", "clusters").append({"name": "train", "arn": "arn:aws:eks:us-west-2:111122223333:cluster/train",
                                         "createdAt": at(-30), "version": "1.31", "status": "ACTIVE",
                                         "endpoint": "https://ABC.gr7.us-west-2.eks.amazonaws.com",
                                         "tags": {"team": "llm"}})
    plain, wired = both(w.raw)

    # When described both ways; Then equal (the map and the timestamp included)
    direct = answer(plain, "eks", "describe_cluster", name="train")
    assert answer(wired, "eks", "describe_cluster", name="train") == direct
    assert direct["cluster"]["tags"] == {"team": "llm"} and isinstance(direct["cluster"]["createdAt"], datetime)

    # And an unknown cluster is EKS's 404 with the code botocore reads from x-amzn-ErrorType
    with pytest.raises(ClientError) as raised:
        wired.session().client("eks").describe_cluster(name="nope")
    assert raised.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert raised.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == "ResourceNotFoundException"


def test_cbor_protocol_cloudwatch_metric_data_parsed_equals_before_call():
    # Given GPU utilisation datapoints (CloudWatch speaks smithy-rpc-v2-cbor in this botocore)
    w = WorldBuilder()
    w.section("cloudwatch", "metrics").append({
        "Namespace": "AWS/EC2", "MetricName": "GPUUtilization", "Dimensions": [{"Name": "InstanceId", "Value": "i-1"}],
        "Datapoints": [[at(1), 3.5], [at(2), 97.25]]})
    plain, wired = both(w.raw)
    query = {"MetricDataQueries": [{"Id": "q", "MetricStat": {"Metric": {
        "Namespace": "AWS/EC2", "MetricName": "GPUUtilization", "Dimensions": [{"Name": "InstanceId", "Value": "i-1"}]},
        "Period": 3600, "Stat": "Maximum"}}], "StartTime": at(0), "EndTime": at(4)}

    direct = answer(plain, "cloudwatch", "get_metric_data", **query)
    parsed = answer(wired, "cloudwatch", "get_metric_data", **query)
    assert parsed == direct
    assert parsed["MetricDataResults"][0]["Values"] == [97.25, 3.5]


def test_errors_travel_in_each_protocols_shape_with_awss_status_and_code():
    w = PClusterWorld(n_compute=1)
    _, wired = both(w.raw)
    session = wired.session()
    cases = [(lambda: session.client("ec2").describe_instances(InstanceIds=["i-0ffffffffffffffff"]),
              "InvalidInstanceID.NotFound", 400),
             (lambda: session.client("sagemaker").describe_cluster(ClusterName="missing"), "ResourceNotFound", 400),
             (lambda: session.client("logs").describe_log_streams(logGroupName="/missing"),
              "ResourceNotFoundException", 400)]
    for call, code, status in cases:
        with pytest.raises(ClientError) as raised:
            call()
        assert raised.value.response["Error"]["Code"] == code
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_a_world_value_the_protocol_cannot_carry_is_named_not_parsed_into_nonsense():
    # Given an instance whose Architecture (a key the world schema does not type) is a list: EC2 returns a string
    w = PClusterWorld(n_compute=1)
    w.section("ec2", "instances")[0]["Architecture"] = ["x86_64"]
    _, wired = both(w.raw)
    with pytest.raises(WorldError, match=r"Architecture: expected a string"):
        wired.session().client("ec2").describe_instances()
