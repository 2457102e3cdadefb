"""The optional MCP endpoint (issue #38; cdk.json `gpuaudit.mcp_endpoint`): one Lambda serving the MCP server over
Streamable HTTP behind a Function URL with AWS_IAM auth, and the role an agent assumes to call it.

The URL is BUFFERED: Lambda's Python runtime cannot stream a response, so the server answers each POST with one
JSON response (stateless; gpuaudit/agent/http.py). The function's role reads the findings table (Query, GetItem) and the
results (GetObject; ListBucket on that prefix so a missing result is a 404, not a 403), and may start an execution of
the stack's state machine: its only non-read action, on that state machine alone. With discovery on, it also holds
the Plan's discovery reads to list the clusters in scope.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra import permissions
from infra.config import DeployConfig
from infra.findings import RESULTS_PREFIX, FindingsStore
from infra.functions import AuditFunctions, Spec, read_statements
from infra.nag import acknowledge_wildcards, default_policy

NAME = "McpEndpoint"
SPEC = Spec("mcp_endpoint", 512, Duration.seconds(60), "gpuaudit: MCP endpoint for agents (Streamable HTTP, read-only)")


class McpEndpoint(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig, functions: AuditFunctions,
                 store: FindingsStore, state_machine: sfn.IStateMachine) -> None:
        super().__init__(scope, construct_id)
        assert config.mcp_endpoint is not None
        statements = [
            # Query: latest state and history spans; GetItem: a cluster's history snapshot head (writes/history.py)
            iam.PolicyStatement(sid="FindingsRead", actions=["dynamodb:GetItem", "dynamodb:Query"],
                                resources=[store.table.table_arn]),
            iam.PolicyStatement(sid="ResultsRead", actions=["s3:GetObject"],
                                resources=[store.bucket.arn_for_objects(f"{RESULTS_PREFIX}*")]),
            iam.PolicyStatement(sid="ResultsMisses", actions=["s3:ListBucket"], resources=[store.bucket.bucket_arn],
                                conditions={"StringLike": {"s3:prefix": [f"{RESULTS_PREFIX}*"]}}),
            # ListExecutions: the on-demand audits already started this hour (one per request, a quota an hour)
            iam.PolicyStatement(sid="OnDemandAudits", actions=["states:StartExecution", "states:ListExecutions"],
                                resources=[state_machine.state_machine_arn]),
        ]
        self.function = functions.add_function(NAME, SPEC, statements,
                                               {"FINDINGS_TABLE": store.table.table_name,
                                                "STATE_MACHINE_ARN": state_machine.state_machine_arn})
        role = functions.roles[NAME]
        acknowledge_wildcards(default_policy(role), {
            "Resource::*": f"{NAME}: X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) take no resource; IAM "
                           "requires Resource '*'.",
            f"/{RESULTS_PREFIX}*": f"{NAME}: reads audit results in the evidence bucket, keyed by cluster and audit "
                                   "ID (named by the caller), so only the prefix can be named.",
        })
        if config.discover:
            discovery = iam.Policy(self, "DiscoveryReads", roles=[role],
                                   statements=read_statements(Stack.of(self), permissions.PLAN_READS))
            acknowledge_wildcards(discovery, permissions.READ_REASONS)
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM,
                                                  invoke_mode=lambda_.InvokeMode.BUFFERED)
        # The agent's way in: a role its principal assumes, allowed to call this URL and nothing else. Since October
        # 2025 a function URL needs both actions; the conditions keep InvokeFunction to calls through the URL.
        self.agent_role = iam.Role(self, "AgentRole", assumed_by=iam.ArnPrincipal(config.mcp_endpoint.agent_principal),
                                   max_session_duration=Duration.hours(1),
                                   description="gpuaudit: an agent's role to call the MCP endpoint (SigV4)")
        self.agent_role.add_to_policy(iam.PolicyStatement(
            sid="InvokeMcpUrl", actions=["lambda:InvokeFunctionUrl"], resources=[self.function.function_arn],
            conditions={"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}}))
        self.agent_role.add_to_policy(iam.PolicyStatement(
            sid="InvokeMcpThroughUrl", actions=["lambda:InvokeFunction"], resources=[self.function.function_arn],
            conditions={"Bool": {"lambda:InvokedViaFunctionUrl": "true"}}))
