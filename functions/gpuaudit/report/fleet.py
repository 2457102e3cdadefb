"""Fleet-scale reports lead with exceptions (#20): nodes the reader must see one by one, and the healthy rest
counted per group. The JSON result keeps every node (OUTPUT-CONTRACT); the Markdown and HTML reports use this."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpuaudit.model.result import CoverageRow, FindingStep, GpuError, NodeResult, Result, TimelineEntry
from gpuaudit.model.timeutil import iso
from gpuaudit.report.order import worst_first

# RULES §11: up to this many nodes in scope every node and every coverage row is listed; past it the reports list
# the exceptions and count the rest per group (the JSON result keeps every row).
EVERY_NODE_UP_TO = 100
HEALTHY = ("Measured", "No HMA detections")
# Identical timeline events (same source group, same words) from this many on are one row with a count.
COLLAPSE_FROM = 3
NAMED_UP_TO = 10  # IDs a counted row names; the JSON result holds every one


def is_exception(n: NodeResult) -> bool:
    """A node the reader must see: a verdict, a GPU line, a status short of proven, or an empty hour."""
    return bool(n.verdict or n.gpu_errors or n.xid_status not in HEALTHY or any(c.empty_hours for c in n.coverage)
                or "flapping:" in (n.history or "") or any(t.assessment == "bad" for t in n.nccl_transports))


def nccl_summary(n: NodeResult) -> str:
    """The NCCL transport cell (RULES §11): each transport the node's NCCL used with its assessment, bad first;
    `Not observable` without NCCL lines."""
    if not n.nccl_transports:
        return n.signals.nccl + (" (NCCL lines, none naming a transport)" if n.signals.nccl == "Observable" else "")
    seen: dict[str, str] = {}
    for t in n.nccl_transports:
        seen.setdefault(t.transport, t.assessment)
    return ", ".join(f"{name} ({assessment.upper() if assessment == 'bad' else assessment})"
                     for name, assessment in seen.items())


def split_healthy(nodes: list[NodeResult]) -> tuple[list[NodeResult], dict[str, list[NodeResult]]]:
    """(the nodes to list one by one, worst verdict first, the healthy rest per group)."""
    if len(nodes) <= EVERY_NODE_UP_TO:
        return worst_first(nodes), {}
    healthy = [n for n in nodes if not is_exception(n)]
    groups: dict[str, list[NodeResult]] = {}
    for n in healthy:
        groups.setdefault(n.instance_group or "(no group)", []).append(n)
    return worst_first(n for n in nodes if is_exception(n)), groups


def healthy_summary(nodes: list[NodeResult]) -> str:
    """Their types and statuses, e.g. "p5.48xlarge: 9,900 Measured" (account text: escape per output)."""
    types = ", ".join(sorted({n.instance_type or "type unknown" for n in nodes}))
    statuses = ", ".join(f"{sum(1 for n in nodes if n.xid_status == s)} {s}" for s in HEALTHY
                         if any(n.xid_status == s for n in nodes))
    return f"{types}: {statuses}"


def onset_sentence(r: Result) -> str | None:
    """RULES §0.5, for every report format: what "before the failure" was measured from (incident mode); the
    window's start is never called the onset. Plain text: each renderer escapes it."""
    if r.mode != "incident":
        return None
    if r.window.onset is None:
        return ("Failure onset: not known — none stated (--onset) and no failure signal read (NCCL timeout, job "
                "throughput or step-time drop, node status change); no cause is shown to precede it"
                + (f"; {r.window.onset_unread}" if r.window.onset_unread else ""))
    return f"Failure onset: {iso(r.window.onset)} ({r.window.onset_source or 'source not recorded'})"


def fleet_size(r: Result) -> bool:
    """Past EVERY_NODE_UP_TO nodes in scope the reports count what is alike instead of listing it."""
    return len(r.nodes) > EVERY_NODE_UP_TO


