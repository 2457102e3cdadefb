"""The watch never takes a metric filter slot the customer uses (issue #51 item 1): before the deploy, a watched group
with all 100 slots taken by other filters, or missing, is named; the watch's own filter (a redeploy) is not counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from helpers.worlds import PClusterWorld
from moto import mock_aws

from gpuaudit.embedded.backend import WorldBackend
from infra.config import DeployConfig
from infra.xid_watch_slots import groups_without_a_free_slot, with_found_groups

OWN = "GpuAudit-xid-watch-"


@pytest.fixture
def logs() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
        for group in ("/full", "/ours-among-99", "/roomy"):
            client.create_log_group(logGroupName=group)
        for n in range(100):
            client.put_metric_filter(logGroupName="/full", filterName=f"customer-{n}", filterPattern="ERROR",
                                     metricTransformations=[{"metricName": f"m{n}", "metricNamespace": "c",
                                                             "metricValue": "1"}])
        for n in range(99):
            client.put_metric_filter(logGroupName="/ours-among-99", filterName=f"customer-{n}", filterPattern="ERROR",
                                     metricTransformations=[{"metricName": f"m{n}", "metricNamespace": "c",
                                                             "metricValue": "1"}])
        client.put_metric_filter(
            logGroupName="/ours-among-99",
            filterName=f"{OWN}hp",
            filterPattern="x",
            metricTransformations=[{"metricName": "w", "metricNamespace": "g", "metricValue": "1"}],
        )
        yield client


def test_a_full_or_missing_group_is_named_and_a_group_with_room_or_our_own_filter_is_not(logs: Any) -> None:
    problems = groups_without_a_free_slot(logs, {"hp": ["/full", "/ours-among-99", "/roomy", "/missing"]}, OWN)
    assert len(problems) == 2
    assert problems[0].startswith("/full (hp): all 100 metric filter slots are taken")
    assert problems[1] == "/missing (hp): no such log group in this account and region"


def test_the_deploy_time_check_stops_the_synth_naming_the_group(logs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from infra import app
    from infra.config import BadConfig, load_config

    config = load_config({"gpuaudit": {"clusters": ["hp"], "xid_watch": {"clusters": {"hp": ["/roomy", "/full"]}}}})
    monkeypatch.setattr(boto3, "client", lambda service, **_: logs)
    with pytest.raises(BadConfig) as raised:
        app._check_watch_slots(config)
    assert "/full (hp)" in str(raised.value) and "/roomy" not in str(raised.value)


def test_a_cluster_watched_without_named_groups_is_watched_on_the_groups_holding_its_name() -> None:
    """`xid_watch: true` with `-c check_xid_watch=true`: each configured cluster's groups are those whose name holds
    the cluster's (the audit's own first search, DescribeLogGroups by pattern, through the world backend), never the
    auditor's own log groups and never a keyword group other clusters share; a cluster with named groups keeps them."""
    w = PClusterWorld("llm-pretrain", n_compute=1)
    for group in ("/aws/lambda/llm-pretrain-audit", "/var/log/kernel", "/custom/llm-pretrain/dmesg", "/aws/other"):
        w.log_group(group)
    logs = WorldBackend(w.world()).session().client("logs")
    raw = {"clusters": ["llm-pretrain", "named-one"], "log_groups": {"named-one": ["/given/named-one"]},
           "xid_watch": True}
    resolved = with_found_groups(raw, logs)
    assert resolved["xid_watch"]["clusters"] == {"llm-pretrain": sorted([w.group, "/custom/llm-pretrain/dmesg"]),
                                                 "named-one": []}
    config = DeployConfig.model_validate(resolved)
    assert config.xid_watch_groups == {"llm-pretrain": sorted([w.group, "/custom/llm-pretrain/dmesg"]),
                                       "named-one": ["/given/named-one"]}


def test_a_watched_cluster_with_no_group_found_stops_the_synth_naming_it() -> None:
    logs = WorldBackend(PClusterWorld("llm-pretrain", n_compute=1).world()).session().client("logs")
    resolved = with_found_groups({"clusters": ["no-logs-here"], "xid_watch": True}, logs)
    with pytest.raises(ValueError, match=r"no log group to watch for no-logs-here.*check_xid_watch=true"):
        DeployConfig.model_validate(resolved)
