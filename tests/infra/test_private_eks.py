"""#19 item 3: an EKS cluster with a private API endpoint is read by a KubeRead function in the cluster's VPC.

That function is the only one in a VPC; its role holds only what Lambda needs to attach it (network interfaces in
the configured subnets) and no AWS read; its role, not the collectors', gets the cluster's access entry; the
collectors may invoke exactly it. The network-interface actions are Lambda's own plumbing (Lambda creates and
deletes the function's interfaces with the execution role); gpuaudit's code never calls them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cdk_synth import TEST_CONFIG, Synthesized, synthesize
from policy_eval import ACCOUNT, REGION, Request, role
from stack_edges import StackPolicies
from test_stack_iam import ALLOWLIST, READS, actions_of, identity_statements, step_roles

from gpuaudit.domain.kube_access import READER_GROUP
from infra.config import DeployConfig

PRIVATE, PUBLIC = "train-private-eks", "train-public-eks"
WHERE = {"subnet_ids": ["subnet-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60719"],
         "security_group_ids": ["sg-0123456789abcdef0"]}
# The actions of AWS's managed AWSLambdaVPCAccessExecutionRole (policy version 3): what Lambda needs of the
# function's role to attach it to subnets.
VPC_ATTACHMENT = {"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
                  "ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"}


@pytest.fixture(scope="module")
def private() -> Synthesized:
    return synthesize(config={**TEST_CONFIG, "eks_access_entries": [PRIVATE, PUBLIC],
                              "eks_private_endpoints": {PRIVATE: WHERE}})


def _reader(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    (found,) = [(fid, f) for fid, f in synth.resources("AWS::Lambda::Function").items()
                if f["Properties"]["Handler"] == "handlers.kube_read.handler"]
    return found


def test_the_reader_runs_in_the_configured_subnets_untraced_and_only_it_is_in_a_vpc(private: Synthesized) -> None:
    reader_id, reader = _reader(private)
    assert reader["Properties"]["VpcConfig"] == {"SubnetIds": WHERE["subnet_ids"],
                                                 "SecurityGroupIds": WHERE["security_group_ids"]}
    assert reader["Properties"].get("TracingConfig", {"Mode": "PassThrough"}) == {"Mode": "PassThrough"}
    env = reader["Properties"]["Environment"]["Variables"]
    assert not {"FINDINGS_TABLE", "ALERT_TOPIC_ARN", "GPUAUDIT_MEMBER_ROLES"} & set(env)
    others = [f for fid, f in private.resources("AWS::Lambda::Function").items() if fid != reader_id]
    assert others and not any("VpcConfig" in f["Properties"] for f in others)


def test_the_readers_role_holds_only_lambdas_vpc_plumbing_scoped_to_its_subnets(private: Synthesized) -> None:
    reader_id, reader = _reader(private)
    role = reader["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = identity_statements(private)  # also: no managed policy on any role
    assert actions_of(statements, role) == VPC_ATTACHMENT | {"logs:CreateLogStream", "logs:PutLogEvents"}
    (create,) = [s for r, s in statements if r == role and "ec2:CreateNetworkInterface" in s["Action"]]
    named = json.dumps(create["Resource"])
    assert all(i in named for i in [*WHERE["subnet_ids"], *WHERE["security_group_ids"]])
    assert named.count("subnet/") == 2 and named.count("security-group/") == 1
    for other in {r for r, _ in statements} - {role}:
        # (ec2:DescribeSubnets is also one of the collectors' own reads, permissions.py)
        touching = VPC_ATTACHMENT - {"ec2:DescribeSubnets"}
        assert not actions_of(statements, other) & touching, f"{other} may touch network interfaces"
    actions = {a for _, s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert actions - ALLOWLIST - VPC_ATTACHMENT == set()


def test_the_private_clusters_access_entry_names_the_reader_and_the_public_ones_the_collectors(
        private: Synthesized) -> None:
    reader_id, reader = _reader(private)
    reader_role = reader["Properties"]["Role"]["Fn::GetAtt"][0]
    roles = step_roles(private)
    collectors = {roles["inventory"], roles["collect_logs"], roles["finish"]}
    by_cluster: dict[str, set[str]] = {}
    for entry in private.resources("AWS::EKS::AccessEntry").values():
        by_cluster.setdefault(entry["Properties"]["ClusterName"], set()).add(
            entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0])
        assert entry["Properties"]["KubernetesGroups"] == [READER_GROUP]
        assert "AccessPolicies" not in entry["Properties"]
    assert by_cluster == {PRIVATE: {reader_role}, PUBLIC: collectors}


def test_the_collectors_may_invoke_exactly_the_reader_and_know_it_by_cluster(private: Synthesized) -> None:
    reader_id, _ = _reader(private)
    statements, roles = identity_statements(private), step_roles(private)
    functions = private.resources("AWS::Lambda::Function")
    for step in ("inventory", "collect_logs", "finish"):
        budget = {"dynamodb:GetItem", "dynamodb:UpdateItem"} if step == "collect_logs" else set()  # query leases
        assert actions_of(statements, roles[step]) - READS - budget - {
            "s3:GetObject", "s3:PutObject", "s3:ListBucket", "logs:CreateLogStream", "logs:PutLogEvents",
            "xray:PutTraceSegments", "xray:PutTelemetryRecords"} == {"lambda:InvokeFunction"}
        invoke = [s for r, s in statements if r == roles[step] and "lambda:InvokeFunction" in s["Action"]]
        assert [s["Resource"] for s in invoke] == [{"Fn::GetAtt": [reader_id, "Arn"]}]
        (function,) = [f for f in functions.values() if f["Properties"]["Handler"] == f"handlers.{step}.handler"]
        readers = function["Properties"]["Environment"]["Variables"]["GPUAUDIT_KUBE_READERS"]
        assert readers["Fn::Join"][1] == [f"{{\"{PRIVATE}\": \"", {"Ref": reader_id}, "\"}"]
    for step in ("plan", "verdict"):
        assert "lambda:InvokeFunction" not in actions_of(statements, roles[step])


def test_no_reader_without_a_private_endpoint(synth: Synthesized) -> None:
    handlers = {f["Properties"]["Handler"] for f in synth.resources("AWS::Lambda::Function").values()}
    assert "handlers.kube_read.handler" not in handlers


@pytest.mark.parametrize(("config", "message"), [
    ({"eks_private_endpoints": {PRIVATE: WHERE}}, "not in `eks_access_entries`"),
    ({"eks_access_entries": [PRIVATE], "eks_private_endpoints": {PRIVATE: {**WHERE, "subnet_ids": []}}}, "subnet_ids"),
    ({"eks_access_entries": [PRIVATE], "eks_private_endpoints": {PRIVATE: {**WHERE, "subnet_ids": ["sub-1"]}}},
     "subnet_ids"),
    ({"eks_access_entries": [PRIVATE], "eks_private_endpoints": {PRIVATE: {**WHERE, "security_group_ids": ["x"]}}},
     "security_group_ids"),
])
def test_a_bad_private_endpoint_configuration_is_refused_naming_it(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DeployConfig.model_validate({"clusters": ["a"], **config})


def test_the_reader_may_change_only_network_interfaces_in_its_configured_subnets(private: Synthesized) -> None:
    """Issue #47 item 6: DeleteNetworkInterface (and the IP assignments) on any interface of the region was the only
    write on an audited service; scoped by ec2:Subnet (the interface's subnet ARN, which EC2 puts in the request
    context), Lambda may still manage the function's own interfaces and no other."""
    _reader_id, reader = _reader(private)
    policies = StackPolicies(private.template)
    role_arn = policies.names.resolve(reader["Properties"]["Role"])
    interface = f"arn:aws:ec2:{REGION}:{ACCOUNT}:network-interface/eni-0123456789abcdef0"
    configured = f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/{WHERE['subnet_ids'][1]}"
    elsewhere = f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/subnet-0fedcba9876543210"
    for action in ("ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"):
        def asked(subnet: str | None, action: str = action) -> bool:
            context = {"aws:SecureTransport": True, **({"ec2:Subnet": subnet} if subnet else {})}
            return bool(policies.decide(Request(role(role_arn), action, interface, context), "resource"))

        assert asked(configured), action
        assert not asked(elsewhere), action
        assert not asked(None), action  # a request without the key is not allowed either
