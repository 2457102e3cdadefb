"""The HTML report's coverage heatmap (RULES §11): one lane per node (its kernel-carrying stream) and, on HyperPod,
one HMA lane, grouped per instance group or queue behind a summary strip that counts the silent nodes per hour.
Consecutive hours in the same state share one rect; at fleet size only the nodes short of proven coverage get a lane.
Inline SVG, no script; every string escaped, every account ID redacted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import TypeVar

from gpuaudit.model.redaction import redact
from gpuaudit.model.result import CoverageRow, GpuError, NodeResult, Result
from gpuaudit.model.timeutil import HOUR, floor_hour, hours_between, iso
from gpuaudit.report.escape import quote, visible
from gpuaudit.report.fleet import HEALTHY, fleet_size, proven_row, split_healthy

# Cell states of the heatmap. Colour is never the only cue: empty hours are hatched, lanes that
# hold one state for the whole window carry their state as text, and markers differ by shape.
LIVE, EMPTY, NA, UNOBS, HMA_NONE = "live", "empty", "na", "unobs", "hma-none"

LABEL_W, LANE_H, LANE_GAP, AXIS_H = 330, 16, 3, 34
OPEN_GROUPS_UP_TO = 200  # nodes: above this, groups start collapsed behind their summary strip
STRIP_H = 18  # the group strip: a bar per hour scaled to the group's peak, its counts printed on it
STATUS_ORDER = {"Not observable": 0, "No HMA detections": 1, "Measured": 2}
MARKER_SHAPES = {"hardware": "tri", "application": "dia", "sympathetic": "sq"}
STATUS_BADGE = {"Measured": ("b-ok", "✓"), "No HMA detections": ("b-ok", "○"), "Not observable": ("b-warn", "⚠")}
TICK_STEPS = (1, 2, 3, 6, 12, 24)
T = TypeVar("T")


def html_text(value: object) -> str:
    """Text → HTML: account IDs redacted first, so the mask itself is escaped too (every HTML output uses it)."""
    return escape(visible(redact(str(value))), quote=True)


_e = html_text


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
    """The group in one bar: per hour, how many of its nodes' kernel lanes were empty, drawn as a hatched bar
    scaled to the group's peak (so magnitude reads without colour) with the count printed on it where it fits."""
    kernel = [lane for lane in group_lanes if lane.kind == "kernel"]
    if not kernel:
        return ""
    cells: list[tuple[str, int]] = []
    for i in range(len(g.hours)):
        empty = sum(1 for lane in kernel if lane.states[i] == EMPTY)
        live = any(lane.states[i] == LIVE for lane in kernel)
        cells.append(("agg-empty", empty) if empty else (LIVE if live else NA, 0))
    peak = max((count for _, count in cells), default=0)
    parts = [f'<rect class="{LIVE}" x="{LABEL_W}" y="1" width="{len(g.hours) * g.cell}" height="{STRIP_H - 2}"/>']
    for first, length, (state, count) in runs(cells):
        x, w = LABEL_W + first * g.cell, length * g.cell
        if state == "agg-empty":
            h = max(4, round((STRIP_H - 2) * count / peak))
            parts.append(f'<rect class="agg-empty" x="{x}" y="{STRIP_H - 1 - h}" width="{w}" height="{h}" '
                         f'data-count="{count}"><title>{count} of {len(kernel)} node(s) with no kernel line, '
                         f"{_span(g.hours, first, length)}</title></rect>")
            if w >= 7 * len(str(count)) + 2:  # the count itself, where the run is wide enough to hold it
                parts.append(f'<text class="lane-text strip-count" x="{x + w / 2:.1f}" y="{STRIP_H - 5}" '
                             f'text-anchor="middle">{count}</text>')
        elif state != LIVE:
            parts.append(f'<rect class="{state}" x="{x}" y="1" width="{w}" height="{STRIP_H - 2}"/>')
    label = (f"silent nodes per hour: up to {peak} of {len(kernel)}" if peak else
             f"silent nodes per hour: none of {len(kernel)}")
    return (f'<svg class="strip" width="{g.width}" height="{STRIP_H}" role="img" aria-label="{_e(label)}">'
            f'<text x="4" y="{STRIP_H - 5}">{_e(label)}</text>{"".join(parts)}</svg>')


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
    # At fleet size a lane is drawn for each node with a row short of proven (an empty hour, not observable); the
    # nodes live every hour, with or without a GPU signal, are in the strip and the node table.
    listed_ids = ({n.instance_id for n in result.nodes
                   if n.xid_status not in HEALTHY or not all(proven_row(c) for c in n.coverage)}
                  if fleet_size(result) else {n.instance_id for n in split_healthy(result.nodes)[0]})
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
        aggregated = (f"; {hidden} node(s) live every hour are counted in the strip, not drawn (their GPU "
                      "signals are in the node table)" if hidden else "")
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
            + _swatch(HMA_NONE, "no HMA detections (log group live)") + _swatch(NA,
                "not applicable (before launch, no GPU)")
            + marks + "</div>")


def _marker_icon(cls: str) -> str:
    shapes = {"hardware": "M7 1L13 13L1 13Z", "application": "M7 1L13 7L7 13L1 7Z", "sympathetic": "M2 2h10v10h-10Z"}
    d = shapes.get(cls, "M2 7a5 5 0 1 0 10 0a5 5 0 1 0 -10 0")
    return f'<path class="mk mk-{cls}" d="{d}"/>'