def some_ids(ids: Sequence[str]) -> str:
    """Every ID of a short list; the first NAMED_UP_TO of a long one and how many more the JSON result holds."""
    if len(ids) <= NAMED_UP_TO:
        return ", ".join(ids)
    return f"{', '.join(ids[:NAMED_UP_TO])} … and {len(ids) - NAMED_UP_TO:,} more (all in the JSON result)"


@dataclass(frozen=True)
class TimelineRow:
    """One timeline row: an event, or `count` identical ones (first at `time`, last at `last`)."""

    time: datetime
    source: str
    resources: list[str]
    event: str
    count: int = 1
    last: datetime | None = None

    @property
    def resource(self) -> str:
        return self.resources[0] if len(self.resources) == 1 else f"{len(self.resources):,} resources: " + some_ids(
            self.resources)

    @property
    def what(self) -> str:
        if self.count == 1:
            return self.event
        return f"{self.event} ×{self.count} (first {iso(self.time)}, last {iso(self.last or self.time)})"


def _source_group(source: str) -> str:
    """A log source without its stream (`group / stream` → `group`): the same event from many nodes' streams."""
    return source.split(" / ")[0]


def collapsed_timeline(entries: Iterable[TimelineEntry], by_kind: bool = False) -> list[TimelineRow]:
    """The timeline with identical events (same words from the same source group) seen COLLAPSE_FROM times or more
    as one row: count, first and last time, the resources they name. `by_kind` (fleet size): events of one kind
    (`first Xid 31`) are alike whatever each node's line says. Ordered by (first) time."""
    alike: dict[tuple[str, str], list[TimelineEntry]] = {}
    for e in entries:
        key = f"{e.kind} (each node's line in the JSON result)" if by_kind and e.kind else e.event
        alike.setdefault((_source_group(e.source), key), []).append(e)
    rows: list[TimelineRow] = []
    for (group, event), same in alike.items():
        if len(same) < COLLAPSE_FROM:
            rows += [TimelineRow(e.time, e.source, [e.resource], e.event) for e in same]
            continue
        times = sorted(e.time for e in same)
        sources = {e.source for e in same}
        rows.append(TimelineRow(times[0], sources.pop() if len(sources) == 1 else f"{group} ({len(sources)} streams)",
                                list(dict.fromkeys(e.resource for e in same)), event, len(same), times[-1]))
    return sorted(rows, key=lambda r: r.time)


@dataclass(frozen=True)
class CapabilityRow:
    """Nodes alike in type and fabric: one row of the capability table at fleet size."""

    nodes: list[str]
    instance_type: str
    gpu_count: object
    efa: object
    nvswitch: object
    fabric_manager: str
    nccl: str


