"""RULES traced (issue #53 C): every item RULES states has a row in docs/rules-trace.md naming the code that applies
it and the tests that show it, and every name in the table exists. The table cannot rot: a RULES item added or
reworded, a function renamed or a test removed fails here."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from helpers.rules_trace import REPO, SHARED_RULES, TRACE, VENDORED_RULES, TraceRow, rules_items, trace_rows

FUNCTIONS = REPO / "functions"


def _rules_text() -> str:
    return (SHARED_RULES if SHARED_RULES.is_file() else VENDORED_RULES).read_text(encoding="utf-8")


@functools.cache
def _defined_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def _missing(ref: str, root: Path) -> str | None:
    """Why `path[::name]` does not name something that exists (None when it does)."""
    path_text, _, name = ref.partition("::")
    path = root / path_text
    if not path.exists():
        path = REPO / path_text  # infra/… and tests/… are named from the repository root
    if not path.exists():
        return f"{ref}: no file {path_text}"
    if name and name not in _defined_names(path):
        return f"{ref}: {path_text} defines no {name}"
    return None


@pytest.fixture(scope="module")
def rows() -> list[TraceRow]:
    return trace_rows(TRACE.read_text(encoding="utf-8"))


def test_the_vendored_rules_are_the_spec_when_the_spec_is_beside_the_checkout() -> None:
    if not SHARED_RULES.is_file():
        pytest.skip(f"{SHARED_RULES} is not beside this checkout; the vendored copy is what the trace is checked on")
    assert VENDORED_RULES.read_text(encoding="utf-8") == SHARED_RULES.read_text(encoding="utf-8"), (
        "RULES.md changed: copy it to tests/fixtures/spec/RULES.md and trace its new items in docs/rules-trace.md"
    )


def test_every_item_of_rules_has_exactly_one_row_and_every_row_an_item(rows: list[TraceRow]) -> None:
    items = rules_items(_rules_text())
    keys = [row.key for row in rows]
    assert len(items) > 150, "the RULES reader found too few items to be reading RULES"
    assert [key for key in items if key not in keys] == [], "RULES items with no row in docs/rules-trace.md"
    assert [key for key in keys if key not in items] == [], "rows in docs/rules-trace.md naming no RULES item"
    assert len(keys) == len(set(keys)), "a RULES item traced twice"


def test_every_function_and_test_the_table_names_exists(rows: list[TraceRow]) -> None:
    broken = [
        reason
        for row in rows
        for reason in [*(_missing(ref, FUNCTIONS) for ref in row.applied_by),
                       *(_missing(ref, REPO) for ref in row.shown_by)]
        if reason
    ]
    assert broken == []


def test_shown_by_names_tests_and_applied_by_names_product_code(rows: list[TraceRow]) -> None:
    for row in rows:
        assert all(ref.startswith("tests/") and "::test_" in ref or ref.endswith(".py") for ref in row.shown_by), row
        assert not any(ref.startswith("tests/") for ref in row.applied_by), row


def test_the_reader_sees_each_kind_of_item() -> None:
    items = rules_items(_rules_text())
    for expected in ("§6 row 79", "§10 row P16", "§7 row `REPLACE`", "§8 row `MetadataOperations`", "§5.7 CloudTrail"):
        assert any(item.startswith(expected) for item in items), expected
    assert sum(item.startswith("§6 non-Xid:") for item in items) >= 9
    assert sum(item.startswith("§8 threshold:") for item in items) == 6
