"""The HTML report (RULES §11): the heatmap's empty cells are exactly the Result's empty hours,
every string is escaped, nothing is fetched from the network, and 2,000 nodes stay small."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import cache
from html.parser import HTMLParser

import pytest
from helpers.worlds import PClusterWorld, at, aws_for

from gpuaudit.devtools.demo import demo_name, demo_request, demo_worlds
from gpuaudit.embedded.world import load_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import (
    Branch,
    ClusterRef,
    CoverageRow,
    GpuError,
    NodeResult,
    Result,
    WindowOut,
)
from gpuaudit.model.timeutil import UTC, hours_between, iso, parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report.html import render_html

SHARED = {demo_name(entry): entry for entry in demo_worlds()}
PCLUSTER, HYPERPOD = "pcluster-capacity-block-expiry", "hyperpod-xid31-app-error"


@cache
def shared_result(name: str) -> Result:
    """A shared world through the whole pipeline, as `gpuaudit audit --world` runs it."""
    entry = SHARED[name]
    return run_audit(aws_for(load_world(entry["path"])), demo_request(entry))


class Page(HTMLParser):
    """Every start tag with its attributes, and the text, of one HTML document."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def empty_cells(self) -> dict[str, list[str]]:
        """Node → hours drawn empty: rects of class `empty`, one per run, `data-hours` listing its hours."""
        drawn: dict[str, list[str]] = {}
        for tag, attrs in self.tags:
            if tag == "rect" and "empty" in attrs.get("class", "").split():
                drawn.setdefault(attrs["data-node"], []).extend(attrs["data-hours"].split(","))
        return {node: sorted(hours) for node, hours in drawn.items()}

    def lanes(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for tag, attrs in self.tags:
            if tag == "g" and "data-lane" in attrs:
                out.setdefault(attrs["data-node"], []).append(attrs["data-lane"])
        return out


def deciding_row(node: NodeResult) -> CoverageRow | None:
    """The lane's documented choice: the Measured kernel-carrying stream, else the failing one with the
    fewest empty hours (then the most kernel lines)."""
    carrying = [c for c in node.coverage if c.source_kind == "kernel" and c.log_stream and (c.kernel_lines_ever or 0)]
    measured = [c for c in carrying if c.status == "Measured"]
    if measured:
        return measured[0]
    return min(carrying, key=lambda c: (len(c.empty_hours), -(c.kernel_lines_ever or 0)), default=None)


def expected_empty(result: Result) -> dict[str, list[str]]:
    out = {}
    for n in result.nodes:
        row = deciding_row(n)
        if row is not None and row.empty_hours:
            out[n.instance_id] = sorted(iso(h) for h in row.empty_hours)
    return out


# -- the heatmap is exact -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", [PCLUSTER, HYPERPOD])
def test_heatmap_empty_cells_equal_each_nodes_empty_hours(name):
    # Given a shared world audited through the pipeline
    result = shared_result(name)
    # When the HTML report is rendered and its SVG parsed
    page = Page(render_html(result))
    # Then every node has a lane, and its empty cells are exactly its kernel stream's empty hours
    assert set(page.lanes()) == {n.instance_id for n in result.nodes}
    assert page.empty_cells() == expected_empty(result)
    for node, hours in page.empty_cells().items():
        rows = [sorted(iso(h) for h in c.empty_hours) for n in result.nodes if n.instance_id == node
                for c in n.coverage]
        assert hours in rows, f"{node}: drawn hours match none of its coverage rows"


def test_pcluster_heatmap_shows_the_silent_hours_after_the_block_ended():
    page = Page(render_html(shared_result(PCLUSTER)))
    # Both compute nodes' kernel streams stop at ~11:00; the better stream of i-0e58… still held 11:00.
    assert page.empty_cells() == {
        "i-04d6608697a8d41be": ["2026-09-27T11:00:00Z", "2026-09-27T12:00:00Z"],
        "i-0e58b081006f7e3df": ["2026-09-27T12:00:00Z"],
    }
    assert page.lanes()["i-086e4d3cea27d2693"] == ["kernel"]


def test_hyperpod_hma_lanes_hold_one_state_and_the_xid_marker_names_code_stream_time():
    result = shared_result(HYPERPOD)
    html = render_html(result)
    page = Page(html)
    lanes = page.lanes()
    assert lanes["i-0cc3fc1626e53a130"] == ["hma"]
    assert lanes["i-05ec84d8dbc742547"] == ["hma"]
    assert page.empty_cells() == {}
    text = " ".join(page.text)
    assert "HMA: No HMA detections" in text and "HMA: Measured" in text
    markers = [a for t, a in page.tags if t == "path" and a.get("data-code") == "31"]
    assert [m["data-node"] for m in markers] == ["i-0cc3fc1626e53a130"]
    title = re.search(r'data-code="31"><title>([^<]*)</title>', html)
    assert title is not None
    assert "Xid 31" in title.group(1) and "2026-09-25T17:03:00Z" in title.group(1)
    assert "SagemakerHealthMonitoringAgent/gpu-g5-xl/i-0cc3fc1626e53a130" in title.group(1)


def test_interior_gap_and_late_launch_are_drawn_hour_exact():
    # Given a window 06:00–10:00 (padded 05:00–11:00): one node silent 07:00–09:00, one launched at 07:30
    # whose stream goes quiet at 10:00
    world = PClusterWorld(n_compute=2)
    gappy, late = world.compute
    world.healthy(gappy, at(4), at(7))
    world.lines(world.group, world.stream_name(gappy), at(9), at(12))
    world.section("ec2", "instances")[2]["LaunchTime"] = at(7, 30)
    world.healthy(late, at(7, 30), at(10))
    world.healthy(world.head, at(4), at(12))
    result = run_audit(aws_for(world.world()), AuditRequest(cluster=world.cluster, mode="incident",
                                                            since=parse_time(at(6)), until=parse_time(at(10))))
    # When rendered
    page = Page(render_html(result))
    # Then the drawn empty hours are the Result's, hour for hour
    assert page.empty_cells() == expected_empty(result)
    assert page.empty_cells()[gappy.instance_id] == [at(7), at(8)]
    assert page.empty_cells()[late.instance_id] == [at(10)]


# -- escaping, privacy, self-containment ----------------------------------------------------------------
INJECTION = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def hostile(result: Result) -> Result:
    """The result with a script in a log line, a stream name, a note, the headline and an action."""
    node = result.nodes[1]
    error = GpuError(time=result.window.start, code=79, class_="hardware", log_group="/aws/x",
                     log_stream=f'"><script>alert(2)</script>{node.instance_id}', message=f"kernel: NVRM: {INJECTION}")
    row = node.coverage[0].model_copy(update={"note": INJECTION})
    node = node.model_copy(update={"gpu_errors": [error], "coverage": [row, *node.coverage[1:]]})
    return result.model_copy(update={
        "nodes": [result.nodes[0], node, *result.nodes[2:]],
        "headline": f"{result.headline} {INJECTION}",
        "actions": [*result.actions, f"`{INJECTION}`"],
        "branches": [*result.branches[:5], Branch(branch="F", status="Not assessed", evidence=INJECTION)]})


def test_script_in_a_log_line_is_escaped_never_executed():
    html = render_html(hostile(shared_result(PCLUSTER)))
    page = Page(html)
    tags = {t for t, _ in page.tags}
    assert "script" not in tags and "img" not in tags
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    # The escaped line reads back verbatim as text (in the GPU errors table and the marker's tooltip).
    assert sum(INJECTION in chunk for chunk in page.text) >= 4


def test_no_resource_is_loaded_from_the_network():
    for name in (PCLUSTER, HYPERPOD):
        html = render_html(hostile(shared_result(name)))
        page = Page(html)
        assert not {"link", "script", "img", "iframe", "object", "embed", "base", "image", "use"} & {
            t for t, _ in page.tags}
        for tag, attrs in page.tags:
            for key in ("src", "href", "xlink:href", "data", "action", "srcset", "poster"):
                assert not attrs.get(key), f"<{tag} {key}=…> loads a resource"
        assert "http://" not in html and "https://" not in html
        assert "@import" not in html
        assert set(re.findall(r"url\(([^)]*)\)", html)) <= {"#pat-empty", "#pat-unobs"}
        csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        assert csp and "default-src 'none'" in csp[0]


def test_account_ids_are_redacted_and_log_group_timestamps_kept():
    result = shared_result(PCLUSTER)
    marked = result.model_copy(update={
        "headline": "role arn:aws:iam::123456789012:role/ops assumed by account 000000000000",
        "cluster": result.cluster.model_copy(update={"arn": "arn:aws:ec2:us-west-2:123456789012:x/y"})})
    html = render_html(marked)
    assert "123456789012" not in html and "000000000000" not in html
    assert "<account>" not in html and "&lt;account&gt;" in html
    assert "/aws/parallelcluster/llm-pretrain-b200-202607141022" in html


# -- scale ----------------------------------------------------------------------------------------------
T0 = datetime(2026, 9, 20, tzinfo=UTC)


def synthetic(n_nodes: int = 2000, n_hours: int = 170) -> Result:
    """2,000 nodes in 4 queues over 170 padded hours: long gaps, scattered silent hours, Xids."""
    padded = hours_between(T0, T0 + timedelta(hours=n_hours))
    nodes = []
    for i in range(n_nodes):
        if i % 7 == 0:
            empty = padded[40 + i % 50: 52 + i % 50]
        elif i % 13 == 0:
            empty = padded[::5]
        elif i % 101 == 0:
            empty = padded[-3:]
        else:
            empty = []
        iid = f"i-{i:017x}"
        stream = f"ip-10-{i // 250}-{i % 250}.{iid}.system-messages"
        row = CoverageRow(log_group="/aws/parallelcluster/big-202609010000", log_stream=stream, kernel_lines_ever=900,
                          live_hours=n_hours - len(empty), empty_hours=empty, first_event=T0, last_event=padded[-1],
                          status="Not observable" if empty else "Measured")
        errors = [GpuError(time=padded[60] + timedelta(minutes=7), code=79, class_="hardware",
                           log_group=row.log_group, log_stream=stream, message="kernel: NVRM: Xid (PCI:0000:53:00): 79")
                  ] if i % 97 == 0 else []
        nodes.append(NodeResult(instance_id=iid, instance_group=f"gpu-{i % 4}", instance_type="p5.48xlarge",
                                status="running", gpu_count=8, verdict="NOT OBSERVABLE" if empty else "LEAVE ALONE",
                                verdict_evidence="synthetic", xid_status=row.status, coverage=[row],
                                gpu_errors=errors))
    return Result(audit_id="synthetic", mode="coverage",
                  cluster=ClusterRef(name="big", kind="parallelcluster", region="us-west-2"),
                  window=WindowOut(start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=n_hours - 1),
                                   source="default-7d", padded_start=T0, padded_end=T0 + timedelta(hours=n_hours)),
                  generated_at=T0 + timedelta(hours=n_hours), headline="synthetic", confidence="Low", nodes=nodes)


def test_two_thousand_nodes_by_170_hours_stays_small_and_exact():
    result = synthetic()
    html = render_html(result)
    assert len(html.encode()) < 5_000_000
    page = Page(html)
    rects = sum(1 for t, _ in page.tags if t == "rect")
    assert rects < 30_000, f"{rects} rects: cells are not aggregated into runs"
    assert page.empty_cells() == expected_empty(result)
    # Large clusters start with each queue collapsed behind its summary strip.
    assert sum(1 for t, a in page.tags if t == "details" and "open" not in a and "group" in a.get("class", "")) == 4
