"""The glossary an agent asks about (the MCP `explain` tool): the words of docs/VERDICTS.md and the Xid catalog.

docs/VERDICTS.md ships inside the package as data/VERDICTS.md (the Lambda package and a wheel have no docs/);
tests/agent/test_mcp_server.py keeps the two copies identical. Every table row of the page is an entry: its first cell
(`REPLACE`, `Measured`, `Proven`, branch `A`, `RULES §7`, …) is the term, the other cells its meaning under their
column names, and the section it stands in is named. An Xid code is explained from data/xid_catalog.json.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gpuaudit.rules.xid_catalog import catalog_by_code

GLOSSARY_PATH = Path(__file__).resolve().parent.parent / "data" / "VERDICTS.md"
SECTION_LIMIT = 2_500  # characters of a section's prose returned with an entry (the page is ~9 KB)
XID = re.compile(r"^(?:xid\s*)?(\d{1,3})$", re.IGNORECASE)


@dataclass(frozen=True)
class Entry:
    term: str
    section: str
    meaning: str


def _cells(line: str) -> list[str]:
    # a cell may hold an escaped pipe (`dmesg -T \| grep`): split on unescaped ones only
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


@cache
def _page() -> tuple[tuple[Entry, ...], dict[str, str]]:
    """(every table row as an entry, each section's prose by heading)."""
    entries: list[Entry] = []
    prose: dict[str, list[str]] = {}
    section, header = "", list[str]()
    for line in GLOSSARY_PATH.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), []
            prose[section] = []
        elif line.startswith("|"):
            cells = _cells(line)
            if not header:
                header = cells
            elif set(line.replace("|", "").strip()) <= {"-", " ", ":"}:
                continue
            else:
                meaning = "; ".join(f"{name}: {text}" for name,
                                    text in zip(header[1:], cells[1:], strict=False) if text)
                entries.append(Entry(term=cells[0].strip("`"), section=section, meaning=meaning))
        elif section and line.strip():
            prose[section].append(line.strip())
    return tuple(entries), {s: " ".join(lines) for s, lines in prose.items()}


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text).strip().casefold().removeprefix("branch ")


def explain(term: str) -> list[Entry]:
    """The entries naming `term` (case, `_` and `-` ignored: NOT_OBSERVABLE is NOT OBSERVABLE); else the sections
    whose heading names it, with their prose; an Xid code (`79`, `Xid 79`) from the catalog. Empty: unknown."""
    entries, prose = _page()
    wanted = _key(term)
    xid = XID.match(term.strip())
    if xid is not None:
        entry = catalog_by_code().get(int(xid.group(1)))
        if entry is None:
            return []
        recurs = f"; if it recurs: {entry.verdict_if_recurs}" if entry.verdict_if_recurs else ""
        return [Entry(term=f"Xid {entry.code}", section="Xid catalog (RULES §6, data/xid_catalog.json)",
                      meaning=f"{entry.mnemonic}: {entry.meaning}; NVIDIA action: {entry.nvidia_action or 'none'}; "
                              f"class: {entry.class_}; verdict: {entry.verdict or 'none'}{recurs}; "
                              f"action: {entry.action_text}")]
    exact = [e for e in entries if _key(e.term) == wanted or _key(e.term).removeprefix("rules ") == wanted]
    if exact:
        return [Entry(e.term, e.section, f"{e.meaning}. {_cut(prose.get(e.section, ''))}".rstrip(". ") + ".")
                if prose.get(e.section) else e for e in exact]
    return [Entry(term=section, section=section, meaning=_cut(text)) for section, text in prose.items()
            if wanted and wanted in _key(section) and text]


def terms() -> list[str]:
    """Every term an entry is kept for, as the page spells it (the tool's description lists them)."""
    return [e.term for e in _page()[0]]


def _cut(text: str) -> str:
    return text if len(text) <= SECTION_LIMIT else text[:SECTION_LIMIT - 1].rstrip() + "…"
