"""`gpuaudit bench-history` (issue #18 item 5): the figures it prints are measured on stores filled through the
product's own merge-and-write path, and both stores return the same spans."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.devtools.history_bench import HistoryBenchConfig, run_history_bench
from gpuaudit.model.history import MAX_SPAN
from gpuaudit.writes.history import HISTORY_SHARDS


def test_a_quiet_fleet_costs_one_span_per_node_per_seven_days() -> None:
    # No Xid, no silence: every hourly entry extends the node's span, cut only at MAX_SPAN
    days = 10
    figures = run_history_bench(HistoryBenchConfig(nodes=12, days=days, lookback_days=days, xid_rate=0,
                                                   silent_rate=0))
    spans_per_node = -(-days * 24 // int(MAX_SPAN.total_seconds() // 3600))  # ceil(240 h / 168 h) = 2
    assert figures["fill"]["spans_stored"] == 12 * spans_per_node
    assert figures["fill"]["writes_per_audit"] == 12
    assert figures["sqlite"]["spans"] == 12 * spans_per_node


def test_xids_cost_one_item_per_audit_and_both_stores_read_the_same_spans() -> None:
    quiet = run_history_bench(HistoryBenchConfig(nodes=8, days=3, lookback_days=2, xid_rate=0, silent_rate=0))
    noisy = run_history_bench(HistoryBenchConfig(nodes=8, days=3, lookback_days=2, xid_rate=2, silent_rate=1,
                                                 seed=3, moto=True))
    assert noisy["fill"]["spans_stored"] > quiet["fill"]["spans_stored"] + 8
    assert noisy["same_spans"] is True
    dyn = noisy["dynamodb_moto"]
    assert dyn["spans"] == noisy["sqlite"]["spans"]
    # read once for the cluster, not per node: the snapshot's head and pieces, one Query per shard of closed spans
    assert dyn["requests"] == 1 + 1 + HISTORY_SHARDS
    assert dyn["items_read"] >= dyn["spans"] - 8 + 2  # closed spans one item each, the 8 latest in the snapshot
    # the computed DynamoDB cost reads what moto's Query of the same key condition read
    assert noisy["dynamodb"]["items_read"] == dyn["items_read"]
    assert noisy["dynamodb"]["requests"] == dyn["requests"]
    assert noisy["dynamodb"]["read_request_units"] >= 1 + HISTORY_SHARDS


@pytest.mark.parametrize("args, flag", [(["--nodes", "0"], "--nodes"), (["--days", "3", "--lookback-days", "5"],
                                                                         "--lookback-days"),
                                        (["--xid-rate", "-1"], "--xid-rate"), (["--format", "csv"], "--format")])
def test_bad_input_is_refused_naming_the_flag(args: list[str], flag: str) -> None:
    out = CliRunner().invoke(app, ["bench-history", *args])
    assert out.exit_code == 2
    assert flag in out.output


def test_json_output_carries_the_figures() -> None:
    out = CliRunner().invoke(app, ["bench-history", "--nodes", "3", "--days", "1", "--lookback-days", "1",
                                   "--format", "json"])
    assert out.exit_code == 0, out.output
    figures = json.loads(out.output)
    assert figures["config"]["nodes"] == 3 and figures["fill"]["audits"] == 24


def test_reboots_never_done_stay_open_in_what_history_shows_and_the_fleet_is_otherwise_the_same() -> None:
    def run(unrebooted: float) -> dict:
        return run_history_bench(HistoryBenchConfig(nodes=20, days=4, lookback_days=4, xid_rate=1, silent_rate=0,
                                                    unrebooted=unrebooted, seed=2))

    done, never = run(0.0), run(1.0)
    # the same Xids at the same times; only the reboots after them are missing
    assert done["fill"]["spans_stored"] > never["fill"]["spans_stored"] - 20
    assert never["shown"]["markdown_open_lines"] > done["shown"]["markdown_open_lines"]
    assert never["shown"]["html_kb"] > 0 and done["shown"]["markdown_lines"] > 0


def test_the_page_height_is_the_browsers_layout() -> None:
    from gpuaudit.devtools.history_bench import CHROMIUM, page_height

    if not CHROMIUM.exists():
        pytest.skip("needs /usr/bin/chromium (Debian: apt-get install -y chromium)")
    csp = "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\">"
    page = (f"<!DOCTYPE html><html><head>{csp}<style>body{{margin:0}}</style></head><body>"
            "<div style='height:4321px'>x</div><details><summary style='height:20px'>s</summary>"
            "<div style='height:9999px'></div></details></body></html>")
    assert page_height(page) == 4321 + 20  # the closed <details> adds its summary only
