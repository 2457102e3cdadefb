"""The shared example worlds end to end, through the CLI in-process: every expectation of each
`<name>.expect.json` (the comparison of shared/tools/check_scenario.py, as pytest), plus coverage-mode
runs checking the report's promises (every node has a status, every row names its source, no account ID)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import app

SHARED_WORLDS = Path(__file__).resolve().parents[3] / "shared" / "worlds"
if not SHARED_WORLDS.exists():  # a checkout without shared/ beside it: the copies kept in the repo
    SHARED_WORLDS = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "worlds"
SCENARIOS = sorted(p.name.removesuffix(".expect.json") for p in SHARED_WORLDS.glob("*.expect.json"))
XID_STATUSES = {"Measured", "Not observable", "No HMA detections"}
ACCOUNT_LIKE = re.compile(r"(?<![\w-])\d{12}(?!\w)")


def expectation(name: str) -> dict[str, Any]:
    return json.loads((SHARED_WORLDS / f"{name}.expect.json").read_text(encoding="utf-8"))


def build_args(cli: dict[str, Any], world: Path, mode: str | None = None) -> list[str]:
    """The CLI invocation check_scenario.py builds from an expect file's `cli` object."""
    args = ["audit", "--world", str(world), "--format", "json"]
    if cli.get("cluster"):
        args += ["--cluster", cli["cluster"]]
    args += ["--mode", mode or cli.get("mode", "incident")]
    for key, flag in (("since", "--since"), ("until", "--until"), ("run_hours", "--run-hours"),
                      ("run_start", "--run-start")):
        if cli.get(key) is not None:
            args += [flag, str(cli[key])]
    if cli.get("instances"):
        args += ["--instances", ",".join(cli["instances"])]
    return args


@cache
def run(name: str, mode: str | None = None) -> tuple[int, str, str]:
    """Exit code, stdout, stderr of one CLI run (cached: several tests read the same run)."""
    args = build_args(expectation(name)["cli"], SHARED_WORLDS / f"{name}.world.json", mode)
    outcome = CliRunner().invoke(app, args)
    return outcome.exit_code, outcome.stdout, outcome.stderr


def result_of(name: str, mode: str | None = None) -> dict[str, Any]:
    code, stdout, stderr = run(name, mode)
    assert code == 0, f"exit {code}: {stderr}"
    return json.loads(stdout)  # type: ignore[no-any-return]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def misses(exp: dict[str, Any], result: dict[str, Any], code: int, stderr: str) -> list[str]:
    """Every expectation that is not met, in check_scenario.py's words."""
    out: list[str] = []

    def check(ok: bool, text: str) -> None:
        if not ok:
            out.append(text)

    nodes = {n.get("instance_id"): n for n in result.get("nodes", [])}
    for iid, want in exp.get("nodes", {}).items():
        node = nodes.get(iid)
        if node is None:
            out.append(f"node {iid} missing from result")
            continue
        for field, allowed in want.items():
            check(node.get(field) in as_list(allowed), f"node {iid} {field}={node.get(field)!r} want {allowed}")
    branches = {b.get("branch"): b for b in result.get("branches", [])}
    for br, allowed in exp.get("branches", {}).items():
        got = branches.get(br, {}).get("status")
        check(got in as_list(allowed), f"branch {br} status={got!r} want {allowed}")
    for br, allowed in exp.get("branch_labels", {}).items():
        got = branches.get(br, {}).get("label")
        check(got in as_list(allowed), f"branch {br} label={got!r} want {allowed}")
    for br in exp.get("not_root_cause", []):
        got = branches.get(br, {}).get("status")
        check(got is not None and got != "Root cause", f"branch {br} not root cause (got {got!r})")
    checks = {c.get("id"): c for c in result.get("checks", [])}
    for cid, allowed in exp.get("checks", {}).items():
        got = checks.get(cid, {}).get("result")
        check(got in as_list(allowed), f"check {cid}={got!r} want {allowed}")
    if "ready" in exp:
        check(result.get("ready") in as_list(exp["ready"]), f"ready={result.get('ready')!r} want {exp['ready']}")
    report = result.get("report_markdown") or ""
    for rx in exp.get("report_regex", []):
        check(re.search(rx, report) is not None, f"report matches /{rx}/")
    for rx in exp.get("report_regex_absent", []):
        found = re.search(rx, report)
        check(found is None, f"report free of /{rx}/ (found {found.group(0) if found else ''!r})")
    dumped = json.dumps(result)
    for rx in exp.get("json_regex", []):
        check(re.search(rx, dumped) is not None, f"result JSON matches /{rx}/")
    check("Traceback" not in stderr, "no traceback on stderr")
    check(code == 0, f"exit code {code} want 0")
    return out


