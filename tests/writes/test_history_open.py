"""History that remembers what is open (issue #37 item 4), written from RULES §7: a verdict that asks the operator to
do something (REPLACE, REBOOT, NOT OBSERVABLE's collection) is an action that stays open across audits — also once
its Xid has left the audit window and later audits give no verdict — until an audit shows it done: a reboot after
the signal (a boot banner, a reboot call), a replacement or relaunch, coverage Measured again, the cluster gone.
"A node the service already replaced or rebooted gets no command to do it again." Both stores read the same
spans through the same rule; `gpuaudit history` leads with the open actions, worst first, filters, and states the
span of the audits it found."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from test_fleet_memory import BUS, Fleet, cli, reboot_line, store_of, xid_line

from gpuaudit.model.history import HistoryRead, HistorySpan, HistoryStore, HistoryXid
from gpuaudit.model.timeutil import iso, parse_time
from gpuaudit.report.history import HistoryView, nodes_of, render_html, render_markdown
from gpuaudit.rules.history import actions_by_node, actions_of, open_actions
from gpuaudit.writes.history import SqliteHistory
from tests.helpers.worlds import at, node_of


def _read(store: HistoryStore, f: Fleet, until_hour: int) -> HistoryRead:
    return store.read(f.w.cluster, [f.node.instance_id], parse_time(at(-24)), parse_time(at(until_hour + 1)))


def _actions(store: HistoryStore, f: Fleet, until_hour: int) -> list:
    return actions_of(_read(store, f, until_hour).of(f.node.instance_id))


# -- the rule, on audits of a world --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "dynamodb"])
def test_a_reboot_never_done_stays_open_after_the_xid_leaves_the_window(kind: str, tmp_path: Path) -> None:
    f = Fleet()
    f.add(8, xid_line(f.node.hostname))  # Xid 79 (REBOOT, RULES §7), no reboot ever after it
    with store_of(kind, tmp_path) as store:
        results = [f.audit(end, store) for end in (10, 22, 34, 46)]
        actions = _actions(store, f, 46)
    assert node_of(results[0], f.node.instance_id).verdict == "REBOOT"
    assert [node_of(r, f.node.instance_id).verdict for r in results[1:]] == [None, None, None]  # out of the window
    (action,) = actions
    assert action.open and action.verdict == "REBOOT"
    assert action.given.audit_id == results[0].audit_id and action.signal == parse_time(at(8))
    assert action.audits_since == 3


@pytest.mark.parametrize("kind", ["sqlite", "dynamodb"])
def test_a_reboot_seen_after_the_signal_closes_it(kind: str, tmp_path: Path) -> None:
    f = Fleet()
    f.add(8, xid_line(f.node.hostname))
    f.add(20, reboot_line(f.node.hostname))  # the boot banner: the node rebooted after the Xid
    with store_of(kind, tmp_path) as store:
        results = [f.audit(end, store) for end in (10, 22, 34)]
        actions = _actions(store, f, 34)
    (action,) = actions
    assert not action.open and action.closed_at == results[1].window.end
    assert f"a boot at {at(20)}" in (action.closed_by or "") and results[1].audit_id in (action.closed_by or "")


def test_a_reboot_before_the_signal_closes_nothing(tmp_path: Path) -> None:
    f = Fleet()
    f.add(7, reboot_line(f.node.hostname))  # in the same window, but before the Xid
    f.add(8, xid_line(f.node.hostname))
    store = SqliteHistory(tmp_path)
    first = f.audit(10, store)
    assert node_of(first, f.node.instance_id).verdict == "REBOOT"
    f.audit(22, store)
    (action,) = _actions(store, f, 22)
    assert action.open


def test_a_replacement_closes_it(tmp_path: Path) -> None:
    f = Fleet()
    f.add(8, xid_line(f.node.hostname))
    store = SqliteHistory(tmp_path)
    f.audit(10, store)
    (instance,) = [i for i in f.w.section("ec2", "instances") if i["InstanceId"] == f.node.instance_id]
    instance["State"] = {"Code": 48, "Name": "terminated"}  # the operator terminated it (the fleet relaunches)
    later = f.audit(22, store)
    (action,) = _actions(store, f, 22)
    assert not action.open and action.closed_at == later.window.end
    assert (action.closed_by or "").startswith("replaced: already terminated")


def test_a_relaunch_after_the_signal_closes_a_replace(tmp_path: Path) -> None:
    f = Fleet()
    f.add(8, xid_line(f.node.hostname))
    f.add(30, reboot_line(f.node.hostname))
    f.add(56, xid_line(f.node.hostname))  # recurring on the same bus after a reboot: REPLACE (RULES §7)
    store = SqliteHistory(tmp_path)
    results = [f.audit(end, store) for end in (10, 32, 58)]
    assert node_of(results[2], f.node.instance_id).verdict == "REPLACE"
    assert open_actions(_read(store, f, 58).of(f.node.instance_id))[0].verdict == "REPLACE"
    (instance,) = [i for i in f.w.section("ec2", "instances") if i["InstanceId"] == f.node.instance_id]
    instance["LaunchTime"] = at(60)  # stopped and started: a new host
    f.audit(70, store)
    actions = _actions(store, f, 70)
    assert [(a.verdict, a.open) for a in actions] == [("REBOOT", False), ("REPLACE", False)]
    assert (actions[1].closed_by or "").startswith(f"relaunched at {at(60)}")


# -- the rule, on spans written as the RULES say --------------------------------------------------------------------

T0 = parse_time(at(0))


def span(iid: str, hour: int, verdict: str | None, *, status: str = "Measured", xid_hour: int | None = None,
         reboots: tuple[int, ...] = (), audits: int = 1, done: str | None = None, closed: str | None = None,
         through: int | None = None) -> HistorySpan:
    when = T0 + timedelta(hours=hour)
    xids = [HistoryXid(code=79, pci=BUS, first=T0 + timedelta(hours=xid_hour), last=T0 + timedelta(hours=xid_hour))
            ] if xid_hour is not None else []
    return HistorySpan(cluster="c", instance_id=iid, audit_id=f"a{hour:03d}", audit_time=when,
                       last_audit_id=f"a{(through or hour):03d}", through=T0 + timedelta(hours=through or hour),
                       audits=audits, mode="coverage", verdict=verdict, xid_status=status, xids=xids,
                       reboots=[T0 + timedelta(hours=h) for h in reboots], done=done,  # type: ignore[arg-type]
                       done_said=f"{done} (said by the audit)" if done else None, closed=closed)


def test_not_observable_stays_open_until_coverage_is_measured_again() -> None:
    spans = [span("i-1", 1, "NOT OBSERVABLE", status="Not observable"), span("i-1", 2, None, status="Not observable"),
             span("i-1", 3, None, status="Measured")]
    assert open_actions(spans[:2])[0].verdict == "NOT OBSERVABLE"
    (action,) = actions_of(spans)
    assert not action.open and "coverage Measured again (audit a003" in (action.closed_by or "")


def test_a_replace_supersedes_an_open_reboot_and_a_reboot_does_not_close_a_replace() -> None:
    spans = [span("i-1", 1, "REBOOT", xid_hour=0), span("i-1", 5, "REPLACE", xid_hour=4),
             span("i-1", 9, None, reboots=(8,))]
    reboot, replace = actions_of(spans)
    assert (reboot.verdict, reboot.open, replace.verdict, replace.open) == ("REBOOT", False, "REPLACE", True)
    assert (reboot.closed_by or "").startswith("superseded by REPLACE")


def test_an_action_the_same_audit_saw_done_is_not_open_and_the_cluster_gone_closes_every_one() -> None:
    assert actions_of([span("i-1", 1, "REBOOT", xid_hour=0, done="rebooted")]) == []
    spans = [span("i-1", 1, "REBOOT", xid_hour=0), span("i-1", 2, "NOT OBSERVABLE", status="Not observable"),
             span("i-1", 3, None, closed="cluster no longer exists")]
    assert [a.open for a in actions_of(spans)] == [False, False]


# -- `gpuaudit history` ----------------------------------------------------------------------------------------------


def fleet_history(tmp_path: Path) -> None:
    """Five nodes over two days of audits, as the rule reads them."""
    spans = [
        span("i-0000000000000000a", 1, None, audits=40, through=40),  # steady, no verdict
        span("i-0000000000000000b", 1, "REBOOT", xid_hour=0), span("i-0000000000000000b", 2, None, through=40,
                                                                    audits=38),  # REBOOT never done
        span("i-0000000000000000c", 1, "REBOOT", xid_hour=0), span("i-0000000000000000c", 4, None, reboots=(3,)),
        span("i-0000000000000000c", 5, None, through=40, audits=35),  # rebooted: changed, nothing open
        span("i-0000000000000000d", 1, "LEAVE ALONE", audits=40, through=40),  # steady LEAVE ALONE
        span("i-0000000000000000e", 10, "NOT OBSERVABLE", status="Not observable", through=40, audits=30),
    ]
    SqliteHistory(tmp_path).write(spans, 90, T0 + timedelta(hours=41))


def test_history_leads_with_open_actions_worst_first_and_states_the_span_found(tmp_path: Path) -> None:
    fleet_history(tmp_path)
    code, md = cli("--cluster", "c", "--history", str(tmp_path), "--days", "30")
    assert code == 0, md
    assert f"Audits found from {at(1)} to {iso(T0 + timedelta(hours=40))} (look-back asked: 30 day(s)" in md
    assert "Nodes: 5 — 2 with an action open, 1 changed with nothing open, 2 steady" in md
    assert md.index("## Open actions (2)") < md.index("## Nodes, worst first")
    opened = md[md.index("## Open actions"):md.index("## Nodes, worst first")]
    open_rows = [line for line in opened.splitlines() if line.startswith("| `i-")]
    assert [r.split(" | ")[:2] for r in open_rows] == [["| `i-0000000000000000e`", "NOT OBSERVABLE"],
                                                       ["| `i-0000000000000000b`", "REBOOT"]]
    table = md[md.index("## Nodes, worst first"):]
    rows = [line.split(" | ")[:2] for line in table.splitlines() if line.startswith("| `i-")]
    assert rows == [["| `i-0000000000000000e`", "NOT OBSERVABLE"], ["| `i-0000000000000000b`", "REBOOT"],
                    ["| `i-0000000000000000c`", "none"]]  # the two steady nodes are counted, not listed
    assert "Steady (nothing open, no verdict change): 2 node(s) — LEAVE ALONE 1, no verdict 1" in md
    code, one = cli("--cluster", "c", "--history", str(tmp_path), "--node", "i-0000000000000000b")
    assert code == 0 and "Nodes: 1 — 1 with an action open" in one
    assert (f"- open: REBOOT (reboot the node) given at {at(1)} in audit a001; no reboot, relaunch or replacement seen "
            "in 38 audit(s) since") in one
    assert "latest verdict none (Measured); open: REBOOT" in one


def test_a_signal_held_by_many_audits_is_one_timeline_row_and_one_signal(tmp_path: Path) -> None:
    held = [span("i-1", h, "REBOOT", xid_hour=0) for h in range(1, 25)]  # one Xid in 24 hourly windows
    SqliteHistory(tmp_path).write([*held, span("i-1", 25, None, reboots=(24,))], 90, T0 + timedelta(hours=26))
    code, md = cli("--cluster", "c", "--history", str(tmp_path), "--all")
    assert code == 0
    rows = [line for line in md.splitlines() if line.startswith(f"| {at(1)} ")]
    assert len(rows) == 1 and f"| {iso(T0 + timedelta(hours=24))} | 24 | coverage | REBOOT |" in rows[0]
    assert "hardware signals 1; reboots 1" in md and "done: REBOOT" in md
    code, text = cli("--cluster", "c", "--history", str(tmp_path), "--format", "json")
    assert len(json.loads(text)["nodes"][0]["timeline"]) == 25  # the JSON keeps the spans as stored


@pytest.mark.parametrize(("args", "expected"), [
    (["--open"], ["i-0000000000000000e", "i-0000000000000000b"]),
    (["--changed"], ["i-0000000000000000b", "i-0000000000000000c"]),  # b's verdict changed too (REBOOT → none)
    (["--verdict", "REBOOT"], ["i-0000000000000000b", "i-0000000000000000c"]),
    (["--verdict", "leave_alone"], ["i-0000000000000000d"]),
    (["--verdict", "REBOOT", "--open"], ["i-0000000000000000b"]),
    (["--verdict", "REPLACE"], []),
])
def test_history_filters_keep_only_the_nodes_asked_for(tmp_path: Path, args: list[str], expected: list[str]) -> None:
    fleet_history(tmp_path)
    code, text = cli("--cluster", "c", "--history", str(tmp_path), "--format", "json", *args)
    assert code == 0, text
    doc = json.loads(text)
    assert [n["instance_id"] for n in doc["nodes"]] == expected
    assert doc["filters"]
    code, md = cli("--cluster", "c", "--history", str(tmp_path), *args)
    assert f"Audits found from {at(1)} to {iso(T0 + timedelta(hours=40))}" in md  # the audits, whatever is kept
    assert ("no node matches the filters" in md) == (not expected)


def test_history_filter_with_a_word_that_is_no_verdict_exits_2(tmp_path: Path) -> None:
    fleet_history(tmp_path)
    code, text = cli("--cluster", "c", "--history", str(tmp_path), "--verdict", "REBOOOT")
    assert code == 2 and "--verdict" in text and "REBOOOT" in text


def test_the_json_keeps_every_node_with_its_open_actions(tmp_path: Path) -> None:
    fleet_history(tmp_path)
    code, text = cli("--cluster", "c", "--history", str(tmp_path), "--format", "json")
    doc = json.loads(text)
    assert len(doc["nodes"]) == 5 and doc["found"] == {"first_audit": at(1),
                                                       "last_audit": iso(T0 + timedelta(hours=40))}
    b = next(n for n in doc["nodes"] if n["instance_id"] == "i-0000000000000000b")
    assert b["standing"] == "REBOOT" and b["open_actions"][0]["audits_since"] == 38
    assert "latest verdict none" in b["summary"] and "open: REBOOT" in b["summary"]


def test_the_html_page_leads_with_open_actions_draws_a_date_axis_and_counts_the_steady_nodes(tmp_path: Path) -> None:
    fleet_history(tmp_path)
    code, page = cli("--cluster", "c", "--history", str(tmp_path), "--format", "html")
    assert code == 0
    assert page.index("<h2>Open actions (2)</h2>") < page.index('class="strip"')
    assert 'aria-label="date axis"' in page and ">09-01<" not in page  # 40 hours: hour ticks, not dates
    assert ">01 03:00<" in page and ">02 15:00<" in page  # every 3 hours on the hour
    assert page.count('class="strip"') == 3  # two open, one changed (in <details>); the steady two are counted
    assert (page.index("<details><summary>Nodes changed, nothing open")
            > page.index('aria-label="history of i-0000000000000000b"'))
    assert "Steady nodes, nothing open and no verdict change: 2 (LEAVE ALONE 1, no verdict 1)" in page
    code, everything = cli("--cluster", "c", "--history", str(tmp_path), "--format", "html", "--all")
    assert everything.count('class="strip"') == 5


def test_a_view_of_two_thousand_nodes_draws_only_those_open_or_changed() -> None:
    spans = [span(f"i-{i:017x}", 1, None, audits=24, through=24) for i in range(2000)]
    spans += [span("i-00000000000000fff", 1, "REBOOT", xid_hour=0), span("i-00000000000000fff", 2, None, through=24)]
    read = HistoryRead(store="test", since=T0, until=T0 + timedelta(hours=24), spans=spans)
    view = HistoryView(since=T0, until=T0 + timedelta(hours=24), days=1, actions=actions_by_node(spans))
    assert [n.instance_id for n in nodes_of(read, view)][0] == "i-00000000000000fff"
    page = render_html(read, "c", view)
    assert page.count('class="strip"') == 1 and "Steady nodes, nothing open and no verdict change: 2000" in page
    assert len(render_markdown(read, "c", view).splitlines()) < 40


def test_the_history_page_in_a_browser_shows_the_open_reboot_above_the_fold_at_two_thousand_nodes(
        tmp_path: Path) -> None:
    from gpuaudit.devtools.history_bench import page_height
    from tests.report.test_html_browser import CHROMIUM, CONSOLE, HEIGHT, WIDTH, exact_pixels, pixels, screenshot

    if not CHROMIUM.exists():
        pytest.skip("headless browser check needs /usr/bin/chromium (Debian: apt-get install -y chromium)")
    spans = [span(f"i-{i:017x}", 1, None, audits=72, through=72) for i in range(2000)]
    never = "i-00000000000abcdef"  # REBOOT for the 24 audits its Xid was in the window, then never done
    spans += [span(never, 1, "REBOOT", xid_hour=0, audits=24, through=24), span(never, 25, None, audits=48, through=72)]
    SqliteHistory(tmp_path).write(spans, 90, T0 + timedelta(hours=73))
    code, page = cli("--cluster", "c", "--history", str(tmp_path), "--format", "html")
    assert code == 0
    (tmp_path / "report.html").write_text(page, encoding="utf-8")
    png, stderr = screenshot(tmp_path / "report.html", tmp_path)
    width, height, rows = pixels(png)
    assert (width, height) == (WIDTH, HEIGHT)
    assert not [line for line in stderr.splitlines() if CONSOLE.search(line)]
    reboot_amber = exact_pixels(rows, (0xE6, 0x9F, 0x00))  # the legend swatch is 168 px; the strip's third ~5,000
    assert reboot_amber > 2000, f"{reboot_amber} REBOOT pixels above the fold: the open action's strip is not shown"
    height_px = page_height(page)
    assert height_px is not None and height_px < 1500, f"{height_px} px for 2,000 steady nodes and one open"


def test_a_span_dated_outside_the_readable_years_is_said_not_hidden(tmp_path: Path) -> None:
    """Issue #48 item 9: a span dated 9999 (a wrong clock, an edited history) is outside what `history` shows; it
    says so, with the date, instead of leaving the node out without a word."""
    far = parse_time("9999-01-01T00:00:00Z")
    future = span("i-2", 1, "REPLACE").model_copy(update={"audit_time": far, "through": far, "audit_id": "z999"})
    SqliteHistory(tmp_path).write([span("i-1", 1, "LEAVE ALONE"), future], 90, T0 + timedelta(hours=2))
    code, md = cli("--cluster", "c", "--history", str(tmp_path), "--all")
    assert code == 0, md
    assert "1 recorded span(s) dated outside 1970-2100 are not shown" in md and "9999-01-01" in md
    assert "i-1" in md
