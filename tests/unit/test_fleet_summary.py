"""Answers that summarise at fleet scale (#20 item 1): the headline counts verdicts and names the few worst nodes,
and an alert is one bounded message, at 10,000 nodes as at 2.

The headline feeds the alert (SNS, Chatbot) and the findings summary; the report keeps every node.
"""

from __future__ import annotations

import re

from gpuaudit.model.result import NodeResult, Verdict
from gpuaudit.report.alert import dedup_key
from gpuaudit.report.fleet import EVERY_NODE_UP_TO
from gpuaudit.report.html import render_html
from gpuaudit.report.markdown import render
from gpuaudit.rules.context import Judged
from gpuaudit.rules.summary import HEADLINE_NODES, headline_for
from gpuaudit.writes.sinks import ALERT_MAX_CHARS, Change, alert_message
from tests.unit.test_consistency import evidence, gpu_node, result

FLEET = 10_000


def node(i: int, verdict: Verdict | None = None, status: str = "Measured") -> NodeResult:
    return gpu_node(instance_id=f"i-{i:017x}", verdict=verdict, xid_status=status)


def fleet(verdicts: dict[int, Verdict], blind: frozenset[int] = frozenset()) -> list[NodeResult]:
    return [node(i, verdicts.get(i), "Not observable" if i in blind else "Measured") for i in range(FLEET)]


def headline(nodes: list[NodeResult]) -> str:
    return headline_for(Judged(evidence(), nodes, {}, {}, []), None, None)[0]


def test_ten_thousand_nodes_with_signals_give_counts_and_the_worst_first() -> None:
    # 3 REPLACE scattered late in the fleet, 50 REBOOT, 347 MONITOR: 400 nodes with a GPU signal
    verdicts: dict[int, Verdict] = {i: "MONITOR" for i in range(0, 347)}
    verdicts |= {i: "REBOOT" for i in range(1000, 1050)}
    verdicts |= {9997: "REPLACE", 5000: "REPLACE", 7000: "REPLACE"}
    text = headline(fleet(verdicts))
    assert len(text) < 1000, len(text)
    assert "400 nodes (3 REPLACE, 50 REBOOT, 347 MONITOR)" in text
    named = re.findall(r"i-[0-9a-f]{17} (REPLACE|REBOOT|MONITOR)", text)
    assert named == ["REPLACE"] * 3 + ["REBOOT"] * (HEADLINE_NODES - 3)  # the worst, whatever their position
    assert f"+{400 - HEADLINE_NODES} more in the report" in text
    assert f"Coverage of {FLEET} GPU node(s): {FLEET} Measured." in text


def test_ten_thousand_nodes_with_blind_ones_name_a_few_and_count_the_rest() -> None:
    text = headline(fleet({}, blind=frozenset(range(0, FLEET, 100))))
    assert len(text) < 600, len(text)
    assert "coverage Not observable on 100 nodes, first i-" in text and "(+95 more in the report)" in text
    assert "9900 Measured, 100 Not observable." in text


def test_a_small_cluster_names_every_node() -> None:
    nodes = [node(1, "REBOOT"), node(2, "REPLACE"), node(3)]
    text = headline(nodes)
    assert text.startswith(f"GPU signals found: {nodes[1].instance_id} REPLACE; {nodes[0].instance_id} REBOOT.")
    blind = headline([node(1, status="Not observable"), node(2)])
    assert blind.startswith(f"GPU errors cannot be ruled out: coverage Not observable on {nodes[0].instance_id}.")


def test_an_alert_is_one_bounded_message_at_any_fleet_size() -> None:
    nodes = fleet({i: "REBOOT" for i in range(FLEET)})
    res = result(nodes=nodes, headline=headline(nodes))
    changes = [Change(1, "REBOOT", "new verdict REBOOT", node=n.instance_id,
                      detail="Xid 79 " + "x" * 300) for n in nodes]
    text = alert_message(res, changes, report_link="https://example.invalid/report.html")
    assert len(text) <= ALERT_MAX_CHARS
    assert nodes[0].instance_id in text and "more (see the report)" in text
    # the pointer and the dedup key survive the cut
    assert text.rstrip().split("\n")[-2:] == ["Report: https://example.invalid/report.html",
                                               f"Dedup key: {dedup_key(res, changes)}"]
    # a few changes are all listed, each cut to one phone line
    few = alert_message(res, changes[:3])
    assert all(n.instance_id in few for n in nodes[:3]) and "more (see the report)" not in few
    # a headline of any length (a branch's evidence) cannot push the alert past the bound
    huge = alert_message(result(nodes=nodes, headline="Root cause (Proven): " + "y" * 50_000), changes)
    assert len(huge) <= ALERT_MAX_CHARS and "y" * 1000 not in huge


def test_the_markdown_report_leads_with_exceptions_and_counts_healthy_nodes_per_group() -> None:
    nodes = [n.model_copy(update={"instance_group": "gpu-a" if i % 2 else "gpu-b"})
             for i, n in enumerate(fleet({17: "REPLACE"}, blind=frozenset({4242})))]
    text = render(result(nodes=nodes, headline=headline(nodes)))
    assert len(text) < 50_000, len(text)  # one line per node would be megabytes
    for exception in (nodes[17], nodes[4242]):
        assert f"`{exception.instance_id}`" in text
    assert "`" + nodes[18].instance_id + "`" not in text  # a healthy node is counted, not listed
    assert "4999 more node(s) of group `gpu-a`" in text and "4999 more node(s) of group `gpu-b`" in text
    # RULES §11: up to EVERY_NODE_UP_TO nodes in scope every node is listed; one more and the healthy are counted
    small = nodes[:EVERY_NODE_UP_TO]
    assert all(f"`{n.instance_id}`" in render(result(nodes=small, headline="h")) for n in small)
    assert "more node(s) of group" in render(result(nodes=nodes[:EVERY_NODE_UP_TO + 1], headline="h"))


def test_the_html_report_draws_exceptions_and_counts_the_healthy_rest() -> None:
    nodes = [n.model_copy(update={"instance_group": "gpu-a", "instance_type": "p5.48xlarge"})
             for n in fleet({17: "REPLACE"}, blind=frozenset({4242}))]
    page = render_html(result(nodes=nodes, headline=headline(nodes)))
    assert len(page) < 600_000, len(page)  # a row and a lane per node would be tens of megabytes
    assert nodes[17].instance_id in page and nodes[4242].instance_id in page
    assert nodes[18].instance_id not in page
    assert "9998 more node(s) of group <code>gpu-a</code> (p5.48xlarge: 9998 Measured)" in page
    assert "9999 node(s) live every hour are counted in the strip, not drawn" in page


def test_a_branch_headline_ends_its_sentence_before_the_coverage_count() -> None:
    nodes = [node(1)]
    text = headline_for(Judged(evidence(), nodes, {}, {}, []),
                        "Root cause: Not observable — the deciding evidence is missing (see visibility gaps)", None)[0]
    assert "(see visibility gaps). Coverage of 1 GPU node(s)" in text
    already = headline_for(Judged(evidence(), nodes, {}, {}, []), "Leading hypothesis: branch B — ends.", None)[0]
    assert "ends.. " not in already and "ends. Coverage" in already
