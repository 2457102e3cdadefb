"""Reports that stay readable at fleet size (#37 items 2 and 3, RULES §11): a gap that names many nodes counts them
and names the exceptions only, every node staying findable in the JSON result; (further behaviours below)."""

from __future__ import annotations

from datetime import timedelta

from gpuaudit.model.timeutil import iso, parse_time
from gpuaudit.rules.actions import NAMED_UP_TO
from tests.helpers.worlds import PClusterWorld, at

SINCE, UNTIL = at(6), at(10)
FM_STARTED = 'systemd[1]: Started "Nvidia Fabric Manager".'


def fabric_world(nodes: int, started: int) -> PClusterWorld:
    """`nodes` P5 (NVSwitch) nodes with live kernel streams; the first `started` logged Fabric Manager's start at
    boot, the others never did (RULES §2: Fabric Manager Not observable on those)."""
    w = PClusterWorld(n_compute=nodes, launch=at(-24))
    boot = iso(parse_time(at(-24)) + timedelta(minutes=1))
    for i, n in enumerate(w.compute):
        w.healthy(n, at(-24), at(12, 25))
        if i < started:
            w.stream(w.group, w.stream_name(n), events=[(boot, f"{n.hostname} {FM_STARTED}")])
    return w


def fm_gap(result_gaps: list[str]) -> str:
    (gap,) = [g for g in result_gaps if "Fabric Manager start line" in g]
    return gap


def test_a_gap_on_every_nvswitch_node_says_all_and_lists_none_keeping_each_in_the_json() -> None:
    w = fabric_world(NAMED_UP_TO + 2, started=0)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    gap = fm_gap(result.visibility_gaps)
    assert f"not found for all {NAMED_UP_TO + 2} NVSwitch nodes in any source searched" in gap
    assert not any(n.instance_id in gap for n in w.compute)
    (listed,) = [g for g in result.gap_nodes if g.gap == gap]
    assert sorted(listed.nodes) == sorted(n.instance_id for n in w.compute)


def test_a_gap_on_most_nodes_counts_them_and_names_only_the_exceptions() -> None:
    w = fabric_world(NAMED_UP_TO + 4, started=2)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    gap = fm_gap(result.visibility_gaps)
    fine, unseen = w.compute[:2], w.compute[2:]
    assert f"not found for {len(unseen)} of {len(w.compute)} NVSwitch nodes (all but " in gap
    assert all(n.instance_id in gap for n in fine) and not any(n.instance_id in gap for n in unseen)
    (listed,) = [g for g in result.gap_nodes if g.gap == gap]
    assert sorted(listed.nodes) == sorted(n.instance_id for n in unseen)
    # the Markdown report carries the same short line: no bullet names every node
    (bullet,) = [line for line in result.report_markdown.splitlines() if "Fabric Manager start line" in line]
    assert not any(n.instance_id in bullet for n in unseen)


def test_a_gap_on_few_nodes_names_each_with_the_count() -> None:
    w = fabric_world(NAMED_UP_TO + 4, started=NAMED_UP_TO + 2)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    gap = fm_gap(result.visibility_gaps)
    unseen = w.compute[NAMED_UP_TO + 2:]
    assert f"{', '.join(n.instance_id for n in unseen)} (2 of {len(w.compute)} NVSwitch nodes)" in gap
