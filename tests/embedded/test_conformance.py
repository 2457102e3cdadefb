"""scripts/verify-insights (gpuaudit.devtools.conformance) run against the embedded backend standing in for an account:
it reads the group with FilterLogEvents only, rebuilds it as a world, runs every template on both sides,
reports a difference when the two answer differently, and creates nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from helpers.worlds import ACCOUNT, PClusterWorld, at, aws_for

from gpuaudit.devtools.conformance import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_SAME, main, verify
from gpuaudit.model.timeutil import parse_time

ROOT = Path(__file__).resolve().parents[2]
PROBES = ("kernel-streams", "stream-summary", "gpu-lines", "job-figures", "stream-count", "kernel-lines", "stream-part",
          "boot-lines", "stream-hours", "gpu-lines-named", "kernel-named", "lagging-hours", "default-limit",
          "end-inclusive")


def account_world() -> PClusterWorld:
    """Two nodes' kernel streams (one silent 07:00-09:00), an Xid line, and a non-kernel stream."""
    w = PClusterWorld(n_compute=2)
    steady, gappy = w.compute
    w.healthy(steady, at(-2), at(12))
    stream = w.healthy(gappy, at(-2), at(7))
    w.lines(w.group, stream, at(9), at(12))
    w.stream(w.group, stream, events=[(at(9, 30, 5), "kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has "
                                                     "fallen off the bus.")])
    w.other_log(steady, "slurmd", at(-2), at(12), every_s=900)
    return w


def run_main(w: PClusterWorld, tmp_path: Path, *extra: str) -> tuple[int, str]:
    world_file = tmp_path / "account.world.json"
    world_file.write_text(json.dumps(w.raw))
    out = io.StringIO()
    code = main(["--world", str(world_file), "--log-group", w.group, "--since", at(0), "--until", at(12), *extra],
                out)
    return code, out.getvalue()


def test_the_embedded_backend_agrees_with_a_world_built_from_its_own_events(tmp_path: Path):
    code, report = run_main(account_world(), tmp_path)

    assert code == EXIT_SAME, report
    for probe in PROBES:
        assert f"[same] {probe}: AWS Complete" in report
    assert f"{len(PROBES)} same, 0 different" in report
    assert ACCOUNT not in report  # masked, though @log carries it


def test_a_bounded_read_shortens_the_window_to_what_was_read_whole(tmp_path: Path):
    code, report = run_main(account_world(), tmp_path, "--max-events", "40")

    # Then the window ends before the 41st event's second, the world holds every event of it, and both agree
    assert code == EXIT_SAME, report
    assert "stopped at --max-events 40" in report
    assert "events read" in report and "T12:00:00" not in report.splitlines()[0]


def test_a_different_answer_from_the_service_is_reported(tmp_path: Path):
    # Given an "account" that prints timestamps ISO-style with a T and hour bins one hour late
    w = account_world()
    aws = aws_for(w.world())

    def rewrite(parsed: dict, **_: object) -> None:
        for row in parsed.get("results", []):
            for cell in row:
                if cell["field"] in ("first_event", "last_event"):
                    cell["value"] = cell["value"].replace(" ", "T")
                if cell["field"] == "hour":
                    cell["value"] = cell["value"].replace(" 0", " 1", 1)

    aws.session.events.register("after-call.cloudwatch-logs.GetQueryResults", rewrite)
    out = io.StringIO()

    # When verified
    code = verify(aws, w.group, parse_time(at(0)), parse_time(at(12)), out=out)

    # Then both differences are named, on the probes that show them
    report = out.getvalue()
    assert code == EXIT_DIFFERENT
    assert "[DIFF] stream-summary" in report
    assert "first_event format: AWS ['9999-99-99T99:99:99.999'], embedded ['9999-99-99 99:99:99.999']" in report
    assert "[DIFF] stream-hours" in report and "hour bins:" in report
    assert "[same] kernel-streams" in report


def test_only_read_calls_reach_the_account(tmp_path: Path):
    w = account_world()
    aws = aws_for(w.world())
    verify(aws, w.group, parse_time(at(0)), parse_time(at(12)), out=io.StringIO())
    assert {op for (_, op) in aws.counts} == {"FilterLogEvents", "StartQuery", "GetQueryResults"}


def test_an_unknown_log_group_is_bad_input_with_a_message(tmp_path: Path, capsys):
    w = account_world()
    world_file = tmp_path / "account.world.json"
    world_file.write_text(json.dumps(w.raw))

    code = main(["--world", str(world_file), "--log-group", "/no/such/group"], io.StringIO())

    assert code == EXIT_BAD_INPUT
    assert "log group '/no/such/group' not found" in capsys.readouterr().err


def test_the_script_runs_from_the_checkout(tmp_path: Path):
    w = account_world()
    world_file = tmp_path / "account.world.json"
    world_file.write_text(json.dumps(w.raw))

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "verify-insights"), "--world", str(world_file),
                           "--log-group", w.group, "--last", "12h"], capture_output=True, text=True, timeout=120)

    assert done.returncode == EXIT_SAME, done.stdout + done.stderr
    assert f"{len(PROBES)} same, 0 different" in done.stdout
