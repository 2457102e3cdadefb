"""AuditDashboard: one CloudWatch dashboard over the handlers' EMF metrics (handlers/observability.py).

Metric dimensions, as the handlers emit them:
  Nodes           cluster, service, xid_status (verdict.py, one datum per status per audit)
  Verdicts        cluster, service, verdict    (verdict.py)
  VisibilityGaps  cluster, service       (verdict.py)
  AlertsPublished cluster, service       (verdict.py)
  StepErrors      service                (runtime.reported_failures, every handler)
Per-cluster graphs use SEARCH expressions, so every xid_status and verdict appears without being
listed here, and discovered clusters (`discover: true`) appear without a redeploy. Powertools adds the
`service` dimension to every metric when POWERTOOLS_SERVICE_NAME is set (the stack sets it), single metrics
included, so every schema names it (tests/deployed/test_deployed_iam.py checks this against what the handlers emit).
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import DeployConfig

NAMESPACE = "gpuaudit"  # handlers/observability.py NAMESPACE
SERVICE = "gpuaudit"  # handlers/observability.py SERVICE
PERIOD = Duration.hours(1)  # the schedule's cadence: one coverage audit per cluster per hour
WIDTH, HEIGHT = 12, 6


def search(schema: str, metric: str, statistic: str, label: str,
           cluster: str | None = None) -> cloudwatch.MathExpression:
    """SEARCH over the namespace's `schema` dimensions: one line per dimension value found."""
    where = f' cluster="{cluster}"' if cluster else ""
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{{{NAMESPACE},{schema}}} MetricName=\"{metric}\"{where}', '{statistic}', "
                   f"{int(PERIOD.to_seconds())})",
        using_metrics={}, label=label, period=PERIOD)


class AuditDashboard(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig,
                 state_machine: sfn.StateMachine) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        # Dashboards are global to the account: the region keeps two regional deployments apart.
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"{stack.stack_name}-{stack.region}",
                                              start="-P7D", period_override=cloudwatch.PeriodOverride.INHERIT)
        nodes = [self._graph(f"Nodes by xid_status: {name}",
                             search("cluster,service,xid_status", "Nodes", "Average", "", cluster=name), stacked=True)
                 for name in config.clusters]
        if config.discover or not nodes:
            nodes.append(self._graph("Nodes by xid_status: every cluster (cluster, service, xid_status)",
                                     search("cluster,service,xid_status", "Nodes", "Average", "")))
        self.dashboard.add_widgets(*nodes)
        self.dashboard.add_widgets(
            self._graph("Verdicts per audit (cluster, service, verdict)",
                        search("cluster,service,verdict", "Verdicts", "Average", "")),
            cloudwatch.GraphWidget(
                title="Audit duration (state machine ExecutionTime)", width=WIDTH, height=HEIGHT,
                left=[state_machine.metric_time(statistic="Average", period=PERIOD, label="average"),
                      state_machine.metric_time(statistic="Maximum", period=PERIOD, label="maximum")]),
        )
        self.dashboard.add_widgets(
            self._graph("Visibility gaps per audit (cluster)",
                        search("cluster,service", "VisibilityGaps", "Maximum", "")),
            cloudwatch.GraphWidget(
                title="Step errors and alerts published", width=WIDTH, height=HEIGHT,
                left=[cloudwatch.Metric(namespace=NAMESPACE, metric_name="StepErrors",
                                        dimensions_map={"service": SERVICE}, statistic="Sum", period=PERIOD,
                                        label="step errors (every handler)")],
                right=[search("cluster,service", "AlertsPublished", "Sum", "")]),
        )

    @staticmethod
    def _graph(title: str, expression: cloudwatch.MathExpression, stacked: bool = False) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(title=title, width=WIDTH, height=HEIGHT, left=[expression], stacked=stacked)
