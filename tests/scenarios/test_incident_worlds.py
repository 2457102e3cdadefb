"""Incident worlds written from RULES (tests/fixtures/incidents/): each `<name>.world.json` a frozen account in the
shape of the shared example worlds, each `<name>.expect.json` the answer RULES gives (decided from RULES, not from
what the product printed), compared as shared/tools/check_scenario.py compares the shared worlds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scenarios.test_scenarios import build_args, misses
from typer.testing import CliRunner

from gpuaudit.cli import app

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
NAMES = sorted(p.name.removesuffix(".expect.json") for p in INCIDENTS.glob("*.expect.json"))


def _expectation(name: str) -> dict[str, Any]:
    return json.loads((INCIDENTS / f"{name}.expect.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", NAMES)
def test_incident_world_meets_every_expectation(name: str) -> None:
    # Given an incident world and the answer RULES gives for it
    exp = _expectation(name)
    assert (INCIDENTS / f"{name}.world.json").exists() and exp["expect"], name
    # When the CLI runs the expect file's invocation
    outcome = CliRunner().invoke(app, build_args(exp["cli"], INCIDENTS / f"{name}.world.json"))
    result = json.loads(outcome.stdout) if outcome.stdout.strip().startswith("{") else {}
    # Then every expectation is met
    assert misses(exp["expect"], result, outcome.exit_code, outcome.stderr) == []


def test_the_incident_worlds_are_present() -> None:
    # The test above is parametrized from the folder: an emptied folder must not pass silently
    assert len(NAMES) >= 10, f"incident worlds missing from {INCIDENTS}"