def capability_rows(nodes: Iterable[NodeResult]) -> list[CapabilityRow]:
    """Every node in rows of alike ones, the largest first."""
    alike: dict[tuple[str, str, str, str, str, str], list[str]] = {}
    values: dict[tuple[str, str, str, str, str, str], tuple[object, object, object]] = {}
    for n in nodes:
        key = (n.instance_type or "unknown", str(n.gpu_count), str(n.efa), str(n.nvswitch), n.signals.fabric_manager,
               nccl_summary(n))
        alike.setdefault(key, []).append(n.instance_id)
        values[key] = (n.gpu_count, n.efa, n.nvswitch)
    return [CapabilityRow(ids, key[0], *values[key], key[4], key[5])
            for key, ids in sorted(alike.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def proven_row(c: CoverageRow) -> bool:
    """A coverage row with nothing to see: proven, no empty hour, no note."""
    return c.status in HEALTHY and not c.empty_hours and not c.note


@dataclass
class CountedRows:
    """Proven coverage rows of one group and log group, counted (fleet size)."""

    group: str
    log_group: str
    rows: int = 0
    nodes: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)


def coverage_split(r: Result) -> tuple[list[tuple[NodeResult, CoverageRow]], list[CountedRows]]:
    """(the coverage rows to list one by one, the proven rest counted per group and log group). Up to
    EVERY_NODE_UP_TO nodes every row is listed; past it (RULES §11) only the Measured rows of nodes without a GPU
    signal are counted: a row short of proven, and every row of a node with a verdict or a GPU error line, stays
    listed in node order worst first, since that node's evidence is its coverage."""
    nodes = worst_first(r.nodes)
    if not fleet_size(r):
        return [(n, c) for n in nodes for c in n.coverage], []
    listed: list[tuple[NodeResult, CoverageRow]] = []
    counted: dict[tuple[str, str], CountedRows] = {}
    for n in nodes:
        for c in n.coverage:
            if not proven_row(c) or n.verdict or n.gpu_errors:
                listed.append((n, c))
                continue
            group = n.instance_group or "(no group)"
            k = counted.setdefault((group, c.log_group), CountedRows(group, c.log_group))
            k.rows += 1
            k.nodes.add(n.instance_id)
            k.statuses[c.status] = k.statuses.get(c.status, 0) + 1
    return listed, sorted(counted.values(), key=lambda k: (k.group, k.log_group))


def xids_in_row(n: NodeResult, c: CoverageRow) -> int:
    """The coverage table's `Xids in window` for one row (RULES §11: one row per node, log group and exact stream):
    the node's Xid entries read from that very stream, so a stream that carries no kernel lines never shows the
    Xids another stream of the node carried."""
    return len([e for e in n.gpu_errors if e.code is not None and e.source != "history"
                and e.log_group == c.log_group and e.log_stream == c.log_stream])


def counted_rows_text(k: CountedRows) -> str:
    """The sentence for counted rows (account text: escape per output)."""
    statuses = ", ".join(f"{v:,} {s}" for s, v in sorted(k.statuses.items()))
    return (f"{k.rows:,} more row(s) of group {k.group}, log group {k.log_group}: {len(k.nodes):,} node(s) without a "
            f"GPU signal, {statuses}, live every hour of the window — each row is in the JSON result")


@dataclass
class ErrorGroup:
    """GPU error lines alike (same Xid, class and meaning), counted (fleet size)."""

    code: int | None
    class_: str
    meaning: str | None
    lines: int = 0
    nodes: list[str] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None
    example: tuple[str, GpuError] | None = None


def error_groups(nodes: Iterable[NodeResult]) -> list[ErrorGroup]:
    """GPU error lines per (Xid, class, meaning), the commonest first, with the first line as the example."""
    groups: dict[tuple[int | None, str, str | None], ErrorGroup] = {}
    for n in worst_first(nodes):
        for e in n.gpu_errors:
            g = groups.setdefault((e.code, e.class_, e.meaning), ErrorGroup(e.code, e.class_, e.meaning))
            g.lines += 1
            if n.instance_id not in g.nodes:
                g.nodes.append(n.instance_id)
            last = e.last_time or e.time
            if g.first is None or e.time < g.first:
                g.first, g.example = e.time, (n.instance_id, e)
            g.last = last if g.last is None or last > g.last else g.last
    return sorted(groups.values(), key=lambda g: (-g.lines, g.code if g.code is not None else -1, g.class_))


def grouped_steps(steps: Sequence[FindingStep]) -> list[tuple[str, str, str]]:
    """A finding's steps as (name, status, evidence) rows: each one up to EVERY_NODE_UP_TO steps; past that, steps
    alike in status and evidence (one per node, most often) are one row naming them (account text: escape per
    output)."""
    if len(steps) <= EVERY_NODE_UP_TO:
        return [(s.name, s.status, s.evidence) for s in steps]
    alike: dict[tuple[str, str], list[str]] = {}
    for s in steps:
        alike.setdefault((s.status, s.evidence), []).append(s.name)
    return [(names[0] if len(names) == 1 else f"{len(names):,} steps: {some_ids(names)}", status, evidence)
            for (status, evidence), names in alike.items()]
