"""`gpuaudit history`: each node's timeline across audits (issue #18 item 3, #37 item 4), rendered from a HistoryRead.

What on-call reads first is what is still to do: the actions a verdict asked for (REPLACE, REBOOT, NOT OBSERVABLE's
collection) that no later audit showed done (`rules.history.actions_of`, the one reading of the spans, computed
by the caller and handed in the view). Nodes come
worst first (`report.order`: an open action counts as the node's verdict, so a REBOOT never done whose Xid has left
the window still ranks as REBOOT). Nodes with nothing open and no verdict change are counted per latest verdict, not
drawn (`--all` lists them; the JSON always keeps every node). The header states the span of the audits actually
found, beside the look-back asked for.

Markdown (open actions, one row per node; timelines for `--node` or `--all`, held signals one row), JSON
(`gpu-audit-history/1`) and HTML (open actions first, then one strip per node under a date axis: a segment per span
coloured and labelled by its verdict, hatched where coverage was Not observable, a triangle per hardware-class Xid,
a bar per reboot; the steady nodes in a closed `<details>`). Everything in the history came from audited accounts:
escaped for each format, account IDs redacted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape

from gpuaudit.model.history import ASKS, Action, HistoryRead, HistorySpan, HistoryXid
from gpuaudit.model.redaction import MASK, redact, redact_tree
from gpuaudit.model.timeutil import iso
from gpuaudit.report.escape import md_cell, md_code, md_inline, visible
from gpuaudit.report.order import VERDICT_SEVERITY, verdict_rank

SCHEMA = "gpu-audit-history/1"
STRIP_W, STRIP_H, LABEL_W = 900, 18, 190
VERDICT_CLASS = {"REPLACE": "v-replace", "REBOOT": "v-reboot", "MONITOR": "v-monitor", "LEAVE ALONE": "v-leave",
                 "NOT OBSERVABLE": "v-unobs", None: "v-none"}
VERDICT_SHORT = {"REPLACE": "REPLACE", "REBOOT": "REBOOT", "MONITOR": "MONITOR", "LEAVE ALONE": "LEAVE",
                 "NOT OBSERVABLE": "N/O", None: "—"}
AXIS_STEPS = tuple(timedelta(hours=h) for h in (1, 3, 6, 12, 24, 48, 72, 168, 336, 720))
AXIS_TICKS = 16  # at most this many labelled ticks on the date axis
OPEN_LABEL = ' class="open"'  # a node with an action open: its label in bold


def _signal_key(x: HistoryXid) -> tuple[int | None, str | None, str | None, datetime]:
    return (x.code, x.signal, x.pci, x.first)


def _signals_of(span: HistorySpan) -> set[tuple[int | None, str | None, str | None, datetime]]:
    return {_signal_key(x) for x in span.xids}


@dataclass(frozen=True)
class NodeHistory:
    """One node's spans in time order and the actions its audits asked for."""

    instance_id: str
    spans: list[HistorySpan]
    actions: list[Action]

    @property
    def open(self) -> list[Action]:
        return [a for a in self.actions if a.open]

    @property
    def latest(self) -> str | None:
        """The latest audit's verdict; a node whose history was closed (cluster gone) has none."""
        return None if self.spans[-1].closed else self.spans[-1].verdict

    @property
    def standing(self) -> str | None:
        """What the node stands at for on-call: the worst of its open actions and its latest verdict."""
        return min([*(a.verdict for a in self.open), self.latest], key=verdict_rank)

    @property
    def rows(self) -> list[HistorySpan]:
        """The spans as a person reads them: consecutive spans in the same state holding the same signals (one Xid
        repeated by every audit whose window holds it) shown as one row. The JSON keeps the spans as stored."""
        rows: list[HistorySpan] = []
        for span in self.spans:
            last = rows[-1] if rows else None
            if (last is not None and last.same_state(span) and _signals_of(last) == _signals_of(span)
                    and span.audit_time >= last.through):
                lasts = {_signal_key(x): x.last for x in span.xids}
                rows[-1] = last.model_copy(update={
                    "through": span.through, "last_audit_id": span.last_audit_id, "audits": last.audits + span.audits,
                    "reboots": sorted({*last.reboots, *span.reboots}), "gaps": max(last.gaps, span.gaps),
                    "done_said": span.done_said or last.done_said,
                    "xids": [x.model_copy(update={"last": max(x.last, lasts.get(_signal_key(x), x.last))})
                             for x in last.xids]})
            else:
                rows.append(span)
        return rows

    @property
    def signals(self) -> int:
        """Distinct hardware signals (an Xid held in many audits' windows counts once)."""
        return len({_signal_key(x) for s in self.spans for x in s.xids})

    @property
    def changes(self) -> int:
        return sum(1 for a, b in zip(self.spans, self.spans[1:], strict=False)
                   if verdict_text(a) != verdict_text(b))

    @property
    def changed(self) -> bool:
        """The verdict changed in the look-back, or an action was asked for and done."""
        return self.changes > 0 or any(not a.open for a in self.actions)

    @property
    def steady(self) -> bool:
        return not self.open and not self.changed


