"""The Xid watch's filter pattern (issue #51 item 1): generated from the catalog data, within CloudWatch Logs'
limits, matching every hardware-class and unverified Xid's real line form and every "fallen off the bus" form of
tests/fixtures/xid_corpus, and no line of any other class."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.filter_pattern import MAX_PATTERN_CHARS, BadPattern, matches, parse

from gpuaudit.rules import xid_catalog as xid_rules
from gpuaudit.rules import xid_watch  # where the pattern is built (infra.xid_watch_pattern re-exports it)
from gpuaudit.rules.xid_catalog import load_catalog
from infra.xid_watch_pattern import WATCHED_CLASSES, filter_pattern, watched_codes

CORPUS = Path(__file__).parents[1] / "fixtures" / "xid_corpus" / "lines.json"
CLASSES = {entry.code: entry.class_ for entry in load_catalog().codes}


def corpus() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(CORPUS.read_text(encoding="utf-8"))["entries"]
    return entries


def any_line_matches(entry: dict[str, Any], pattern: str) -> bool:
    """A metric filter sees one log event at a time: an entry is caught when one of its events matches."""
    return any(matches(pattern, line) for line in entry["lines"])


def printed(code: int) -> str:
    """The driver's own print of an Xid (`NVRM: Xid (PCI:%s): %d, pid=…`), as every corpus capture shows it."""
    return f"[6781741.548779] NVRM: Xid (PCI:0000:91:00): {code}, pid=2512125, name=python3, Ch 00000008"


def test_the_pattern_is_within_cloudwatch_logs_limits_and_uses_no_regex_slot() -> None:
    pattern = filter_pattern()
    assert len(pattern) <= MAX_PATTERN_CHARS and "%" not in pattern
    assert [t.op for t in parse(pattern)] == ["?"] * (len(watched_codes()) + 1)


def test_the_checker_refuses_what_cloudwatch_would() -> None:
    for bad in ("?a " * 400, '%Xid.79%', '?"a" b'):
        with pytest.raises(BadPattern):
            parse(bad)


@pytest.mark.parametrize("entry", [e for e in corpus() if CLASSES.get(e["expect"].get("code")) in WATCHED_CLASSES],
                         ids=lambda e: e["id"])
def test_every_watched_class_line_of_the_corpus_matches(entry: dict[str, Any]) -> None:
    assert any_line_matches(entry, filter_pattern())


@pytest.mark.parametrize("entry", [e for e in corpus() if any("fallen off the bus" in line for line in e["lines"])],
                         ids=lambda e: e["id"])
def test_every_fallen_off_the_bus_form_of_the_corpus_matches_each_of_its_events(entry: dict[str, Any]) -> None:
    lines = [line for line in entry["lines"] if "fallen off the bus" in line]
    assert all(matches(filter_pattern(), line) for line in lines)


@pytest.mark.parametrize("entry", [e for e in corpus() if CLASSES.get(e["expect"].get("code")) not in WATCHED_CLASSES
                                   and not any("fallen off the bus" in line for line in e["lines"])],
                         ids=lambda e: e["id"])
def test_no_line_of_another_class_matches(entry: dict[str, Any]) -> None:
    assert entry["expect"].get("code") is not None
    assert not any_line_matches(entry, filter_pattern())


def test_every_catalog_code_is_watched_exactly_when_its_class_is_hardware_or_unverified() -> None:
    pattern = filter_pattern()
    caught = {code for code in CLASSES if matches(pattern, printed(code))}
    assert caught == {code for code, klass in CLASSES.items() if klass in ("hardware", "unverified")}
    assert {79, 48, 64, 95} <= caught and not caught & {13, 14, 31, 43, 45, 119, 154}


def test_a_catalog_change_changes_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = load_catalog()
    reclassified = tuple(e.model_copy(update={"class_": "hardware"}) if e.code == 13 else
                         e.model_copy(update={"class_": "application"}) if e.code == 79 else e for e in catalog.codes)
    monkeypatch.setattr(xid_watch, "load_catalog", lambda: catalog.model_copy(update={"codes": reclassified}))
    pattern = filter_pattern()
    assert matches(pattern, printed(13)) and not matches(pattern, printed(79))
    # a fallen-off-the-bus line is still caught without its Xid: RULES §6 reads it as Xid 79 whatever the catalog
    assert matches(pattern, "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.")
    assert xid_rules.load_catalog() is catalog


def test_the_deployments_class_overrides_change_the_watch() -> None:
    pattern = filter_pattern(["13=hardware", "48=application"])
    assert matches(pattern, printed(13)) and not matches(pattern, printed(48))
