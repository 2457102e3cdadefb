"""The terminal summary (`--format table`): what an operator reads first, rendered from the Result alone.

Headline, verdict counts, then one row per node with a verdict or a coverage gap, worst first, in aligned columns
that are never truncated (kubectl's rule: an ID that is cut cannot be acted on; a narrow terminal wraps the line
instead); then the branches (incident) or the checks (preflight), the gaps and the next steps.

Everything quoted comes from the audited account: each cell is redacted (account IDs) and passed through
`one_line` (control characters, ANSI escapes shown as `\\xNN`, never emitted) and is built as Rich `Text`, so no
markup in account text is interpreted. Nothing here is Markdown: a command shown in backticks in the Result is
printed bare (styled) so it can be copied as is. Colour carries severity beside a glyph and a word, never alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from rich.text import Text

from gpuaudit.model.redaction import redact
from gpuaudit.model.result import BRANCH_NAMES, CheckResult, NodeResult, Result, check_rank
from gpuaudit.model.timeutil import iso
from gpuaudit.report.escape import one_line
from gpuaudit.report.markdown import action_lines
from gpuaudit.report.order import deciding_first, verdict_counts, worst_first

VERDICT_STYLE: dict[str, tuple[str, str]] = {  # verdict -> (glyph, Rich style)
    "REPLACE": ("✖", "bold red"), "NOT OBSERVABLE": ("?", "bold magenta"), "REBOOT": ("↻", "yellow"),
    "MONITOR": ("!", "cyan"), "LEAVE ALONE": ("✓", "green")}
NO_VERDICT = ("·", "dim")
CHECK_STYLE: dict[CheckResult, tuple[str, str]] = {
    "FAIL": ("✖", "bold red"), "RISK": ("!", "yellow"), "Needs input": ("?", "cyan"), "Not checked": ("?", "magenta"),
    "UNVERIFIED": ("?", "magenta"), "PASS": ("✓", "green")}
BRANCH_STYLE = {"Root cause": "bold red", "Contributing": "yellow", "UNVERIFIED": "magenta", "Not assessed": "magenta",
                "Ruled out": "green"}
READY_STYLE = {"Yes": ("✓", "green"), "Yes with risks": ("!", "yellow"), "No": ("✖", "bold red")}
LISTED = 8  # gaps and actions shown before "… N more in the full report"
CODE_SPAN = re.compile(r"`+([^`]+)`+")
COLUMNS = ("VERDICT", "NODE", "GROUP", "TYPE", "XID", "LAST SEEN", "COVERAGE")
# Below this many columns the node table drops what `kubectl get` leaves to `-o wide` (GROUP, TYPE, LAST SEEN): an
# ID that wraps cannot be copied, so the columns go, never the ID. Files and pipes are always wide.
WIDE_COLUMNS = 120
NARROW_DROPS = ("GROUP", "TYPE", "LAST SEEN")


class _Clean:
    """Account text made safe for a terminal: account IDs redacted, controls made visible, one line."""

    def __init__(self, account_ids: frozenset[str]) -> None:
        self.account_ids = account_ids

    def __call__(self, value: object) -> str:
        return one_line(redact(str(value), self.account_ids)) if value not in (None, "") else "—"

    def prose(self, value: str, style: str = "") -> Text:
        """A sentence whose `code spans` become plain, bold text: copyable, no Markdown left."""
        out, last = Text(style=style), 0
        text = self(value)
        for match in CODE_SPAN.finditer(text):
            out.append(text[last:match.start()])
            out.append(match.group(1), style="bold")
            last = match.end()
        out.append(text[last:])
        return out


def shown_nodes(result: Result) -> list[NodeResult]:
    """The nodes the summary lists: every node with a verdict, and any other whose GPU evidence is not measured."""
    return [n for n in result.nodes if n.verdict is not None or n.xid_status != "Measured"]


def _xids(node: NodeResult) -> str:
    """The Xid the node's verdict rests on (else the most telling one) with its class, and how many other codes it
    logged: the deciding signal first, as every output orders it (report/order.py deciding_first)."""
    seen: list[str] = []
    for e in deciding_first(node):
        what = f"{e.code} {e.class_}" if e.code is not None else f"HMA {e.hma_reason or e.class_}"
        what += " (earlier audit)" if e.source == "history" else ""
        if what not in seen:
            seen.append(what)
    if not seen:
        return "—"
    return seen[0] + (f" (+{len(seen) - 1} more)" if len(seen) > 1 else "")


def _last_seen(node: NodeResult) -> str:
    times = [r.last_event for r in node.coverage if r.last_event is not None]
    return _short_time(max(times)) if times else "never"


def _short_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


def _coverage(node: NodeResult) -> str:
    if not node.coverage:
        return f"{node.xid_status} (no log stream)"
    empty = max((len(r.empty_hours) for r in node.coverage if r.status != "Measured"), default=0)
    return f"{node.xid_status} ({empty} empty h)" if empty else node.xid_status


def node_rows(result: Result, nodes: Sequence[NodeResult]) -> list[tuple[Text, ...]]:
    clean = _Clean(result.account_ids)
    rows: list[tuple[Text, ...]] = []
    for n in worst_first(nodes):
        glyph, style = VERDICT_STYLE.get(n.verdict or "", NO_VERDICT)
        rows.append((Text(f"{glyph} {n.verdict or 'no verdict'}", style=style), Text(clean(n.instance_id)),
                     Text(clean(n.instance_group)), Text(clean(n.instance_type)), Text(clean(_xids(n))),
                     Text(_last_seen(n)), Text(clean(_coverage(n)), style="" if n.xid_status == "Measured" else style)))
    return rows


def _table(header: Sequence[str], rows: Sequence[Sequence[Text]], indent: str = "  ") -> list[Text]:
    """Aligned columns, widest cell sets the width, nothing cut: the last column is not padded."""
    widths = [max([len(h), *(r[i].cell_len for r in rows)]) for i, h in enumerate(header)]
    lines = [Text(indent + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(), style="bold")]
    for row in rows:
        line = Text(indent)
        for i, (cell, width) in enumerate(zip(row, widths, strict=True)):
            line.append_text(cell)
            if i < len(row) - 1:
                line.append(" " * (width - cell.cell_len + 2))
        lines.append(line)
    return lines


def _listed(title: str, items: Sequence[str], clean: _Clean, more: str) -> list[Text]:
    if not items:
        return []
    lines = [Text(f"{title} ({len(items)})", style="bold")]
    lines += [Text("  - ").append_text(clean.prose(item)) for item in items[:LISTED]]
    if len(items) > LISTED:
        lines.append(Text(f"  … {len(items) - LISTED} more {more}", style="dim"))
    return lines


def _narrowed(header: Sequence[str], rows: Sequence[tuple[Text, ...]], wide: bool) -> tuple[list[str],
                                                                                            list[tuple[Text, ...]]]:
    """The node table's columns for the width: all of them when wide, else without NARROW_DROPS."""
    if wide:
        return list(header), list(rows)
    kept = [i for i, h in enumerate(header) if h not in NARROW_DROPS]
    return [header[i] for i in kept], [tuple(r[i] for i in kept) for r in rows]


