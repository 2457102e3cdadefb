"""The Xid watch's filter pattern (issue #51), generated from the Xid catalog data: a catalog change (or a deployment's
`xid_class_overrides`) changes the watch. The pattern is built in gpuaudit/rules/xid_watch.py, from the same terms the
audit's locate query uses; the names of the stack's resources are here. No CDK here, so tests and benchmarks read it
without the CDK runtime."""

from __future__ import annotations

from gpuaudit.rules.xid_watch import (  # the one source of what the watch matches, shared with the audit's locate
    ALARM_PERIOD_S,
    MAX_PATTERN_CHARS,
    WATCHED_CLASSES,
    filter_pattern,
    watch_terms,
    watched_codes,
    xid_term,
)
from gpuaudit.settings import XID_WATCH_ALARM_INFIX

__all__ = ["ALARM_PERIOD_S", "MAX_PATTERN_CHARS", "METRIC_FILTERS_PER_GROUP", "NAMESPACE", "WATCHED_CLASSES",
           "alarm_name", "filter_pattern", "metric_name", "watch_terms", "watched_codes", "xid_term"]

NAMESPACE = "gpuaudit/XidWatch"
# CloudWatch Logs quotas (PutMetricFilter API reference): a log group holds at most 100 metric filters. The generated
# pattern uses no regular expression, so it takes none of the five regex filter patterns a log group may hold.
METRIC_FILTERS_PER_GROUP = 100


def metric_name(cluster: str) -> str:
    return f"FatalXidLines-{cluster}"


def alarm_name(stack_name: str, cluster: str) -> str:
    return f"{stack_name}{XID_WATCH_ALARM_INFIX}{cluster}"
