"""An Xid watch audit narrowed to the nodes whose lines tripped the watch (issue #51 items 1-2), through the deployed
steps (Plan → Inventory → CollectLogs → Finish → Verdict) against small worlds written from the rules: the locate
query runs in the embedded backend, which evaluates its filter and stats as Logs Insights does (moto's ignores them).

RULES §6/§7: a first Xid 79 is hardware class → REBOOT; an application-class Xid 13 is not the watch's (its filter
pattern is the hardware-class and unverified codes), so a node with only an Xid 13 is no node to narrow to. Fail
closed: a locate not read whole, or naming no node, leaves the audit the whole cluster's, and the result says why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from handlers import inventory, plan, verdict
from handlers.payload import load
from helpers.worlds import HyperPodWorld, PClusterWorld, WorldBuilder, at
from lambda_harness import Account, LambdaContext, through_steps, world_account
from test_xid_watch_plan import alarm_event

from gpuaudit.collectors import insights

CLUSTER = "llm-pretrain"
ALARM = "2026-10-01T12:10:41Z"  # the alarm's state change: the audit's window ends at its minute, 12:10
TRIPPED = at(12, 8, 30)  # written in the minute the alarm's period ended on (two minutes before it)


def xid_line(hostname: str, code: int, tail: str = "pid=0, GPU has fallen off the bus.") -> str:
    return f"{hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, {tail}"


def fleet_world(compute: int = 5) -> PClusterWorld:
    """A ParallelCluster of `compute` GPU nodes, every kernel stream live from two days back to past the alarm."""
    w = PClusterWorld(CLUSTER, n_compute=compute)
    for node in w.compute:
        w.healthy(node, at(-48), at(12, 25))
    return w


def write(w: PClusterWorld, node_index: int, time: str, line: str) -> None:
    node = w.compute[node_index]
    w.stream(w.group, w.stream_name(node), events=[(time, line)])


@pytest.fixture
def world_file(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "watch.world.json"


def account_for(w: WorldBuilder, path: Path, monkeypatch: pytest.MonkeyPatch, cluster: str = CLUSTER) -> Any:
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    return world_account(monkeypatch, path, clusters=(cluster,))


def watch_audit(account: Account, cluster: str = CLUSTER) -> dict[str, Any]:
    """The alarm's event through Plan and every step of the cluster's audit: the result JSON the Verdict wrote."""
    (target,) = plan.handler(alarm_event(cluster, ALARM), LambdaContext())["targets"]
    out = verdict.handler(through_steps(target), LambdaContext())
    return account.read_json(out["result"]["json"])


def verdicts(result: dict[str, Any]) -> dict[str, str | None]:
    return {n["instance_id"]: n["verdict"] for n in result["nodes"]}


def test_a_watch_audit_judges_exactly_the_two_nodes_whose_xid_79_tripped_it(
        world_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = fleet_world()
    for i in (1, 3):
        write(w, i, TRIPPED, xid_line(w.compute[i].hostname, 79))
    write(w, 0, TRIPPED, xid_line(w.compute[0].hostname, 13, "pid=2211, name=python3, Graphics SM Warp Exception"))
    # an Xid 79 hours before the alarm tripped an earlier alarm, not this one: its node is the hourly audit's
    write(w, 4, at(9), xid_line(w.compute[4].hostname, 79))
    with account_for(w, world_file, monkeypatch) as account:
        result = watch_audit(account)
    tripped = sorted(w.compute[i].instance_id for i in (1, 3))
    assert verdicts(result) == {iid: "REBOOT" for iid in tripped}
    assert result["narrowed_to"] == tripped
    scope = result["cluster_state"][0]
    assert f"the lines that tripped the Xid watch name {', '.join(tripped)}" in scope
    assert "the rest of the cluster (4 node(s)) is audited hourly" in scope  # the head node and nodes 0, 2, 4
    assert result["mode"] == "incident" and not any("xid-locate" in g for g in result["visibility_gaps"])


def test_a_locate_that_fails_leaves_the_audit_the_whole_cluster_and_says_why(
        world_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = fleet_world(3)
    write(w, 1, TRIPPED, xid_line(w.compute[1].hostname, 79))
    w.fault("logs", "StartQuery", "AccessDeniedException", times=1)  # the audit's first query is the locate
    with account_for(w, world_file, monkeypatch) as account:
        result = watch_audit(account)
    assert set(verdicts(result)) == {w.head.instance_id, *(n.instance_id for n in w.compute)}
    assert verdicts(result)[w.compute[1].instance_id] == "REBOOT"
    assert result["narrowed_to"] is None
    scope = result["cluster_state"][0]
    assert scope.startswith("audit of the whole cluster: the lines that tripped the Xid watch could not be located")
    assert "AccessDeniedException" in scope and "xid-locate" in scope


def test_a_locate_past_the_row_cap_narrows_nothing(world_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = fleet_world(3)
    for i in (0, 2):
        write(w, i, TRIPPED, xid_line(w.compute[i].hostname, 79))
    monkeypatch.setattr(insights, "MAX_ROWS", 2)  # the two streams fill the cap: a third could be past it
    with account_for(w, world_file, monkeypatch) as account:
        (target,) = plan.handler(alarm_event(CLUSTER, ALARM), LambdaContext())["targets"]
        found = inventory.handler(target, LambdaContext())
        evidence = load(found["evidence"], account.session.client("s3"))
    assert {n["instance_id"] for n in evidence["nodes"]} == {w.head.instance_id, *(n.instance_id for n in w.compute)}
    assert evidence["node_scope"]["narrowed_to"] is None
    assert "could not be located" in evidence["node_scope"]["said"] and "row cap" in evidence["node_scope"]["said"]


def test_an_application_xid_13_alone_narrows_to_no_node_and_the_audit_is_the_whole_clusters(
        world_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = fleet_world(3)
    write(w, 2, TRIPPED, xid_line(w.compute[2].hostname, 13, "pid=2211, name=python3, Graphics SM Warp Exception"))
    with account_for(w, world_file, monkeypatch) as account:
        result = watch_audit(account)
    assert set(verdicts(result)) == {w.head.instance_id, *(n.instance_id for n in w.compute)}
    assert result["narrowed_to"] is None
    assert result["cluster_state"][0] == ("audit of the whole cluster: the lines that tripped the Xid watch were "
                                          "searched for in the minutes around the alarm, and no stream holds such a "
                                          "line, so they name no node of the cluster")


def test_on_hyperpod_the_node_streams_of_the_cluster_log_group_name_the_node(
        world_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HyperPod writes each node's lines to `<instance group>/<instance-id>` in the cluster's log group."""
    w = HyperPodWorld("hp-train", gpu_nodes=3, gpu_type="ml.p5.48xlarge")
    for node in w.gpu:
        w.kernel_stream(w.group, f"{node.group}/{node.instance_id}", at(-48), at(12, 25), host=node.hostname)
    tripped = w.gpu[2]
    w.stream(w.group, f"{tripped.group}/{tripped.instance_id}", events=[(TRIPPED, xid_line(tripped.hostname, 79))])
    with account_for(w, world_file, monkeypatch, "hp-train") as account:
        result = watch_audit(account, "hp-train")
    assert verdicts(result) == {tripped.instance_id: "REBOOT"} and result["cluster"]["kind"] == "hyperpod-slurm"
    assert result["narrowed_to"] == [tripped.instance_id]
    assert "the rest of the cluster (3 node(s)) is audited hourly" in result["cluster_state"][0]  # controller + 2
