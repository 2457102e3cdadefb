"""The optional MCP endpoint (issue #38): off by default; when configured, one function behind an AWS_IAM Function URL,
a role holding only its reads and StartExecution of the stack's state machine, and an agent role that may call that
URL and nothing else. cdk-nag runs in the synth (an unacknowledged finding fails it)."""

from __future__ import annotations

from typing import Any

import pytest
from cdk_synth import TEST_CONFIG, Synthesized, synthesize
from policy_eval import Request, role
from stack_edges import StackPolicies, denied_edges, without_statements

from infra.config import BadConfig, load_config

AGENT = "arn:aws:iam::111122223333:role/devops-agent"
MCP_CONFIG = {**TEST_CONFIG, "mcp_endpoint": {"agent_principal": AGENT}}


@pytest.fixture(scope="module")
def mcp() -> Synthesized:
    return synthesize(config=MCP_CONFIG)


def _function(s: Synthesized) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, f) for k, f in s.resources("AWS::Lambda::Function").items()
                if f["Properties"]["Handler"] == "handlers.mcp_endpoint.handler"]
    return found


def _statements(s: Synthesized, role_id: str) -> dict[str, dict[str, Any]]:
    """Sid -> statement of every policy attached to the role."""
    out = {}
    for policy in s.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            out.update({st.get("Sid",
                               str(st["Action"])): st for st in policy["Properties"]["PolicyDocument"]["Statement"]})
    return out


def test_off_by_default(synth: Synthesized) -> None:
    assert not synth.resources("AWS::Lambda::Url")
    assert not [f for f in synth.resources("AWS::Lambda::Function").values()
                if f["Properties"]["Handler"] == "handlers.mcp_endpoint.handler"]
    assert "McpEndpointUrl" not in synth.template.get("Outputs", {})


def test_one_function_behind_an_aws_iam_url_buffered(mcp: Synthesized) -> None:
    logical_id, function = _function(mcp)
    (url,) = mcp.resources("AWS::Lambda::Url").values()
    assert url["Properties"]["AuthType"] == "AWS_IAM"
    assert url["Properties"]["InvokeMode"] == "BUFFERED"  # Python cannot stream a response: JSON answers
    assert url["Properties"]["TargetFunctionArn"] == {"Fn::GetAtt": [logical_id, "Arn"]}
    env = function["Properties"]["Environment"]["Variables"]
    assert {"FINDINGS_TABLE", "EVIDENCE_BUCKET", "STATE_MACHINE_ARN", "GPUAUDIT_DEPLOYMENT"} <= set(env)
    (machine_id,) = mcp.resources("AWS::StepFunctions::StateMachine")
    assert env["STATE_MACHINE_ARN"] == {"Ref": machine_id}
    assert {"McpEndpointUrl", "McpAgentRoleArn"} <= set(mcp.template["Outputs"])


def test_the_functions_role_reads_and_starts_only_the_stacks_state_machine(mcp: Synthesized) -> None:
    _, function = _function(mcp)
    statements = _statements(mcp, function["Properties"]["Role"]["Fn::GetAtt"][0])
    actions = {a for st in statements.values()
               for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
    assert actions == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "dynamodb:GetItem",
        "dynamodb:Query",
        "s3:GetObject",
        "s3:ListBucket",
        "states:StartExecution",
        "states:ListExecutions",
    }  # ListExecutions: this hour's on-demand audits
    (machine_id,) = mcp.resources("AWS::StepFunctions::StateMachine")
    assert statements["OnDemandAudits"]["Resource"] == {"Ref": machine_id}
    assert statements["ResultsMisses"]["Condition"] == {"StringLike": {"s3:prefix": ["results/*"]}}
    assert all(st["Effect"] == "Allow" for st in statements.values())


