"""RULES §11: identical actions on many nodes are one action with the list of nodes, worst verdict first, with one
command taking every ID from an IDs file beside the report (chunked as the API allows)."""

from __future__ import annotations

from helpers.worlds import PClusterWorld, at

from gpuaudit.report.markdown import LISTED_IDS, action_lines, ids_files
from gpuaudit.rules.actions import EC2_IDS_PER_CALL


def xid_world(nodes: int, code: int = 79) -> PClusterWorld:
    """`nodes` GPU nodes, each logging one Xid `code` at 09:00 on a live kernel stream."""
    w = PClusterWorld(n_compute=nodes)
    for node in w.compute:
        stream = w.healthy(node, at(-2), at(13))
        w.stream(w.group, stream, events=[(at(9), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, "
                                                  "pid=2211, name=python3")])
    return w


def test_many_reboot_nodes_are_one_action_with_every_id_and_one_chunked_command() -> None:
    w = xid_world(LISTED_IDS + 2)
    result = w.audit(w.cluster, since=at(6), until=at(10))
    rebooted = sorted(n.instance_id for n in result.nodes if n.verdict == "REBOOT")
    assert len(rebooted) == LISTED_IDS + 2

    (group,) = [g for g in result.action_groups if g.verdict == "REBOOT"]
    # one action naming every node (the JSON result keeps them all), one command over the IDs file
    assert sorted(group.nodes) == rebooted and group.ids_file == "reboot-ids.txt"
    assert [a for a in result.actions if a.startswith("Reboot ")] == [group.action]
    assert group.action.startswith(f"Reboot {len(rebooted)} nodes (REBOOT): drain them, then "
                                   f"`xargs -n {EC2_IDS_PER_CALL} aws ec2 reboot-instances --instance-ids < "
                                   "<report>.reboot-ids.txt`")
    assert all(iid in group.action for iid in rebooted)
    assert ids_files(result) == {"reboot-ids.txt": "\n".join(group.nodes) + "\n"}
    # the report names the first LISTED_IDS and says where the rest are
    (line,) = [a for a in action_lines(result) if a.startswith("Reboot ")]
    assert line.endswith("… and 2 more (all in <report>.reboot-ids.txt and the JSON result)")
    assert sum(iid in line for iid in rebooted) == LISTED_IDS
    assert sum(a.startswith("Reboot ") for a in result.report_markdown.split("\n. ")) <= 1
    assert result.report_markdown.count("aws ec2 reboot-instances") == 1


def test_one_node_keeps_its_own_command() -> None:
    w = xid_world(1)
    result = w.audit(w.cluster, since=at(6), until=at(10))
    (node,) = [n for n in result.nodes if n.verdict == "REBOOT"]
    assert f"Reboot {node.instance_id}: drain it, then `aws ec2 reboot-instances --instance-ids {node.instance_id}`" \
        in result.actions
    assert ids_files(result) == {}
