"""The CLI as an operator who lives in aws-cli, kubectl and prowler types it (issue #36): a terminal summary on a
real pseudo-terminal, filters and order, exit codes that gate, outputs by extension, finding records, durations,
progress on stderr, help that teaches, AWS access with a next step.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from helpers.worlds import PClusterWorld, at
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.devtools import worldgen
from gpuaudit.model.result import SCHEMA
from gpuaudit.report.records import FIELDS, FINDINGS_SCHEMA

FUNCTIONS = str(Path(__file__).resolve().parents[2] / "functions")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CLUSTER = "bench-pcluster"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated ParallelCluster world whose audit holds REBOOT, MONITOR, NOT OBSERVABLE and LEAVE ALONE nodes
    (seed chosen for that mix; the test below asserts the mix, so a change of generator is caught)."""
    spec = worldgen.WorldSpec(kind="parallelcluster", nodes=10, days=1, silent_fraction=0.2, xid_rate=1.5, seed=3)
    path = tmp_path_factory.mktemp("mixed") / "mixed.world.json"
    worldgen.write(worldgen.generate(spec), str(path))
    return path


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, list(args), env=env)
    return outcome.exit_code, outcome.stdout, outcome.stderr


def audit_mixed(world: Path, *extra: str) -> tuple[int, str, str]:
    return invoke("audit", "--world", str(world), "--cluster", CLUSTER, "--last", "24h", *extra)


INTERRUPTS: list[int] = []  # the processes `on_terminal` sent SIGINT to while they ran


def on_terminal(args: Sequence[str], *, env: dict[str, str] | None = None, stderr_tty: bool = True,
                interrupt_when: str | None = None, timeout: float = 120) -> tuple[int, str, str]:
    """`python -m gpuaudit ARGS` with stdout (and stderr) on a real pseudo-terminal, as a user's shell runs it.
    `interrupt_when`: send SIGINT (Ctrl-C) once stderr shows this text."""
    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty() if stderr_tty else os.pipe()
    full_env = {**os.environ, "PYTHONPATH": FUNCTIONS, "TERM": "xterm-256color", "COLUMNS": "250", **(env or {})}
    full_env.pop("NO_COLOR", None) if "NO_COLOR" not in (env or {}) else None
    # Ctrl-C's default disposition, as a user's shell gives a foreground command: a suite started in the background
    # (`make test &` without job control) ignores SIGINT, every child inherits that, and the CLI would never see it.
    proc = subprocess.Popen([sys.executable, "-m", "gpuaudit", *args], stdin=subprocess.DEVNULL, stdout=out_slave,
                            stderr=err_slave, env=full_env, close_fds=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(out_slave)
    os.close(err_slave)
    chunks: dict[int, list[bytes]] = {out_master: [], err_master: []}
    open_fds, deadline, interrupted = {out_master, err_master}, time.monotonic() + timeout, False
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_fds), [], [], 0.2)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                data = b""
            if not data:
                open_fds.discard(fd)
                continue
            chunks[fd].append(data)
        if (interrupt_when and not interrupted
                and interrupt_when in b"".join(chunks[err_master]).decode("utf-8", "replace")):
            if proc.poll() is None:  # still running: a loaded machine may schedule this loop only after it ended
                proc.send_signal(signal.SIGINT)
                INTERRUPTS.append(proc.pid)
            interrupted = True
    code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    os.close(out_master)
    os.close(err_master)
    return (code, b"".join(chunks[out_master]).decode("utf-8", "replace").replace("\r\n", "\n"),
            b"".join(chunks[err_master]).decode("utf-8", "replace").replace("\r\n", "\n"))


def table_rows(stdout: str) -> list[list[str]]:
    """The node rows of the summary: (verdict words, instance ID, …) split on the column gaps."""
    lines = ANSI.sub("", stdout).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("VERDICT"))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


RANK = ["REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR", "LEAVE ALONE", "no verdict"]


def verdict_of(row: list[str]) -> str:
    return row[0].split(" ", 1)[1]


