"""Issue #49 item 9: events a rule writer can act on. `Resources` carries the node's instance ARN and the cluster's
ARN; one event per node per audit (a node's new verdict and its lost coverage are one event, not a second one
repeating the verdict); the reason code says what the verdict rests on — an Xid 63 whose message asks for a GPU
reset (RULES §6: a remap pending activation → REBOOT) is `informational-xid`, a non-Xid memory line
`memory-signal`, never a bare `node-status`."""

from __future__ import annotations

from typing import Any

from helpers.event_patterns import matches
from helpers.worlds import ACCOUNT, REGION, HyperPodWorld, PClusterWorld, at

from gpuaudit.model.result import Result
from gpuaudit.report import events
from gpuaudit.report.records import records
from gpuaudit.writes.sinks import compare


def sent(result: Result) -> list[dict[str, Any]]:
    """The audit's events against an empty latest state, as a rule sees them."""
    import json

    return [{"source": e["Source"], "detail-type": e["DetailType"], "resources": e.get("Resources", []),
             "detail": json.loads(e["Detail"])} for e in events.entries(result, compare(result, {}).records)]


def hyperpod_with_line(message: str) -> tuple[HyperPodWorld, str]:
    """One HyperPod GPU node whose kernel stream is live all window and logs `message` at 09:00."""
    w = HyperPodWorld(gpu_nodes=1)
    node = w.gpu[0]
    stream = w.kernel_stream(w.group, f"{node.instance_id}/kernel", at(-10), at(12, 25), host=node.hostname)
    w.stream(w.group, stream, events=[(at(9), f"{node.hostname} kernel: {message}")])
    return w, node.instance_id


REMAP_PENDING = ("NVRM: Xid (PCI:0000:53:00): 63, pid=0, Row Remapper: New row marked for remapping, reset gpu to "
                 "activate.")


def test_an_event_names_the_instance_and_the_cluster_arn_and_a_rule_matches_on_them() -> None:
    w, iid = hyperpod_with_line(REMAP_PENDING)
    result = w.audit(w.cluster, since=at(6), until=at(10))
    cluster_arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{w.cluster_id}"
    instance_arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{iid}"
    (event,) = [e for e in sent(result) if e["detail"]["node"] == iid]
    assert event["resources"] == [instance_arn, cluster_arn]
    assert matches({"source": ["gpuaudit"], "resources": [cluster_arn]}, event)
    assert matches({"resources": [{"prefix": f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/"}]}, event)


def test_a_row_remap_pending_reboot_says_its_xid_class_not_node_status() -> None:
    w, iid = hyperpod_with_line(REMAP_PENDING)
    result = w.audit(w.cluster, since=at(6), until=at(10))
    (node,) = [n for n in result.nodes if n.instance_id == iid]
    assert (node.verdict, node.deciding_xid) == ("REBOOT", 63)
    (record,) = [r for r in records(result) if r["id"] == iid]
    (event,) = [e for e in sent(result) if e["detail"]["node"] == iid]
    assert record["reason_code"] == event["detail"]["reason_code"] == "informational-xid"


def test_a_non_xid_memory_line_is_a_memory_signal() -> None:
    # RULES §6: `Pending Page Blacklist : Yes` (a non-Xid memory signal, as nvidia-smi -q prints it) → REBOOT, with
    # no Xid at all
    w, iid = hyperpod_with_line("nvidia-smi: Pending Page Blacklist          : Yes")
    result = w.audit(w.cluster, since=at(6), until=at(10))
    (node,) = [n for n in result.nodes if n.instance_id == iid]
    assert node.verdict == "REBOOT" and node.deciding_xid is None
    (record,) = [r for r in records(result) if r["id"] == iid]
    assert record["reason_code"] == "memory-signal"


def test_a_hardware_xid_keeps_its_code() -> None:
    w, iid = hyperpod_with_line("NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus.")
    result = w.audit(w.cluster, since=at(6), until=at(10))
    (record,) = [r for r in records(result) if r["id"] == iid]
    assert (record["verdict"], record["reason_code"]) == ("REBOOT", "hardware-xid")


def test_one_event_per_node_per_audit_with_every_change_it_carries() -> None:
    # Given three GPU nodes with no log stream: each a new NOT OBSERVABLE verdict and a coverage lost
    w = PClusterWorld(n_compute=3)
    result = w.audit(w.cluster, since=at(6), until=at(10))
    changes = compare(result, {}).records
    blind = {n.instance_id for n in result.nodes if n.verdict == "NOT OBSERVABLE"}
    assert len(blind) == 3 and len([c for c in changes if c.node in blind]) == 6
    got = sent(result)
    assert sorted(e["detail"]["node"] for e in got) == sorted(blind)  # one each
    for event in got:
        assert (event["detail-type"], event["detail"]["changes"]) == (
            "GPU Audit Node Verdict Changed", ["new-verdict", "coverage-lost"])
        assert event["detail"]["verdict_code"] == "NOT_OBSERVABLE"
        assert event["detail"]["coverage"] == "Not observable"
