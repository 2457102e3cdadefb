"""The one verdict order, worst first (report/order.py), every human output shares."""

from __future__ import annotations

from gpuaudit.model.result import NodeResult
from gpuaudit.report.order import VERDICT_SEVERITY, verdict_counts, verdict_rank, worst_first


def node(iid: str, verdict: str | None) -> NodeResult:
    return NodeResult(instance_id=iid, status="Running", verdict=verdict, xid_status="Measured")  # type: ignore[arg-type]


def test_nodes_sort_replace_not_observable_reboot_monitor_leave_alone_then_no_verdict():
    nodes = [node("i-1", "LEAVE ALONE"), node("i-2", None), node("i-3", "REBOOT"), node("i-4", "MONITOR"),
             node("i-5", "NOT OBSERVABLE"), node("i-6", "REPLACE")]
    assert [n.verdict for n in worst_first(nodes)] == ["REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR",
                                                        "LEAVE ALONE", None]


def test_same_verdict_orders_by_instance_id_and_counts_leave_out_absent_verdicts():
    nodes = [node("i-b", "REBOOT"), node("i-a", "REBOOT"), node("i-c", "LEAVE ALONE")]
    assert [n.instance_id for n in worst_first(nodes)] == ["i-a", "i-b", "i-c"]
    assert verdict_counts(nodes) == [("REBOOT", 2), ("LEAVE ALONE", 1)]
    assert verdict_rank(None) == len(VERDICT_SEVERITY) and verdict_rank("REPLACE") == 0


def test_the_reports_list_nodes_worst_first_however_many_are_healthy():
    """Markdown and HTML list the nodes split_healthy gives them: worst first, with few healthy nodes (all listed)
    and with many (the healthy rest counted per group)."""
    from gpuaudit.report.fleet import EVERY_NODE_UP_TO, split_healthy

    few = [node("i-1", "LEAVE ALONE"), node("i-2", "REBOOT"), node("i-3", "NOT OBSERVABLE"), node("i-4", "REPLACE")]
    assert [n.instance_id for n in split_healthy(few)[0]] == ["i-4", "i-3", "i-2", "i-1"]
    many = [node(f"i-h{k:04d}", None) for k in range(EVERY_NODE_UP_TO + 1)] + few[1:]
    listed, rest = split_healthy(many)
    assert [n.verdict for n in listed] == ["REPLACE", "NOT OBSERVABLE", "REBOOT"] and rest


def test_the_history_lists_nodes_worst_first_an_open_action_ranking_as_its_verdict_a_closed_one_last():
    from datetime import UTC, datetime

    from gpuaudit.model.history import HistoryRead, HistorySpan
    from gpuaudit.report.history import HistoryView, nodes_of, render_markdown
    from gpuaudit.rules.history import actions_by_node

    t0, t1 = datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 9, 2, tzinfo=UTC)

    def span(iid: str, when: datetime, verdict: str | None, closed: str | None = None) -> HistorySpan:
        return HistorySpan(cluster="c", instance_id=iid, audit_id=f"a{when.day}", audit_time=when,
                           last_audit_id=f"a{when.day}", through=when, mode="coverage", verdict=verdict,
                           xid_status="Measured", closed=closed)

    spans = [span("i-a", t0, "REPLACE"), span("i-a", t1, None, closed="cluster no longer exists"),
             span("i-b", t0, "REPLACE"), span("i-b", t1, "LEAVE ALONE"),
             span("i-c", t1, "REBOOT"), span("i-d", t0, "MONITOR"), span("i-e", t1, "NOT OBSERVABLE")]
    read = HistoryRead(store="sqlite", since=t0, until=t1, spans=spans, items_read=len(spans), requests=1)
    # i-b's REPLACE was never shown done (a LEAVE ALONE after it is no replacement): it stands at REPLACE (RULES §7)
    view = HistoryView(since=t0, until=t1, actions=actions_by_node(spans))
    assert [n.instance_id for n in nodes_of(read, view)] == ["i-b", "i-e", "i-c", "i-d", "i-a"]
    text = render_markdown(read, "c", view)
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `i-")]
    nodes_table = rows[-4:]  # the node rows (the open-actions table comes first); i-d is steady, counted
    assert nodes_table == ["| `i-b`", "| `i-e`", "| `i-c`", "| `i-a`"]
    assert "Steady (nothing open, no verdict change): 1 node(s) — MONITOR 1" in text
