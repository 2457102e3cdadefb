"""Bad input gets a clear error or is handled, and loses nothing (reliability issue, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.worlds import PClusterWorld, at
from pydantic import ValidationError
from typer.testing import CliRunner

from gpuaudit.cli import app


def invoke(*args: str):
    out = CliRunner().invoke(app, list(args))
    assert "Traceback" not in out.output
    return out


def test_stream_names_with_quotes_and_brackets_cannot_break_the_detail_query() -> None:
    # Given a node whose kernel stream name holds quote, bracket and regex characters, with a silent hour
    w = PClusterWorld("inj", n_compute=1)
    gpu = w.compute[0]
    stream = f'{gpu.hostname}.{gpu.instance_id}.sys"tem]|.*-messages'
    w.kernel_stream(w.group, stream, at(-48), at(9), host=gpu.hostname)
    w.lines(w.group, stream, at(10), at(13))
    # When audited (the silent hour forces a per-hour detail query naming the stream)
    result = w.audit("inj", since=at(8), until=at(11))
    row = next(r for n in result.nodes for r in n.coverage if r.log_stream == stream)
    # Then the name was quoted, the query ran, and the exact empty hour is reported
    assert row.empty_hours and [h.hour for h in row.empty_hours] == [9]
    assert row.status == "Not observable"


def test_log_lines_with_undecodable_bytes_and_very_long_lines_are_audited() -> None:
    w = PClusterWorld("odd", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    long_line = f"{gpu.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 31, pid=1, name=x, " + "A" * 300_000
    w.stream(w.group, stream, events=[(at(9, 30), f"{gpu.hostname} kernel: bad bytes \udcff\udcfe here"),
                                      (at(9, 40), long_line)])
    result = w.audit("odd", mode="incident", since=at(8), until=at(11))
    node = result.nodes[-1] if result.nodes[-1].instance_id == gpu.instance_id else result.nodes[0]
    assert node.xid_status == "Measured"
    assert any(e.code == 31 for e in node.gpu_errors)
    assert len(result.report_markdown) < 200_000  # a 300 kB line is not pasted whole into the report


def test_empty_account_is_an_unknown_cluster(tmp_path: Path) -> None:
    path = tmp_path / "empty.world.json"
    path.write_text(json.dumps({"format": "gpu-audit-world/1", "now": "2026-10-01T00:00:00Z",
                                "account_id": "111122223333", "region": "us-west-2"}))
    out = invoke("audit", "--world", str(path), "--cluster", "nothing-here")
    assert out.exit_code == 2
    assert "cluster 'nothing-here' not found" in out.output


def test_truncated_world_file_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "cut.world.json"
    path.write_text('{"format": "gpu-audit-world/1", "now": "2026-10-01T00:00:00Z", "logs": {"gro')
    out = invoke("audit", "--world", str(path), "--cluster", "c")
    assert out.exit_code == 2
    assert "not valid JSON" in out.output


def test_bad_xid_override_and_bad_last_are_bad_input(tmp_path: Path) -> None:
    world = str(Path(__file__).resolve().parents[2] / "functions/gpuaudit/worlds/hyperpod-xid31-app-error.world.json")
    assert invoke("audit", "--world", world, "--cluster", "research-hp-slurm", "--xid-class", "31=oops").exit_code == 2
    out = invoke("audit", "--world", world, "--cluster", "research-hp-slurm", "--last", "30 days")
    assert out.exit_code == 2 and "--last" in out.output


HYPERPOD_WORLD = str(
    Path(__file__).resolve().parents[2] / "functions/gpuaudit/worlds/hyperpod-xid31-app-error.world.json"
)


@pytest.mark.parametrize(("field", "value"), [("run_hours", "inf"), ("run_hours", "nan"), ("run_hours", "1e308"),
                                              ("run_hours", "-1"), ("checkpoint_minutes", "inf"),
                                              ("checkpoint_minutes", "1e308")])
def test_one_validator_refuses_a_run_length_at_every_entry_point(field: str, value: str) -> None:
    """The CLI, the MCP tool's input and the Step Functions on-demand input refuse the same planned run (issue #48
    item 7): not finite, not above zero, or beyond any date a time input may name; none of them judges it."""
    from handlers.plan import parse_trigger
    from handlers.runtime import InvalidEvent

    from gpuaudit.agent.schema import AuditInput

    flag = "--" + field.replace("_", "-")
    out = invoke("audit", "--world", HYPERPOD_WORLD, "--cluster", "research-hp-slurm", "--mode", "preflight",
                 flag, value)
    assert out.exit_code == 2 and flag in out.output, out.output
    with pytest.raises(ValidationError) as tool:
        AuditInput.model_validate({"cluster": "research-hp-slurm", "mode": "preflight", field: float(value)})
    assert field in str(tool.value)
    with pytest.raises(InvalidEvent) as console:
        parse_trigger({"cluster": "research-hp-slurm", "mode": "preflight", field: value})
    assert field in str(console.value)


@pytest.mark.parametrize("label", ["lab\nx", "lab\x1b[2J", "lab\u200bx", "lab\u2028x"])
def test_a_cluster_name_with_control_or_invisible_characters_is_refused_by_the_cli_and_step_functions(
        label: str) -> None:
    from handlers.plan import parse_trigger
    from handlers.runtime import InvalidEvent

    out = invoke("audit", "--world", HYPERPOD_WORLD, "--cluster", label, "--instances", "i-0123456789abcdef0")
    assert out.exit_code == 2 and "--cluster" in out.output and "control or invisible character" in out.output
    assert "\x1b" not in out.output and "\u200b" not in out.output and "\u2028" not in out.output
    with pytest.raises(InvalidEvent, match="control or invisible character"):
        parse_trigger({"cluster": label, "instance_ids": ["i-0123456789abcdef0"]})


@pytest.mark.parametrize("flag", ["--since", "--until", "--onset", "--run-start", "--cluster"])
def test_a_huge_cli_value_is_refused_without_being_echoed_whole(flag: str) -> None:
    out = invoke("audit", "--world", HYPERPOD_WORLD, "--cluster", "research-hp-slurm", flag, "9" * 200_000)
    assert out.exit_code == 2 and flag in out.output and len(out.output) < 2_000, len(out.output)


@pytest.mark.parametrize("command", ["audit", "history", "report"])
def test_out_to_a_named_pipe_nothing_reads_is_refused_not_a_hang(tmp_path: Path, command: str) -> None:
    """Issue #48 item 9: opening a FIFO with no reader blocks for ever; it is refused, naming the pipe."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "out.md"
    os.mkfifo(fifo)
    if command == "history":  # a history to read first
        assert invoke("audit", "--world", HYPERPOD_WORLD, "--cluster", "research-hp-slurm", "--quiet", "--format",
                      "json", "--history", str(tmp_path / "h")).exit_code == 0
    args = {"audit": ["--world", HYPERPOD_WORLD, "--cluster", "research-hp-slurm", "--quiet"],
            "history": ["--cluster", "research-hp-slurm", "--history", str(tmp_path / "h")],
            "report": [str(tmp_path / "result.json"), "--format", "md"]}[command]
    done = subprocess.run([sys.executable, "-m", "gpuaudit", command, *args, "--out", str(fifo)],
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "functions")},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "named pipe that nothing reads" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [["--until", "1970-01-01T00:00:00Z"], ["--until", "1970-01-01T05:00:00Z",
                                                                        "--mode", "incident"]])
