"""The embedded backend answers real boto3 clients with AWS semantics (WORLD-FORMAT.md): pagination,
filters, derived fields, datetimes, service errors with AWS's codes and messages, injected faults,
and a refusal of every mutating call."""

from __future__ import annotations

from datetime import datetime

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from helpers.worlds import (
    ACCOUNT,
    HyperPodWorld,
    PClusterWorld,
    WorldBuilder,
    at,
    aws_for,
    ms,
)

from gpuaudit.collectors.aws import CallFailed
from gpuaudit.embedded.backend import WorldBackend

CONTINUOUS_ONLY = "ListClusterEvents is only supported for cluster with NodeProvisioningMode set to Continuous"


def session_of(w: WorldBuilder):
    return WorldBackend(w.world()).session()


def error_code(raised: pytest.ExceptionInfo[ClientError]) -> str:
    return raised.value.response["Error"]["Code"]


def run_query(logs, groups: list[str], query: str, start: str = at(0), end: str = at(12)) -> list[dict[str, str]]:
    qid = logs.start_query(logGroupNames=groups, startTime=ms(start) // 1000, endTime=ms(end) // 1000,
                           queryString=query)["queryId"]
    out = logs.get_query_results(queryId=qid)
    assert out["status"] == "Complete"
    return [{c["field"]: c["value"] for c in row} for row in out["results"]]


# -- pagination ---------------------------------------------------------------------------------
def test_describe_log_groups_paginates_with_next_tokens_to_the_end():
    # Given seven log groups
    w = WorldBuilder()
    names = [w.log_group(f"/aws/team-{i}/kernel") for i in range(7)]
    logs = session_of(w).client("logs")

    # When listed two at a time by hand
    seen, token, pages = [], None, 0
    while True:
        page = logs.describe_log_groups(limit=2, **({"nextToken": token} if token else {}))
        seen += [g["logGroupName"] for g in page["logGroups"]]
        pages += 1
        token = page.get("nextToken")
        if not token:
            break

    # Then four pages hold every group exactly once, and the last page has no token
    assert pages == 4
    assert seen == sorted(names)


def test_boto3_paginators_walk_every_page():
    # Given 12 ParallelCluster instances and 130 HyperPod nodes
    pc = PClusterWorld(n_compute=11)
    hp = HyperPodWorld(gpu_nodes=129)

    # When read through boto3's own paginators with small pages
    ec2 = session_of(pc).client("ec2")
    instances = [i["InstanceId"] for page in ec2.get_paginator("describe_instances").paginate(
        PaginationConfig={"PageSize": 5}) for r in page["Reservations"] for i in r["Instances"]]
    sm = session_of(hp).client("sagemaker")
    nodes = [n["InstanceId"] for page in sm.get_paginator("list_cluster_nodes").paginate(ClusterName=hp.cluster)
             for n in page["ClusterNodeSummaries"]]

    # Then nothing is lost or repeated
    assert len(instances) == len(set(instances)) == 12
    assert len(nodes) == len(set(nodes)) == 130


# -- CloudWatch Logs semantics ------------------------------------------------------------------------
def test_describe_log_groups_pattern_is_a_case_sensitive_substring_and_prefix_is_a_prefix():
    # Given groups inside and outside /aws/parallelcluster
    w = WorldBuilder()
    pc = w.log_group("/aws/parallelcluster/llm-pretrain-202609010000")
    custom = w.log_group("/aws/fsx-training/llm-pretrain/kernel")
    w.log_group("/aws/lambda/other")
    logs = session_of(w).client("logs")

    def names(**params):
        return [g["logGroupName"] for g in logs.describe_log_groups(**params)["logGroups"]]

    # Then a pattern matches anywhere in the name, a prefix only at the start, and case matters
    assert names(logGroupNamePattern="llm-pretrain") == sorted([pc, custom])
    assert names(logGroupNamePrefix="/aws/parallelcluster") == [pc]
    assert names(logGroupNamePattern="LLM-PRETRAIN") == []
    with pytest.raises(ClientError) as raised:
        logs.describe_log_groups(logGroupNamePattern="llm", logGroupNamePrefix="/aws")
    assert error_code(raised) == "InvalidParameterException"


