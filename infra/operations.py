"""Alarms on the auditor itself, to the alert topic: an auditor that fails silently is the failure this product
exists to prevent. Every failure kind has an alarm or a notification (docs/DEPLOY.md lists them):

- executions failed, timed out or aborted: the state machine's, and its Distributed Map's child executions', which
  emit AWS/States metrics under the labelled ARN `stateMachine:<name>/<label>` and never fail the parent
  (ToleratedFailurePercentage 100); an EventBridge rule on every such execution status notifies the topic at once;
- per Lambda: AWS/Lambda Errors (a timeout or out-of-memory kill flushes no EMF) and Duration p99 near its timeout;
- a step raised (StepErrors), Logs Insights throttling left queries unrun, events EventBridge could not deliver;
- a cluster's audit that did not finish (AuditsFailed, recorded by RecordFailure) and no completed audit of the
  whole fleet in 2 hours: neither depends on a configured cluster list, so discovered clusters are covered; per
  configured cluster also its own audit age."""

from __future__ import annotations

import jsii
from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.interfaces import aws_events as events_refs
from constructs import Construct

from infra.config import DeployConfig
from infra.workflow import CLUSTER_MAP_LABEL

NAMESPACE = "gpuaudit"  # handlers/observability.py
SERVICE = "gpuaudit"
AUDIT_AGE = Duration.hours(2)  # two missed hourly audits
NEAR_TIMEOUT = 0.9  # Duration p99 above this share of a function's timeout: the next slow run is killed
EXECUTION_FAILURES = ["FAILED", "TIMED_OUT", "ABORTED"]
# The notification of an execution that ended badly: what, which, when, where; never the account ID (the event's
# ARNs carry it, so none is used) nor the execution's input or cause (account text).
EXECUTION_MESSAGE = ("gpuaudit: an audit execution ended {status} (execution {name}, stopped {time}, region "
                     "{region}). Clusters in it may not have been audited: open the stack's state machine in "
                     "the Step Functions console, find this execution by name and read its failed step.")


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


@jsii.implements(events.IRuleTarget)
class NotifyTopic:
    """An EventBridge target publishing to the alert topic with a readable message, undeliverable events to the
    dead-letter queue. Unlike aws_events_targets.SnsTopic it adds no unconditioned topic-policy grant: the scoped
    grants are allow_service_to_notify's."""

    def __init__(self, topic: sns.ITopic, message: events.RuleTargetInput, dead_letters: sqs.IQueue) -> None:
        self.topic, self.message, self.dead_letters = topic, message, dead_letters

    def bind(self, rule: events_refs.IRuleRef, id: str | None = None) -> events.RuleTargetConfig:  # noqa: A002
        self.dead_letters.add_to_resource_policy(iam.PolicyStatement(
            sid="ExecutionStatusUndelivered", principals=[iam.ServicePrincipal("events.amazonaws.com")],
            actions=["sqs:SendMessage"], resources=[self.dead_letters.queue_arn],
            conditions={"ArnEquals": {"aws:SourceArn": rule.rule_ref.rule_arn}}))
        return events.RuleTargetConfig(
            arn=self.topic.topic_arn, input=self.message,
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(arn=self.dead_letters.queue_arn),
            retry_policy=events.CfnRule.RetryPolicyProperty(maximum_retry_attempts=4,
                                                            maximum_event_age_in_seconds=3600))


