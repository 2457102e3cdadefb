"""Writes that destroy what was there (issue #48 item 3), with real faults: a file-size limit the kernel enforces
(RLIMIT_FSIZE: a write past it fails as a full disk does, part-way), outputs naming the run's own inputs. A write
leaves the previous file whole or replaces it whole; an output is never one of the run's inputs; a cache that
cannot be written is a named gap of an audit that stands."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.worlds import PClusterWorld, at
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.model.result import Result

EXIT_OK, EXIT_BAD_INPUT = 0, 2
PREVIOUS = "# the previous report\n" + "kept line\n" * 3000  # ~30 KB an earlier run wrote


def small_world(tmp_path: Path) -> tuple[Path, list[str]]:
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-2), at(12, 25))
    path = tmp_path / "fleet.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    return path, ["audit", "--world", str(path), "--cluster", w.cluster, "--since", at(6), "--until", at(10)]


def run_with_file_limit(args: list[str], limit_bytes: int) -> subprocess.CompletedProcess[str]:
    """The CLI in a process whose files cannot grow past `limit_bytes` (a write past it fails with EFBIG, as a
    full disk fails with ENOSPC: after the bytes that fit)."""
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the failed write is an error, not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "gpuaudit", *args], capture_output=True, text=True, env=env,
                          preexec_fn=limited, timeout=300, check=False)


def test_a_write_that_fails_part_way_leaves_the_previous_report_whole_and_no_temporary_file(tmp_path: Path) -> None:
    _, audit = small_world(tmp_path)
    report = tmp_path / "out" / "result.json"
    report.parent.mkdir()
    report.write_text(PREVIOUS, encoding="utf-8")
    done = run_with_file_limit([*audit, "--out", str(report)], limit_bytes=4096)
    assert done.returncode == EXIT_BAD_INPUT and "cannot write output" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert report.read_text(encoding="utf-8") == PREVIOUS
    assert sorted(p.name for p in report.parent.iterdir()) == ["result.json"]


def test_a_write_that_succeeds_replaces_the_file_whole_and_keeps_its_permissions(tmp_path: Path) -> None:
    _, audit = small_world(tmp_path)
    report = tmp_path / "result.json"
    report.write_text(PREVIOUS, encoding="utf-8")
    report.chmod(0o640)
    out = CliRunner().invoke(app, [*audit, "--out", str(report)])
    assert out.exit_code == EXIT_OK, out.output
    Result.model_validate_json(report.read_text(encoding="utf-8"))
    assert report.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.world.json", "result.json"]


@pytest.mark.parametrize("named", ["world", "cache", "history"])
def test_an_output_naming_one_of_the_runs_inputs_is_refused_and_the_input_kept(tmp_path: Path, named: str) -> None:
    world, audit = small_world(tmp_path)
    cache, history = tmp_path / "bins.json", tmp_path / "memory"
    runner = CliRunner()
    assert runner.invoke(app, [*audit, "--cache", str(cache), "--history", str(history), "--format", "json"]
                         ).exit_code == EXIT_OK  # the inputs exist, as an earlier run left them
    target = {"world": world, "cache": cache, "history": history / "gpuaudit-history.sqlite3"}[named]
    before = target.read_bytes()
    out = runner.invoke(app, [*audit, "--cache", str(cache), "--history", str(history), "--format", "json",
                              "--out", str(target)])
    assert out.exit_code == EXIT_BAD_INPUT and "refusing to overwrite it" in out.output, out.output
    assert f"--{named}" in out.output
    assert target.read_bytes() == before


def test_report_out_naming_the_result_it_renders_is_refused(tmp_path: Path) -> None:
    _, audit = small_world(tmp_path)
    saved = tmp_path / "result.json"
    runner = CliRunner()
    assert runner.invoke(app, [*audit, "--out", str(saved)]).exit_code == EXIT_OK
    before = saved.read_bytes()
    out = runner.invoke(app, ["report", str(saved), "--format", "csv", "--out", str(tmp_path / "." / "result.json")])
    assert out.exit_code == EXIT_BAD_INPUT and "refusing to overwrite it" in out.output, out.output
    assert saved.read_bytes() == before


def test_a_cache_that_cannot_be_written_is_a_named_gap_and_the_audit_stands(tmp_path: Path) -> None:
    _, audit = small_world(tmp_path)
    cache = tmp_path / "bins.json"
    done = run_with_file_limit([*audit, "--cache", str(cache), "--format", "json"], limit_bytes=64)
    assert done.returncode == EXIT_OK, done.stderr
    result = Result.model_validate_json(done.stdout)
    (gap,) = [g for g in result.visibility_gaps if "cache write" in g]
    assert str(cache) in gap and "EFBIG" in gap and "this audit's own reads are whole" in gap
    assert result.confidence == "High"  # nothing this audit read is missing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.world.json"]  # no partial cache, no temporary
