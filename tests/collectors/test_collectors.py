"""Collectors (RULES §2, §3, §4 query plan) through real boto3 clients served by the embedded backend:
which log groups are found and kept, which nodes are in scope, and what the audit costs in calls."""

from __future__ import annotations

import pytest
from helpers.worlds import (
    REGION,
    HyperPodWorld,
    PClusterWorld,
    WorldBuilder,
    at,
    calls,
    hours,
    iso_list,
    node_of,
)

from gpuaudit.collectors.inventory import UnknownCluster
from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import collect

SINCE, UNTIL = at(6), at(10)


def evidence_of(w: WorldBuilder, cluster: str, since: str = SINCE, until: str = UNTIL) -> Evidence:
    return collect(w.aws(), AuditRequest(cluster=cluster, mode="coverage", since=parse_time(since),
                                         until=parse_time(until)))


def purposes(evidence: Evidence, purpose: str) -> list:
    return [q for q in evidence.queries if q.purpose == purpose]


# -- finding log sources (RULES §3) ---------------------------------------------------------------
def test_log_groups_are_found_by_substring_not_only_under_aws_parallelcluster():
    # Given a customer pipeline group /aws/<pipeline>/<cluster>/kernel, a keyword-only group, and an unrelated one
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    customer = w.log_group("/aws/fsx-training/llm-pretrain/kernel")
    journal = w.log_group("/custom/journal")
    w.log_group("/aws/lambda/billing-export")
    w.healthy(node, at(-10), at(12, 25))

    # When the audit collects
    ev = evidence_of(w, w.cluster)

    # Then both the cluster-name match and the keyword match are candidates; the unrelated group is not
    names = {g.name for g in ev.log_groups}
    assert {w.group, customer, journal} <= names
    assert "/aws/lambda/billing-export" not in names
    assert [g.matched_patterns for g in ev.log_groups if g.name == customer] == [["llm-pretrain", "kernel"]]


def test_customer_kernel_group_outside_parallelcluster_carries_coverage():
    # Given the only kernel stream of the node lives in /aws/<pipeline>/<cluster>/kernel, named by DNS and ID
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    customer = w.log_group("/aws/fsx-training/llm-pretrain/kernel")
    stream = w.kernel_stream(customer, f"{node.private_dns}-{node.instance_id}", at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the node is Measured through that exact group and stream
    n = node_of(result, node.instance_id)
    assert n.xid_status == "Measured"
    assert [(r.log_group, r.log_stream) for r in n.coverage if r.status == "Measured"] == [(customer, stream)]


def test_groups_whose_streams_name_no_audited_node_are_not_kept():
    # Given a keyword-matching group whose streams belong to another team's hosts
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(12, 25))
    foreign = w.log_group("/aws/other-team/kernel")
    w.kernel_stream(foreign, "ip-10-9-9-9.us-west-2.compute.internal-i-0ffffffffffffffff", at(-10), at(12, 25))

    # When the audit collects and judges
    ev = evidence_of(w, w.cluster)
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the group was searched but none of its streams enter the evidence or any coverage row
    assert foreign in {g.name for g in ev.log_groups}
    assert foreign not in {a.log_group for a in ev.stream_activity}
    assert foreign not in {k.log_group for k in ev.kernel_streams}
    assert all(r.log_group != foreign for n in result.nodes for r in n.coverage)
    assert "i-0ffffffffffffffff" not in {n.instance_id for n in result.nodes}
    assert any("dead or unrelated" in g and foreign in g for g in result.visibility_gaps)


# -- which nodes are in scope (RULES §2) -----------------------------------------------------------
def test_vanished_compute_node_is_discovered_from_the_cluster_log_group():
    # Given a compute node gone from DescribeInstances whose system-messages stream has lines in the padded window
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))
    gone = "i-0deadbeef00000001"
    w.kernel_stream(w.group, f"ip-10-0-9-9.{gone}.system-messages", at(-10), at(8), host="ip-10-0-9-9")

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then it is a node of the audit, found by its log streams, with its own coverage verdict
    n = node_of(result, gone)
    assert n.discovered_by == "log-streams"
    assert n.status == "terminated"
    assert n.xid_status == "Not observable"
    assert iso_list(n.coverage[0].empty_hours) == hours(8, 9, 10)


def test_compute_node_that_stopped_long_before_the_window_is_not_discovered():
    # Given a stream of an instance whose last line was two days before the window
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))
    old = "i-0deadbeef00000002"
    w.kernel_stream(w.group, f"ip-10-0-9-8.{old}.system-messages", at(-60), at(-48), host="ip-10-0-9-8")

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then it is not pulled into the audit
    assert old not in {n.instance_id for n in result.nodes}