# -- 2. the terminal summary ------------------------------------------------------------------------
def test_a_terminal_gets_the_summary_table_worst_first_with_full_ids_and_colour_beside_words(mixed: Path):
    # When the operator audits on a terminal with no --format
    code, stdout, _ = on_terminal(["audit", "--world", str(mixed), "--cluster", CLUSTER, "--last", "24h"])

    # Then the summary, not Markdown: headline, counts, a row per node with a verdict, worst first
    assert code == 0
    plain = ANSI.sub("", stdout)
    assert plain.startswith("gpuaudit coverage audit: bench-pcluster (us-west-2)")
    assert "##" not in plain and "**" not in plain and "\\|" not in plain and "\\_" not in plain
    rows = table_rows(stdout)
    result = json.loads(audit_mixed(mixed, "--format", "json")[1])
    judged = {n["instance_id"]: n["verdict"] for n in result["nodes"] if n["verdict"]}
    assert {"REBOOT", "MONITOR", "NOT OBSERVABLE", "LEAVE ALONE"} <= set(judged.values())
    assert {r[1] for r in rows} >= set(judged)  # every judged node, its full ID (never cut)
    assert all(re.fullmatch(r"i-[0-9a-f]{17}", r[1]) for r in rows)
    ranks = [RANK.index(verdict_of(r)) for r in rows]
    assert ranks == sorted(ranks)
    assert all(verdict_of(r) == (judged.get(r[1]) or "no verdict") for r in rows)
    # colour carries severity, and the glyph and word are there without it
    assert "\x1b[" in stdout and re.search(r"↻ REBOOT \d+", plain) and "✓ LEAVE ALONE" in plain


def test_no_color_and_the_flag_turn_colour_off_on_a_terminal_keeping_glyphs_and_words(mixed: Path):
    for env, extra in (({"NO_COLOR": "1"}, []), ({}, ["--no-color"])):
        code, stdout, _ = on_terminal(["audit", "--world", str(mixed), "--cluster", CLUSTER, "--last", "24h", *extra],
                                      env=env)
        assert code == 0
        styles = {p for params in re.findall(r"\x1b\[([0-9;]*)m", stdout) for p in params.split(";")}
        assert styles <= {"", "0", "1", "2"}, styles  # bold and dim stay (NO_COLOR is about colour), no colour code
        assert "↻ REBOOT" in stdout and "? NOT OBSERVABLE" in stdout


def test_account_text_with_terminal_escapes_reaches_the_terminal_shown_not_executed(tmp_path: Path):
    # Given a node whose kernel stream name carries an OSC title escape and a colour escape (an attacker's log name)
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    hostile = f"ip-10-0-0-1.{node.instance_id}.system-messages\x1b]0;pwned\x07\x1b[31m"
    w.kernel_stream(f"/aws/parallelcluster/{w.cluster}-202608261551", hostile, at(-10), at(1))
    path = tmp_path / "hostile.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")

    # When audited on a terminal
    code, stdout, _ = on_terminal(["audit", "--world", str(path), "--cluster", w.cluster, "--since", at(6)],
                                  env={"NO_COLOR": "1"})

    # Then no raw escape reaches the terminal; the name is shown with its controls visible
    assert code == 0, stdout
    assert "\x1b]" not in stdout and "\x07" not in stdout and "\x1b[31m" not in stdout
    assert "\\x1b]0;pwned\\x07" in stdout


def test_table_in_a_pipe_is_plain_text_with_commands_copyable(mixed: Path):
    code, stdout, _ = audit_mixed(mixed, "--format", "table")
    assert code == 0
    assert "\x1b[" not in stdout and "VERDICT" in stdout
    assert "\\|" not in stdout and "`" not in stdout  # no Markdown escapes, no code-span backticks


# -- 3. filters and order ---------------------------------------------------------------------------
def test_verdict_filter_and_only_exceptions_keep_only_those_rows(mixed: Path):
    _, stdout, _ = audit_mixed(mixed, "--format", "table", "--verdict", "NOT_OBSERVABLE,reboot")
    assert {verdict_of(r) for r in table_rows(stdout)} == {"NOT OBSERVABLE", "REBOOT"}
    assert "--verdict NOT OBSERVABLE,REBOOT" in stdout  # the table says it is filtered
    _, stdout, _ = audit_mixed(mixed, "--format", "table", "--only-exceptions")
    kept = {verdict_of(r) for r in table_rows(stdout)}
    assert "LEAVE ALONE" not in kept and {"REBOOT", "MONITOR", "NOT OBSERVABLE"} <= kept
    code, _, stderr = audit_mixed(mixed, "--verdict", "FINE")
    assert code == 2 and "'FINE' is not a verdict" in stderr


