"""Alarms on the auditor itself, to the alert topic: an auditor that fails silently is the failure this product
exists to prevent. Executions failed or timed out, any step error, Logs Insights throttling that left queries
unrun, events the triggers could not deliver (their dead-letter queue), and per configured cluster: no
completed audit in 2 hours."""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import DeployConfig

NAMESPACE = "gpuaudit"  # handlers/observability.py
SERVICE = "gpuaudit"
AUDIT_AGE = Duration.hours(2)  # two missed hourly audits


def allow_service_to_notify(topic: sns.ITopic, key: kms.IKey, service: str, sid: str, source_arn: str,
                            key_conditions: bool = True) -> None:
    """What an AWS service needs to publish to the KMS-encrypted alert topic (SNS Developer Guide, "Enable
    compatibility between event sources from AWS services and encrypted topics"): sns:Publish in the topic policy
    (the topic's only other statement is enforce_ssl's Deny) and kms:GenerateDataKey* + kms:Decrypt in the key
    policy (which otherwise enables only this account's IAM policies, and a service principal has none). Both are
    scoped to this account and to the publishing resources (aws:SourceAccount, aws:SourceArn: confused deputy),
    except the key grant to EventBridge when `key_conditions` is False: SNS does not support those keys in a KMS
    policy for EventBridge-to-encrypted-topic delivery, and with them every notification would be dropped."""
    account = Stack.of(topic).account
    conditions = {"StringEquals": {"aws:SourceAccount": account}, "ArnLike": {"aws:SourceArn": source_arn}}
    principal = iam.ServicePrincipal(service)
    topic.add_to_resource_policy(iam.PolicyStatement(sid=f"{sid}Publish", principals=[principal],
                                                     actions=["sns:Publish"], resources=[topic.topic_arn],
                                                     conditions=conditions))
    key.add_to_resource_policy(iam.PolicyStatement(sid=f"{sid}UseKey", principals=[principal],
                                                   actions=["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"],
                                                   conditions=conditions if key_conditions else None))


class AuditorAlarms(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig, state_machine: sfn.StateMachine,
                 topic: sns.ITopic, key: kms.IKey, dead_letters: sqs.IQueue) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        # Named after the stack, so the topic and key policies can name exactly this stack's alarms: a key policy
        # cannot name the alarms' ARNs themselves (the key would then depend on the alarms, which depend on it).
        self.alarm_prefix = f"{stack.stack_name}-"
        allow_service_to_notify(topic, key, "cloudwatch.amazonaws.com", "CloudWatchAlarms", stack.format_arn(
            service="cloudwatch", resource="alarm", resource_name=f"{self.alarm_prefix}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME))
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
                                     alarm_name=f"{self.alarm_prefix}{name}",
                                     comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                                     treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                                     alarm_description=f"gpuaudit: {what}")
            alarm.add_alarm_action(notify)
            self.alarms.append(alarm)
        for cluster in config.clusters:
            completed = cloudwatch.Metric(namespace=NAMESPACE, metric_name="AuditsCompleted",
                                          dimensions_map={"cluster": cluster, "service": SERVICE},
                                          period=AUDIT_AGE, statistic="Sum")
            name = f"AuditAge{''.join(c for c in cluster.title() if c.isalnum())}"
            alarm = cloudwatch.Alarm(
                self, name, metric=completed, alarm_name=f"{self.alarm_prefix}{name}",
                threshold=1, evaluation_periods=1, comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
                alarm_description=f"gpuaudit: no completed audit of {cluster} in {AUDIT_AGE.to_hours()} h")
            alarm.add_alarm_action(notify)
            self.alarms.append(alarm)