@dataclass(frozen=True)
class HistoryView:
    """What to show of a read: the look-back asked for (spans reaching it are drawn; the actions are judged on every
    span read, so one given before it and never done stays open) and the filters (a node must pass all given)."""

    since: datetime
    until: datetime
    days: int | None = None  # the look-back asked for, in days (None: the read's own range)
    verdicts: frozenset[str] = field(default_factory=frozenset)  # any audit gave one of these, or one is open
    open_only: bool = False
    changed_only: bool = False
    show_all: bool = False  # list (and draw) the steady nodes too
    # each node's actions, from rules.history.actions_by_node over every span read (the caller's: report reads no rule)
    actions: Mapping[str, Sequence[Action]] = field(default_factory=dict)

    def keeps(self, node: NodeHistory) -> bool:
        if self.verdicts and not ({s.verdict for s in node.spans} | {a.verdict for a in node.open}) & self.verdicts:
            return False
        return (not self.open_only or bool(node.open)) and (not self.changed_only or node.changed)

    def filters(self) -> str:
        said = [f"--verdict {','.join(v for v in VERDICT_SEVERITY if v in self.verdicts)}"] if self.verdicts else []
        return ", ".join([*said, *(["--open"] if self.open_only else []),
                          *(["--changed"] if self.changed_only else [])])


def view_of(read: HistoryRead) -> HistoryView:
    return HistoryView(since=read.since, until=read.until)


def nodes_of(read: HistoryRead, view: HistoryView | None = None) -> list[NodeHistory]:
    """The nodes the view keeps, worst first: the standing verdict (report.order), an open action before none at the
    same rank, then instance ID. Spans before the look-back count for the actions only."""
    view = view or view_of(read)
    grouped: dict[str, list[HistorySpan]] = {}
    for span in sorted(read.spans, key=lambda s: (s.instance_id, s.audit_time, s.audit_id)):
        grouped.setdefault(span.instance_id, []).append(span)
    nodes = []
    for iid, spans in grouped.items():
        shown = [s for s in spans if s.through >= view.since]
        node = NodeHistory(iid, shown or spans[-1:], list(view.actions.get(iid, ())))
        if not shown and not node.open:
            continue  # nothing in the look-back and nothing left to do
        if view.keeps(node):
            nodes.append(node)
    return sorted(nodes, key=lambda n: (verdict_rank(n.standing), not n.open, n.instance_id))


def found_span(nodes: Sequence[NodeHistory]) -> tuple[datetime, datetime] | None:
    """The first and last audit time of the spans actually shown (not the look-back asked for)."""
    spans = [s for n in nodes for s in n.spans]
    return (min(s.audit_time for s in spans), max(s.through for s in spans)) if spans else None


