"""The HTML report (RULES §11), rendered only from the Result: one self-contained file.

No network fetch, no script: inline CSS and SVG, `<details>` for expansion, and a
Content-Security-Policy that forbids anything else. The coverage heatmap draws one lane per
node (its kernel-carrying stream) and, on HyperPod, one HMA lane; consecutive hours in the same
state share one rect, so a 2,000-node × 170-hour window stays a few megabytes. Every string is
escaped, every account ID redacted (OUTPUT-CONTRACT privacy).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import TypeVar

from gpuaudit.model.result import BRANCH_NAMES, CoverageRow, GpuError, NodeResult, Result, check_rank
from gpuaudit.model.timeutil import HOUR, floor_hour, hours_between, iso
from gpuaudit.report.escape import quote, visible
from gpuaudit.report.fleet import healthy_summary, nccl_summary, onset_sentence, split_healthy
from gpuaudit.report.markdown import action_lines
from gpuaudit.report.redact import MASK, redact

# Cell states of the heatmap. Colour is never the only cue: empty hours are hatched, lanes that
# hold one state for the whole window carry their state as text, and markers differ by shape.
LIVE, EMPTY, NA, UNOBS, HMA_NONE = "live", "empty", "na", "unobs", "hma-none"
STATE_TEXT = {LIVE: "live: kernel stream held a line this hour", EMPTY: "empty: no line this hour",
              NA: "not applicable", UNOBS: "not observable", HMA_NONE: "no HMA detections"}

LABEL_W, LANE_H, LANE_GAP, AXIS_H = 330, 16, 3, 34
OPEN_GROUPS_UP_TO = 200  # nodes: above this, groups start collapsed behind their summary strip
STATUS_ORDER = {"Not observable": 0, "No HMA detections": 1, "Measured": 2}
MARKER_SHAPES = {"hardware": "tri", "application": "dia", "sympathetic": "sq"}

CSS = """
:root{--ink:#1b1b1b;--muted:#555;--line:#d0d0d0;--live:#56B4E9;--empty:#E69F00;--na:#ececec;--unobs:#bdbdbd;
--hma:#9fd9c4;--blue:#0072B2;--verm:#D55E00;--purple:#CC79A7}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);margin:0 auto;
max-width:1500px;padding:16px 24px 48px;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:20px 0 8px;border-bottom:2px solid var(--line);
padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
code{background:#f3f3f3;padding:0 3px;border-radius:3px;overflow-wrap:anywhere}
.meta{color:var(--muted);margin:2px 0}
.headline{font-size:16px;border-left:5px solid var(--blue);background:#f2f7fb;padding:10px 14px;margin:8px 0}
table{border-collapse:collapse;width:100%;margin:6px 0 10px}
th,td{border:1px solid var(--line);padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0}
td{overflow-wrap:break-word}td:first-child{white-space:nowrap}
.cov td:nth-child(2),.cov td:nth-child(3){min-width:10em}.cov td:last-child{overflow-wrap:anywhere}
.scroll{max-height:70vh;overflow:auto;border:1px solid var(--line)}
.hscroll{overflow-x:auto}.vscroll{max-height:70vh;overflow-y:auto;width:max-content;
border-bottom:1px solid var(--line)}
.badge{display:inline-block;border:2px solid;border-radius:4px;padding:0 5px;font-weight:600;white-space:nowrap;
background:#fff}
.b-bad{border-color:var(--verm);background:#fbe5d9}.b-warn{border-color:var(--empty);background:#fdf0d5}
.b-ok{border-color:var(--blue);background:#dcebf6}.b-grey{border-color:#888;background:#eee}
.b-info{border-color:var(--purple);background:#f6e4ee}
details{margin:6px 0}summary{cursor:pointer;padding:3px 0}
summary{overflow:hidden}summary .strip{display:block;margin:2px 0 0}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:6px 0 10px;align-items:center}
.legend span{display:inline-flex;align-items:center;gap:6px}
svg text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:11px;fill:var(--ink)}
svg .ax{fill:var(--muted);font-size:10px}
svg .lane-text{font-size:10.5px;font-weight:600;paint-order:stroke;stroke:#fff;stroke-width:3px}
.live,.key-live{fill:var(--live)}.empty,.key-empty{fill:url(#pat-empty);stroke:#5a3a00;stroke-width:.6}
.na,.key-na{fill:var(--na)}.unobs,.key-unobs{fill:url(#pat-unobs)}.hma-none,.key-hma-none{fill:var(--hma)}
.agg-empty{fill:url(#pat-empty)}
.tick{stroke:#999;stroke-width:1}.grid{stroke:#fff;stroke-width:1}
.win{stroke:var(--ink);stroke-width:1.5;stroke-dasharray:4 3}
.mk{stroke:#fff;stroke-width:1.2}.mk-hardware{fill:var(--verm)}.mk-application{fill:var(--blue)}
.mk-sympathetic{fill:var(--purple)}.mk-other{fill:#111}
ol li,ul li{margin:3px 0}
@media print{.scroll{max-height:none;overflow:visible}details{display:block}}
"""

DEFS = """<svg width="0" height="0" style="position:absolute" aria-hidden="true" focusable="false"><defs>
<pattern id="pat-empty" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
<rect width="6" height="6" fill="#E69F00"/><rect width="2.4" height="6" fill="#3d2600"/></pattern>
<pattern id="pat-unobs" width="5" height="5" patternUnits="userSpaceOnUse">
<rect width="5" height="5" fill="#d4d4d4"/><rect y="2" width="5" height="1.2" fill="#8a8a8a"/></pattern>
</defs></svg>"""

VERDICT_BADGE = {"REPLACE": ("b-bad", "✖"), "REBOOT": ("b-warn", "↻"), "LEAVE ALONE": ("b-ok", "✓"),
                 "MONITOR": ("b-info", "◐"), "NOT OBSERVABLE": ("b-grey", "?")}
STATUS_BADGE = {"Measured": ("b-ok", "✓"), "No HMA detections": ("b-ok", "○"), "Not observable": ("b-warn", "⚠")}
CHECK_BADGE = {"PASS": ("b-ok", "✓"), "RISK": ("b-warn", "▲"), "FAIL": ("b-bad", "✖"), "UNVERIFIED": ("b-grey", "?"),
               "Needs input": ("b-info", "✎"), "Not checked": ("b-grey", "–")}
BRANCH_BADGE = {"Root cause": ("b-bad", "●"), "Contributing": ("b-warn", "◑"), "Ruled out": ("b-ok", "✓"),
                "Not assessed": ("b-grey", "–"), "UNVERIFIED": ("b-grey", "?")}
TICK_STEPS = (1, 2, 3, 6, 12, 24)
T = TypeVar("T")


def _e(value: object) -> str:
    """Text → HTML: account IDs redacted first, so the mask itself is escaped too."""
    return escape(visible(redact(str(value))), quote=True)


def _prose(value: object) -> str:
    """Escaped text with Markdown-style `code` spans kept as <code> (applied after escaping)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(value))


def _t(value: datetime | None) -> str:
    return iso(value) if value else "—"


def _or_dash(value: object) -> str:
    return _prose(value) if value not in (None, "") else "—"


def _badge(text: str, table: dict[str, tuple[str, str]]) -> str:
    css, symbol = table.get(text, ("b-grey", "•"))
    return f'<span class="badge {css}">{symbol} {_e(text)}</span>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], scroll: bool = False, css: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    table = f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>' if css else (
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return f'<div class="scroll">{table}</div>' if scroll else table


# ---------------------------------------------------------------- heatmap model


def kernel_row(node: NodeResult) -> CoverageRow | None:
    """The node's kernel-carrying stream whose status decides the node: the Measured one when there is
    one; otherwise the best of the failing ones (fewest empty hours, then most kernel lines)."""
    carrying = [c for c in node.coverage
                if c.source_kind == "kernel" and c.log_stream and (c.kernel_lines_ever or 0) > 0]
    if not carrying:
        return None
    measured = [c for c in carrying if c.status == "Measured"]
    if measured:
        return measured[0]
    return min(carrying, key=lambda c: (len(c.empty_hours), -(c.kernel_lines_ever or 0)))


def columns(result: Result) -> list[datetime]:
    """Hour starts of the padded window, widened to any empty hour that lies outside it."""
    start = result.window.padded_start or result.window.start
    end = result.window.padded_end or result.window.end
    hours = hours_between(start, end)
    empties = [floor_hour(h) for n in result.nodes for c in n.coverage for h in c.empty_hours]
    if empties:
        lo, hi = min([*hours[:1], *empties]), max([*hours[-1:], *empties])
        hours = hours_between(lo, hi + HOUR)
    return hours or [floor_hour(start)]


@dataclass
class Lane:
    node: NodeResult
    kind: str  # "kernel", "hma" or "single" (no stream to draw hour by hour)
    row: CoverageRow | None
    states: list[str]
    text: str = ""  # a one-state lane's state, written across it
    errors: list[GpuError] = field(default_factory=list)
    first: bool = True  # the node's first lane carries its instance ID


@dataclass(frozen=True)
class Grid:
    """The heatmap's columns: hour starts, their ISO keys, where the padded window lies, cell width."""

    hours: list[datetime]
    pad_first: int
    pad_count: int
    cell: int
    keys: list[str] = field(init=False)
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", [iso(h) for h in self.hours])
        object.__setattr__(self, "index", {k: i for i, k in enumerate(self.keys)})

    @classmethod
    def of(cls, result: Result) -> Grid:
        hours = columns(result)
        padded = hours_between(result.window.padded_start or result.window.start,
                               result.window.padded_end or result.window.end)
        first = hours.index(padded[0]) if padded and padded[0] in hours else 0
        return cls(hours, first, len(padded), max(5, min(120, 900 // len(hours))))

    @property
    def width(self) -> int:
        return LABEL_W + self.cell * len(self.hours) + 64  # room for the last date label

    def x(self, when: datetime) -> float:
        offset = (when - self.hours[0]).total_seconds() / 3600
        return LABEL_W + max(0.0, min(offset, len(self.hours))) * self.cell


def _kernel_states(row: CoverageRow, grid: Grid) -> list[str]:
    empty = {grid.index[iso(floor_hour(h))] for h in row.empty_hours}
    # live_hours + empty hours = the hours expected of the node (from its launch hour); the rest of
    # the padded window precedes its launch and is not applicable.
    start = grid.pad_first + max(0, grid.pad_count - row.live_hours - len(empty))
    end = grid.pad_first + grid.pad_count
    # A Not observable stream with no empty hour: per-hour liveness was not read, so not proven.
    expected = UNOBS if row.status == "Not observable" and not empty else LIVE
    return [EMPTY if i in empty else expected if start <= i < end else NA for i in range(len(grid.hours))]


def lanes_for(node: NodeResult, grid: Grid) -> list[Lane]:
    hours = grid.hours
    lanes: list[Lane] = []
    kernel = kernel_row(node)
    if kernel is not None:
        lanes.append(Lane(node, "kernel", kernel, _kernel_states(kernel, grid)))
    for row in (c for c in node.coverage if c.source_kind == "hma"):
        state = {"Measured": LIVE, "No HMA detections": HMA_NONE}.get(row.status, UNOBS)
        text = {"Measured": "HMA: Measured — detection stream present",
                "No HMA detections": "HMA: No HMA detections — cluster log group live"}.get(
                    row.status, "HMA: Not observable")
        lanes.append(Lane(node, "hma", row, [state] * len(hours), text))
    if not lanes:
        first = node.coverage[0] if node.coverage else None
        if node.gpu_count == 0 or (first is not None and first.log_group.startswith("(not searched")):
            lanes.append(Lane(node, "single", first, [NA] * len(hours), "no GPU — Xid evidence does not apply"))
        else:
            lanes.append(Lane(node, "single", first, [UNOBS] * len(hours),
                              "Not observable — no stream carries this node's kernel messages"))
    for later in lanes[1:]:
        later.first = False
    for e in node.gpu_errors:
        target = next((lane for lane in lanes if lane.kind == e.source), lanes[0])
        target.errors.append(e)
    return lanes


def runs(states: Sequence[T]) -> list[tuple[int, int, T]]:
    """(first column, length, state) for each run of equal consecutive states."""
    out: list[tuple[int, int, T]] = []
    for i, s in enumerate(states):
        if out and out[-1][2] == s and out[-1][0] + out[-1][1] == i:
            first, length, _ = out[-1]
            out[-1] = (first, length + 1, s)
        else:
            out.append((i, 1, s))
    return out


# ---------------------------------------------------------------- heatmap drawing


def _span(hours: list[datetime], first: int, length: int) -> str:
    end = hours[first + length - 1] + HOUR
    return f"{iso(hours[first])} → {iso(end)} ({length} h)"


def _lane_svg(lane: Lane, y: int, g: Grid) -> str:
    """One lane, drawn in its own coordinates (translated to row y): one rect per run of equal hours."""
    n = lane.node
    iid = _e(n.instance_id)
    row = lane.row
    source = f"{row.log_group} / {row.log_stream or 'no stream'}" if row else "no coverage row"
    status: str = row.status if row else n.xid_status
    parts = [f'<g data-node="{iid}" data-lane="{lane.kind}" transform="translate(0 {y})"><title>{iid} · '
             f"{lane.kind} · {_e(source)} · {_e(status)}</title>"]
    label = "  └ HMA" if lane.kind == "hma" and not lane.first else n.instance_id
    tag = {"kernel": "kernel", "hma": "HMA", "single": ""}[lane.kind]
    if lane.states and all(s == NA for s in lane.states):
        status = "not applicable"
    symbol = STATUS_BADGE.get(status, ("", "–"))[1]
    parts.append(f'<text x="4" y="12">{_e(label)}</text>'
                 f'<text x="{LABEL_W - 8}" y="12" text-anchor="end">{_e(tag)} {symbol} {_e(status)}</text>')
    # The lane's commonest state as one background rect; only the other runs are drawn over it.
    background = max(set(lane.states) - {EMPTY} or {NA}, key=lane.states.count)
    parts.append(f'<rect class="{background}" x="{LABEL_W}" width="{len(g.hours) * g.cell}" height="{LANE_H}"/>')
    for first, length, state in runs(lane.states):
        x, w = LABEL_W + first * g.cell, length * g.cell
        if state == EMPTY:
            stamps = ",".join(g.keys[first:first + length])
            parts.append(f'<rect class="{EMPTY}" x="{x}" width="{w}" height="{LANE_H}" data-node="{iid}" '
                         f'data-hours="{stamps}"><title>no line {_span(g.hours, first, length)}</title></rect>')
        elif state != background:
            parts.append(f'<rect class="{state}" x="{x}" width="{w}" height="{LANE_H}"/>')
    if lane.text:
        parts.append(f'<text class="lane-text" x="{LABEL_W + 16}" y="12">{_e(lane.text)}</text>')
    for e in lane.errors:
        parts.append(_marker(e, g.x(e.time), LANE_H / 2, iid))
    parts.append("</g>")
    return "".join(parts)


def _marker(e: GpuError, x: float, y: float, iid: str) -> str:
    what = f"Xid {e.code}" if e.code is not None else "GPU event"
    if e.meaning:
        what += f" ({e.meaning})"
    when = iso(e.time) + (f" to {iso(e.last_time)}" if e.last_time and e.last_time != e.time else "")
    reason = f", HMA reason {e.hma_reason}" if e.hma_reason else ""
    title = (f"{what} ×{e.count}, class {e.class_}, {when}, {e.source} stream {e.log_group} / {e.log_stream}"
             f"{reason} — {quote(e.message, 240)}")
    shape = MARKER_SHAPES.get(e.class_, "circle")
    css = f"mk mk-{e.class_ if e.class_ in MARKER_SHAPES else 'other'}"
    r = 5.5
    if shape == "tri":
        d = f"M{x:.1f} {y - r:.1f}L{x + r:.1f} {y + r:.1f}L{x - r:.1f} {y + r:.1f}Z"
    elif shape == "dia":
        d = f"M{x:.1f} {y - r:.1f}L{x + r:.1f} {y:.1f}L{x:.1f} {y + r:.1f}L{x - r:.1f} {y:.1f}Z"
    elif shape == "sq":
        d = f"M{x - r + 1:.1f} {y - r + 1:.1f}h{2 * r - 2:.1f}v{2 * r - 2:.1f}h{-(2 * r - 2):.1f}Z"
    else:
        d = (f"M{x - r + 1:.1f} {y:.1f}a{r - 1:.1f} {r - 1:.1f} 0 1 0 {2 * (r - 1):.1f} 0"
             f"a{r - 1:.1f} {r - 1:.1f} 0 1 0 {-2 * (r - 1):.1f} 0")
    code = "" if e.code is None else f' data-code="{e.code}"'
    return f'<path class="{css}" d="{d}" data-node="{iid}"{code}><title>{_e(title)}</title></path>'


def _axis(g: Grid, result: Result) -> str:
    step = next((s for s in TICK_STEPS if s * g.cell >= 46), TICK_STEPS[-1])
    parts = []
    midnights = [i for i, h in enumerate(g.hours) if h.hour == 0]
    # The first column is dated too, unless the first midnight's date would overlap it.
    dated = midnights if midnights and midnights[0] * g.cell < 80 else [0, *midnights]
    for i in dated:
        parts.append(f'<text class="ax" x="{LABEL_W + i * g.cell + 2}" y="11">{g.hours[i]:%Y-%m-%d}</text>')
    for i, h in enumerate(g.hours):
        x = LABEL_W + i * g.cell
        if h.hour % step == 0:
            parts.append(f'<line class="tick" x1="{x}" y1="16" x2="{x}" y2="{AXIS_H - 2}"/>'
                         f'<text class="ax" x="{x + 2}" y="{AXIS_H - 6}">{h:%H}:00</text>')
    parts.append(f'<text class="ax" x="4" y="{AXIS_H - 6}">node · UTC hour →</text>')
    parts.append(_window_lines(g, result, 14, AXIS_H))
    return f'<svg width="{g.width}" height="{AXIS_H}" aria-hidden="true">{"".join(parts)}</svg>'


def _window_lines(g: Grid, result: Result, top: int, bottom: int) -> str:
    return "".join(f'<line class="win" x1="{g.x(when):.1f}" y1="{top}" x2="{g.x(when):.1f}" y2="{bottom}">'
                   f"<title>{name} {iso(when)}</title></line>"
                   for when, name in ((result.window.start, "impact start"), (result.window.end, "impact end")))


def _group_name(node: NodeResult, word: str) -> str:
    """Instance group (HyperPod) or queue (ParallelCluster); without one, the node's role."""
    if node.instance_group:
        return f"{word} {node.instance_group}"
    return f"{node.role} node(s)" if node.role != "compute" else f"compute node(s), {word} not recorded"


def _strip(group_lanes: list[Lane], g: Grid) -> str:
    """The group in one bar: per hour, the share of its nodes' kernel lanes that were empty, drawn as a
    hatched bar whose height is that share (so magnitude reads without colour)."""
    kernel = [lane for lane in group_lanes if lane.kind == "kernel"]
    if not kernel:
        return ""
    cells: list[tuple[str, int]] = []
    for i in range(len(g.hours)):
        empty = sum(1 for lane in kernel if lane.states[i] == EMPTY)
        live = any(lane.states[i] == LIVE for lane in kernel)
        cells.append(("agg-empty", empty) if empty else (LIVE if live else NA, 0))
    parts = [f'<rect class="{LIVE}" x="{LABEL_W}" y="1" width="{len(g.hours) * g.cell}" height="12"/>']
    for first, length, (state, count) in runs(cells):
        x, w = LABEL_W + first * g.cell, length * g.cell
        if state == "agg-empty":
            h = max(3, round(12 * count / len(kernel)))
            parts.append(f'<rect class="agg-empty" x="{x}" y="{13 - h}" width="{w}" height="{h}" data-count="{count}">'
                         f"<title>{count} of {len(kernel)} node(s) with no kernel line, "
                         f"{_span(g.hours, first, length)}</title></rect>")
        elif state != LIVE:
            parts.append(f'<rect class="{state}" x="{x}" y="1" width="{w}" height="12"/>')
    label = f"silent nodes per hour (of {len(kernel)})"
    return (f'<svg class="strip" width="{g.width}" height="14" role="img" aria-label="group summary">'
            f'<text x="4" y="11">{_e(label)}</text>{"".join(parts)}</svg>')


def heatmap(result: Result) -> str:
    g = Grid.of(result)
    hours = g.hours
    word = "queue" if result.cluster.kind == "parallelcluster" else "instance group"
    groups: dict[str, list[NodeResult]] = {}
    for node in result.nodes:
        groups.setdefault(_group_name(node, word), []).append(node)
    out = [_legend(),
           f'<p class="meta">{len(hours)} hour column(s), {_e(iso(hours[0]))} → {_e(iso(hours[-1] + HOUR))}; '
           "dashed lines mark the impact window. Each node's lane is its kernel-carrying stream (the one whose "
           "status decides the node); every stream is listed in the coverage table below.</p>"]
    listed_ids = {n.instance_id for n in split_healthy(result.nodes)[0]}
    for name, nodes in groups.items():
        nodes = sorted(nodes, key=lambda n: STATUS_ORDER.get(n.xid_status, 3))
        lanes = [lane for n in nodes for lane in lanes_for(n, g)]
        # At fleet size only the exceptions get a lane; the strip below aggregates every node of the group.
        drawn = [lane for n in nodes if n.instance_id in listed_ids for lane in lanes_for(n, g)]
        hidden = sum(1 for n in nodes if n.instance_id not in listed_ids)
        height = len(drawn) * (LANE_H + LANE_GAP) + 2
        body = [_lane_svg(lane, i * (LANE_H + LANE_GAP), g) for i, lane in enumerate(drawn)]
        body.append(_window_lines(g, result, 0, height))
        counts: dict[str, int] = {}
        for n in nodes:
            counts[n.xid_status] = counts.get(n.xid_status, 0) + 1
        silent = sum(lane.states.count(EMPTY) for lane in lanes)
        tally = ", ".join(f"{v} {_e(k)}" for k, v in sorted(counts.items(), key=lambda kv: STATUS_ORDER.get(kv[0], 3)))
        aggregated = (f"; {hidden} healthy node(s) live every hour are counted in the strip, not drawn"
                      if hidden else "")
        summary = (f"<b>{_e(name)}</b> — {len(nodes)} node(s): {tally}; "
                   f"{silent} empty node-hour(s){aggregated}{_strip(lanes, g)}")
        svg = (f'<svg width="{g.width}" height="{height}" role="img" '
               f'aria-label="coverage heatmap, {_e(name)}">{"".join(body)}</svg>')
        state = " open" if len(result.nodes) <= OPEN_GROUPS_UP_TO else ""
        # The axis stays in view while a long group scrolls under it; both scroll sideways together.
        tall = ' class="vscroll"' if len(drawn) > 40 else ""
        out.append(f'<details class="group"{state}><summary>{summary}</summary><div class="hscroll">'
                   f"{_axis(g, result)}<div{tall}>{svg}</div></div></details>")
    return "".join(out)


def _swatch(css: str, text: str) -> str:
    # Styled by `key-<state>`, not the state's own class: class `empty` marks heatmap cells only.
    return (f'<span><svg width="26" height="14" aria-hidden="true"><rect class="key-{css}" width="26" '
            f'height="14"/></svg>{_e(text)}</span>')


def _legend() -> str:
    marks = "".join(
        f'<span><svg width="14" height="14" aria-hidden="true">{_marker_icon(cls)}</svg>{_e(text)}</span>'
        for cls, text in (("hardware", "hardware Xid (▲)"), ("application", "application Xid (◆)"),
                          ("sympathetic", "sympathetic Xid (■)"), ("other", "other GPU event (●)")))
    return ('<div class="legend">' + _swatch(LIVE, "live: ≥1 line that hour / HMA Measured")
            + _swatch(EMPTY, "empty: no line that hour (hatched)") + _swatch(UNOBS, "not observable / not proven")
            + _swatch(HMA_NONE, "no HMA detections (log group live)") + _swatch(NA, "not applicable (before launch, no GPU)")
            + marks + "</div>")


def _marker_icon(cls: str) -> str:
    shapes = {"hardware": "M7 1L13 13L1 13Z", "application": "M7 1L13 7L7 13L1 7Z", "sympathetic": "M2 2h10v10h-10Z"}
    d = shapes.get(cls, "M2 7a5 5 0 1 0 10 0a5 5 0 1 0 -10 0")
    return f'<path class="mk mk-{cls}" d="{d}"/>'


# ---------------------------------------------------------------- sections


def _title(r: Result) -> str:
    what = "pre-flight" if r.mode == "preflight" else f"{r.mode} audit"
    return f"gpuaudit {what}: {r.cluster.name} ({r.cluster.region})"


def _header(r: Result) -> str:
    return (f"<h1>{_e(_title(r))}</h1>"
            f'<p class="meta">Impact window {_e(_t(r.window.start))} → {_e(_t(r.window.end))} (source: '
            f"{_e(r.window.source)}); coverage tested over the padded window {_e(_t(r.window.padded_start))} → "
            f"{_e(_t(r.window.padded_end))}</p>"
            + (f'<p class="meta">{_e(onset)}</p>' if (onset := onset_sentence(r)) else "")
            + f'<p class="meta">Orchestrator: {_e(r.cluster.kind)} · Generated {_e(_t(r.generated_at))} · '
            f"audit {_e(r.audit_id)}</p>")


def _verdict(r: Result) -> str:
    out = ["<h2>Verdict</h2>"]
    if r.mode == "preflight" and r.ready:
        css = {"Yes": "b-ok", "Yes with risks": "b-warn", "No": "b-bad"}[r.ready]
        out.append(f'<p><span class="badge {css}">Ready: {_e(r.ready)}</span></p>')
    out.append(f'<p class="headline">{_prose(r.headline)}</p>')
    confidence = {"High": "b-ok", "Medium": "b-warn", "Low": "b-grey"}[r.confidence]
    verdicts: dict[str, int] = {}
    for n in r.nodes:
        key = n.verdict or "no verdict"
        verdicts[key] = verdicts.get(key, 0) + 1
    tally = " ".join(f"{_badge(k, VERDICT_BADGE)} ×{v}" for k, v in verdicts.items())
    out.append(f'<p>Confidence: <span class="badge {confidence}">{_e(r.confidence)}</span> · '
               f"Node verdicts: {tally}</p>")
    return "".join(out)


def _healthy_note(groups: dict[str, list[NodeResult]]) -> str:
    """The healthy nodes a fleet-size table does not list, counted per group."""
    if not groups:
        return ""
    items = "".join(f"<li>{len(nodes)} more node(s) of group <code>{_e(g)}</code> ({_e(healthy_summary(nodes))}), "
                    "no GPU signal, no empty hour</li>" for g, nodes in sorted(groups.items()))
    return f'<ul class="meta">{items}</ul><p class="meta">Every node is in the JSON result.</p>'


def _node_verdicts(r: Result) -> str:
    listed, healthy = split_healthy(r.nodes)
    rows = [(f"<code>{_e(n.instance_id)}</code>", _or_dash(n.instance_group), _or_dash(n.instance_type),
             _e(n.status), _e(n.role), _badge(n.verdict, VERDICT_BADGE) if n.verdict else "no verdict (no GPU signal)",
             _badge(n.xid_status, STATUS_BADGE),
             _or_dash(n.verdict_evidence) + (f"<br>Kubernetes: {_e(n.kubernetes)}" if n.kubernetes else "")
             + (f"<br>Earlier audits: {_prose(n.history)}" if n.history else ""))
            for n in listed]
    return "<h2>Node verdicts</h2>" + _table(
        ("Node", "Group / queue", "Type", "Status", "Role", "Verdict", "Xid status", "Evidence"), rows,
        scroll=len(rows) > 40) + _healthy_note(healthy)


def _capability(r: Result) -> str:
    listed, healthy = split_healthy(r.nodes)
    rows = [(f"<code>{_e(n.instance_id)}</code>", _or_dash(n.instance_type or "unknown"), _or_dash(n.gpu_count),
             _or_dash(n.efa), _or_dash(n.nvswitch), _e(n.signals.fabric_manager), _nccl_cell(n),
             _e(n.signals.efa_counters), _e(n.signals.gpu_activity)) for n in listed]
    return "<h2>Node capability and fabric</h2>" + _table(
        ("Node", "Type", "GPUs", "EFA attached/max", "NVSwitch", "Fabric Manager", "NCCL transport", "EFA counters",
         "GPU activity"), rows, scroll=len(rows) > 40) + _healthy_note(healthy)


def _nccl_cell(n: NodeResult) -> str:
    """The transports, then each first line quoted with its group and stream (log text is untrusted: escaped)."""
    lines = "".join(f"<br><b>{_e(t.transport)}</b> ({_e(t.assessment)}: {_e(t.why)}): <code>{_e(quote(t.message))}"
                    f"</code> in <code>{_e(t.log_group)}</code> / <code>{_e(t.log_stream)}</code> at {_e(iso(t.time))}"
                    + (f" (×{t.count})" if t.count > 1 else "") for t in n.nccl_transports)
    return _e(nccl_summary(n)) + lines


def _coverage_table(r: Result) -> str:
    rows = []
    listed, healthy = split_healthy(r.nodes)
    for n in listed:
        xids = len([e for e in n.gpu_errors if e.code is not None and e.source != "history"])
        for c in n.coverage:
            if not c.log_stream:
                live = "no stream"
            elif c.source_kind == "kernel":
                live = (f"no — {len(c.empty_hours)} empty hour(s) from {_e(iso(c.empty_hours[0]))}" if c.empty_hours
                        else f"yes ({c.live_hours} h)")
            else:
                live = "n/a (HMA)"
            rows.append((f"<code>{_e(n.instance_id)}</code>", f"<code>{_e(c.log_group)}</code>",
                         f"<code>{_e(c.log_stream)}</code>" if c.log_stream else "none", _e(_t(c.first_event)),
                         _e(_t(c.last_event)), live, _or_dash(c.kernel_lines_ever), str(xids),
                         _badge(c.status, STATUS_BADGE), _or_dash(c.note)))
    return "<h3>GPU error log coverage</h3>" + _table(
        ("Node", "Log group", "Log stream", "First event", "Last event", "Live across window", "Kernel lines ever",
         "Xids in window", "Status", "Note"), rows, scroll=len(rows) > 40, css="cov") + _healthy_note(healthy)


def _errors(r: Result) -> str:
    errors = [(n, e) for n in r.nodes for e in n.gpu_errors]
    if not errors:
        return ""
    rows = []
    for n, e in errors:
        label = f"Xid {e.code}" if e.code is not None else "—"
        if e.meaning:
            label += f" ({e.meaning})"
        source = f"<code>{_e(e.log_group)}</code> / <code>{_e(e.log_stream)}</code>"
        if e.hma_reason:
            source += f" (HMA reason {_e(e.hma_reason)})"
        rows.append((f"<code>{_e(n.instance_id)}</code>", _e(_t(e.time)), _e(_t(e.last_time)), str(e.count),
                     _e(label), _e(e.class_), _or_dash(e.pci), source, f'<span class="mono">{_e(quote(e.message))}</span>'))
    return "<h3>GPU errors</h3>" + _table(
        ("Node", "First", "Last", "Count", "Xid", "Class", "PCI", "Source", "Line (verbatim)"), rows,
        scroll=len(rows) > 40)


def _timeline(r: Result) -> str:
    if not r.timeline:
        return ""
    rows = [(_e(_t(t.time)), _e(t.source), f"<code>{_e(t.resource)}</code>", _prose(t.event)) for t in r.timeline]
    return (f"<h2>Timeline (UTC)</h2><details{' open' if len(rows) <= 30 else ''}><summary>{len(rows)} event(s)"
            f"</summary>{_table(('Time', 'Source', 'Resource', 'Event'), rows, scroll=len(rows) > 40)}</details>")


def _checks(r: Result) -> str:
    if not r.checks:
        return ""
    ordered = sorted(r.checks, key=lambda c: (check_rank(c.result), int(c.id[1:])))
    rows = [(_e(c.id), _e(c.title), _badge(c.result, CHECK_BADGE), _prose(c.evidence), _or_dash(c.action))
            for c in ordered]
    return "<h2>Pre-flight checks</h2>" + _table(("#", "Check", "Result", "Evidence", "Action"), rows)


def _branches(r: Result) -> str:
    if not r.branches:
        return ""
    leading = [f"<li>Branch {_e(b.branch)} ({_e(BRANCH_NAMES[b.branch])}): {_badge(b.status, BRANCH_BADGE)}"
               + (f" — <b>{_e(b.label)}</b>" if b.label else "") + f". {_prose(b.evidence)}"
               + (f" <i>Confirming measurement:</i> {_prose(b.confirming_measurement)}" if b.confirming_measurement
                  else "") + "</li>"
               for b in r.branches if b.status in ("Root cause", "Contributing", "UNVERIFIED")]
    rows = [(f"{_e(b.branch)} — {_e(BRANCH_NAMES[b.branch])}", _badge(b.status, BRANCH_BADGE), _or_dash(b.label),
             _prose(b.evidence), _or_dash(b.confirming_measurement)) for b in r.branches]
    return ("<h2>Root cause</h2>" + (f"<ul>{''.join(leading)}</ul>" if leading else "")
            + _table(("Branch", "Status", "Label", "Evidence", "Confirming measurement"), rows))


def _findings(r: Result) -> str:
    out = []
    for f in r.findings:
        rows = [(_e(s.name), _e(s.status), _prose(s.evidence)) for s in f.steps]
        out.append(f"<h2>{_e(f.question)}</h2><p><b>{_prose(f.answer)}</b>"
                   + (f" — {_e(f.label)}" if f.label else "") + "</p>"
                   + (_table(("Step", "Status", "Evidence"), rows) if rows else "")
                   + (f"<p>Action (not executed): {_prose(f.action)}</p>" if f.action else ""))
    return "".join(out)


def _lists(r: Result) -> str:
    state = "".join(f"<li>{_prose(s)}</li>" for s in r.cluster_state) or "<li>not read</li>"
    services = "".join(f"<li><code>{_e(n.instance_id)}</code>: {_prose(n.service_action)}</li>"
                       for n in r.nodes if n.service_action)
    actions = "".join(f"<li>{_prose(a)}</li>" for a in action_lines(r))
    gaps = "".join(f"<li>{_prose(g)}</li>" for g in r.visibility_gaps) or "<li>none</li>"
    calls = ", ".join(f"{_e(c.service)} {_e(c.operation)} ×{c.count}" for c in r.calls) or "none"
    return (f"<h2>Cluster state</h2><ul>{state}</ul>"
            + (f"<h3>What the service itself did</h3><ul>{services}</ul>" if services else "")
            + "<h2>Recommended operator actions (not executed)</h2>"
            + (f"<ol>{actions}</ol>" if actions else "<p>none</p>")
            + f"<h2>Visibility gaps</h2><ul>{gaps}</ul>"
            + f"<h2>Calls made</h2><p>{calls}</p><p><b>{_e(r.self_check)}</b></p>")


def render_html(result: Result) -> str:
    r = result
    # The picture first: headline, then the heatmap, then the tables it summarises.
    body = (_header(r) + _verdict(r)
            + "<h2>GPU error log coverage, hour by hour</h2>" + heatmap(r) + _node_verdicts(r)
            + _checks(r) + _timeline(r) + _capability(r) + _coverage_table(r) + _errors(r)
            + _branches(r) + _findings(r) + _lists(r))
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(_title(r))}</title><style>{CSS}</style></head><body>{DEFS}{body}</body></html>")
    # A last pass for an account ID that slipped through; a raw mask would read as a tag, so escape it.
    return redact(page).replace(MASK, escape(MASK))
