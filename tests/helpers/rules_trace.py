"""RULES.md traced to code and tests (issue #53 C): the items RULES states, and the trace table that maps each.

An *item* is every place RULES states a rule: each numbered section, each bold-led subsection, each row of each
table, each numbered or bulleted entry, and each `;`-separated entry of the two inline lists (the non-Xid memory
signals of §6, the HyperPod node state thresholds of §8). Its key is the section and the first words of the item,
so a reworded or added rule changes or adds a key and the trace test fails until the table says who applies it.

The trace table is `docs/rules-trace.md`: one row per key (written as a double-backtick code span, so the key's own
backticks and angle brackets stay as RULES writes them), the functions that apply it (`path/to/module.py::name`,
relative to `functions/gpuaudit/`, or `functions/handlers/…`) and the tests that show it (`tests/…py::test_name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENDORED_RULES = REPO / "tests" / "fixtures" / "spec" / "RULES.md"
SHARED_RULES = REPO.parent / "shared" / "spec" / "RULES.md"
TRACE = REPO / "docs" / "rules-trace.md"

# Inline lists whose `;`-separated entries are each a rule (the paragraph's first words → the entry's key prefix).
INLINE_LISTS = {"Non-Xid memory signals": "non-Xid", "**HyperPod node state thresholds:**": "threshold"}
_WORDS = 6


def _first_words(text: str, count: int = _WORDS) -> str:
    return " ".join(re.sub(r"[*`]", "", text).split()[:count])


def _is_separator(line: str) -> bool:
    return bool(re.match(r"^\|[\s:|-]+\|\s*$", line))


def rules_items(text: str) -> list[str]:
    """Every item RULES states, in order, each as its key (unique)."""
    items: list[str] = []
    section = ""
    sub = ""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        heading = re.match(r"^## (\d+)\. (.*)", line)
        if heading:
            section, sub = heading.group(1), ""
            items.append(f"§{section} {heading.group(2).strip()}")
            continue
        if not section:
            continue
        for lead, prefix in INLINE_LISTS.items():
            if line.startswith(lead):
                paragraph = [line]
                for follow in lines[index + 1 :]:
                    if not follow.strip():
                        break
                    paragraph.append(follow)
                body = " ".join(paragraph).split(":", 1)[1]
                parts = re.split(r";|\.\s+(?=[A-Z])", body)
                items.extend(f"§{section} {prefix}: {_first_words(part, 4)}" for part in parts if part.strip())
        bold = re.match(r"^\*\*([^*]+?)\*\*", line)
        if bold:
            sub = bold.group(1).strip().rstrip(".:")
            items.append(f"§{section} {sub}")
            continue
        row = re.match(r"^\|(.+)\|\s*$", line)
        if row:
            if _is_separator(line) or (index + 1 < len(lines) and _is_separator(lines[index + 1])):
                continue
            cells = [cell.strip() for cell in row.group(1).split("|")]
            key = f"§{section} row {cells[0]}"
            if key in items and len(cells) > 1:
                key = f"{key} / {cells[1]}"
            items.append(key)
            continue
        numbered = re.match(r"^(\d+)\. (.*)", line)
        if numbered:
            letter = sub.split(" ")[0] if re.match(r"^[A-F] —", sub) else ""
            label = f"§{section} {letter}.{numbered.group(1)}" if letter else f"§{section}.{numbered.group(1)}"
            items.append(f"{label} {_first_words(numbered.group(2))}")
            continue
        bullet = re.match(r"^- (.*)", line)
        if bullet:
            items.append(f"§{section} - {_first_words(bullet.group(1))}")
    return items


@dataclass(frozen=True)
class TraceRow:
    key: str
    applied_by: tuple[str, ...]
    shown_by: tuple[str, ...]


def _cell_refs(cell: str) -> tuple[str, ...]:
    return tuple(ref.strip().strip("`") for ref in cell.split(";") if ref.strip() and ref.strip() != "—")


def trace_rows(text: str) -> list[TraceRow]:
    """The rows of the trace table (docs/rules-trace.md): `| key | applied by | shown by |`."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| `` §"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        rows.append(TraceRow(cells[0].removeprefix("`` ").removesuffix(" ``"), _cell_refs(cells[1]),
                             _cell_refs(cells[2])))
    return rows
