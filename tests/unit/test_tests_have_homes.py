"""Every test has a home a newcomer can find (issue #52 item 5): no test file sits directly in tests/, each folder
that holds tests is in tests/README.md's table, every folder the table names exists, and no two test files share
a basename (the folders have no __init__.py, so pytest imports each file by its basename)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
README = TESTS / "README.md"
# A table row's first cell: the folder, in backticks, ending in "/" (| `rules/` | what it holds | example |)
FOLDER_ROW = re.compile(r"^\|\s*`([^`/]+)/`\s*\|", re.MULTILINE)


def _listed_folders() -> list[str]:
    return FOLDER_ROW.findall(README.read_text(encoding="utf-8"))


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_no_test_file_sits_directly_in_tests() -> None:
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert flat == [], f"give these a folder of tests/ (tests/README.md says which): {flat}"


def test_every_folder_holding_tests_is_in_the_readme_table() -> None:
    holding_tests = {p.relative_to(TESTS).parts[0] for p in _test_files()}
    unlisted = sorted(holding_tests - set(_listed_folders()))
    assert unlisted == [], f"tests/README.md's table does not say what these folders hold: {unlisted}"


def test_every_folder_the_readme_table_names_exists() -> None:
    listed = _listed_folders()
    assert {"unit", "rules", "handlers", "infra"} <= set(listed), "tests/README.md's folder table was not read"
    missing = sorted(name for name in listed if not (TESTS / name).is_dir())
    assert missing == [], f"tests/README.md names folders tests/ does not have: {missing}"


def test_no_two_test_files_share_a_basename() -> None:
    shared = sorted(name for name, count in Counter(p.name for p in _test_files()).items() if count > 1)
    assert shared == [], f"pytest imports test files by basename: rename one of each {shared}"
