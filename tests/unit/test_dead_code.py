"""Dead code out and kept out (issue #52 item 9): vulture, configured as `make lint` runs it, finds nothing, and its
allow-list (vulture_allowlist.py) names only what is still defined, so a stale entry cannot hide new dead code."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from vulture import config as vulture_config
from vulture.core import Vulture

ROOT = Path(__file__).resolve().parents[2]
ALLOWLIST = ROOT / "vulture_allowlist.py"


@pytest.fixture(scope="module")
def lint_config() -> dict[str, Any]:
    """[tool.vulture] of pyproject.toml, read by vulture itself as `make lint` runs it (its paths: from the root)."""
    return vulture_config.make_config(argv=["--config", str(ROOT / "pyproject.toml")])


@pytest.fixture(scope="module")
def scan(lint_config: dict[str, Any]) -> Vulture:
    """One vulture pass over what `make lint` scans, shared by the checks below."""
    finder = Vulture(ignore_names=lint_config["ignore_names"], ignore_decorators=lint_config["ignore_decorators"])
    finder.scavenge([str(ROOT / p) for p in lint_config["paths"]], exclude=lint_config["exclude"])
    return finder


def test_vulture_finds_no_dead_code(scan: Vulture, lint_config: dict[str, Any]) -> None:
    dead = [f"{item.filename.relative_to(ROOT)}:{item.first_lineno} {item.typ} {item.name}"
            for item in scan.get_unused_code(min_confidence=lint_config["min_confidence"])]
    assert dead == [], "remove it, or say in vulture_allowlist.py who reads it"


def test_the_product_is_what_vulture_reads(lint_config: dict[str, Any]) -> None:
    # A name read only by a test is dead unless the allow-list says why it stays: tests are not scanned.
    scanned = set(lint_config["paths"])
    assert {"functions", "infra", "app.py", ALLOWLIST.name} <= scanned
    assert not any(p.startswith("tests") for p in scanned)


def allowed_names() -> list[str]:
    tree = ast.parse(ALLOWLIST.read_text(encoding="utf-8"))
    return [node.value.attr for node in tree.body
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Attribute)]


def test_every_allowed_name_is_still_defined(scan: Vulture) -> None:
    allowed = allowed_names()
    assert allowed and len(allowed) == len(set(allowed)), "each name once"
    defined = {item.name for items in (scan.defined_attrs, scan.defined_classes, scan.defined_funcs,
                                       scan.defined_methods, scan.defined_props, scan.defined_vars)
               for item in items if Path(item.filename) != ALLOWLIST}
    assert [name for name in allowed if name not in defined] == [], "gone from the code: remove it from the list"