def _signal(x: HistoryXid) -> str:
    what = f"Xid {x.code}" if x.code is not None else f"`{x.signal}`"
    when = iso(x.first) + (f" … {iso(x.last)}" if x.last != x.first else "")
    return what + (f" on PCI {x.pci}" if x.pci else "") + f" at {when}"


def verdict_text(span: HistorySpan) -> str:
    """A span's verdict as the history shows it; a closing span says why the verdict ended."""
    return f"closed: {span.closed}" if span.closed else span.verdict or "none"


def summary_line(spans: list[HistorySpan], actions: Sequence[Action] = ()) -> str:
    node = NodeHistory(spans[0].instance_id, spans, list(actions))
    xids = node.signals
    reboots = len({r for s in spans for r in s.reboots})
    standing = node.open
    return (f"{sum(s.audits for s in spans)} audit(s) in {len(spans)} span(s); verdict changes {node.changes}; "
            f"hardware signals {xids}; reboots {reboots}; latest verdict "
            + (f"closed: {spans[-1].closed}" if spans[-1].closed else
               f"{spans[-1].verdict or 'none'} ({spans[-1].xid_status})")
            + (f"; open: {', '.join(a.verdict for a in standing)}" if standing else ""))


def action_text(action: Action) -> str:
    """One action as the history shows it: what was asked, since when, and what closed it (or that nothing did)."""
    head = (f"{action.verdict} ({ASKS[action.verdict]}) given at {iso(action.given.audit_time)} in audit "
            f"{action.given.audit_id}" + (f", last given at {iso(action.last_given)}"
                                          if action.last_given != action.given.audit_time else ""))
    if action.open:
        what = {"REBOOT": "no reboot, relaunch or replacement seen",
                "REPLACE": "no replacement or relaunch seen",
                "NOT OBSERVABLE": "coverage not Measured again, node not replaced"}[action.verdict]
        return f"open: {head}; {what} in {action.audits_since} audit(s) since"
    return f"done: {head}; {action.closed_by}"