def test_a_window_reaching_outside_the_time_bounds_is_refused_before_any_read(args: list[str]) -> None:
    """Issue #48 item 5: `--until 1970-01-01` alone took the default length back into 1969, a window outside the
    bounds every time input keeps; it is refused, as a time outside them is."""
    out = invoke("audit", "--world", HYPERPOD_WORLD, "--cluster", "research-hp-slurm", *args)
    assert out.exit_code == 2 and "outside the years 1970-2100" in out.output, out.output


def test_each_call_waits_no_longer_than_the_deadline_leaves() -> None:
    """Issue #48 item 5: a call in flight is bounded by the audit's deadline too: each botocore attempt's read and
    connect timeouts are cut to a third of what remains (three attempts per call); none given: 30 s."""
    import time

    import boto3

    from gpuaudit.collectors.aws import BOTOCORE_ATTEMPTS, Aws

    aws = Aws(session=boto3.Session(region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y"),
              region="us-west-2")
    assert aws.client("ec2").meta.config.read_timeout == 30
    for remaining in (600.0, 40.0, 10.0, 3.0, 0.5):
        aws.deadline = time.monotonic() + remaining
        config = aws.client("ec2").meta.config
        attempts = config.retries["max_attempts"] + 1 if "max_attempts" in config.retries else \
            config.retries["total_max_attempts"]
        assert attempts == BOTOCORE_ATTEMPTS
        bound = max(remaining / BOTOCORE_ATTEMPTS, 1.0)
        assert config.read_timeout <= bound and config.connect_timeout <= bound, (remaining, config.read_timeout)


def test_an_audit_without_a_deadline_gets_the_default_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import time

    from gpuaudit.collectors.aws import DEFAULT_DEADLINE_S

    cli_audit = importlib.import_module("gpuaudit.cli.audit")  # the module (the package exports the command)

    seen: list[float | None] = []
    real = cli_audit.run_audit

    def watching(aws, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(aws.deadline)
        return real(aws, *args, **kwargs)

    monkeypatch.setattr(cli_audit, "run_audit", watching)
    assert invoke("audit", "--world", HYPERPOD_WORLD, "--cluster", "research-hp-slurm", "--quiet", "--format",
                  "json").exit_code == 0
    assert seen and seen[0] is not None and 0 < seen[0] - time.monotonic() <= DEFAULT_DEADLINE_S


@pytest.mark.parametrize("field", ["since", "until", "onset", "run_start"])
def test_the_step_functions_input_keeps_the_same_date_bounds_as_the_cli(field: str) -> None:
    from handlers.plan import parse_trigger
    from handlers.runtime import InvalidEvent

    with pytest.raises(InvalidEvent, match="outside the years 1970-2100"):
        parse_trigger({"cluster": "research-hp-slurm", "mode": "incident", field: "0001-01-01T00:00:00Z"})