# -- 4. exit codes that gate ------------------------------------------------------------------------
def test_fail_on_exits_4_only_when_a_node_has_that_verdict_and_still_writes_the_output(mixed: Path, tmp_path: Path):
    out = tmp_path / "r.json"
    code, _, stderr = audit_mixed(mixed, "--fail-on", "REBOOT,REPLACE", "--out", str(out))
    assert code == 4 and "node(s) REBOOT" in stderr and json.loads(out.read_text())["nodes"]
    assert audit_mixed(mixed, "--fail-on", "REPLACE", "--format", "json")[0] == 0  # no REPLACE node here
    assert audit_mixed(mixed, "--format", "json")[0] == 0  # no gate asked: 0 whatever the findings


def test_fail_if_not_ready_exits_4_on_a_preflight_that_is_not_ready(tmp_path: Path):
    world = Path(__file__).resolve().parents[2] / "functions/gpuaudit/worlds/hyperpod-preflight-risks.world.json"
    args = ("audit", "--world", str(world), "--cluster", "train-hp-p5", "--mode", "preflight", "--run-hours", "72")
    code, stdout, _ = invoke(*args, "--format", "json")
    ready = json.loads(stdout)["ready"]
    code, _, stderr = invoke(*args, "--format", "json", "--fail-if-not-ready")
    assert code == (0 if ready in ("Yes", "Yes with risks") else 4)
    assert ready == "No" and "ready is No" in stderr
    assert invoke("audit", "--world", str(world), "--cluster", "train-hp-p5", "--fail-if-not-ready")[0] == 2


# -- 5. outputs -------------------------------------------------------------------------------------
def test_out_dash_is_stdout_and_the_extension_picks_the_format(mixed: Path, tmp_path: Path):
    code, stdout, _ = audit_mixed(mixed, "--out", "-", "--format", "json")
    assert code == 0 and json.loads(stdout)["schema"] == SCHEMA and not (Path.cwd() / "-").exists()
    out = tmp_path / "r.html"
    assert audit_mixed(mixed, "--out", str(out))[0] == 0
    assert out.read_text().lstrip().lower().startswith("<!doctype html")
    out = tmp_path / "f.csv"
    assert audit_mixed(mixed, "--out", str(out))[0] == 0 and out.read_text().startswith(",".join(FIELDS[:3]))


def test_format_contradicting_the_extension_and_a_name_without_one_are_errors(mixed: Path, tmp_path: Path):
    code, _, stderr = audit_mixed(mixed, "--format", "html", "--out", str(tmp_path / "x.json"))
    assert code == 2 and "--format html conflicts with --out" in stderr and not (tmp_path / "x.json").exists()
    code, _, stderr = audit_mixed(mixed, "--out", str(tmp_path / "json"))
    assert code == 2 and "cannot tell the format" in stderr and not (tmp_path / "json").exists()


def test_out_dir_writes_every_format_in_one_run(mixed: Path, tmp_path: Path):
    code, stdout, stderr = audit_mixed(mixed, "--out-dir", str(tmp_path / "o"))
    assert code == 0 and stdout == ""
    files = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "o").iterdir()}
    assert set(files) == {"report.md", "result.json", "report.html", "findings.ndjson", "findings.csv",
                          "findings.events.ndjson",
                          "report.reboot-ids.txt"}  # the IDs file the grouped REBOOT command reads (#49 item 1)
    result = json.loads(files["result.json"])
    assert files["report.md"].rstrip() == result["report_markdown"].rstrip()
    assert len(files["findings.ndjson"].splitlines()) == len(result["nodes"]) + len(result["branches"]) + \
        len(result["checks"])


