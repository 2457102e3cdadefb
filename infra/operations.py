"""Alarms on the auditor itself, to the alert topic: an auditor that fails silently is the failure this product
exists to prevent. Executions failed or timed out, any step error, Logs Insights throttling that left queries
unrun, events the triggers could not deliver (their dead-letter queue), and per configured cluster: no
completed audit in 2 hours."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import DeployConfig

NAMESPACE = "gpuaudit"  # handlers/observability.py
SERVICE = "gpuaudit"
AUDIT_AGE = Duration.hours(2)  # two missed hourly audits


class AuditorAlarms(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig, state_machine: sfn.StateMachine,
                 topic: sns.ITopic, dead_letters: sqs.IQueue) -> None:
        super().__init__(scope, construct_id)
        notify = actions.SnsAction(topic)
        hour = Duration.hours(1)
        specs: list[tuple[str, cloudwatch.IMetric, str]] = [
            ("ExecutionsFailed", state_machine.metric_failed(period=hour, statistic="Sum"),
             "an audit execution failed: clusters of that run were not audited"),
            ("ExecutionsTimedOut", state_machine.metric_timed_out(period=hour, statistic="Sum"),
             "an audit execution timed out"),
            ("StepErrors", cloudwatch.Metric(namespace=NAMESPACE, metric_name="StepErrors",
                                             dimensions_map={"service": SERVICE}, period=hour, statistic="Sum"),
             "a step of the audit raised: its result carries a Not checked gap"),
            ("ThrottledQueries", cloudwatch.Metric(namespace=NAMESPACE, metric_name="ThrottledQueries",
                                                   dimensions_map={"service": SERVICE}, period=hour, statistic="Sum"),
             "Logs Insights throttled queries past every retry: raise the concurrent-query quota or lower "
             "logs_insights_concurrent_queries"),
            ("UndeliveredTriggers", dead_letters.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic="Maximum"),
             "EventBridge could not start the state machine: events are in the dead-letter queue"),
        ]
        self.alarms: list[cloudwatch.Alarm] = []
        for name, metric, what in specs:
            alarm = cloudwatch.Alarm(self, name, metric=metric, threshold=0, evaluation_periods=1,
                                     comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                                     treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                                     alarm_description=f"gpuaudit: {what}")
            alarm.add_alarm_action(notify)
            self.alarms.append(alarm)
        for cluster in config.clusters:
            completed = cloudwatch.Metric(namespace=NAMESPACE, metric_name="AuditsCompleted",
                                          dimensions_map={"cluster": cluster, "service": SERVICE},
                                          period=AUDIT_AGE, statistic="Sum")
            alarm = cloudwatch.Alarm(
                self, f"AuditAge{''.join(c for c in cluster.title() if c.isalnum())}", metric=completed,
                threshold=1, evaluation_periods=1, comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
                alarm_description=f"gpuaudit: no completed audit of {cluster} in {AUDIT_AGE.to_hours()} h")
            alarm.add_alarm_action(notify)
            self.alarms.append(alarm)
