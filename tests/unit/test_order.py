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