def test_a_terminal_writing_a_report_file_still_shows_the_summary_naming_the_file(mixed: Path, tmp_path: Path):
    out = tmp_path / "report.md"
    code, stdout, _ = on_terminal(["audit", "--world", str(mixed), "--cluster", CLUSTER, "--last", "24h",
                                   "--out", str(out)], env={"NO_COLOR": "1"})
    assert code == 0 and out.read_text().startswith("# gpuaudit coverage audit")
    assert stdout.rstrip().endswith(f"full report: {out}")


# -- 6. finding records -----------------------------------------------------------------------------
def test_ndjson_has_one_record_per_node_worst_first_then_one_per_branch(mixed: Path):
    _, result_text, _ = audit_mixed(mixed, "--format", "json", "--mode", "incident")
    result = json.loads(result_text)
    _, stdout, _ = audit_mixed(mixed, "--format", "ndjson", "--mode", "incident")
    rows = [json.loads(line) for line in stdout.splitlines()]
    nodes = [r for r in rows if r["record"] == "node"]
    assert {r["schema"] for r in rows} == {FINDINGS_SCHEMA} and all(list(r) == list(FIELDS) for r in rows)
    assert {(r["id"], r["verdict"]) for r in nodes} == {(n["instance_id"], n["verdict"]) for n in result["nodes"]}
    assert [r["severity_rank"] for r in nodes] == sorted(r["severity_rank"] for r in nodes)
    assert [r["id"] for r in rows if r["record"] == "branch"] == [b["branch"] for b in result["branches"]]
    by_id = {n["instance_id"]: n for n in result["nodes"]}
    for r in nodes:
        node = by_id[r["id"]]
        assert r["coverage_status"] == node["xid_status"]
        assert r["xid_codes"] == sorted({e["code"] for e in node["gpu_errors"] if e["code"] is not None})
        assert r["log_stream"] == list(dict.fromkeys(c["log_stream"] for c in node["coverage"] if c["log_stream"]))
    rebooted = next(r for r in nodes if r["verdict"] == "REBOOT")
    assert any(rebooted["id"] in a for a in rebooted["actions"])
    _, stdout, _ = audit_mixed(mixed, "--format", "ndjson", "--verdict", "NOT_OBSERVABLE")
    assert {json.loads(line)["verdict"] for line in stdout.splitlines()} == {"NOT OBSERVABLE"}


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(tmp_path: Path):
    # Given a node whose only kernel stream's name starts like a spreadsheet formula
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    group = f"/aws/parallelcluster/{w.cluster}-202608261551"
    w.kernel_stream(group, f"=HYPERLINK(1)-{node.instance_id}.system-messages", at(-10), at(12, 25))
    path = tmp_path / "formula.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")

    code, stdout, _ = invoke("audit", "--world", str(path), "--cluster", w.cluster, "--since", at(6), "--format", "csv")

    assert code == 0
    rows = list(csv.DictReader(io.StringIO(stdout)))
    streams = next(r["log_stream"] for r in rows if r["id"] == node.instance_id)
    assert "=HYPERLINK(1)" in streams and streams.startswith("'")
    assert not any(v.startswith(("=", "+", "-", "@")) for r in rows for v in r.values())


# -- 7. durations -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "hours"), [(("--last", "2h"), 2), (("--last", "30m"), 0.5), (("--since", "6h"), 6),
                                              (("--last", "2d"), 48)])
def test_last_and_since_take_lengths_ending_at_now(mixed: Path, flags: tuple[str, str], hours: float):
    code, stdout, stderr = invoke("audit", "--world", str(mixed), "--cluster", CLUSTER, *flags, "--format", "json")
    assert code == 0, stderr
    window = json.loads(stdout)["window"]
    start, end = (time.mktime(time.strptime(window[k], "%Y-%m-%dT%H:%M:%SZ")) for k in ("start", "end"))
    assert end - start == hours * 3600


def test_an_impossible_calendar_date_says_it_is_not_a_date(mixed: Path):
    code, _, stderr = invoke("audit", "--world", str(mixed), "--cluster", CLUSTER, "--since", "2026-09-31T00:00:00Z")
    assert code == 2 and "--since: 2026-09-31 is not a date" in stderr