class AuditorAlarms(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig, state_machine: sfn.StateMachine,
                 topic: sns.ITopic, key: kms.IKey, dead_letters: sqs.IQueue,
                 functions: dict[str, tuple[lambda_.IFunction, Duration]]) -> None:
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
            ("ExecutionsAborted", state_machine.metric_aborted(period=hour, statistic="Sum"),
             "an audit execution was aborted"),
            ("UndeliveredTriggers", dead_letters.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic="Maximum"),
             "EventBridge could not deliver an event (start the state machine, or notify this topic of a failed "
             "execution): events are in the dead-letter queue"),
            ("EventsFailed", cloudwatch.Metric(namespace=NAMESPACE, metric_name="EventsFailed",
                                               dimensions_map={"service": SERVICE}, period=hour, statistic="Sum"),
             "findings the event bus did not accept after every retry (handlers/verdict.py logs the error codes): "
             "rules on the bus missed those changes; the alert and the findings table hold them"),
            ("AuditsFailed", cloudwatch.Metric(namespace=NAMESPACE, metric_name="AuditsFailed",
                                               dimensions_map={"service": SERVICE}, period=hour, statistic="Sum"),
             "a cluster's audit did not finish (Inventory or Verdict failed): the findings table holds it under "
             "FAILED#<cluster>"),
        ]
        # The Distributed Map's child executions (one per cluster) report under the labelled ARN.
        children = f"{state_machine.state_machine_arn}/{CLUSTER_MAP_LABEL}"
        for metric_name, what in (("ExecutionsFailed", "failed"), ("ExecutionsTimedOut", "timed out"),
                                  ("ExecutionsAborted", "was aborted")):
            specs.append((f"Cluster{metric_name}", cloudwatch.Metric(
                namespace="AWS/States", metric_name=metric_name, dimensions_map={"StateMachineArn": children},
                period=hour, statistic="Sum"),
                f"a cluster's audit (a child execution of the {CLUSTER_MAP_LABEL} map) {what}: that cluster was not "
                "audited"))
        for name, (function, timeout) in functions.items():
            specs.append((f"{name}Errors", function.metric_errors(period=hour, statistic="Sum"),
                          f"the {name} function failed (an error, a timeout or an out-of-memory kill)"))
            specs.append((f"{name}NearTimeout", function.metric_duration(period=hour, statistic="p99"),
                          f"the {name} function's p99 duration passed {int(NEAR_TIMEOUT * 100)} % of its "
                          f"{int(timeout.to_seconds())} s timeout"))
        self.alarms: list[cloudwatch.Alarm] = []
        timeouts = {f"{name}NearTimeout": timeout.to_seconds() * 1000 * NEAR_TIMEOUT
                    for name, (_, timeout) in functions.items()}
        for name, metric, what in specs:
            alarm = cloudwatch.Alarm(self, name, metric=metric, threshold=timeouts.get(name, 0), evaluation_periods=1,
                                     alarm_name=f"{self.alarm_prefix}{name}",
                                     comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                                     treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                                     alarm_description=f"gpuaudit: {what}")
            alarm.add_alarm_action(notify)
            self.alarms.append(alarm)
        # The whole fleet, configured or discovered: no audit completed at all in 2 h (nothing runs, or every
        # cluster fails). Missing data breaches: a silent auditor is the failure.
        fleet = cloudwatch.Alarm(
            self, "NoAuditCompleted", alarm_name=f"{self.alarm_prefix}NoAuditCompleted",
            metric=cloudwatch.Metric(namespace=NAMESPACE, metric_name="AuditsCompleted",
                                     dimensions_map={"service": SERVICE}, period=AUDIT_AGE, statistic="Sum"),
            threshold=1, evaluation_periods=1, comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
            alarm_description=f"gpuaudit: no completed audit of any cluster in {AUDIT_AGE.to_hours()} h")
        fleet.add_alarm_action(notify)
        self.alarms.append(fleet)
        self.execution_status = events.Rule(
            self, "ExecutionStatus", description="gpuaudit: an audit execution (or a cluster's child execution) "
                                                 "failed, timed out or was aborted: notify the alert topic",
            event_pattern=events.EventPattern(
                source=["aws.states"], detail_type=["Step Functions Execution Status Change"],
                detail={"status": EXECUTION_FAILURES, "stateMachineArn": events.Match.any_of(
                    events.Match.exact_string(state_machine.state_machine_arn),
                    events.Match.prefix(f"{state_machine.state_machine_arn}/"))}))
        field = events.EventField.from_path
        self.execution_status.add_target(NotifyTopic(topic, events.RuleTargetInput.from_text(EXECUTION_MESSAGE.format(
            status=field("$.detail.status"), name=field("$.detail.name"), time=field("$.time"),
            region=field("$.region"))), dead_letters))
        allow_service_to_notify(topic, key, "events.amazonaws.com", "ExecutionStatusEvents",
                                self.execution_status.rule_arn, key_conditions=False)
        for cluster in config.clusters:
            completed = cloudwatch.Metric(namespace=NAMESPACE, metric_name="AuditsCompleted",
                                          dimensions_map={"cluster": cluster, "service": SERVICE},
                                          period=AUDIT_AGE, statistic="Sum")
            name = f"AuditAge{''.join(c for c in cluster.title() if c.isalnum())}"
            alarm = cloudwatch.Alarm(
                self, name, metric=completed, alarm_name=f"{self.alarm_prefix}{name}",
                threshold=1, evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
                alarm_description=f"gpuaudit: no completed audit of {cluster} in {AUDIT_AGE.to_hours()} h")
            alarm.add_alarm_action(notify)
            self.alarms.append(alarm)
