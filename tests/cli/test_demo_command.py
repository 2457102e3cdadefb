"""`make demo` — the README's first command (#37 item 5): `gpuaudit demo` runs every shipped scenario through the
full pipeline and ends with one recap table; per scenario it writes the result, both reports and the alert that was
published, and the files agree with each other and with the recap."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.devtools.demo import demo_name, demo_worlds
from gpuaudit.model.result import Result


def test_the_demo_audits_every_shipped_scenario_writes_its_files_and_recaps_each(tmp_path: Path) -> None:
    outcome = CliRunner().invoke(app, ["demo", "--out-dir", str(tmp_path)], env={"COLUMNS": "400"})
    assert outcome.exit_code == 0, outcome.output
    assert "Traceback" not in outcome.output
    entries = demo_worlds()
    assert len(entries) >= 9
    published = 0
    for entry in entries:
        stem = tmp_path / demo_name(entry)
        result = Result.model_validate_json(Path(f"{stem}.result.json").read_text(encoding="utf-8"))
        assert result.self_check.startswith("Self-check: passed"), (stem.name, result.self_check)
        assert Path(f"{stem}.report.md").read_text(encoding="utf-8").strip() == result.report_markdown.strip()
        assert result.headline and "<h1" in Path(f"{stem}.report.html").read_text(encoding="utf-8")
        assert stem.name in outcome.output  # one recap row per scenario
        alert = Path(f"{stem}.alert.txt")
        if alert.exists():
            published += 1
            subject = alert.read_text(encoding="utf-8").splitlines()[0].removeprefix("Subject: ")
            assert len(subject) <= 100 and subject.split(":")[0] in outcome.output
    assert published >= len(entries) // 2  # a first audit of a scenario with findings pages someone
    assert "\n" in outcome.output and len(outcome.output.splitlines()) < 400  # a recap, not the reports