def _steps_for(result: Result, nodes: Sequence[NodeResult]) -> list[str]:
    """The next steps a filtered table shows (`--verdict`, `--only-exceptions`): a node action only when it is about
    a listed node (a grouped one by its nodes), a cluster-level step (a check's, a branch's) always."""
    shown = {n.instance_id for n in nodes}
    grouped = {g.action: set(g.nodes) for g in result.action_groups}
    every = {n.instance_id for n in result.nodes}
    out = []
    for action in result.actions:
        about = grouped.get(action) or {iid for iid in every if iid in action}
        if not about or about & shown:
            out.append(action)
    return out


def summary(result: Result, nodes: Sequence[NodeResult] | None = None, report_file: str | None = None,
            filtered: str | None = None, width: int | None = None) -> list[Text]:
    """The summary as lines. `nodes`: the rows to list (default: shown_nodes); `filtered` names the filter that
    chose them, so a shortened list never reads as the whole cluster; `width`: the terminal's columns (None: a file
    or a pipe), below WIDE_COLUMNS the node table drops NARROW_DROPS."""
    clean = _Clean(result.account_ids)
    listed = shown_nodes(result) if nodes is None else list(nodes)
    elsewhere = f"in the full report: {report_file}" if report_file else "in the full report (--format md)"
    lines = [Text(f"gpuaudit {result.mode} audit: {clean(result.cluster.name)} ({clean(result.cluster.region)}), "
                  f"window {iso(result.window.start)} → {iso(result.window.end)}", style="bold"),
             clean.prose(result.headline),
             Text(f"confidence: {result.confidence}")
             + (Text(f" — {clean(result.confidence_basis)}") if result.confidence_basis else Text())]
    if result.ready is not None:
        glyph, style = READY_STYLE[result.ready]
        lines.append(Text("ready: ").append(f"{glyph} {result.ready}", style=style))
    counts = verdict_counts(result.nodes)
    tally = Text("verdicts: ")
    for i, (verdict, count) in enumerate(counts):
        glyph, style = VERDICT_STYLE[verdict]
        tally.append(" · " if i else "").append(f"{glyph} {verdict} {count}", style=style)
    lines.append(tally if counts else Text("verdicts: none (no node with a GPU signal)"))
    lines.append(Text(""))
    if listed:
        note = f" — {filtered}: {len(listed)} of {len(shown_nodes(result))}" if filtered else ""
        lines.append(Text(f"nodes ({len(listed)}, worst first{note})", style="bold"))
        lines += _table(*_narrowed(COLUMNS, node_rows(result, listed), width is None or width >= WIDE_COLUMNS))
    elif filtered:
        lines.append(Text(f"nodes: none match {filtered}", style="bold"))
    if result.branches:
        lines += [Text(""), Text("root-cause branches", style="bold")]
        rows: list[tuple[Text, ...]] = []
        for b in result.branches:
            style = BRANCH_STYLE.get(b.status, "")
            rows.append((Text(b.branch), Text(BRANCH_NAMES[b.branch]), Text(b.status, style=style),
                         Text(b.label or "—")))
        table = _table(("BRANCH", "NAME", "STATUS", "LABEL"), rows)
        lines.append(table[0])
        for line, b in zip(table[1:], result.branches, strict=True):
            lines += [line, Text("      ").append_text(clean.prose(b.evidence, "dim"))]
    if result.checks:
        lines += [Text(""), Text("preflight checks (worst first)", style="bold")]
        checks = sorted(result.checks, key=lambda c: (check_rank(c.result), c.id))
        rows = []
        for c in checks:
            glyph, style = CHECK_STYLE[c.result]
            rows.append((Text(clean(c.id)), Text(f"{glyph} {c.result}", style=style), Text(clean(c.title))))
        table = _table(("CHECK", "RESULT", "TITLE"), rows)
        lines.append(table[0])
        for line, c in zip(table[1:], checks, strict=True):
            lines.append(line)
            if c.action and c.result != "PASS":
                lines.append(Text("      → ").append_text(clean.prose(c.action)))
    # a grouped action names its first few nodes and where all of them are (its IDs file), as the Markdown does
    kept = set(_steps_for(result, listed) if filtered else result.actions)
    steps = [short for action, short in zip(result.actions, action_lines(result), strict=True) if action in kept]
    for title, items in (("visibility gaps", result.visibility_gaps), ("next steps", steps)):
        block = _listed(title, items, clean, elsewhere)
        lines += [Text(""), *block] if block else []
    if result.invariants_broken:
        lines += [Text(""), Text(f"✖ this result breaks {len(result.invariants_broken)} invariant(s): a bug; "
                                 "see the full report", style="bold red")]
    if report_file:
        lines += [Text(""), Text(f"full report: {report_file}")]
    return lines