# -- 8. progress, verbose, interrupt, unwrapped errors --------------------------------------------
def test_progress_on_a_terminal_names_phases_nodes_and_queries_and_is_off_in_a_pipe_or_quiet(mixed: Path):
    args = ["audit", "--world", str(mixed), "--cluster", CLUSTER, "--last", "24h", "--format", "json"]
    code, _, stderr = on_terminal(args)
    assert code == 0
    for shown in ("inventory", "queries", "nodes", "log groups", "records scanned", "AWS calls"):
        assert shown in stderr, shown
    assert re.search(r"queries \d+/\d+", stderr)
    assert on_terminal([*args, "--quiet"])[2] == ""
    assert on_terminal(args, stderr_tty=False)[2] == ""


def test_verbose_names_each_aws_call(mixed: Path):
    code, _, stderr = audit_mixed(mixed, "--format", "json", "--verbose")
    assert code == 0
    assert "aws ec2 DescribeInstances → ok" in stderr and "aws logs StartQuery → ok" in stderr
    assert "phase: judging" in stderr


def test_ctrl_c_exits_130_with_one_line_and_no_traceback(tmp_path: Path):
    spec = worldgen.WorldSpec(kind="parallelcluster", nodes=300, days=2, xid_rate=0.5, seed=1)
    world = tmp_path / "big.world.json"
    worldgen.write(worldgen.generate(spec), str(world))
    # Interrupted as soon as the progress line shows (its first frame counts AWS calls), with the whole audit ahead.
    # On a loaded machine this test's loop may still run only after the audit ended: no signal was sent then (the
    # process had exited), and the run is repeated, at most three times.
    for _ in range(3):
        sent = len(INTERRUPTS)
        code, _, stderr = on_terminal(["audit", "--world", str(world), "--cluster", CLUSTER, "--last", "2d",
                                       "--format", "json"], interrupt_when="AWS calls")
        if len(INTERRUPTS) > sent:
            break
    assert len(INTERRUPTS) > sent, "the audit always ended before it could be interrupted"
    assert code == 130
    assert "interrupted (Ctrl-C)" in stderr and "Traceback" not in stderr and "KeyboardInterrupt" not in stderr


