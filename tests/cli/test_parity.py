"""Issue #49 item 10: parity between the commands. `report` takes the filters and formats `audit` takes and prints
what `audit` printed for the same result; `--only-exceptions` (and `--verdict`) filter the next steps too, not only
the node rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.worlds import PClusterWorld, at, blind_and_signalled
from typer.testing import CliRunner

from gpuaudit.cli import app


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, PClusterWorld]:
    w = blind_and_signalled()
    folder = tmp_path_factory.mktemp("parity")
    world = folder / "w.world.json"
    world.write_text(json.dumps(w.raw), encoding="utf-8")
    result = folder / "result.json"
    done = CliRunner().invoke(app, ["audit", "--world", str(world), "--cluster", w.cluster, "--since", at(6),
                                    "--until", at(10), "--out", str(result), "--quiet"])
    assert done.exit_code == 0, done.output
    return world, result, w


def run(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, list(args))
    return done.exit_code, done.stdout, " ".join(done.stderr.split())


def audit(saved: tuple[Path, Path, PClusterWorld], *extra: str) -> tuple[int, str, str]:
    world, _, w = saved
    return run("audit", "--world", str(world), "--cluster", w.cluster, "--since", at(6), "--until", at(10),
               "--quiet", *extra)


@pytest.mark.parametrize("extra", [("--format", "ndjson", "--verdict", "not_observable,REBOOT"),
                                   ("--format", "csv", "--only-exceptions"),
                                   ("--format", "table", "--only-exceptions"),
                                   ("--format", "events")])
def test_report_prints_what_audit_printed_with_the_same_filters_and_format(saved: tuple[Path, Path, PClusterWorld],
                                                                          extra: tuple[str, ...]) -> None:
    _, result, _ = saved
    code, audited, stderr = audit(saved, *extra)
    assert code == 0, stderr
    code, reported, stderr = run("report", str(result), "--quiet", *extra)
    assert code == 0, stderr
    if "events" in extra:
        # the same events; a saved result keeps no account ID (redacted), so a ParallelCluster's instance ARN,
        # which needs it, is only in what the audit itself sent
        audited, reported = ([json.loads(line)["Detail"] for line in text.splitlines()] for text in (audited, reported))
    assert reported == audited and reported


def test_report_writes_by_extension_and_out_dir_like_audit(saved: tuple[Path, Path, PClusterWorld],
                                                           tmp_path: Path) -> None:
    _, result, w = saved
    code, _, stderr = run("report", str(result), "--out", str(tmp_path / "rows.csv"), "--verdict", "REBOOT")
    assert code == 0, stderr
    rows = (tmp_path / "rows.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0].startswith("schema,") and sum(w.compute[1].instance_id in r for r in rows) == 1
    assert not any(w.compute[2].instance_id in r for r in rows if ",node," in r)
    code, _, stderr = run("report", str(result), "--out-dir", str(tmp_path / "all"), "--quiet")
    assert code == 0, stderr
    assert {p.name for p in (tmp_path / "all").iterdir()} >= {"report.md", "result.json", "report.html",
                                                              "findings.ndjson", "findings.csv",
                                                              "findings.events.ndjson"}
    code, _, stderr = run("report", str(result), "--format", "json", "--out", str(tmp_path / "x.csv"))
    assert code == 2 and "--format json conflicts with --out" in stderr


def test_only_exceptions_filters_the_next_steps_too(saved: tuple[Path, Path, PClusterWorld]) -> None:
    _, _, w = saved
    blind, rebooted, app_error = (n.instance_id for n in w.compute[:3])
    code, whole, _ = audit(saved, "--format", "table")
    assert code == 0 and app_error in whole.split("next steps", 1)[1]
    code, shown, _ = audit(saved, "--format", "table", "--only-exceptions")
    steps = shown.split("next steps", 1)[1]
    assert blind in steps and rebooted in steps and app_error not in steps
    code, shown, _ = audit(saved, "--format", "table", "--verdict", "REBOOT")
    steps = shown.split("next steps", 1)[1]
    assert rebooted in steps and blind not in steps and app_error not in steps
