"""What on-call reads first (issue #49 items 2, 3, 6): the urgent node tables open at any size and the rest collapsed,
the recommended actions right under the verdict (a pre-flight's checks right after its readiness), coverage gaps above
the LEAVE ALONE rows in every output, `--coverage` to filter on them, and a report that fits a 390-px phone with no
sideways scroll, checked in the real browser."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers.worlds import aws_for
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.devtools.demo import demo_request, demo_worlds
from gpuaudit.embedded.world import load_world
from gpuaudit.model.result import CoverageRow, NodeResult
from gpuaudit.pipeline import run_audit
from gpuaudit.report.html import render_html
from gpuaudit.report.order import coverage_gap, worst_first

HOUR = datetime(2026, 10, 1, 3, tzinfo=UTC)


def node(iid: str, verdict: str | None, status: str = "Measured", empty: bool = False) -> NodeResult:
    rows = [CoverageRow(log_group="/aws/g", log_stream=f"{iid}.syslog", source_kind="kernel", status=status,  # type: ignore[arg-type]
                        empty_hours=[HOUR] if empty else [])]
    return NodeResult(instance_id=iid, status="Running", verdict=verdict, xid_status=status, coverage=rows)  # type: ignore[arg-type]


def test_coverage_gaps_stand_above_the_leave_alone_rows_and_below_every_verdict_that_asks_something() -> None:
    nodes = [node("i-1", "LEAVE ALONE"), node("i-2", None, "No HMA detections", empty=True), node("i-3", "MONITOR"),
             node("i-4", "LEAVE ALONE", empty=True), node("i-5", None), node("i-6", "REBOOT"),
             node("i-7", None, "Not observable")]
    assert [n.instance_id for n in worst_first(nodes)] == ["i-6", "i-3", "i-2", "i-4", "i-7", "i-1", "i-5"]
    assert [coverage_gap(n) for n in nodes] == [False, True, False, True, False, False, True]


def _fleet_html(counts: dict[str | None, int]) -> str:
    from gpuaudit.model.result import Result

    nodes = [node(f"i-{verdict or 'none'}-{k:04d}".replace(" ", "_"), verdict) for verdict, n in counts.items()
             for k in range(n)]
    nodes += [node(f"i-gap-{k:03d}", None, "No HMA detections", empty=True) for k in range(34)]
    base = run_audit(aws_for(load_world(demo_worlds()[0]["path"])), demo_request(demo_worlds()[0]))
    return render_html(Result.model_validate({**base.model_dump(by_alias=True), "nodes": [
        n.model_dump(by_alias=True) for n in nodes]}))


def _details(html: str) -> dict[str, bool]:
    """Each node table's summary text → whether it starts open."""
    section = html.split("<h2>Node verdicts</h2>", 1)[1]
    return {re.sub(r"<[^>]+>", "", m.group(2)).strip(): bool(m.group(1))
            for m in re.finditer(r'<details class="verdict"( open)?><summary>(.*?)</summary>', section)}


def test_at_fleet_size_replace_not_observable_and_reboot_open_and_the_rest_collapsed() -> None:
    # Given 42 REPLACE, 184 REBOOT, 27 MONITOR and 230 LEAVE ALONE nodes, and 34 with an HMA coverage gap
    tables = _details(_fleet_html({"REPLACE": 42, "REBOOT": 184, "MONITOR": 27, "LEAVE ALONE": 230}))
    opened = [title.split(" ×")[0] for title, is_open in tables.items() if is_open]
    shut = [title.split(" ×")[0] for title, is_open in tables.items() if not is_open]
    assert any("REPLACE" in t for t in opened) and any("REBOOT" in t for t in opened)
    assert any("coverage gap" in t for t in opened)  # the 34 gap rows: read before the healthy rows
    assert any("MONITOR" in t for t in shut)
    titles = list(tables)
    gap = next(i for i, t in enumerate(titles) if "coverage gap" in t)
    monitor = next(i for i, t in enumerate(titles) if "MONITOR" in t)
    assert monitor < gap and "×34" in titles[gap]


@pytest.mark.parametrize("mode", ["incident", "preflight"])
def test_the_actions_come_right_under_the_verdict_and_a_preflights_checks_right_after_its_readiness(mode: str) -> None:
    entry = next(e for e in demo_worlds() if demo_request(e).mode == mode)
    html = render_html(run_audit(aws_for(load_world(entry["path"])), demo_request(entry)))
    headings = re.findall(r"<h2>([^<]+)</h2>", html)
    verdict = headings.index("Verdict")
    if mode == "preflight":
        assert headings[verdict + 1] == "Pre-flight checks"
        assert headings[verdict + 2] == "Recommended operator actions (not executed)"
    else:
        assert headings[verdict + 1] == "Recommended operator actions (not executed)"
        assert headings[verdict + 2] == "Root cause"


