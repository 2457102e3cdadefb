"""The deployed MCP endpoint (issue #38) against what the deployed audit wrote: the synthesized state machine runs a
console audit in moto, then the Lambda handler answers Function URL events (the MCP client's JSON-RPC POSTs) for each
tool, and every AWS call it makes is evaluated against the synthesized role of the MCP function (as
tests/deployed/test_deployed_iam.py does for the audit's functions). start_audit's execution is run to its end."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.types import Tool

sys.path[:0] = [str(Path(__file__).parents[1] / "handlers"), str(Path(__file__).parents[1] / "infra")]

from cdk_synth import TEST_CONFIG, Synthesized, synthesize  # noqa: E402
from handlers import mcp_endpoint  # noqa: E402
from lambda_harness import BUCKET, TABLE, TOPIC  # noqa: E402
from stack_edges import StackPolicies, without_statements  # noqa: E402
from test_deployed_iam import Recorder, denied_calls  # noqa: E402
from test_state_machine import audits, deployed  # noqa: E402

from tests.agent.test_mcp_server import check_tool_listing  # noqa: E402

AGENT = "arn:aws:iam::111122223333:role/devops-agent"
HOST = "abcdefghijklmnopqrstuvwxyz012345.lambda-url.us-west-2.on.aws"
CONSOLE = {"cluster": "research-hp-slurm", "mode": "incident", "since": "2026-10-01T16:00:00Z"}


@pytest.fixture(scope="module")
def synth() -> Synthesized:
    return synthesize()


@pytest.fixture(scope="module")
def mcp_synth() -> Synthesized:
    return synthesize(config={**TEST_CONFIG, "mcp_endpoint": {"agent_principal": AGENT}})


class StatesRecorder(Recorder):
    def resources(self, service: str, operation: str, p: dict[str, Any]) -> list[str]:
        if service == "states" and "stateMachineArn" in p:
            return [p["stateMachineArn"]]
        return super().resources(service, operation, p)


def url_event(body: Any, method: str = "POST") -> dict[str, Any]:
    """A Function URL request (payload format 2.0) as Lambda delivers it after SigV4 auth."""
    return {"version": "2.0", "rawPath": "/mcp", "rawQueryString": "", "isBase64Encoded": False,
            "headers": {"host": HOST, "content-type": "application/json",
                        "accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"},
            "requestContext": {"domainName": HOST, "http": {"method": method, "path": "/mcp", "sourceIp": "10.0.0.1"},
                               "authorizer": {"iam": {"userArn": "arn:aws:sts::123456789012:assumed-role/x/agent"}}},
            "body": json.dumps(body) if body is not None else ""}


def call(tool: str, arguments: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    answer = mcp_endpoint.handler(url_event({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                             "params": {"name": tool, "arguments": arguments}}), None)  # type: ignore[arg-type]
    assert answer["statusCode"] == 200, answer
    result: dict[str, Any] = json.loads(answer["body"])["result"]
    return result


def test_every_tool_over_the_function_url_and_each_call_is_allowed_by_the_synthesized_role(
        synth: Synthesized, mcp_synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    with deployed(synth, monkeypatch) as machine:
        (audit,) = audits(machine.run(CONSOLE))
        account = machine.account.topic_arn.split(":")[4]
        rec = StatesRecorder(region=machine.account.world.region, account=account)

        def recording() -> Any:
            session = machine.account.backend.session()
            session.events.register("provide-client-params", rec.on_params)
            session.events.register("after-call", rec.on_after_call)
            return session

        monkeypatch.setattr(mcp_endpoint, "session_factory", recording)
        monkeypatch.setattr(mcp_endpoint, "clock", lambda: machine.account.world.now)
        monkeypatch.setenv("STATE_MACHINE_ARN", machine.arn)
        mcp_endpoint.server.cache_clear()
        rec.current = "McpEndpoint"

        init = mcp_endpoint.handler(url_event({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}), None)  # type: ignore[arg-type]
        assert init["statusCode"] == 200 and json.loads(init["body"])["result"]["serverInfo"]["name"] == "gpuaudit"
        listed = json.loads(mcp_endpoint.handler(url_event({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                                                 None)["body"])["result"]["tools"]  # type: ignore[arg-type]
        assert {t["name"] for t in listed} == {"start_audit", "audit_summary", "audit_nodes", "list_clusters",
                                               "latest_findings", "node_history", "explain", "list_audits"}
        check_tool_listing([Tool.model_validate(t) for t in listed])  # names with a prefix ≤ 64, valid schemas

        cluster, audit_id = "research-hp-slurm", audit["audit_id"]
        summary = call("audit_summary", {"cluster": cluster, "audit_id": audit_id})["structuredContent"]
        assert summary["audit_id"] == audit_id and summary["result_location"] == \
            f"s3://{BUCKET}/results/{cluster}/{audit_id}.json"
        page = call("audit_nodes", {"cluster": cluster, "audit_id": audit_id, "limit": 1})["structuredContent"]
        assert page["total"] == summary["nodes_total"] and len(page["nodes"]) == 1
        # issue #49 item 8: the bucket's audits of the cluster, and audit_id omitted reads the latest of them
        stored = call("list_audits", {"cluster": cluster})["structuredContent"]
        assert [a["audit_id"] for a in stored["audits"]] == [audit_id]
        assert call("audit_summary", {"cluster": cluster})["structuredContent"]["audit_id"] == audit_id
        latest = call("latest_findings", {"cluster": cluster, "mode": "incident"})["structuredContent"]
        assert latest["source"] == f"dynamodb {TABLE}" and latest["nodes"][0]["audit_id"] == audit_id
        node = latest["nodes"][0]["instance_id"]
        assert call("node_history", {"cluster": cluster, "node": node})["structuredContent"]["spans"]
        clusters = call("list_clusters", {})["structuredContent"]
        assert clusters["clusters"] == [{"name": cluster, "kind": "configured"}]
        assert call("explain", {"term": "REBOOT"})["structuredContent"]["entries"][0]["term"] == "REBOOT"
        missing = call("audit_summary", {"cluster": cluster, "audit_id": "0" * 24})
        assert missing["isError"] and "no result of audit" in missing["content"][0]["text"]
        outside = call("start_audit", {"cluster": "someone-elses-cluster", "last": "2h"})
        assert outside["isError"] and "not audited by this deployment" in outside["content"][0]["text"]
        started = call("start_audit", {"cluster": cluster, "mode": "coverage", "last": "2h"})["structuredContent"]
        deadline = time.monotonic() + 120
        while (run := machine.client.describe_execution(executionArn=started["execution_arn"]))["status"] == "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert run["status"] == "SUCCEEDED" and json.loads(run["input"]) == {"cluster": cluster, "mode": "coverage",
                                                                             "last": "2h"}, run
        mine = [c for c in rec.calls if c.function == "McpEndpoint"]

    (machine_id,) = mcp_synth.resources("AWS::StepFunctions::StateMachine")
    physical = {machine_id: "gpuaudit"}
    for kind, name in (("AWS::S3::Bucket", BUCKET), ("AWS::DynamoDB::Table", TABLE), ("AWS::SNS::Topic", TOPIC)):
        (logical_id,) = mcp_synth.resources(kind)
        physical[logical_id] = name
    (function,) = [f for f in mcp_synth.resources("AWS::Lambda::Function").values()
                   if f["Properties"]["Handler"] == "handlers.mcp_endpoint.handler"]

    def check(template: dict[str, Any]) -> list[str]:
        policies = StackPolicies(template, physical=physical, region=rec.region, account=account)
        return denied_calls(mine, policies, {"McpEndpoint": policies.names.resolve(function["Properties"]["Role"])})

    assert {c.action for c in mine} == {"dynamodb:GetItem", "dynamodb:Query", "s3:GetObject", "states:StartExecution",
                                        "states:ListExecutions", "s3:ListBucket"}
    assert check(mcp_synth.template) == []
    # the check can fail: without the grant that scopes StartExecution to the state machine, that call is denied
    assert any("states:StartExecution" in p for p in check(without_statements(mcp_synth.template, {"OnDemandAudits"})))
    assert any("s3:ListBucket" in p for p in check(without_statements(mcp_synth.template, {"ResultsMisses"})))