def test_shared_scenarios_are_present():
    # The scenario tests below are parametrized from this folder: an empty folder must not pass silently
    assert len(SCENARIOS) >= 2, f"no scenarios found in {SHARED_WORLDS}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_meets_every_expectation(name: str):
    # Given the scenario's world and its expectations
    exp = expectation(name)

    # When the CLI runs the expect file's invocation
    code, stdout, stderr = run(name)
    result = json.loads(stdout)

    # Then every expectation is met
    assert misses(exp["expect"], result, code, stderr) == []


def test_the_comparison_itself_catches_a_wrong_result():
    # Given a real result with one node's verdict and the report's cluster name changed
    name = "hyperpod-xid31-app-error"
    exp = expectation(name)["expect"]
    result = json.loads(json.dumps(result_of(name)))
    for node in result["nodes"]:
        if node["instance_id"] == "i-0cc3fc1626e53a130":
            node["verdict"] = "REPLACE"
    result["report_markdown"] = result["report_markdown"].replace("research-hp-slurm", "x") + " 111122223333"

    # When compared; Then each change is reported
    found = misses(exp, result, 0, "")
    assert any("i-0cc3fc1626e53a130 verdict='REPLACE'" in m for m in found)
    assert any("research-hp-slurm" in m for m in found)
    assert any("free of /111122223333/" in m for m in found)


# -- coverage mode over the same worlds ------------------------------------------------------------
@pytest.mark.parametrize("name", SCENARIOS)
def test_coverage_mode_gives_every_node_an_xid_status(name: str):
    # When the world is audited in coverage mode
    result = result_of(name, "coverage")

    # Then every node carries one of the three statuses and at least one coverage row
    assert result["mode"] == "coverage"
    assert result["nodes"]
    for node in result["nodes"]:
        assert node["xid_status"] in XID_STATUSES, node["instance_id"]
        assert node["coverage"], node["instance_id"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_coverage_rows_name_their_group_and_stream_or_what_was_searched(name: str):
    result = result_of(name, "coverage")
    for node in result["nodes"]:
        for row in node["coverage"]:
            where = f"{node['instance_id']} {row}"
            assert row["log_group"], where
            if row["log_stream"] is not None:
                assert row["log_group"].startswith("/"), where
                continue
            note = row["note"] or ""
            assert note, where
            if node["gpu_count"] == 0:
                assert "no GPU" in note, where
            else:  # the group named is the one searched, or the note lists the groups searched
                assert row["log_group"].startswith("/") or re.search(r"/aws/\S+", note), where
            if row["status"] == "Measured":
                pytest.fail(f"Measured without a stream: {where}")


@pytest.mark.parametrize("name", SCENARIOS)
def test_coverage_report_has_no_account_id_but_keeps_log_group_timestamps(name: str):
    # When audited in coverage mode
    result = result_of(name, "coverage")
    report = result["report_markdown"]

    # Then no account ID, nor any bare 12-digit number, appears in the report
    assert "111122223333" not in report
    assert ACCOUNT_LIKE.findall(report) == []
    # and every /aws/parallelcluster/<cluster>-<12 digits> group of the result is quoted intact
    pcluster_groups = {r["log_group"] for n in result["nodes"] for r in n["coverage"]
                       if re.fullmatch(r"/aws/parallelcluster/.+-\d{12}", r["log_group"])}
    for group in pcluster_groups:
        assert f"`{group}`" in report


def test_pcluster_report_quotes_its_timestamped_log_group():
    result = result_of("pcluster-capacity-block-expiry", "coverage")
    assert "`/aws/parallelcluster/llm-pretrain-b200-202607141022`" in result["report_markdown"]


def test_hyperpod_report_names_the_hma_stream_exactly():
    result = result_of("hyperpod-xid31-app-error", "coverage")
    assert "`SagemakerHealthMonitoringAgent/gpu-g5-xl/i-0cc3fc1626e53a130`" in result["report_markdown"]