def test_log_group_arn_carries_the_world_account_only_where_aws_puts_it():
    w = WorldBuilder()
    w.log_group("/g")
    (group,) = session_of(w).client("logs").describe_log_groups()["logGroups"]
    assert group["arn"] == f"arn:aws:logs:us-west-2:{ACCOUNT}:log-group:/g:*"


def test_describe_log_streams_derives_first_and_last_event_from_events_and_periodic_lines():
    # Given one stream with an explicit event at 00:30 and a generated run 01:00–02:00 every 10 min,
    # and another stream that ends later
    w = WorldBuilder()
    w.stream("/g", "a", events=[(at(0, 30), "boot")], periodic=[(at(1), at(2), 600, "tick")])
    w.lines("/g", "b", at(3), at(4))
    logs = session_of(w).client("logs")

    # When described in LastEventTime order, newest first
    streams = logs.describe_log_streams(logGroupName="/g", orderBy="LastEventTime", descending=True)["logStreams"]

    # Then the bounds come from the lines themselves (the last generated line is 01:50, `to` is exclusive)
    assert [s["logStreamName"] for s in streams] == ["b", "a"]
    a = streams[1]
    assert a["firstEventTimestamp"] == ms(at(0, 30))
    assert a["lastEventTimestamp"] == ms(at(1, 50))


def test_describe_log_streams_prefix_cannot_be_ordered_by_last_event_time():
    w = WorldBuilder()
    w.lines("/g", "SagemakerHealthMonitoringAgent/x/i-1", at(1), at(2))
    logs = session_of(w).client("logs")
    assert [s["logStreamName"] for s in logs.describe_log_streams(
        logGroupName="/g", logStreamNamePrefix="SagemakerHealthMonitoringAgent/")["logStreams"]] == [
        "SagemakerHealthMonitoringAgent/x/i-1"]
    with pytest.raises(ClientError) as raised:
        logs.describe_log_streams(logGroupName="/g", logStreamNamePrefix="S", orderBy="LastEventTime")
    assert error_code(raised) == "InvalidParameterException"


def test_unknown_log_group_is_resource_not_found():
    logs = session_of(WorldBuilder()).client("logs")
    with pytest.raises(ClientError) as raised:
        logs.describe_log_streams(logGroupName="/nope")
    assert error_code(raised) == "ResourceNotFoundException"


def test_filter_log_events_applies_the_filter_pattern_over_generated_lines():
    w = WorldBuilder()
    w.stream("/g", "s", events=[(at(1, 5), "kernel: NVRM: Xid (PCI:0000:53:00): 79, fell off the bus")],
             periodic=[(at(1), at(2), 600, "systemd[1]: tick")])
    logs = session_of(w).client("logs")
    events = logs.filter_log_events(logGroupName="/g", filterPattern='"NVRM: Xid"')["events"]
    assert [e["timestamp"] for e in events] == [ms(at(1, 5))]
    assert len(logs.filter_log_events(logGroupName="/g", startTime=ms(at(1)), endTime=ms(at(1, 30)))["events"]) == 5


def test_logs_insights_stats_run_with_real_semantics():
    # Given two streams with 6 and 3 lines in the hour
    w = WorldBuilder()
    w.lines("/g", "a", at(1), at(2), 600)
    w.lines("/g", "b", at(1), at(1, 30), 600)
    logs = session_of(w).client("logs")

    # When counted by stream
    rows = run_query(logs, ["/g"], "stats count(*) as n by @logStream | sort @logStream asc")

    # Then the counts are computed, not echoed raw events
    assert [(r["@logStream"], r["n"]) for r in rows] == [("a", "6"), ("b", "3")]


