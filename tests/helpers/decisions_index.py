"""The index of docs/decisions.md, derived from its `## ` entries (issue #52 item 10).

Each entry is a `## ` heading followed by one line `*Decision N · YYYY-MM-DD · Status*`: N its place in the file
(entries are appended, so a number never moves), the date it was decided, its status (Accepted, or Accepted and
amended by a later entry, or Superseded by one). The index at the top of the file lists them. After appending an
entry, run from the repository root:

    .venv/bin/python -m tests.helpers.decisions_index

It numbers every entry by its place, gives an entry without its line one dated today and Accepted, and rewrites the
index. tests/unit/test_decisions_index.py fails until then.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DECISIONS = Path(__file__).resolve().parents[2] / "docs" / "decisions.md"
INDEX_START = "<!-- index: tests/helpers/decisions_index.py writes what follows, up to its end marker -->"
INDEX_END = "<!-- end of index -->"
STATUS_LINE = re.compile(r"^\*Decision (?P<number>\d+) · (?P<date>\d{4}-\d{2}-\d{2}) · (?P<status>[^*]+)\*$")
MAX_PROSE_WIDTH = 120  # a table row is one line whatever its width; prose wraps


@dataclass(frozen=True)
class Entry:
    title: str
    line: int  # of the heading, 0-based
    number: int | None  # as written on its status line; None when the line is missing
    date: str | None
    status: str | None


def entries(text: str) -> list[Entry]:
    """The `## ` headings outside code blocks, each with the status line under it when there is one."""
    lines, found, fenced = text.splitlines(), [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("## "):
            continue
        below = next((lines[j] for j in range(i + 1, len(lines)) if lines[j].strip()), "")
        status = STATUS_LINE.match(below)
        found.append(Entry(line[3:].strip(), i, int(status["number"]) if status else None,
                           status["date"] if status else None, status["status"].strip() if status else None))
    return found


def anchor(title: str, taken: dict[str, int]) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    seen = taken.get(slug, 0)
    taken[slug] = seen + 1
    return f"{slug}-{seen}" if seen else slug


def index(found: list[Entry]) -> list[str]:
    taken: dict[str, int] = {}
    rows = [f"| {n} | [{e.title}](#{anchor(e.title, taken)}) | {e.date or '?'} | {e.status or '?'} |"
            for n, e in enumerate(found, start=1)]
    return [INDEX_START, "", "| # | Decision | Date | Status |", "|---|---|---|---|", *rows, "", INDEX_END]


def current_index(text: str) -> list[str]:
    lines = text.splitlines()
    if INDEX_START not in lines or INDEX_END not in lines:
        return []
    return lines[lines.index(INDEX_START): lines.index(INDEX_END) + 1]


def problems(text: str) -> list[str]:
    """What stands between the file and its rules: missing or misnumbered status lines, a stale index, long prose."""
    found = entries(text)
    out = [f"`## {e.title}`: no `*Decision N · YYYY-MM-DD · Status*` line under it" for e in found if e.number is None]
    out += [f"`## {e.title}`: numbered {e.number}, is entry {n}" for n, e in enumerate(found, start=1)
            if e.number is not None and e.number != n]
    if current_index(text) != index(found):
        out.append("the index is not the entries' (missing, stale or out of order)")
    fenced = False
    for i, line in enumerate(text.splitlines(), start=1):
        fenced = fenced != line.startswith("```")
        if not fenced and not line.startswith("|") and len(line) > MAX_PROSE_WIDTH:
            out.append(f"line {i} is {len(line)} characters: wrap it at {MAX_PROSE_WIDTH}")
    return out


def rewrite(text: str, today: str) -> str:
    """The file with every entry numbered by its place, a status line where one is missing, and the index redone."""
    lines = text.splitlines()
    for n, e in reversed(list(enumerate(entries(text), start=1))):
        if e.number is None:
            lines[e.line + 1: e.line + 1] = ["", f"*Decision {n} · {today} · Accepted*"]
        else:
            at = next(j for j in range(e.line + 1, len(lines)) if lines[j].strip())
            lines[at] = f"*Decision {n} · {e.date} · {e.status}*"
    text = "\n".join(lines) + "\n"
    old, new = current_index(text), index(entries(text))
    if not old:
        raise SystemExit(f"{DECISIONS}: no index markers ({INDEX_START} ... {INDEX_END}) to write between")
    start = lines.index(INDEX_START)
    lines[start: start + len(old)] = new
    return "\n".join(lines) + "\n"


def main() -> int:
    text = DECISIONS.read_text(encoding="utf-8")
    DECISIONS.write_text(rewrite(text, datetime.now(UTC).date().isoformat()), encoding="utf-8")
    left = problems(DECISIONS.read_text(encoding="utf-8"))
    print("\n".join(left) if left else f"{DECISIONS}: index written")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
