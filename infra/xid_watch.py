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

from collections.abc import Iterable, Mapping

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpuaudit.domain.markers import FALLEN_OFF_BUS_MARKER
from gpuaudit.rules.xid import load_catalog
from gpuaudit.settings import XID_WATCH_ALARM_INFIX
from infra.config import DeployConfig

# The classes a line of which starts an incident audit: RULES §6's hardware class (a verdict on the node) and
# unverified (no verdict without evidence the audit reads). Application, driver-config, informational and
# sympathetic lines wait for the hourly audit.
WATCHED_CLASSES = frozenset({"hardware", "unverified"})
NAMESPACE = "gpuaudit/XidWatch"
# CloudWatch Logs quotas (PutMetricFilter API reference): a filter pattern is at most 1,024 characters; a log group
# holds at most 100 metric filters. The generated pattern uses no regular expression, so it takes none of the five
# regex filter patterns a log group may hold.
MAX_PATTERN_CHARS = 1024
METRIC_FILTERS_PER_GROUP = 100
ALARM_PERIOD_S = 60


def watched_codes(overrides: Iterable[str] = ()) -> list[int]:
    """The catalog's hardware-class and unverified codes, with the deployment's `xid_class_overrides` (CODE=CLASS)
    applied: an override to hardware adds a code, an override away from it removes one."""
    classes = {entry.code: entry.class_ for entry in load_catalog().codes}
    for item in overrides:
        code, _, klass = item.partition("=")
        if code.strip().isdigit():
            classes[int(code)] = klass.strip()  # type: ignore[assignment]
    return sorted(code for code, klass in classes.items() if klass in WATCHED_CLASSES)


def xid_term(code: int) -> str:
    """How the driver prints the code: `NVRM: Xid (PCI:0000:91:00): 79, …` — the closing parenthesis, the code and
    its comma. The parenthesis keeps 46 from matching 146's line, the comma 14 from matching 140's."""
    return f"): {code},"


def filter_pattern(overrides: Iterable[str] = ()) -> str:
    """The metric filter's pattern: any watched code's line, or any "fallen off the bus" line (RULES §6 reads those
    as Xid 79 with or without an Xid). Unstructured-log OR terms (`?"…"`), each a quoted phrase matched anywhere in
    the event (CloudWatch Logs filter pattern syntax)."""
    terms = [xid_term(code) for code in watched_codes(overrides)] + [FALLEN_OFF_BUS_MARKER]
    pattern = " ".join(f'?"{term}"' for term in terms)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the Xid watch's filter pattern is {len(pattern)} characters, past CloudWatch Logs' "
                         f"{MAX_PATTERN_CHARS}: split it across filters")
    return pattern


def metric_name(cluster: str) -> str:
    return f"FatalXidLines-{cluster}"


def alarm_name(stack_name: str, cluster: str) -> str:
    return f"{stack_name}{XID_WATCH_ALARM_INFIX}{cluster}"


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
