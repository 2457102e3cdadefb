"""The one stack: findings store, functions, state machine, triggers, dashboard."""

from __future__ import annotations

from aws_cdk import CfnOutput, CfnResource, Fn, Stack
from constructs import Construct

from infra.config import BadConfig, DeployConfig
from infra.dashboard import AuditDashboard
from infra.findings import FindingsStore
from infra.functions import AuditFunctions
from infra.mcp_endpoint import NAME as MCP_NAME
from infra.mcp_endpoint import SPEC as MCP_SPEC
from infra.mcp_endpoint import McpEndpoint
from infra.operations import AuditorAlarms
from infra.triggers import AuditTriggers
from infra.workflow import AuditWorkflow
from infra.xid_watch import XidWatch

# "Resources per stack: 500" (CloudFormation quotas). Configured clusters (an audit-age alarm each) and EKS access
# entries (three each) are what grows with the configuration.
MAX_STACK_RESOURCES = 500


class GpuAuditStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: DeployConfig, bundle: bool,
                 **kwargs: object) -> None:
        super().__init__(scope, construct_id, description="gpuaudit: read-only auditor of GPU training clusters",
                         **kwargs)  # type: ignore[arg-type]
        self.store = FindingsStore(self, "Findings", config)
        self.functions = AuditFunctions(self, "Functions", config, self.store, bundle)
        self.workflow = AuditWorkflow(self, "Workflow", config, self.functions, self.store.map_results,
                                      self.store.table)
        self.triggers = AuditTriggers(self, "Triggers", config, self.workflow.state_machine)
        # Opt-in (issue #51): nothing of it is synthesized unless `xid_watch` is set.
        self.xid_watch = XidWatch(self, "XidWatch", config, self.triggers.start) \
            if config.xid_watch is not None else None
        self.dashboard = AuditDashboard(self, "Dashboard", config, self.workflow.state_machine)
        timed = self.functions.timed_functions()
        self.mcp: McpEndpoint | None = None
        if config.mcp_endpoint is not None:  # its function is alarmed like the others (errors, near its timeout)
            self.mcp = McpEndpoint(self, "Mcp", config, self.functions, self.store, self.workflow.state_machine)
            timed[MCP_NAME] = (self.mcp.function, MCP_SPEC.timeout)
        self.alarms = AuditorAlarms(self, "Alarms", config, self.workflow.state_machine, self.store.topic,
                                    self.store.alert_key, self.triggers.dead_letters, timed)
        CfnOutput(self, "StateMachineArn", value=self.workflow.state_machine.state_machine_arn,
                  description="Start an on-demand audit here (Step Functions console, Start execution)")
        CfnOutput(self, "CollectorRoleArns", value=Fn.join(",", [self.functions.roles[n].role_arn for n in (
            "Inventory", "CollectLogs", "Finish")]), description="The roles that read member accounts: pass as "
                  "AuditorRoleArns when deploying the read-only role there (docs/DEPLOY.md)")
        CfnOutput(self, "FindingsTableName", value=self.store.table.table_name)
        CfnOutput(self, "AlertTopicArn", value=self.store.topic.topic_arn)
        CfnOutput(self, "EvidenceBucketName", value=self.store.bucket.bucket_name,
                  description="results/<cluster>/<audit_id>.json, .md and .html; payloads/ expire after days")
        if self.mcp is not None:
            CfnOutput(self, "McpEndpointUrl", value=self.mcp.url.url + "mcp",
                      description="The MCP endpoint (Streamable HTTP, SigV4: service lambda); docs/DEPLOY.md")
            CfnOutput(self, "McpAgentRoleArn", value=self.mcp.agent_role.role_arn,
                      description="The role the configured agent principal assumes to call the MCP endpoint")
        CfnOutput(self, "DashboardName", value=self.dashboard.dashboard.dashboard_name,
                  description="CloudWatch dashboard: nodes by xid_status, verdicts, duration, gaps, errors, alerts")
        self._within_resource_quota(config)

    def _within_resource_quota(self, config: DeployConfig) -> None:
        """Past CloudFormation's resources per stack the deploy would fail late: a synth error instead, naming the
        limit, what grows with the configuration and what to do."""
        resources = sum(1 for c in self.node.find_all() if CfnResource.is_cfn_resource(c))
        if resources > MAX_STACK_RESOURCES:
            raise BadConfig(
                f"`clusters`: this configuration needs {resources} CloudFormation resources, past the "
                f"{MAX_STACK_RESOURCES} one stack may hold ({len(config.clusters)} configured clusters add an "
                f"audit-age alarm each, {len(config.eks_access_entries)} EKS access entries three each): audit "
                "the fleet with `discover: true` (optionally with `discovery_tag`), whose alarms are fleet-wide "
                "and do not grow with it, or split `clusters` across two deployments (two stack names)")
