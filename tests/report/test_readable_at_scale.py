"""Reports that stay readable at fleet size (#37 items 2 and 3, RULES §11): a gap that names many nodes counts them
and names the exceptions only; in incident mode the root cause and branch table follow the verdict; the pre-flight
answer names its FAIL and RISK checks; identical timeline events are one row with a count; no table without rows;
up to 100 nodes every coverage row is listed, past that the proven rows are counted per group — the JSON result
keeping every node, row and line."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from gpuaudit.collectors.aws import Aws
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import load_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import iso, parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report.fleet import EVERY_NODE_UP_TO
from gpuaudit.report.html import render_html
from gpuaudit.rules.actions import NAMED_UP_TO
from tests.helpers.worlds import ACCOUNT, Node, PClusterWorld, at

PREFLIGHT_WORLD = Path(__file__).resolve().parents[2] / "functions/gpuaudit/worlds/hyperpod-preflight-risks.world.json"

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


def xid(w: PClusterWorld, node: Node, code: int, when: str = at(9), process: str = "python3", pid: int = 2211) -> None:
    w.stream(w.group, w.stream_name(node), events=[
        (when, f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, pid={pid}, name={process}")])


def headings(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("## ")]


def test_in_incident_mode_the_root_cause_and_branch_table_come_right_after_the_verdict() -> None:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-2), at(13))
    xid(w, w.compute[0], 79)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    md = result.report_markdown
    assert headings(md)[:3] == ["## Verdict", "## Root cause", "## Node verdicts"]
    verdict, rest = md.split("## Root cause", 1)
    assert "Confidence: **" in verdict
    branch_table = rest.index("| Branch | Status | Label | Evidence | Confirming measurement |")
    assert branch_table < rest.index("## Node verdicts")
    assert "| A — GPU/node hardware | Root cause | Proven |" in rest[branch_table:rest.index("## Node verdicts")]
    # the HTML report in the same order: verdict, root cause with the branch table, then the heatmap and nodes
    page = render_html(result)
    order = [page.index(h) for h in ("<h2>Verdict</h2>", "<h2>Root cause</h2>", "<th>Confirming measurement</th>",
                                      "<h2>GPU error log coverage, hour by hour</h2>", "<h2>Node verdicts</h2>")]
    assert order == sorted(order)


def test_the_preflight_answer_names_its_fail_and_risk_checks() -> None:
    world = load_world(PREFLIGHT_WORLD)
    aws = Aws(session=WorldBackend(world).session(), region=world.region, clock=lambda: world.now,
              sleep=lambda _s: None)
    result = run_audit(aws, AuditRequest(cluster="train-hp-p5", mode="preflight", run_hours=48))
    failed = [c.id for c in result.checks if c.result == "FAIL"]
    risky = [c.id for c in result.checks if c.result == "RISK"]
    assert failed and risky  # the world's plan fails P1 and P4 and is at risk on others (RULES §10)
    answer = f"Ready: No — FAIL {', '.join(failed)}; RISK {', '.join(risky)}"
    assert result.headline.startswith(answer + ".")
    assert f"## {answer}\n" in result.report_markdown
    assert f'<span class="badge b-bad">{answer}</span>' in render_html(result)


def test_identical_timeline_events_are_one_row_with_a_count_and_the_first_and_last_time() -> None:
    w = PClusterWorld(n_compute=6)
    for n in w.compute:
        w.healthy(n, at(-2), at(13))
    repeated = w.compute[:4]
    for i, n in enumerate(repeated):
        xid(w, n, 79, when=at(7, 10 * i))
    for n in w.compute[4:]:  # twice is not yet a repetition worth collapsing: both rows stay
        xid(w, n, 48, when=at(8), process="torchrun")
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    md = result.report_markdown
    timeline = md.split("## Timeline (UTC)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in timeline.splitlines() if line.startswith("| 2026-")]
    (collapsed,) = [r for r in rows if "Xid 79" in r]
    assert f"×4 (first {at(7)}, last {at(7, 30)})" in collapsed and collapsed.startswith(f"| {at(7)} |")
    assert all(n.instance_id in collapsed for n in repeated)
    assert len([r for r in rows if "Xid 48" in r]) == 2
    # the JSON result keeps every event
    assert len([e for e in result.timeline if "Xid 79" in e.event]) == 4
    page = render_html(result)
    assert f"×4 (first {at(7)}, last {at(7, 30)})" in page and "3 row(s), 6 event(s)" in page


def tables(markdown: str) -> list[list[str]]:
    """Each Markdown table's lines (header, separator, rows)."""
    out: list[list[str]] = []
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            block = [line]
            for later in lines[i + 1:]:
                if not later.startswith("|"):
                    break
                block.append(later)
            out.append(block)
    return out