def _age(since: datetime, until: datetime) -> str:
    hours = max(int((until - since).total_seconds() // 3600), 0)
    return f"{hours // 24} d {hours % 24} h" if hours >= 24 else f"{hours} h"


def _open_rows(nodes: Sequence[NodeHistory], until: datetime) -> list[tuple[NodeHistory, Action, str]]:
    """Every open action, worst verdict first, then the longest open (the forgotten ones before today's)."""
    rows = [(n, a, _age(a.given.audit_time, until)) for n in nodes for a in n.open]
    return sorted(rows, key=lambda r: (verdict_rank(r[1].verdict), r[1].given.audit_time, r[0].instance_id))


def header(read: HistoryRead, nodes: Sequence[NodeHistory], view: HistoryView) -> list[str]:
    """Plain sentences every format shows: the audits found (of every node read, whatever the filters keep), the
    look-back asked, the counts, the filters."""
    in_lookback = [s for s in read.spans if s.through >= view.since]
    span = (min(s.audit_time for s in in_lookback), max(s.through for s in in_lookback)) if in_lookback else None
    asked = f"{view.days} day(s) to {iso(view.until)}" if view.days else f"{iso(view.since)} to {iso(view.until)}"
    found = f"Audits found from {iso(span[0])} to {iso(span[1])}" if span else "No audit found"
    opened = sum(1 for n in nodes if n.open)
    changed = sum(1 for n in nodes if not n.open and n.changed)
    lines = [f"{found} (look-back asked: {asked}); read from {read.store} ({read.items_read} item(s), "
             f"{read.requests} request(s))",
             f"Nodes: {len(nodes)} — {opened} with an action open, {changed} changed with nothing open, "
             f"{len(nodes) - opened - changed} steady"]
    if view.filters():
        lines.append(f"Filtered: {view.filters()}")
    return lines


def actions_asked(node: NodeHistory) -> str:
    """`REBOOT open, REPLACE done`: each action the node's audits asked for, in the order given."""
    return ", ".join(f"{a.verdict} {'open' if a.open else 'done'}" for a in node.actions)


def _steady_counts(nodes: Sequence[NodeHistory]) -> list[tuple[str, int]]:
    counts: dict[str | None, int] = {}
    for n in nodes:
        if n.steady:
            counts[n.latest] = counts.get(n.latest, 0) + 1
    return [(v or "no verdict", c) for v, c in sorted(counts.items(), key=lambda kv: verdict_rank(kv[0]))]


# --------------------------------------------------------------------------- Markdown


def _span_rows(spans: Sequence[HistorySpan]) -> list[str]:
    rows = ["| From | Through | Audits | Mode | Verdict | Coverage | Hardware signals | Reboots | Done | Audit |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for s in spans:
        rows.append(f"| {iso(s.audit_time)} | {iso(s.through)} | {s.audits} | {md_cell(s.mode)} | "
                    f"{md_cell(verdict_text(s))} | {md_cell(s.xid_status)} | "
                    f"{md_cell('; '.join(_signal(x) for x in s.xids))} | "
                    f"{md_cell(', '.join(iso(r) for r in s.reboots))} | {md_cell(s.done_said or '')} | "
                    f"{md_code(s.audit_id)}" + (f" … {md_code(s.last_audit_id)}" if s.last_audit_id != s.audit_id
                                                else "") + " |")
    return rows


def render_markdown(read: HistoryRead, cluster: str, view: HistoryView | None = None) -> str:
    view = view or view_of(read)
    nodes = nodes_of(read, view)
    span = found_span(nodes)
    until = span[1] if span else view.until
    lines = [f"# gpuaudit history: {md_inline(cluster)}", "", *(f"- {md_inline(t)}" for t in header(read, nodes, view))]
    if not nodes:
        lines.append("- " + ("no node matches the filters" if view.filters() else
                             "no audit of this cluster in the look-back"))
    opened = _open_rows(nodes, until)
    if opened:
        lines += ["", f"## Open actions ({len(opened)})", "",
                  "| Node | Action | Given | Signal | Open for | Audits since | Latest verdict |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {md_code(n.instance_id)} | {a.verdict} | "
                  f"{iso(a.given.audit_time)} ({md_code(a.given.audit_id)}) | {iso(a.signal) if a.signal else '—'} | "
                  f"{age} | {a.audits_since} | {md_cell(n.latest or 'none')} |"
                  for n, a, age in opened]
    listed = [n for n in nodes if view.show_all or not n.steady]
    if listed:
        lines += ["", "## Nodes, worst first", "",
                  "| Node | Standing | Latest verdict | Actions asked | Verdict changes | Hardware signals | Reboots | "
                  "Audits |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {md_code(n.instance_id)} | {n.standing or 'none'} | {md_cell(verdict_text(n.spans[-1]))} | "
                  f"{actions_asked(n) or '—'} | {n.changes} | {n.signals} | "
                  f"{len({r for s in n.spans for r in s.reboots})} | {sum(s.audits for s in n.spans)} |"
                  for n in listed]
    steady = _steady_counts(nodes)
    if steady and not view.show_all:
        lines += ["", f"Steady (nothing open, no verdict change): {sum(c for _, c in steady)} node(s) — "
                  + ", ".join(f"{v} {c}" for v, c in steady) + " (`--all` lists them; `--format json` has every node)"]
    if listed and not (view.show_all or len(nodes) == 1):
        lines += ["", "One node's timeline: `--node <instance-id>`; every node's: `--all`."]
    for n in nodes if (view.show_all or len(nodes) == 1) else []:
        lines += ["", f"## {md_code(n.instance_id)}", "", md_inline(summary_line(n.spans, n.actions))]
        lines += [f"- {md_inline(action_text(a))}" for a in n.actions]
        lines += ["", *_span_rows(n.rows)]
    return redact("\n".join(lines)) + "\n"


# --------------------------------------------------------------------------- table (a terminal)


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned plain columns, the widest cell setting each width, nothing cut (an ID that is cut cannot be used)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in [list(header), *rows]]


def render_table(read: HistoryRead, cluster: str, view: HistoryView | None = None) -> str:
    """`history --format table`: what the Markdown says, as a terminal reads it (issue #49 item 10) — the header, the
    open actions, the nodes worst first, the steady ones counted, a node's timeline for `--node`; account text made
    visible (control characters as `\\xNN`) and redacted, never markup."""
    view = view or view_of(read)
    nodes = nodes_of(read, view)
    span = found_span(nodes)
    until = span[1] if span else view.until

    def clean(value: object) -> str:
        return visible(" ".join(str(value).split()))

    lines = [f"gpuaudit history: {clean(cluster)}", *header(read, nodes, view)]
    if not nodes:
        lines.append("no node matches the filters" if view.filters() else "no audit of this cluster in the look-back")
    opened = _open_rows(nodes, until)
    if opened:
        lines += ["", f"open actions ({len(opened)})", *_columns(
            ("NODE", "ACTION", "GIVEN", "SIGNAL", "OPEN FOR", "AUDITS SINCE", "LATEST"),
            [(clean(n.instance_id), a.verdict, iso(a.given.audit_time), iso(a.signal) if a.signal else "—", age,
              str(a.audits_since), clean(n.latest or "none")) for n, a, age in opened])]
    listed = [n for n in nodes if view.show_all or not n.steady]
    if listed:
        lines += ["", "nodes, worst first", *_columns(
            ("NODE", "STANDING", "LATEST VERDICT", "ACTIONS ASKED", "CHANGES", "SIGNALS", "REBOOTS", "AUDITS"),
            [(clean(n.instance_id), n.standing or "none", clean(verdict_text(n.spans[-1])),
              actions_asked(n) or "—", str(n.changes), str(n.signals),
              str(len({r for s in n.spans for r in s.reboots})), str(sum(s.audits for s in n.spans)))
             for n in listed])]
    steady = _steady_counts(nodes)
    if steady and not view.show_all:
        lines += ["", f"steady (nothing open, no verdict change): {sum(c for _, c in steady)} node(s) — "
                  + ", ".join(f"{v} {c}" for v, c in steady) + " (--all lists them)"]
    for n in nodes if (view.show_all or len(nodes) == 1) else []:
        lines += ["", clean(n.instance_id), "  " + clean(summary_line(n.spans, n.actions))]
        lines += [f"  - {clean(action_text(a))}" for a in n.actions]
        lines += _columns(("FROM", "THROUGH", "AUDITS", "VERDICT", "COVERAGE", "REBOOTS"),
                          [(iso(x.audit_time), iso(x.through), str(x.audits), clean(verdict_text(x)),
                            clean(x.xid_status), str(len(x.reboots))) for x in n.rows])
    return redact("\n".join(lines)) + "\n"


# --------------------------------------------------------------------------- JSON


def _action_doc(a: Action) -> dict[str, object]:
    return {"verdict": a.verdict, "open": a.open, "given_at": iso(a.given.audit_time), "given_by": a.given.audit_id,
            "last_given_at": iso(a.last_given), "signal": iso(a.signal) if a.signal else None,
            "audits_since": a.audits_since, "closed_at": iso(a.closed_at) if a.closed_at else None,
            "closed_by": a.closed_by, "said": action_text(a)}


def render_json(read: HistoryRead, cluster: str, view: HistoryView | None = None) -> str:
    view = view or view_of(read)
    nodes = nodes_of(read, view)
    span = found_span(nodes)
    doc = {"schema": SCHEMA, "cluster": cluster, "since": iso(view.since), "until": iso(view.until),
           "found": {"first_audit": iso(span[0]), "last_audit": iso(span[1])} if span else None,
           "filters": view.filters() or None, "store": read.store, "items_read": read.items_read,
           "requests": read.requests,
           "nodes": [{"instance_id": n.instance_id, "standing": n.standing, "summary": summary_line(n.spans, n.actions),
                      "open_actions": [_action_doc(a) for a in n.open],
                      "actions": [_action_doc(a) for a in n.actions],
                      "timeline": [s.model_dump(mode="json", exclude={"cluster", "instance_id"}) for s in n.spans]}
                     for n in nodes]}
    return json.dumps(redact_tree(doc, keep=frozenset()), indent=2, ensure_ascii=True)


# --------------------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1b1b;margin:0 auto;max-width:1500px;
padding:16px 24px 48px}h1{font-size:22px}h2{font-size:16px;margin:18px 0 4px}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;background:#f3f3f3;padding:0 3px}
table{border-collapse:collapse;width:100%;margin:6px 0 10px}th,td{border:1px solid #d0d0d0;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#f4f4f4}.meta{color:#555;margin:2px 0}
svg text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:10.5px;fill:#1b1b1b}
svg.strip{display:block}.axis{position:sticky;top:0;background:#fff;display:block;z-index:1}
.axis line{stroke:#777}.tick{stroke:#e2e2e2}
.v-replace{fill:#D55E00}.v-reboot{fill:#E69F00}.v-monitor{fill:#CC79A7}.v-leave{fill:#0072B2}
.v-none{fill:#56B4E9}.v-unobs{fill:url(#pat-unobs)}.gap{fill:#ececec}.unobs-cov{fill:url(#pat-unobs);opacity:.55}
.xid{fill:#111;stroke:#fff;stroke-width:1}.reboot{stroke:#111;stroke-width:2;stroke-dasharray:2 1}
.open{font-weight:600}.legend span{margin-right:16px}summary{cursor:pointer;margin:6px 0}
"""
DEFS = """<svg width="0" height="0" style="position:absolute" aria-hidden="true" focusable="false"><defs>
<pattern id="pat-unobs" width="5" height="5" patternUnits="userSpaceOnUse">
<rect width="5" height="5" fill="#d4d4d4"/><rect y="2" width="5" height="1.2" fill="#8a8a8a"/></pattern>
</defs></svg>"""


def _e(value: object) -> str:
    return escape(visible(redact(str(value))), quote=True)


@dataclass(frozen=True)
class Axis:
    """The strips' time range: the audits found, within the look-back asked for."""

    start: datetime
    end: datetime

    def x(self, when: datetime) -> float:
        total = max((self.end - self.start).total_seconds(), 1.0)
        share = min(max((when - self.start).total_seconds() / total, 0.0), 1.0)
        return LABEL_W + share * STRIP_W

    def ticks(self) -> list[datetime]:
        """Tick times on whole hours/days: the smallest step giving at most AXIS_TICKS ticks."""
        length = self.end - self.start
        steps = [s for s in AXIS_STEPS if length <= timedelta(days=2) or s >= timedelta(days=1)]  # days: dates only
        step = next((s for s in steps if length / s <= AXIS_TICKS), steps[-1])
        unit = int(step.total_seconds()) if step <= timedelta(days=1) else 86400  # on multiples of the step, or days
        first = datetime.fromtimestamp(-(-int(self.start.timestamp()) // unit) * unit, tz=self.start.tzinfo)
        out = []
        while first <= self.end:
            out.append(first)
            first += step
        return out

    def svg(self) -> str:
        hours = self.end - self.start <= timedelta(days=2)
        parts = [f'<line x1="{LABEL_W}" x2="{LABEL_W + STRIP_W}" y1="21" y2="21"/>',
                 f'<text x="0" y="14">UTC, {_e(iso(self.start)[:10])} → {_e(iso(self.end)[:10])}</text>']
        for t in self.ticks():
            x = self.x(t)
            label = t.strftime("%d %H:%M" if hours else "%m-%d")
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="24"/><text x="{x - 14:.1f}" y="12">'
                         f"{_e(label)}</text>")
        return (f'<svg class="axis" width="{LABEL_W + STRIP_W + 10}" height="26" role="img" aria-label="date axis">'
                + "".join(parts) + "</svg>")


def strip(node: NodeHistory, axis: Axis) -> str:
    """One node across the look-back: a segment per span (from its first audit to its last, at least 2 px)."""
    title = _e(f"{node.instance_id}: {summary_line(node.spans, node.actions)}")
    parts = [f'<rect class="gap" x="{LABEL_W}" y="2" width="{STRIP_W}" height="{STRIP_H}"><title>no audit recorded'
             "</title></rect>",
             f'<text x="0" y="{STRIP_H - 2}"{OPEN_LABEL if node.open else ""}><title>{title}</title>'
             f"{_e(node.instance_id)}</text>"]
    for s in node.rows:
        x0, x1 = axis.x(s.audit_time), axis.x(s.through)
        width = max(x1 - x0, 2.0)
        said = _e(f"{verdict_text(s)} · {s.xid_status} · {s.audits} audit(s) {iso(s.audit_time)} → "
                  f"{iso(s.through)} · audit {s.audit_id}" + (f" · {s.done_said}" if s.done_said else ""))
        parts.append(f'<rect class="{VERDICT_CLASS.get(s.verdict, "v-none")}" x="{x0:.1f}" y="2" width="{width:.1f}" '
                     f'height="{STRIP_H}"><title>{said}</title></rect>')
        if s.xid_status == "Not observable" and s.verdict != "NOT OBSERVABLE":
            parts.append(f'<rect class="unobs-cov" x="{x0:.1f}" y="2" width="{width:.1f}" height="{STRIP_H}"/>')
        if width > 60:
            parts.append(f'<text x="{x0 + 3:.1f}" y="{STRIP_H - 2}">{_e(VERDICT_SHORT.get(s.verdict, "?"))}</text>')
        for r in s.reboots:
            xr = axis.x(r)
            parts.append(f'<line class="reboot" x1="{xr:.1f}" x2="{xr:.1f}" y1="0" y2="{STRIP_H + 4}">'
                         f"<title>reboot at {_e(iso(r))}</title></line>")
        for x in s.xids:
            xx = axis.x(x.first)
            parts.append(f'<path class="xid" d="M{xx:.1f},1 l5,9 h-10 z"><title>{_e(_signal(x))} (audit '
                         f"{_e(s.audit_id)})</title></path>")
    return (f'<svg class="strip" width="{LABEL_W + STRIP_W + 10}" height="{STRIP_H + 6}" role="img" '
            f'aria-label="history of {_e(node.instance_id)}">{"".join(parts)}</svg>')


def _span_table(spans: Sequence[HistorySpan]) -> str:
    rows = "".join(
        f"<tr><td>{_e(iso(s.audit_time))}</td><td>{_e(iso(s.through))}</td><td>{s.audits}</td>"
        f"<td>{_e(s.mode)}</td><td>{_e(verdict_text(s))}</td><td>{_e(s.xid_status)}</td>"
        f"<td>{_e('; '.join(_signal(x) for x in s.xids)) or '—'}</td>"
        f"<td>{_e(', '.join(iso(r) for r in s.reboots)) or '—'}</td><td>{_e(s.done_said or '—')}</td>"
        f"<td><code>{_e(s.audit_id)}</code></td></tr>" for s in spans)
    return ("<table><tr><th>From</th><th>Through</th><th>Audits</th><th>Mode</th><th>Verdict</th><th>Coverage</th>"
            f"<th>Hardware signals</th><th>Reboots</th><th>Done</th><th>Audit</th></tr>{rows}</table>")


def render_html(read: HistoryRead, cluster: str, view: HistoryView | None = None) -> str:
    view = view or view_of(read)
    nodes = nodes_of(read, view)
    span = found_span(nodes)
    axis = Axis(max(span[0], view.since) if span else view.since, span[1] if span else view.until)
    legend = ('<p class="legend">' + "".join(
        f'<span><svg width="14" height="12"><rect class="{css}" width="14" height="12"/></svg> {_e(v or "no verdict")}'
        "</span>" for v, css in VERDICT_CLASS.items())
        + '<span><svg width="14" height="12"><path class="xid" d="M7,1 l5,9 h-10 z"/></svg> hardware-class Xid</span>'
        '<span><svg width="6" height="12"><line class="reboot" x1="3" x2="3" y1="0" y2="12"/></svg> reboot</span>'
        '<span><svg width="14" height="12"><rect class="gap" width="14" height="12"/></svg> no audit recorded</span>'
        "</p>")
    body = [f"<h1>gpuaudit history: {_e(cluster)}</h1>",
            *(f'<p class="meta">{_e(t)}</p>' for t in header(read, nodes, view))]
    if not nodes:
        body.append("<p>" + ("No node matches the filters." if view.filters() else
                             "No audit of this cluster in the look-back.") + "</p>")
    opened = _open_rows(nodes, axis.end)
    if opened:
        body.append(f"<h2>Open actions ({len(opened)})</h2><table><tr><th>Node</th><th>Action</th><th>Given</th>"
                    "<th>Signal</th><th>Open for</th><th>Audits since</th><th>Latest verdict</th></tr>" + "".join(
                        f"<tr><td><code>{_e(n.instance_id)}</code></td><td>{_e(a.verdict)}</td>"
                        f"<td>{_e(iso(a.given.audit_time))} (<code>{_e(a.given.audit_id)}</code>)</td>"
                        f"<td>{_e(iso(a.signal)) if a.signal else '—'}</td><td>{_e(age)}</td><td>{a.audits_since}</td>"
                        f"<td>{_e(n.latest or 'none')}</td></tr>" for n, a, age in opened) + "</table>")
    if nodes:
        body.append(legend)
    with_open = [n for n in nodes if n.open]
    changed = [n for n in nodes if not n.open and n.changed]
    steady = [n for n in nodes if n.steady]
    if with_open:
        body.append(f"<h2>Nodes with an action open, worst first ({len(with_open)})</h2>" + axis.svg()
                    + "".join(strip(n, axis) for n in with_open))
    if changed:
        body.append(f"<details><summary>Nodes changed, nothing open, worst first ({len(changed)})</summary>"
                    + axis.svg() + "".join(strip(n, axis) for n in changed) + "</details>")
    counts = _steady_counts(nodes)
    if counts:
        said = ", ".join(f"{v} {c}" for v, c in counts)
        if view.show_all:
            body.append(f"<details><summary>Steady nodes, nothing open and no verdict change ({said})</summary>"
                        + axis.svg() + "".join(strip(n, axis) for n in steady) + "</details>")
        else:
            body.append(f"<p>Steady nodes, nothing open and no verdict change: {len(steady)} ({_e(said)}). "
                        "<code>--all</code> draws them; <code>--format json</code> has every node.</p>")
    timelines = nodes if (view.show_all or len(nodes) == 1) else []
    if timelines:
        body.append(f"<h2>Timelines ({len(timelines)})</h2>" + "".join(
            f"<details{' open' if len(timelines) == 1 else ''}><summary><code>{_e(n.instance_id)}</code> — "
            f"{_e(summary_line(n.spans, n.actions))}</summary><ul>"
            + "".join(f"<li>{_e(action_text(a))}</li>" for a in n.actions) + f"</ul>{_span_table(n.rows)}</details>"
            for n in timelines))
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>gpuaudit history: {_e(cluster)}</title><style>{CSS}</style></head><body>{DEFS}"
            + "".join(body) + "</body></html>")
    return redact(page).replace(MASK, escape(MASK))