def test_errors_in_a_pipe_are_one_line_however_long(mixed: Path):
    proc = subprocess.run([sys.executable, "-m", "gpuaudit", "audit", "--world", str(mixed), "--cluster",
                           "no-such-cluster-with-a-long-name"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": FUNCTIONS}, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and len(proc.stderr) > 120


# -- 9. help that teaches -------------------------------------------------------------------------------
def test_audit_help_groups_options_and_ends_with_examples():
    code, stdout, _ = invoke("audit", "--help", env={"COLUMNS": "200"})
    assert code == 0
    for panel in ("Scope", "Window", "Output", "Filters and CI gates", "AWS access", "Preflight", "Advanced"):
        assert re.search(rf"─ {panel} ─", stdout), panel
    assert stdout.index("Examples") > stdout.index("Advanced")
    assert "--fail-on REPLACE" in stdout


def test_top_level_help_puts_developer_commands_apart():
    _, stdout, _ = invoke("--help", env={"COLUMNS": "200"})
    developer = stdout[stdout.index("─ Developer tools ─"):]
    assert all(name in developer for name in ("bench", "bench-history", "world"))
    commands = stdout[stdout.index("─ Commands ─"):stdout.index("─ Developer tools ─")]
    assert "audit" in commands and "history" in commands and "bench" not in commands


def test_an_unknown_hyperpod_cluster_lists_the_ones_in_the_region():
    world = Path(__file__).resolve().parents[2] / "functions/gpuaudit/worlds/hyperpod-xid31-app-error.world.json"
    code, _, stderr = invoke("audit", "--world", str(world), "--cluster", "research-hp-slrum")
    assert code == 2
    assert "did you mean research-hp-slurm?" in stderr and "HyperPod clusters in us-west-2: research-hp-slurm" in stderr


# -- 1. AWS access --------------------------------------------------------------------------------------
def test_version_prints_the_version_and_the_schema_versions():
    code, stdout, _ = invoke("--version")
    from gpuaudit import __version__
    assert code == 0 and stdout.strip() == f"gpuaudit {__version__} (result schema {SCHEMA}, findings schema " \
                                           f"{FINDINGS_SCHEMA})"


@pytest.fixture
def aws_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An operator's machine: its own ~/.aws, no credentials in the environment, no instance metadata."""
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / ".aws" / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / ".aws" / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "config").write_text(
        "[profile work]\nregion = eu-central-1\nsso_start_url = https://example.awsapps.com/start\n"
        "sso_region = eu-central-1\nsso_account_id = 111122223333\nsso_role_name = ReadOnly\n", encoding="utf-8")
    return tmp_path


def one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_missing_profile_is_one_line_naming_the_next_step(aws_home: Path, monkeypatch: pytest.MonkeyPatch):
    code, _, stderr = invoke("audit", "--cluster", "c", "--profile", "nope")
    assert code == 2 and "--profile nope: no such profile" in one_line_error(stderr)
    assert "aws configure list-profiles" in stderr
    monkeypatch.setenv("AWS_PROFILE", "nope")
    code, _, stderr = invoke("audit", "--cluster", "c")
    assert code == 3 and "AWS_PROFILE nope: no such profile" in one_line_error(stderr)


def test_no_credentials_is_exit_3_with_the_next_step(aws_home: Path):
    code, _, stderr = invoke("audit", "--cluster", "c", "--region", "us-west-2")
    assert code == 3 and "no AWS credentials found" in one_line_error(stderr) and "aws sso login" in stderr


def test_an_expired_sso_session_says_aws_sso_login_for_that_profile(aws_home: Path):
    # Given the profile's SSO token in the cache expired yesterday
    import hashlib
    cache = aws_home / ".aws" / "sso" / "cache"
    cache.mkdir(parents=True)
    key = hashlib.sha1(b"https://example.awsapps.com/start").hexdigest()
    (cache / f"{key}.json").write_text(json.dumps({
        "startUrl": "https://example.awsapps.com/start", "region": "eu-central-1", "accessToken": "x",
        "expiresAt": "2020-01-01T00:00:00Z"}), encoding="utf-8")

    code, _, stderr = invoke("audit", "--cluster", "c", "--profile", "work")

    assert code == 3
    assert "SSO session of profile work has expired" in one_line_error(stderr)
    assert "aws sso login --profile work" in stderr


def test_region_comes_from_aws_region_then_aws_default_region_then_the_profile(monkeypatch: pytest.MonkeyPatch):
    from gpuaudit.collectors.session import AccessProblem, open_session

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    env = {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-2"}
    assert open_session(None, None, env).region == "eu-west-1"
    assert open_session(None, None, {"AWS_DEFAULT_REGION": "us-east-2"}).region == "us-east-2"
    assert open_session(None, "ap-south-1", env).region == "ap-south-1"
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(AccessProblem, match="no AWS region: pass --region, set AWS_REGION"):
        open_session(None, None, {})


def test_report_renders_a_saved_result_as_the_summary_or_records(mixed: Path, tmp_path: Path):
    saved = tmp_path / "result.json"
    assert audit_mixed(mixed, "--out", str(saved))[0] == 0
    code, stdout, _ = invoke("report", str(saved), "--format", "table")
    assert code == 0 and [r[1] for r in table_rows(stdout)] == [r[1] for r in table_rows(audit_mixed(
        mixed, "--format", "table")[1])]
    code, stdout, _ = invoke("report", str(saved), "--format", "ndjson")
    assert code == 0 and len(stdout.splitlines()) == len(json.loads(saved.read_text())["nodes"])


def test_credentials_that_expire_mid_audit_name_the_next_step(tmp_path: Path):
    from helpers.worlds import HyperPodWorld

    w = HyperPodWorld()
    w.fault("sagemaker", "DescribeCluster", "ExpiredTokenException")
    w.fault("ec2", "DescribeInstances", "ExpiredTokenException")
    path = tmp_path / "expired.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    code, _, stderr = invoke("audit", "--world", str(path), "--cluster", w.cluster)
    assert code == 3
    assert "ExpiredTokenException" in stderr and "aws sso login" in one_line_error(stderr)