def fleet_world(nodes: int, silent: int = 0, xids: int = 0) -> PClusterWorld:
    """`nodes` GPU nodes live all window; the first `silent` stop shipping kernel lines at 07:00 (empty hours in the
    window: Not observable), the next `xids` log one Xid 31 each (application: LEAVE ALONE)."""
    w = PClusterWorld(n_compute=nodes)
    for i, n in enumerate(w.compute):
        w.healthy(n, at(-2), at(7) if i < silent else at(13))
        if silent <= i < silent + xids:
            xid(w, n, 31, process=f"proc{i}", pid=1000 + i)
    return w


def coverage_section(md: str) -> str:
    return md.split("## GPU error log coverage", 1)[1].split("\n## ", 1)[0]


def test_up_to_100_nodes_every_coverage_row_is_listed() -> None:
    w = fleet_world(EVERY_NODE_UP_TO - 1, silent=1)  # with the head node: 100 nodes in scope, 98 of them healthy
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    section = coverage_section(result.report_markdown)
    assert all(f"`{w.stream_name(n)}`" in section for n in w.compute)
    assert "more row(s)" not in section


def test_past_100_nodes_proven_rows_are_counted_and_every_other_row_listed_the_json_keeping_all() -> None:
    w = fleet_world(EVERY_NODE_UP_TO + 10, silent=2, xids=3)
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    md = result.report_markdown
    section = coverage_section(md)
    silent, signalled = w.compute[:2], w.compute[2:5]
    # the rows short of proven, one by one
    assert all(f"`{w.stream_name(n)}`" in section for n in silent)
    # RULES §11: only the Measured nodes without a GPU signal are counted, per group and log group; a node with a
    # signal keeps its coverage row (its evidence), listed beside the rows short of proven
    assert all(f"`{w.stream_name(n)}`" in section for n in signalled)
    quiet = len(w.compute) - len(silent) - len(signalled)
    assert (f"{quiet} more row(s) of group gpu, log group {w.group}: {quiet} node(s) without a GPU signal, {quiet} "
            f"Measured, live every hour of the window") in section
    assert not any(f"`{w.stream_name(n)}`" in section for n in w.compute[5:])
    # each node with a signal is still on its own line under Node verdicts
    verdicts = md.split("## Node verdicts", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{n.instance_id}`" in verdicts for n in [*silent, *signalled])
    # the capability table holds every node, alike ones in one row
    capability = md.split("## Node capability and fabric", 1)[1].split("\n## ", 1)[0]
    assert f"| {len(w.compute)} node(s): " in capability
    # the JSON result keeps every coverage row
    assert sum(len(n.coverage) for n in result.nodes if n.instance_id != w.head.instance_id) == len(w.compute)
    rebuilt = Result.model_validate_json(result.model_dump_json(by_alias=True))
    assert {n.instance_id for n in rebuilt.nodes} == {n.instance_id for n in [w.head, *w.compute]}
    # no table is printed without rows (RULES §11)
    assert all(len(table) > 2 for table in tables(md))


def test_leave_alone_nodes_differing_only_in_process_and_pid_are_one_action() -> None:
    w = fleet_world(4, xids=3)
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    (group,) = [g for g in result.action_groups if g.verdict == "LEAVE ALONE"]
    assert sorted(group.nodes) == sorted(n.instance_id for n in w.compute[:3])
    assert group.action.startswith("3 nodes (LEAVE ALONE): Leave each node in service; hand the Xid 31 (each node's "
                                   "process and PID: its Xid line")
    assert not re.search(r"proc\d", group.action)
    # one node keeps its own words, with its process and PID
    one = fleet_world(2, xids=1)
    alone = one.audit(one.cluster, since=SINCE, until=UNTIL)
    node = one.compute[0].instance_id
    assert f"Leave {node} in service; hand the Xid 31 (process proc0, PID 1000) to the application owner" in \
        " ".join(alone.actions)


def test_the_html_at_fleet_size_groups_nodes_per_verdict_worst_first_and_prints_silent_counts_on_the_strip() -> None:
    w = fleet_world(EVERY_NODE_UP_TO + 10, silent=2, xids=3)
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    page = render_html(result)
    assert "<script" not in page and "default-src 'none'; style-src 'unsafe-inline'" in page  # the CSP stays
    # one <details> per verdict, worst first, each holding its nodes
    groups = re.findall(r'<details class="verdict"( open)?><summary>(.*?)</summary>(.*?)</details>', page)
    titles = [re.sub(r"<[^>]+>", "", title) for _, title, _ in groups]
    assert titles == ["? NOT OBSERVABLE ×2", "✓ LEAVE ALONE ×3", "no verdict (no GPU signal) ×1"]
    silent, signalled = w.compute[:2], w.compute[2:5]
    assert all(n.instance_id in groups[0][2] for n in silent)
    assert all(n.instance_id in groups[1][2] for n in signalled)
    # the strip counts the silent nodes per hour, printed on it (07:00 to the padded window's end: 2 of them)
    gpu_group = page.split("<b>queue gpu</b>", 1)[1].split("</summary>", 1)[0]
    assert f"silent nodes per hour: up to 2 of {len(w.compute)}" in gpu_group
    assert re.search(r'<rect class="agg-empty"[^>]*data-count="2"', gpu_group)
    assert re.search(r'class="lane-text strip-count"[^>]*>2</text>', gpu_group)
    # lanes only for the nodes short of proven coverage; the rest counted in the strip
    lanes = set(re.findall(r'<g data-node="([^"]+)" data-lane="kernel"', page))
    assert lanes == {n.instance_id for n in silent}
    assert f"{len(w.compute) - 2} node(s) live every hour are counted in the strip" in page
    # the tables the Markdown counts are counted here too, and none is empty
    assert "<tbody></tbody>" not in page
    assert f"| {len(w.compute)} node(s): " not in page and f"{len(w.compute)} node(s): " in page


def reserved_fleet(nodes: int, with_series: bool) -> PClusterWorld:
    """`nodes` P5 nodes on one Capacity Block (RULES §8 idle reserved GPUs, incident mode); with series, each GPU
    publishes GPUPowerUtilization 04:00–09:00 only, so 10:00 and 11:00 have no datapoint on every node (§0.2:
    missing, never idle); without, no series at all (GPU activity Not observable on every node)."""
    w = PClusterWorld(n_compute=nodes, launch=at(-24))
    for n in w.compute:
        w.healthy(n, at(-24), at(12, 25))
    w.section("ec2", "capacity_reservations").append({
        "CapacityReservationId": "cr-0a1b2c3d4e5f60718", "InstanceType": "p5.48xlarge", "State": "active",
        "ReservationType": "capacity-block", "StartDate": at(-48), "EndDate": at(24 * 5 + 11, 30),
        "TotalInstanceCount": nodes, "AvailableInstanceCount": 0, "AvailabilityZone": "us-west-2a",
        "OwnerId": ACCOUNT})
    if with_series:
        metrics = w.section("cloudwatch", "metrics")
        for n in w.compute:
            for gpu in range(8):
                metrics.append({"Namespace": "AWS/EC2", "MetricName": "GPUPowerUtilization", "Unit": "Percent",
                                "Dimensions": [{"Name": "InstanceId", "Value": n.instance_id},
                                               {"Name": "GpuId", "Value": str(gpu)}],
                                "Datapoints": [[at(h, 20), 50.0] for h in range(4, 10)]})
    return w


def test_nodes_missing_the_same_metric_hours_are_one_gap_counting_them() -> None:
    w = reserved_fleet(NAMED_UP_TO + 2, with_series=True)
    result = w.audit(w.cluster, mode="incident", since=at(4), until=at(12))
    (gap,) = [g for g in result.visibility_gaps if g.startswith("GPUPowerUtilization")]
    assert gap.startswith(f"GPUPowerUtilization has no datapoint in 2 of 8 UTC hour(s) ({at(10)} to {at(11)}) for "
                          f"all {NAMED_UP_TO + 2} GPU nodes: Not observable then")
    (listed,) = [g for g in result.gap_nodes if g.gap == gap]
    assert sorted(listed.nodes) == sorted(n.instance_id for n in w.compute)


def test_past_100_nodes_a_findings_steps_alike_are_one_row_naming_them() -> None:
    w = reserved_fleet(EVERY_NODE_UP_TO + 1, with_series=False)
    result = w.audit(w.cluster, mode="incident", since=at(4), until=at(12))
    (finding,) = [f for f in result.findings if f.id == "idle-reserved-gpus"]
    assert len(finding.steps) == EVERY_NODE_UP_TO + 1  # the JSON result keeps one step per node
    assert f"GPU activity Not observable on all {EVERY_NODE_UP_TO + 1} reserved nodes" in finding.answer
    section = result.report_markdown.split("## Are the reserved GPUs being used?", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "Step" not in line]
    assert len(rows) == 1 and rows[0].startswith(f"| {EVERY_NODE_UP_TO + 1} steps: ")
    assert "| Not observable | on \\`cr-0a1b2c3d4e5f60718\\`: no AWS/EC2 GPUPowerUtilization series" in rows[0]


def test_past_100_nodes_the_incident_timeline_shows_first_xids_of_one_code_as_one_row() -> None:
    w = PClusterWorld(n_compute=EVERY_NODE_UP_TO + 1)
    for n in w.compute:
        w.healthy(n, at(-2), at(13))
    for i, n in enumerate(w.compute[:5]):  # five nodes, five different processes: five different lines
        xid(w, n, 31, when=at(7, i), process=f"proc{i}", pid=100 + i)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    md = result.report_markdown
    timeline = md.split("## Timeline (UTC)", 1)[1].split("\n## ", 1)[0]
    (row,) = [line for line in timeline.splitlines() if "Xid 31" in line]
    assert f"first Xid 31 (each node's line in the JSON result) ×5 (first {at(7)}, last {at(7, 4)})" in row
    assert all(n.instance_id in row for n in w.compute[:5])
    # the JSON result keeps each node's own line
    events = [e.event for e in result.timeline if e.kind == "first Xid 31"]
    assert len(events) == 5 and all(any(f"name=proc{i}" in e for e in events) for i in range(5))
    # a small cluster keeps each line as its own row
    small = PClusterWorld(n_compute=5)
    for n in small.compute:
        small.healthy(n, at(-2), at(13))
    for i, n in enumerate(small.compute):
        xid(small, n, 31, when=at(7, i), process=f"proc{i}", pid=100 + i)
    few = small.audit(small.cluster, mode="incident", since=SINCE, until=UNTIL).report_markdown
    assert len([line for line in few.split("## Timeline (UTC)", 1)[1].split("\n## ", 1)[0].splitlines()
                if "first Xid 31" in line]) == 5


def test_a_branch_evidence_naming_a_fleet_opens_from_its_beginning_in_the_html() -> None:
    w = fleet_world(EVERY_NODE_UP_TO + 1)
    for n in w.compute[:NAMED_UP_TO + 2]:
        xid(w, n, 79)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    (a,) = [b for b in result.branches if b.branch == "A"]
    assert len(a.evidence) > 1_000  # the worst ten nodes' evidence quoted whole, the rest counted
    page = render_html(result)
    root = page.split("<h2>Root cause</h2>", 1)[1].split("<h2>", 1)[0]
    row = root.split("A — GPU/node hardware", 1)[1].split("</tr>", 1)[0]
    assert f"({len(a.evidence):,} characters: open for all)</summary>" in row
    assert "and 2 more of 12 nodes (REBOOT 2)" in row  # the whole evidence still in the page, behind the summary
    # a short evidence is shown whole: the security group every node shares is named once
    (d,) = [b for b in result.branches if b.branch == "D"]
    assert len(d.evidence) < 1_000 and "characters: open for all" not in root.split("D — GPU communication", 1)[1] \
        .split("</tr>", 1)[0]


def test_branch_a_on_many_hardware_nodes_names_the_worst_whole_and_counts_the_rest_the_headline_bounded() -> None:
    """RULES §11 (reports readable at fleet size) beside §0.4 (name everything): branch A quotes the worst nodes'
    evidence whole and counts the rest by verdict; every node keeps its own evidence under its verdict."""
    w = fleet_world(NAMED_UP_TO + 15)
    for i, n in enumerate(w.compute):
        xid(w, n, 64 if i == len(w.compute) - 1 else 79)  # one REPLACE (64) last by ID, the rest REBOOT (79)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    a = next(b for b in result.branches if b.branch == "A")
    assert a.status == "Root cause"
    replaced = w.compute[-1].instance_id
    assert a.evidence.index(replaced) < a.evidence.index(": REBOOT")  # worst first, though last by ID
    more = len(w.compute) - NAMED_UP_TO
    assert f"and {more} more of {len(w.compute)} nodes (REBOOT {more})" in a.evidence
    assert sum(n.instance_id in a.evidence for n in w.compute) == NAMED_UP_TO
    assert len(result.headline) < 6_000
    assert {n.instance_id for n in result.nodes if n.verdict} == {n.instance_id for n in w.compute}


def test_a_security_group_shared_by_every_gpu_node_is_said_once_not_node_by_node() -> None:
    w = fleet_world(NAMED_UP_TO + 5)
    sg = "sg-0c0ffee000000b22"
    for raw in w.section("ec2", "instances"):
        raw["SecurityGroups"] = [{"GroupId": sg, "GroupName": "train-efa"}]
        raw["VpcId"] = "vpc-0abc"
    w.section("ec2", "security_groups").append({"GroupId": sg, "GroupName": "train-efa", "VpcId": "vpc-0abc",
                                                "IpPermissions": [], "IpPermissionsEgress": []})
    d = next(b for b in w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL).branches if b.branch == "D")
    assert f"nodes all {len(w.compute)} GPU compute nodes" in d.evidence and sg in d.evidence
    assert not any(n.instance_id in d.evidence for n in w.compute)


def test_branch_f_on_many_application_xids_quotes_the_first_lines_and_counts_the_rest_per_code() -> None:
    w = fleet_world(NAMED_UP_TO + 5, xids=NAMED_UP_TO + 5)  # every node: one Xid 31 (application)
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    f = next(b for b in result.branches if b.branch == "F")
    assert "and 5 more application-class Xid line(s) on 5 node(s) (Xid 31 ×5), each under its node" in f.evidence
    assert sum(n.instance_id in f.evidence for n in w.compute) == NAMED_UP_TO
    assert len(f.evidence) < 4_000