def test_instance_ids_in_other_groups_do_not_create_nodes():
    # Given an unknown instance's stream in a customer group (not the cluster's /aws/parallelcluster group)
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))
    stranger = "i-0deadbeef00000003"
    w.kernel_stream("/aws/fsx-training/llm-pretrain/kernel", f"ip-10-0-9-7.{stranger}.system-messages",
                    at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then only the cluster's own log group can name vanished compute nodes
    assert stranger not in {n.instance_id for n in result.nodes}


def test_head_node_stays_in_scope():
    # Given a ParallelCluster with a head node and one compute node
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))
    w.other_log(w.head, "slurmctld", at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the head node is a node of the result, with its role
    head = node_of(result, w.head.instance_id)
    assert head.role == "head"
    assert w.head.instance_id in result.resources


def test_cluster_name_that_is_a_prefix_of_another_does_not_pull_in_its_instances():
    # Given llm-pretrain and llm-pretrain-b200 in one account, each with instances and a cluster log group
    w = PClusterWorld("llm-pretrain", n_compute=1)
    mine = w.compute[0]
    w.healthy(mine, at(-10), at(12, 25))
    theirs = w.add_instance(cluster="llm-pretrain-b200", launch=at(-48))
    their_group = w.log_group("/aws/parallelcluster/llm-pretrain-b200-202607141022")
    w.kernel_stream(their_group, f"{theirs.hostname}.{theirs.instance_id}.system-messages", at(-10), at(12, 25))
    w.kernel_stream(their_group, "ip-10-0-9-6.i-0deadbeef00000004.system-messages", at(-10), at(8))

    # When llm-pretrain is audited
    result = w.audit("llm-pretrain", since=SINCE, until=UNTIL)

    # Then neither the other cluster's instances nor its vanished nodes are audited
    ids = {n.instance_id for n in result.nodes}
    assert ids == {w.head.instance_id, mine.instance_id}
    assert all(r.log_group != their_group for n in result.nodes for r in n.coverage)


def test_unknown_cluster_names_what_was_searched():
    # Given an account with one ParallelCluster
    w = PClusterWorld("llm-pretrain", n_compute=1)

    # When a cluster that does not exist is audited
    with pytest.raises(UnknownCluster) as raised:
        w.audit("no-such-cluster", since=SINCE, until=UNTIL)

    # Then the error names the cluster, the region and both lookups tried
    message = str(raised.value)
    for part in ("no-such-cluster", "us-west-2", "DescribeCluster", "DescribeInstances",
                 "parallelcluster:cluster-name=no-such-cluster"):
        assert part in message


def test_hyperpod_nodes_not_running_are_described_one_by_one():
    # Given a HyperPod cluster with three GPU nodes, one in Failure and one Pending
    w = HyperPodWorld(gpu_nodes=3, statuses=["Failure", "Running", "Pending"])
    w.cluster_metrics(at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then DescribeClusterNode was called for exactly the two nodes not Running, and their state is reported
    assert calls(result, "sagemaker", "DescribeClusterNode") == 2
    assert calls(result, "sagemaker", "ListClusterNodes") == 1
    assert node_of(result, w.gpu[0].instance_id).status == "Failure"
    state = " ".join(result.cluster_state)
    assert f"{w.gpu[0].instance_id} (Failure: node is Failure)" in state
    assert w.gpu[2].instance_id in state and w.gpu[1].instance_id not in state


def test_hyperpod_node_listing_paginates_to_the_end():
    # Given more HyperPod nodes than one ListClusterNodes page (100)
    w = HyperPodWorld(gpu_nodes=120)
    w.cluster_metrics(at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then every node is in the result
    assert len(result.nodes) == 121
    assert calls(result, "sagemaker", "ListClusterNodes") == 2


# -- the query plan: cost grows with log groups, not with healthy nodes ----------------------------
def healthy_cluster(n_nodes: int) -> PClusterWorld:
    w = PClusterWorld(n_compute=n_nodes)
    for node in w.compute:
        w.healthy(node, at(-10), at(12, 25))
    return w


def test_start_query_count_does_not_grow_with_healthy_nodes():
    # Given the same cluster with 3 and with 30 healthy compute nodes
    small, large = healthy_cluster(3), healthy_cluster(30)

    # When both are audited
    r_small = small.audit(small.cluster, since=SINCE, until=UNTIL)
    r_large = large.audit(large.cluster, since=SINCE, until=UNTIL)

    # Then one batch of queries serves either size — the summary, the GPU lines and the kernel look-back as one range
    # time (#34 item 4: the cluster launched 48 h before now, three UTC days) — and every node is Measured
    assert calls(r_small, "logs", "StartQuery") == calls(r_large, "logs", "StartQuery") == 2 + 1
    assert {n.xid_status for n in r_large.nodes if n.role == "compute"} == {"Measured"}
    assert len([n for n in r_large.nodes if n.role == "compute"]) == 30


def test_sixty_log_groups_are_queried_in_two_batches_of_at_most_fifty():
    # Given 60 candidate log groups (59 customer groups plus the cluster's), all healthy
    w = healthy_cluster(1)
    extra = [w.log_group(f"/aws/pipeline-{i:02d}/llm-pretrain/kernel") for i in range(59)]

    # When the audit collects
    ev = evidence_of(w, w.cluster)

    # Then 2 batches × (summary, GPU lines, the kernel look-back as one range), each naming at most 50 groups,
    # together naming every group
    assert len(ev.log_groups) == 60
    assert len(ev.queries) == 2 * (2 + 1)
    assert sorted(len(q.log_groups) for q in purposes(ev, "stream-summary")) == [10, 50]
    assert all(len(q.log_groups) <= 50 for q in ev.queries)
    assert {g for q in purposes(ev, "kernel-streams") for g in q.log_groups} == {w.group, *extra}
    assert next(c.count for c in ev.calls if c.operation == "StartQuery") == 2 * (2 + 1)


def test_node_stream_with_gaps_triggers_exactly_one_detail_query():
    # Given 3 nodes: one healthy, two with a gap at 07:00–09:00 in the same log group
    w = PClusterWorld(n_compute=3)
    healthy, gap_a, gap_b = w.compute
    w.healthy(healthy, at(-10), at(12, 25))
    for node in (gap_a, gap_b):
        stream = w.healthy(node, at(-10), at(7))
        w.lines(w.group, stream, at(9), at(12, 25))

    # When the audit collects
    ev = evidence_of(w, w.cluster)

    # Then one stream-hours query names exactly the two gap streams
    (detail,) = purposes(ev, "stream-hours")
    assert detail.log_groups == [w.group]
    assert len(ev.queries) == 2 + 1 + 1  # summary, GPU lines, the kernel look-back as one range, the detail
    with_hours = {a.log_stream for a in ev.stream_activity if a.hour_counts is not None}
    assert with_hours == {w.stream_name(gap_a), w.stream_name(gap_b)}


def test_one_detail_query_over_two_groups_keeps_each_groups_streams_apart():
    # Given node 1's kernel stream under the same name in two groups — silent 07:00–09:00 in the first, live
    # throughout in the second — and node 2's stream in the second group, silent 08:00–09:00
    w = PClusterWorld(n_compute=2)
    one, two = w.compute
    mirror = w.log_group(f"/aws/{w.cluster}/kernel-mirror")
    stream = w.healthy(one, at(-10), at(7))
    w.lines(w.group, stream, at(9), at(12, 25))
    w.kernel_stream(mirror, stream, at(-10), at(12, 25), host=one.hostname)
    other = w.kernel_stream(mirror, w.stream_name(two), at(-10), at(8), host=two.hostname)
    w.lines(mirror, other, at(9), at(12, 25))

    # When the audit collects and judges
    ev = evidence_of(w, w.cluster)
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then one detail query reads both gap streams over both groups, and each stream keeps its own hours: the
    # mirror's live copy of node 1's name, read by that query too, is neither merged into nor taken for the other
    (detail,) = purposes(ev, "stream-hours")
    assert detail.log_groups == sorted([w.group, mirror])
    rows = {c.log_group: c for c in node_of(result, one.instance_id).coverage}
    assert iso_list(rows[w.group].empty_hours) == hours(7, 8) and rows[w.group].status == "Not observable"
    assert rows[mirror].empty_hours == [] and rows[mirror].status == "Measured"
    (row_two,) = [c for c in node_of(result, two.instance_id).coverage if c.log_group == mirror]
    assert iso_list(row_two.empty_hours) == hours(8)


def test_all_healthy_nodes_need_no_detail_query():
    # Given only healthy nodes
    w = healthy_cluster(3)

    # When the audit collects
    ev = evidence_of(w, w.cluster)

    # Then no stream-hours query runs
    assert purposes(ev, "stream-hours") == []


# -- the Logs Insights 10,000-row cap --------------------------------------------------------------
def add_filler_streams(w: WorldBuilder, group: str, count: int, time: str, message: str) -> None:
    """Tiny streams named `filler-…`, which sort before the nodes' `ip-…` streams in stats output."""
    g = next(g for g in w.section("logs", "groups") if g["logGroupName"] == group)
    g["streams"].extend({"logStreamName": f"filler-{i:05d}", "events": [[time, message]]} for i in range(count))


def test_summary_past_ten_thousand_rows_is_a_visibility_gap_never_empty_hours():
    # Given 10,001 tiny streams in the window beside a healthy node and a node silent from 07:00 to 09:00
    w = PClusterWorld(n_compute=2)
    healthy, gappy = w.compute
    w.healthy(healthy, at(-10), at(12, 25))
    stream = w.healthy(gappy, at(-10), at(7))
    w.lines(w.group, stream, at(9), at(12, 25))
    add_filler_streams(w, w.group, 10_001, at(7), "filler line")

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the cap is reported as a gap, and the rows it cut are read by name instead of taken as empty
    assert any("stream-summary" in g and "10000 rows" in g for g in result.visibility_gaps)
    assert node_of(result, healthy.instance_id).xid_status == "Measured"
    (row,) = node_of(result, gappy.instance_id).coverage
    assert iso_list(row.empty_hours) == hours(7, 8)
    assert row.status == "Not observable"


def add_host_named_streams(w: WorldBuilder, group: str, count: int, time: str, message: str,
                           last_digit: int | None = None) -> None:
    """Tiny streams named by EC2 host name alone (`ip-1-9-a-b.<region>.compute.internal`, sorting before the nodes'
    `ip-10-…` in stats output), with the IP address's last digit spread over 0-9, or all `last_digit`."""
    g = next(g for g in w.section("logs", "groups") if g["logGroupName"] == group)
    g["streams"].extend({"logStreamName": f"ip-1-9-{i // 10}-{i % 10}{'' if last_digit is None else last_digit}."
                                          f"{REGION}.compute.internal", "events": [[time, message]]}
                        for i in range(count))


def test_kernel_query_past_ten_thousand_rows_is_not_read_as_no_kernel_lines():
    # Given 10,001 old streams with kernel lines before the window, named by no instance ID and by EC2 host names
    # ending in the same digit as the node's (kernel-streams query capped, and so is every part it is read again
    # in), and a node whose kernel stream is named by its host alone, live
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.kernel_stream(w.group, f"{node.private_dns}/messages", at(-10), at(12, 25), host=node.hostname)
    add_host_named_streams(w, w.group, 10_001, at(-20), "host kernel: usb 1-1: new device",
                           last_digit=int(node.hostname[-1]))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the cap is a visibility gap, and the node is not said to ship "other logs, not kernel messages"
    assert any("kernel-streams" in g and "10000 rows" in g for g in result.visibility_gaps)
    n = node_of(result, node.instance_id)
    assert n.xid_status == "Not observable"
    (row,) = n.coverage
    assert "ships other logs" not in (row.note or "")
    assert "10,000-row cap" in (row.note or "")
    assert row.kernel_lines_ever is None


def test_a_capped_kernel_query_is_read_again_by_host_name_so_a_node_named_by_host_is_measured():
    # Given 10,001 old kernel streams named by EC2 host names alone (the last digits spread), and a node whose
    # kernel stream is named by its host alone, live
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.kernel_stream(w.group, f"{node.private_dns}/messages", at(-10), at(12, 25), host=node.hostname)
    add_host_named_streams(w, w.group, 10_001, at(-20), "host kernel: usb 1-1: new device")

    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the names without an instance ID are read again by their host name's last digit: every part stays under
    # the cap, no gap, and the node is Measured from its own stream
    assert not any("kernel-streams" in g and "10000 rows" in g for g in result.visibility_gaps)
    n = node_of(result, node.instance_id)
    assert n.xid_status == "Measured"
    (row,) = n.coverage
    assert row.log_stream == f"{node.private_dns}/messages" and row.kernel_lines_ever


def test_a_capped_kernel_query_is_read_again_by_instance_id_so_a_node_named_by_id_is_measured():
    # Given the same 10,001 ID-less kernel streams, and a node whose stream names its instance ID
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(12, 25))
    add_filler_streams(w, w.group, 10_001, at(-20), "host kernel: usb 1-1: new device")

    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the node's stream is read in the part of its instance-ID digit: Measured, with its kernel lines counted;
    # the names without an ID still passed the cap in their part, which stays a gap that says so
    n = node_of(result, node.instance_id)
    assert n.xid_status == "Measured"
    (row,) = n.coverage
    assert row.kernel_lines_ever and row.kernel_lines_ever > 0
    assert any("kernel-streams" in g and "in parts by the instance ID or host name in the stream name, of which 1 "
               "reached the Logs Insights" in g
               for g in result.visibility_gaps)