def test_start_query_over_more_than_fifty_groups_is_refused():
    w = WorldBuilder()
    groups = [w.log_group(f"/g{i}") for i in range(51)]
    logs = session_of(w).client("logs")
    with pytest.raises(ClientError) as raised:
        logs.start_query(logGroupNames=groups, startTime=0, endTime=10, queryString="stats count(*)")
    assert error_code(raised) == "InvalidParameterException"
    assert "50" in raised.value.response["Error"]["Message"]
    # and fifty is fine
    logs.start_query(logGroupNames=groups[:50], startTime=0, endTime=10, queryString="stats count(*)")


def test_malformed_query_is_refused():
    w = WorldBuilder()
    w.log_group("/g")
    logs = session_of(w).client("logs")
    with pytest.raises(ClientError) as raised:
        logs.start_query(logGroupNames=["/g"], startTime=0, endTime=10, queryString="stats count(* by")
    assert error_code(raised) == "MalformedQueryException"


# -- timestamps ----------------------------------------------------------------------------------
def test_timestamps_come_back_as_aware_datetimes():
    # Given ISO strings in the world
    pc, hp = PClusterWorld(n_compute=1, launch=at(-3)), HyperPodWorld(gpu_nodes=1, launch=at(-2))

    # When read through boto3
    (reservation, *_) = session_of(pc).client("ec2").describe_instances()["Reservations"]
    launch = reservation["Instances"][0]["LaunchTime"]
    described = session_of(hp).client("sagemaker").describe_cluster(ClusterName=hp.cluster)

    # Then boto3 shapes them into aware datetimes, as it would for AWS
    assert isinstance(launch, datetime) and launch.tzinfo is not None
    assert launch.isoformat().startswith("2026-09-30T21:00:00")
    assert isinstance(described["CreationTime"], datetime)


def test_fields_the_call_does_not_return_are_dropped():
    # Given a cluster dict carrying the world-only "Nodes" key
    hp = HyperPodWorld(gpu_nodes=1)
    described = session_of(hp).client("sagemaker").describe_cluster(ClusterName=hp.cluster)
    assert "Nodes" not in described
    assert described["NodeRecovery"] == "Automatic"


# -- SageMaker HyperPod ---------------------------------------------------------------------------
def test_list_cluster_events_is_gated_by_node_provisioning_mode():
    # Given a cluster without NodeProvisioningMode=Continuous
    hp = HyperPodWorld(gpu_nodes=1)
    sm = session_of(hp).client("sagemaker")

    # When its events are listed or described; Then AWS's own ValidationException comes back
    for call in (lambda: sm.list_cluster_events(ClusterName=hp.cluster),
                 lambda: sm.describe_cluster_event(ClusterName=hp.cluster, EventId="e-1")):
        with pytest.raises(ClientError) as raised:
            call()
        assert error_code(raised) == "ValidationException"
        assert raised.value.response["Error"]["Message"] == CONTINUOUS_ONLY


def test_list_cluster_events_with_continuous_mode_filters_by_time_and_node():
    # Given a Continuous cluster with three events
    hp = HyperPodWorld(gpu_nodes=2, provisioning_mode="Continuous")
    a, b = hp.gpu
    hp.described["Events"] = [
        {"EventId": "e-1", "ClusterName": hp.cluster, "InstanceId": a.instance_id, "InstanceGroupName": "gpu-workers",
         "EventTime": at(1), "ResourceType": "Node", "Description": "node replaced"},
        {"EventId": "e-2", "ClusterName": hp.cluster, "InstanceId": b.instance_id, "InstanceGroupName": "gpu-workers",
         "EventTime": at(2), "ResourceType": "Node", "Description": "node rebooted"},
        {"EventId": "e-3", "ClusterName": hp.cluster, "InstanceId": a.instance_id, "InstanceGroupName": "gpu-workers",
         "EventTime": at(5), "ResourceType": "Node", "Description": "health check passed"}]
    sm = session_of(hp).client("sagemaker")

    # When listed for node a between 00:00 and 03:00
    events = sm.list_cluster_events(ClusterName=hp.cluster, NodeId=a.instance_id,
                                    EventTimeAfter=datetime.fromisoformat(at(0)),
                                    EventTimeBefore=datetime.fromisoformat(at(3)))["Events"]

    # Then only e-1 qualifies, and DescribeClusterEvent finds any event by ID
    assert [e["EventId"] for e in events] == ["e-1"]
    assert sm.describe_cluster_event(ClusterName=hp.cluster, EventId="e-3")["EventDetails"]["Description"] == \
        "health check passed"


