"""docs/decisions.md stays navigable (issue #52 item 10): every `## ` entry is numbered by its place, dated, given a
status, and listed in the index at the top; prose wraps. An entry appended without its line or its index row fails
here, with the command that fixes it (tests/helpers/decisions_index.py)."""

from __future__ import annotations

from tests.helpers.decisions_index import (
    DECISIONS,
    INDEX_END,
    INDEX_START,
    anchor,
    entries,
    problems,
    rewrite,
)

SMALL = f"""# Decisions

{INDEX_START}
{INDEX_END}

## First choice (issue #1)

*Decision 1 · 2026-12-01 · Accepted*

**Why.** Because.

```
## not an entry: inside a code block
```
"""


def test_the_decision_log_is_indexed_numbered_dated_and_wrapped() -> None:
    text = DECISIONS.read_text(encoding="utf-8")
    assert problems(text) == [], "run: .venv/bin/python -m tests.helpers.decisions_index"
    found = entries(text)
    assert len(found) >= 19 and [e.number for e in found] == list(range(1, len(found) + 1))
    assert all(e.date and e.status and e.status.startswith(("Accepted", "Superseded")) for e in found)
    # the index is what rewriting would write: nothing left to number, date or list
    assert rewrite(text, today="2099-01-01") == text


def test_an_appended_entry_without_its_line_or_row_is_named() -> None:
    indexed = rewrite(SMALL, today="2026-12-01")
    assert problems(indexed) == []
    appended = indexed + "\n## Second choice\n\n**Why.** Because.\n"
    assert problems(appended) == ["`## Second choice`: no `*Decision N · YYYY-MM-DD · Status*` line under it",
                                  "the index is not the entries' (missing, stale or out of order)"]


def test_rewriting_numbers_an_appended_entry_next_dates_it_and_lists_it() -> None:
    appended = rewrite(SMALL, today="2026-12-01") + "\n## Second choice: the same words (again)\n\nBody.\n"
    fixed = rewrite(appended, today="2026-12-07")
    assert problems(fixed) == []
    assert [(e.title, e.number, e.date, e.status) for e in entries(fixed)] == [
        ("First choice (issue #1)", 1, "2026-12-01", "Accepted"),
        ("Second choice: the same words (again)", 2, "2026-12-07", "Accepted")]
    assert "| 2 | [Second choice: the same words (again)](#second-choice-the-same-words-again) | 2026-12-07 | " \
           "Accepted |" in fixed.splitlines()


def test_an_entry_out_of_place_or_a_long_prose_line_is_named() -> None:
    misnumbered = rewrite(SMALL, today="2026-12-01").replace("*Decision 1 ·", "*Decision 4 ·")
    assert "`## First choice (issue #1)`: numbered 4, is entry 1" in problems(misnumbered)
    long_prose = rewrite(SMALL, today="2026-12-01") + "\n" + "word " * 30 + "\n| a table row " + "x" * 200 + " |\n"
    assert problems(long_prose) == [f"line {len(long_prose.splitlines()) - 1} is 150 characters: wrap it at 120"]


def test_anchors_are_githubs() -> None:
    taken: dict[str, int] = {}
    assert anchor("Straggler GPU: peers, \"clearly below\" (issue #53 item 9)", taken) == \
        "straggler-gpu-peers-clearly-below-issue-53-item-9"
    assert [anchor("Same", taken), anchor("Same", taken)] == ["same", "same-1"]
