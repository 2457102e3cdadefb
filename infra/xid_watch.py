"""The opt-in Xid watch (issue #51): a fatal Xid line starts an incident audit of its cluster within minutes.

Per watched log group one CloudWatch Logs metric filter (pattern generated from the Xid catalog data, so a catalog
change changes the watch) counts matching lines into one metric per cluster; one alarm per cluster (1-minute period,
Sum >= 1) changes to ALARM on the first line, and the alarm-state-change event CloudWatch sends to EventBridge starts
the state machine through the same target as every other trigger. Plan maps the alarm back to its cluster
(handlers/targets.py) and coalesces it with node events and Capacity Block warnings (handlers/coalesce.py).
Why metric filter + alarm and not a subscription filter: docs/decisions.md.

Only log groups the configuration names get a filter; the stack creates nothing on any other group, and the
filter is the stack's own resource (deleted with it or when `xid_watch` is turned off).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpuaudit.settings import XID_WATCH_ALARM_INFIX
from infra.config import DeployConfig
from infra.xid_watch_pattern import ALARM_PERIOD_S, NAMESPACE, alarm_name, filter_pattern, metric_name


class XidWatch(Construct):
    """Metric filters on the configured groups, an alarm per watched cluster, one rule from the alarms to Plan."""

    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig,
                 start: events.IRuleTarget) -> None:
        super().__init__(scope, construct_id)
        watched: Mapping[str, list[str]] = config.xid_watch_groups
        pattern = filter_pattern(config.xid_class_overrides)
        stack_name = Stack.of(self).stack_name
        self.filters: list[logs.CfnMetricFilter] = []
        self.alarms: list[cloudwatch.CfnAlarm] = []
        for index, (cluster, groups) in enumerate(sorted(watched.items())):
            for number, group in enumerate(groups):
                # The logical ID is stable per (cluster, position); the group's name is in the filter's properties
                # and CloudFormation's error (LimitExceeded on a group with no free slot) names this resource.
                self.filters.append(logs.CfnMetricFilter(
                    self, f"Filter{index}x{number}", log_group_name=group, filter_pattern=pattern,
                    filter_name=f"{stack_name}-xid-watch-{cluster}"[:512],
                    metric_transformations=[logs.CfnMetricFilter.MetricTransformationProperty(
                        metric_namespace=NAMESPACE, metric_name=metric_name(cluster), metric_value="1",
                        default_value=None, unit="Count")]))
            self.alarms.append(cloudwatch.CfnAlarm(
                self, f"Alarm{index}", alarm_name=alarm_name(stack_name, cluster),
                alarm_description=f"gpuaudit: a hardware-class or unverified Xid line in {cluster}'s watched log "
                                  "groups: starts an incident audit (no action of its own; EventBridge rule)",
                namespace=NAMESPACE, metric_name=metric_name(cluster), statistic="Sum", period=ALARM_PERIOD_S,
                evaluation_periods=1, datapoints_to_alarm=1, threshold=1,
                comparison_operator="GreaterThanOrEqualToThreshold", treat_missing_data="notBreaching"))
        # The state change to ALARM is the trigger: one per burst (the alarm stays in ALARM while lines keep coming).
        self.rule = events.Rule(
            self, "AlarmToAudit", targets=[start],
            description="gpuaudit: incident audit of a cluster whose Xid watch alarm fired",
            event_pattern=events.EventPattern(
                source=["aws.cloudwatch"], detail_type=["CloudWatch Alarm State Change"],
                detail={"alarmName": [{"prefix": f"{stack_name}{XID_WATCH_ALARM_INFIX}"}],
                        "state": {"value": ["ALARM"]}}))