def test_the_agent_role_is_assumed_by_the_named_principal_and_may_only_call_the_url(mcp: Synthesized) -> None:
    logical_id, _ = _function(mcp)
    (role_id,) = [k for k, r in mcp.resources("AWS::IAM::Role").items()
                  if "devops-agent" in str(r["Properties"]["AssumeRolePolicyDocument"])]
    trust = mcp.resources("AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [(s["Action"], s["Principal"]) for s in trust] == [("sts:AssumeRole", {"AWS": AGENT})]
    statements = _statements(mcp, role_id)
    target = {"Fn::GetAtt": [logical_id, "Arn"]}
    assert statements == {
        "InvokeMcpUrl": {"Action": "lambda:InvokeFunctionUrl", "Effect": "Allow", "Resource": target,
                         "Sid": "InvokeMcpUrl",
                         "Condition": {"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}}},
        "InvokeMcpThroughUrl": {"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": target,
                                "Sid": "InvokeMcpThroughUrl",
                                "Condition": {"Bool": {"lambda:InvokedViaFunctionUrl": "true"}}}}


def test_cdk_nag_is_clean_with_the_endpoint(mcp: Synthesized) -> None:
    (report,) = [r for r in mcp.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert report["conclusion"] == "success" and report["violations"] == []
    mine = [s for s in report["suppressedViolations"]
            if any("/Mcp" in c["constructPath"] or "McpEndpoint" in c["constructPath"]
                   for c in s["violatingConstructs"])]
    assert mine and all(len(s["reason"]) > 60 for s in mine)


@pytest.mark.parametrize("principal", ["devops-agent", "arn:aws:iam::123:role/x", "arn:aws:s3:::bucket"])
def test_a_malformed_agent_principal_is_refused_naming_the_field(principal: str) -> None:
    with pytest.raises(BadConfig, match="mcp_endpoint.agent_principal"):
        load_config({"gpuaudit": {**TEST_CONFIG, "mcp_endpoint": {"agent_principal": principal}}})


def test_every_edge_of_the_stack_with_the_endpoint_is_allowed(mcp: Synthesized) -> None:
    """stack_edges reads the MCP function like the others: its role's trust, its log group, its table and bucket."""
    assert denied_edges(mcp.template) == []
    assert denied_edges(without_statements(mcp.template, {"FindingsRead"})), "the edge check cannot fail"


@pytest.mark.parametrize(("action", "context", "allowed"), [
    ("lambda:InvokeFunctionUrl", {"lambda:FunctionUrlAuthType": "AWS_IAM"}, True),
    ("lambda:InvokeFunctionUrl", {"lambda:FunctionUrlAuthType": "NONE"}, False),
    ("lambda:InvokeFunction", {"lambda:InvokedViaFunctionUrl": True}, True),
    ("lambda:InvokeFunction", {}, False),  # a direct Invoke, around the URL
    ("lambda:GetFunctionUrlConfig", {}, False),
])
def test_the_agent_may_assume_its_role_and_only_call_the_url(mcp: Synthesized, action: str, context: dict[str, Any],
                                                              allowed: bool) -> None:
    policies = StackPolicies(mcp.template)
    logical_id, _ = _function(mcp)
    (role_id,) = [k for k, r in mcp.resources("AWS::IAM::Role").items()
                  if AGENT in str(r["Properties"]["AssumeRolePolicyDocument"])]
    agent_role = policies.names.arn(role_id)
    assert policies.decide(Request(role(AGENT), "sts:AssumeRole", agent_role, {}), "trust")
    assert not policies.decide(Request(role("arn:aws:iam::444455556666:role/other"), "sts:AssumeRole", agent_role, {}),
                               "trust")
    target = policies.names.arn(logical_id)
    assert bool(policies.decide(Request(role(agent_role), action, target, {"aws:SecureTransport": True, **context}),
                                "resource")) is allowed


def test_the_endpoint_is_alarmed_like_every_function(mcp: Synthesized) -> None:
    logical_id, _ = _function(mcp)
    watched = {a["Properties"]["MetricName"] for a in mcp.resources("AWS::CloudWatch::Alarm").values()
               if {"Name": "FunctionName", "Value": {"Ref": logical_id}} in a["Properties"].get("Dimensions", [])}
    assert watched == {"Errors", "Duration"}
