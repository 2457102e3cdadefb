"""Before a deploy that turns the Xid watch on: which log groups a cluster named without any is watched on, and does
each watched log group have a free metric filter slot?

A cluster the configuration watches without naming its groups (`xid_watch: true`) is watched, with
`-c check_xid_watch=true`, on the groups whose name holds the cluster's name: the audit's own first search (RULES §3,
collectors/log_sources.py `discover_log_groups`, DescribeLogGroups by `logGroupNamePattern`), read once at synth with
the deploying credentials. The audit's keyword search ("kernel", "syslog", ...) is not followed: such a group is
shared by clusters, and its alarm would start an audit of this cluster for another cluster's line; name it instead.

A log group holds at most 100 metric filters (CloudWatch Logs quotas); the watch never takes a slot the customer
uses, so a group that has none free is named before CloudFormation tries (where it would fail the whole deploy on a
LimitExceededException). Run with `-c check_xid_watch=true` (credentials of the target account, as `cdk deploy`
has): the only calls are DescribeLogGroups and DescribeMetricFilters, reads. The watch's own filter (a redeploy) is
not counted against the group: updating it takes no new slot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infra.config import AUDITOR_LOG_PREFIXES
from infra.xid_watch_pattern import METRIC_FILTERS_PER_GROUP

GROUPS_PER_CLUSTER = 50  # what `xid_watch.clusters.<cluster>` takes


def with_found_groups(raw: dict[str, Any], logs: Any) -> dict[str, Any]:
    """The raw configuration, each watched cluster that names no log group (in `log_groups` or `xid_watch.clusters`)
    given the groups whose name holds its own (the auditor's own log groups left out), at most GROUPS_PER_CLUSTER. A
    cluster with none found stays bare, and the configuration's check names it. Reads only (DescribeLogGroups)."""
    watch = raw.get("xid_watch")
    if watch is None or watch is False:
        return raw
    named = dict((watch if isinstance(watch, dict) else {}).get("clusters") or {})
    watched = list(named) if isinstance(watch, dict) and watch.get("clusters") is not None else list(
        raw.get("clusters") or [])
    log_groups = raw.get("log_groups") or {}
    for cluster in watched:
        if named.get(cluster) or (log_groups.get(cluster) if isinstance(log_groups, dict) else None):
            named.setdefault(cluster, [])  # watched on the groups it names
            continue
        found = sorted({g["logGroupName"] for page in logs.get_paginator("describe_log_groups").paginate(
            logGroupNamePattern=cluster) for g in page.get("logGroups", [])
            if not g["logGroupName"].startswith(AUDITOR_LOG_PREFIXES)})
        named[cluster] = found[:GROUPS_PER_CLUSTER]
    return {**raw, "xid_watch": {**(watch if isinstance(watch, dict) else {}), "clusters": named}}


def groups_without_a_free_slot(logs: Any, watched: Mapping[str, Sequence[str]], own_filter_prefix: str) -> list[str]:
    """One sentence per watched group that cannot take the watch's filter: full, missing, or not readable."""
    problems: list[str] = []
    for cluster, groups in sorted(watched.items()):
        for group in groups:
            try:
                found = [g["logGroupName"] for page in logs.get_paginator("describe_log_groups").paginate(
                    logGroupNamePrefix=group) for g in page.get("logGroups", [])]
                if group not in found:
                    problems.append(f"{group} ({cluster}): no such log group in this account and region")
                    continue
                names = [f["filterName"] for page in logs.get_paginator("describe_metric_filters").paginate(
                    logGroupName=group) for f in page.get("metricFilters", [])
                         if f.get("logGroupName", group) == group]
            except ClientError as err:
                code = err.response["Error"]["Code"]
                problems.append(f"{group} ({cluster}): " + ("no such log group in this account and region"
                                                             if code == "ResourceNotFoundException" else
                                                             f"its metric filters could not be read ({code})"))
                continue
            except BotoCoreError as err:
                problems.append(f"{group} ({cluster}): its metric filters could not be read ({type(err).__name__})")
                continue
            others = [n for n in names if not n.startswith(own_filter_prefix)]
            if len(others) >= METRIC_FILTERS_PER_GROUP and len(others) == len(names):
                problems.append(f"{group} ({cluster}): all {METRIC_FILTERS_PER_GROUP} metric filter slots are "
                                "taken by filters the stack does not own; the watch takes none of them: free one, or "
                                "leave the group out of `xid_watch`")
    return problems
