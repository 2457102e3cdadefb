"""Locating the lines that tripped the Xid watch (issue #51 item 1): the locate query matches what the watch's metric
filter matches (one source of terms), its streams map to nodes as every stream of the audit does, and a locate that
is not read whole narrows nothing (fail closed). Against small worlds: the embedded backend evaluates the query's
filter and stats as Logs Insights does."""

from __future__ import annotations

import re

from helpers.filter_pattern import matches, parse
from helpers.worlds import PClusterWorld, at, aws_for

from gpuaudit import pipeline
from gpuaudit.collectors.log_queries import xid_locate_query
from gpuaudit.model.evidence import AuditRequest, NodeInfo
from gpuaudit.model.timeutil import parse_time
from gpuaudit.rules.xid_watch import filter_pattern, node_scope, watch_terms

ALARM_MINUTE = parse_time("2026-10-01T12:10:00Z")
OVERRIDES = ["13=hardware", "48=application"]


def locate_terms(query: str) -> list[str]:
    """The texts the query's filter looks for, in order (`@message like "…"`, JSON-quoted)."""
    return [re.sub(r'\\(.)', r"\1", t) for t in re.findall(r'@message like "((?:[^"\\]|\\.)*)"', query)]


def test_the_locate_query_looks_for_exactly_the_metric_filters_terms() -> None:
    for overrides in ([], OVERRIDES):
        assert locate_terms(xid_locate_query(watch_terms(overrides))) == [t.text for t in parse(
            filter_pattern(overrides))]
    assert "): 13," in watch_terms(OVERRIDES) and "): 13," not in watch_terms()  # the deployment's overrides count


def fleet(dns_streams: bool = False) -> PClusterWorld:
    """Three GPU nodes; nodes 0 and 2 write an Xid 79 two minutes before the alarm. `dns_streams`: the kernel log of
    a self-managed fleet, one stream per node named by its private DNS name in a syslog group."""
    w = PClusterWorld("gpu-fleet", n_compute=3)
    group = w.log_group("/gpu-fleet/syslog") if dns_streams else w.group
    for i, node in enumerate(w.compute):
        stream = node.private_dns if dns_streams else w.stream_name(node)
        w.kernel_stream(group, stream, at(-48), at(12, 25), host=node.hostname)
        if i != 1:
            w.stream(group, stream, events=[(at(12, 8, 30), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): "
                                                            "79, pid=0, GPU has fallen off the bus.")])
    return w


def narrowed(w: PClusterWorld, request: AuditRequest) -> pipeline.Evidence:
    aws = aws_for(w.world())
    return pipeline.narrow_to_watch(aws, pipeline.read_inventory(aws, request), ALARM_MINUTE)


def incident(cluster: str, **fields: object) -> AuditRequest:
    return AuditRequest(cluster=cluster, mode="incident", since=parse_time("2026-09-30T12:10:00Z"),
                        until=ALARM_MINUTE, **fields)  # type: ignore[arg-type]


def test_streams_named_by_private_dns_map_to_their_nodes_on_a_self_managed_fleet() -> None:
    w = fleet(dns_streams=True)
    ids = [n.instance_id for n in w.compute]
    evidence = narrowed(w, incident("gpu-fleet", instance_ids=ids))
    assert evidence.cluster.kind == "ec2"
    assert [n.instance_id for n in evidence.nodes] == [ids[0], ids[2]]
    assert evidence.node_scope is not None and evidence.node_scope.narrowed_to == [ids[0], ids[2]]


def test_a_locate_still_running_at_its_deadline_is_stopped_and_narrows_nothing() -> None:
    w = fleet()
    w.raw.setdefault("faults", []).append({"service": "logs", "operation": "GetQueryResults", "status": "Running"})
    evidence = narrowed(w, incident("gpu-fleet"))
    assert len(evidence.nodes) == 4 and evidence.node_scope is not None
    assert evidence.node_scope.narrowed_to is None
    said = evidence.node_scope.said
    assert said.startswith("audit of the whole cluster: the lines that tripped the Xid watch could not be located")
    assert "xid-locate query still Running" in said and "stopped" in said


def test_the_scope_line_names_a_few_nodes_and_counts_the_rest() -> None:
    nodes = [NodeInfo(instance_id=f"i-{n:017x}", status="running") for n in range(30)]
    streams = [("/g", f"host.{n.instance_id}.system-messages") for n in nodes[:12]]
    scope = node_scope(streams, "", nodes)
    assert scope.narrowed_to == [n.instance_id for n in nodes[:12]]
    assert scope.said == (f"audit of 12 node(s): the lines that tripped the Xid watch name "
                          f"{', '.join(n.instance_id for n in nodes[:10])} (+2 more in the result's narrowed_to); "
                          "the rest of the cluster (18 node(s)) is audited hourly")


def test_streams_of_no_node_of_the_cluster_narrow_nothing() -> None:
    nodes = [NodeInfo(instance_id="i-00000000000000001", status="running")]
    scope = node_scope([("/g", "host.i-0000000000000000f.system-messages")], "", nodes)
    assert scope.narrowed_to is None and "the 1 stream(s) holding such a line name no node of the cluster" in scope.said


def test_an_application_xid_13_line_is_not_the_watchs() -> None:
    line = "ip-10-0-0-2 kernel: NVRM: Xid (PCI:0000:53:00): 13, pid=2211, name=python3, Graphics SM Warp Exception"
    assert not matches(filter_pattern(), line)
    assert not any(term in line for term in watch_terms())  # the locate query's `like` tests: substrings


def test_the_locate_window_holds_the_lines_that_could_have_tripped_the_alarm_and_no_earlier_one() -> None:
    """The alarm (period 60 s) sees a line's minute once it has ended, its datapoint up to 35 s late (agent flush 5 s,
    filter to metric 30 s assumed), at its once-a-minute evaluation: a line 2 min 30 s before the alarm's minute can
    be the one that tripped it, and so can one in that minute after its start; one 4 minutes before cannot (it tripped
    an earlier evaluation)."""
    w = PClusterWorld("gpu-fleet", n_compute=3)
    for node, written in zip(w.compute, (at(12, 7, 30), at(12, 10, 40), at(12, 6)), strict=True):
        stream = w.stream_name(node)
        w.kernel_stream(w.group, stream, at(-48), at(12, 25), host=node.hostname)
        w.stream(w.group, stream, events=[(written, f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=0")])
    evidence = narrowed(w, incident("gpu-fleet"))
    assert evidence.node_scope is not None
    assert evidence.node_scope.narrowed_to == sorted(n.instance_id for n in w.compute[:2])