def test_unknown_cluster_is_aws_not_found():
    sm = session_of(HyperPodWorld()).client("sagemaker")
    with pytest.raises(ClientError) as raised:
        sm.describe_cluster(ClusterName="nope")
    assert error_code(raised) == "ResourceNotFound"


# -- faults ------------------------------------------------------------------------------------------
def test_fault_fails_the_first_times_calls_then_succeeds():
    # Given StartQuery throttled twice
    w = WorldBuilder()
    w.log_group("/g")
    w.fault("logs", "StartQuery", "LimitExceededException", times=2, message="Rate exceeded")
    logs = session_of(w).client("logs")

    def start():
        return logs.start_query(logGroupNames=["/g"], startTime=0, endTime=10, queryString="stats count(*)")

    # When called three times; Then two throttles with AWS's shape, then an answer
    for _ in range(2):
        with pytest.raises(ClientError) as raised:
            start()
        assert error_code(raised) == "LimitExceededException"
        assert raised.value.response["Error"]["Message"] == "Rate exceeded"
    assert start()["queryId"]


def test_throttling_fault_is_retried_by_the_collector_port_and_counted():
    # Given DescribeLogGroups throttled twice
    w = WorldBuilder()
    w.log_group("/g")
    w.fault("logs", "DescribeLogGroups", "ThrottlingException", times=2)
    aws = aws_for(w.world())

    # When the product's Aws port calls it once
    answer = aws.call("logs", "DescribeLogGroups")

    # Then it waited and retried, and all three attempts are counted
    assert [g["logGroupName"] for g in answer["logGroups"]] == ["/g"]
    assert aws.counts[("logs", "DescribeLogGroups")] == 3


def test_fault_without_times_always_fails_and_a_denial_is_not_retried():
    w = WorldBuilder()
    w.fault("ec2", "DescribeInstances", "UnauthorizedOperation")
    aws = aws_for(w.world())
    for _ in range(2):
        with pytest.raises(CallFailed) as raised:
            aws.call("ec2", "DescribeInstances")
        assert raised.value.code == "UnauthorizedOperation"
    assert aws.counts[("ec2", "DescribeInstances")] == 2


def test_endpoint_connection_fault_raises_the_botocore_error():
    w = WorldBuilder()
    w.fault("sagemaker", "DescribeCluster", "EndpointConnectionError")
    sm = session_of(w).client("sagemaker")
    with pytest.raises(EndpointConnectionError):
        sm.describe_cluster(ClusterName="any")


# -- read-only -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("service", "method", "params"), [
    ("ec2", "terminate_instances", {"InstanceIds": ["i-00000000000000002"]}),
    ("ec2", "reboot_instances", {"InstanceIds": ["i-00000000000000002"]}),
    ("sagemaker", "batch_reboot_cluster_nodes", {"ClusterName": "hp-slurm", "NodeIds": ["i-00000000000000002"]}),
    ("sagemaker", "batch_delete_cluster_nodes", {"ClusterName": "hp-slurm", "NodeIds": ["i-00000000000000002"]}),
    ("logs", "delete_log_group", {"logGroupName": "/g"}),
])
def test_mutating_calls_are_refused(service: str, method: str, params: dict):
    # Given a world with the resources the call names
    w = HyperPodWorld()
    w.log_group("/g")
    client = session_of(w).client(service)

    # When a mutating call is made; Then it is refused as access denied, naming it
    with pytest.raises(ClientError) as raised:
        getattr(client, method)(**params)
    assert error_code(raised) == "AccessDeniedException"
    assert "read-only" in raised.value.response["Error"]["Message"]


def test_the_collector_port_never_issues_a_write():
    aws = aws_for(WorldBuilder().world())
    with pytest.raises(PermissionError):
        aws.call("ec2", "TerminateInstances", InstanceIds=["i-00000000000000002"])
    assert aws.counts == {}