def test_coverage_filters_the_node_rows_by_status_or_gap() -> None:
    # Given the shipped world where one node's kernel stream went silent
    entry = next(e for e in demo_worlds() if "silent" in e["path"])
    args = ["audit", "--world", entry["path"], "--cluster", entry["cluster"], "--mode", entry["mode"],
            "--format", "ndjson", "--quiet"]

    def node_records(*extra: str) -> list[dict[str, object]]:
        out = CliRunner().invoke(app, [*args, *extra])
        assert out.exit_code == 0, out.output
        records = [json.loads(line) for line in out.stdout.splitlines()]
        return [r for r in records if r["record"] == "node"]

    everything, gaps, measured = (
        node_records(),
        node_records("--coverage", "GAP"),
        node_records("--coverage", "measured"),
    )
    # Then --coverage keeps exactly the rows of that status (GAP: not observable, or any empty hour)
    assert gaps and measured and {r["id"] for r in gaps}.isdisjoint(r["id"] for r in measured)
    assert all(r["coverage_status"] == "Measured" for r in measured)
    assert {r["id"] for r in gaps} | {r["id"] for r in measured} <= {r["id"] for r in everything}
    assert all(r["coverage_status"] != "Measured" or r["id"] not in {m["id"] for m in measured} for r in gaps)
    spaced = node_records("--coverage", "not observable,NO_HMA_DETECTIONS")
    assert {r["id"] for r in spaced} == {r["id"] for r in everything if r["coverage_status"] == "Not observable"}
    bad = CliRunner().invoke(app, [*args, "--coverage", "healthy"])
    assert bad.exit_code == 2 and "not a coverage status" in bad.output


CHROMIUM = Path("/usr/bin/chromium")
PHONE = 390


def _page_width_at(page: Path, width: int, folder: Path) -> tuple[int, int, list[str]]:
    """The page's scroll width and client width in an iframe `width` px wide (Chromium's headless window is at least
    500 px), and which of the verdict, actions and checks reach past the right edge. The probe runs in the frame's
    parent (a test-only wrapper; the report itself keeps its CSP and has no script)."""
    probe = ("<script>addEventListener('load',()=>{const f=document.querySelector('iframe').contentDocument;"
             "const d=f.documentElement,w=d.clientWidth;const out=[];"
             "for(const e of f.querySelectorAll('.headline,.badge,ol li,table td')){const r=e.getBoundingClientRect();"
             "if(r.width&&r.right>w+1&&!e.closest('.hscroll'))out.push(e.tagName+':'+e.textContent.slice(0,40))}"
             "document.body.setAttribute('data-probe',JSON.stringify([d.scrollWidth,w,out.slice(0,5)]))});</script>")
    frame = folder / f"{page.stem}.at{width}.html"
    frame.write_text(f'<html><body style="margin:0"><iframe src="{page.name}" style="border:0;width:{width}px;'
                     f'height:2000px"></iframe>{probe}</body></html>', encoding="utf-8")
    run = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--allow-file-access-from-files",
            f"--user-data-dir={folder / 'profile'}",
            "--window-size=500,2000",
            "--virtual-time-budget=3000",
            "--dump-dom",
            frame.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    found = re.search(r'data-probe="([^"]*)"', run.stdout)
    assert found, f"chromium gave no measurement: {run.stderr[-1500:]}"
    import html
    scroll, client, wide = json.loads(html.unescape(found.group(1)))
    return scroll, client, wide


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (Debian: apt-get install -y chromium)")
@pytest.mark.parametrize("kind", ["incident", "preflight", "coverage"])
def test_at_390_px_the_page_never_scrolls_sideways_and_verdict_actions_and_checks_fit(
    kind: str, tmp_path: Path
) -> None:
    entry = next(e for e in demo_worlds() if demo_request(e).mode == kind)
    page = tmp_path / "report.html"
    page.write_text(render_html(run_audit(aws_for(load_world(entry["path"])), demo_request(entry))), encoding="utf-8")
    scroll, client, wide = _page_width_at(page, PHONE, tmp_path)
    assert client <= PHONE and scroll <= client, (scroll, client)
    assert wide == [], wide
