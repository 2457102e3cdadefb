"""The Markdown report of RULES §11, rendered only from the Result."""

from __future__ import annotations

from datetime import datetime

from gpuaudit.model.evidence import Evidence
from gpuaudit.model.redaction import redact
from gpuaudit.model.result import BRANCH_NAMES, IDS_AT, NodeResult, Result, check_rank, readiness_reasons
from gpuaudit.model.timeutil import HOUR, iso
from gpuaudit.report.escape import md_cell, md_code, md_inline, quote
from gpuaudit.report.fleet import (
    EVERY_NODE_UP_TO,
    capability_rows,
    collapsed_timeline,
    counted_rows_text,
    coverage_split,
    error_groups,
    fleet_size,
    grouped_steps,
    healthy_summary,
    nccl_summary,
    onset_sentence,
    some_ids,
    split_healthy,
    xids_in_row,
)
from gpuaudit.report.order import worst_first


def _t(value: datetime | None) -> str:
    return iso(value) if value else "—"


_cell = md_cell  # every table cell is account text until proven otherwise


GAPS_SHOWN = 12  # runs of empty hours a cell names; past that the JSON result lists every hour


def _hours(hours: list[datetime]) -> str:
    """Every empty hour said (RULES §4), as runs of consecutive hours with both ends named, not the first few."""
    if not hours:
        return "yes"
    runs: list[list[datetime]] = []
    for h in sorted(hours):
        if runs and h - runs[-1][-1] == HOUR:
            runs[-1].append(h)
        else:
            runs.append([h])
    shown = ", ".join(iso(r[0])[:13] + "h" + (f" → {iso(r[-1])[:13]}h" if len(r) > 1 else "")
                      for r in runs[:GAPS_SHOWN])
    more = (f" (+{len(runs) - GAPS_SHOWN} more gap(s); every hour in the JSON result)"
            if len(runs) > GAPS_SHOWN else "")
    return f"no — {len(hours)} empty hour(s): {shown}{more}"


def _node_line(n: NodeResult) -> str:
    verdict = n.verdict or "no verdict (no GPU signal)"
    what = f"**{verdict}** — {md_code(n.instance_id)}"
    meta = md_inline(", ".join(x for x in (n.instance_type or "type unknown", n.instance_group, n.status, n.role)
                               if x))
    evidence = f": {md_inline(n.verdict_evidence)}" if n.verdict_evidence else ""
    kube = f"; Kubernetes: {md_inline(n.kubernetes)}" if n.kubernetes else ""
    earlier = f"; earlier audits: {md_inline(n.history)}" if n.history else ""
    return f"- {what} ({meta}); Xid status **{n.xid_status}**{evidence}{kube}{earlier}"


def _healthy_lines(groups: dict[str, list[NodeResult]]) -> list[str]:
    return [f"- {len(nodes)} more node(s) of group {md_code(group)} ({md_inline(healthy_summary(nodes))}), no GPU "
            "signal, no empty hour — each is in the JSON result" for group, nodes in sorted(groups.items())]


def ready_line(r: Result) -> str:
    """`Ready: No — FAIL P1, P6; RISK P3`: the answer and the checks that make it (RULES §10)."""
    why = readiness_reasons((c.id, c.result) for c in r.checks)
    return f"Ready: {r.ready}" + (f" — {why}" if why else "")


# RULES §11 / #37: every verdict, label and `RULES §N` the report cites can be opened by its reader
GLOSSARY_LINE = ("What a verdict, a label or a cited `RULES §N` means: `gpuaudit explain <term>` (e.g. `gpuaudit "
                 "explain REBOOT`, `gpuaudit explain \"RULES §7\"`), or the glossary docs/VERDICTS.md.")


def _table(header: str, rows: list[str]) -> list[str]:
    """A Markdown table, or nothing when it has no row (RULES §11: no empty table)."""
    if not rows:
        return []
    columns = header.count("|") - 1
    return [header, "|" + "---|" * columns, *rows]


def _root_cause(r: Result) -> list[str]:
    if not r.branches:
        return []
    lines = ["## Root cause", ""]
    lines += [f"- Branch {b.branch} ({BRANCH_NAMES[b.branch]}): **{b.status}**"
              + (f" — {b.label}" if b.label else "") + f". {md_inline(b.evidence)}"
              + (f" Confirming measurement: {md_inline(b.confirming_measurement)}"
                 if b.confirming_measurement else "")
              for b in r.branches if b.status in ("Root cause", "Contributing", "UNVERIFIED")]
    lines += ["", *_table("| Branch | Status | Label | Evidence | Confirming measurement |",
                          [f"| {b.branch} — {BRANCH_NAMES[b.branch]} | {b.status} | {_cell(b.label)} | "
                           f"{_cell(b.evidence)} | {_cell(b.confirming_measurement)} |" for b in r.branches]), ""]
    return lines


NO_TIMED_EVENT = ("no timed event read over the padded window (no Xid, node status change, NCCL or job line, "
                  "cluster change or service event): see the branch table for what was read")


def _timeline(r: Result) -> list[str]:
    rows = [f"| {_t(e.time)} | {_cell(e.source)} | {_cell(e.resource)} | {_cell(e.what)} |"
            for e in collapsed_timeline(r.timeline, by_kind=fleet_size(r))]
    if not rows:
        # RULES §11: an incident report holds its timeline; an empty one is said, not dropped
        return ["## Timeline (UTC)", "", f"- {NO_TIMED_EVENT}", ""] if r.mode == "incident" else []
    return ["## Timeline (UTC)", "", *_table("| Time | Source | Resource | Event |", rows), ""]


def _capability(r: Result, listed: list[NodeResult], healthy: dict[str, list[NodeResult]]) -> list[str]:
    header = "| Node | Type | GPUs | EFA attached/max | NVSwitch | Fabric Manager | NCCL transport |"
    if fleet_size(r):
        rows = [f"| {len(k.nodes):,} node(s): {md_inline(some_ids(k.nodes))} | {_cell(k.instance_type)} | "
                f"{_cell(k.gpu_count)} | {_cell(k.efa)} | {_cell(k.nvswitch)} | {_cell(k.fabric_manager)} | "
                f"{_cell(k.nccl)} |" for k in capability_rows(r.nodes)]
        note = ["", f"Every node of the {len(r.nodes):,} is in one row (nodes alike in type and fabric share it)."]
    else:
        rows = [f"| {md_code(n.instance_id)} | {_cell(n.instance_type or 'unknown')} | {_cell(n.gpu_count)} | "
                f"{_cell(n.efa)} | {_cell(n.nvswitch)} | {_cell(n.signals.fabric_manager)} | "
                f"{_cell(nccl_summary(n))} |" for n in listed]
        note = ["", *_healthy_lines(healthy)] if healthy else []
    lines = ["## Node capability and fabric", "", *_table(header, rows), *note]
    transport_lines = [f"- {md_code(n.instance_id)} {md_inline(t.transport)} (**{t.assessment}**: {md_inline(t.why)})"
                       f" — {md_code(quote(t.message))} in {md_code(t.log_group)} / {md_code(t.log_stream)} at "
                       f"{_t(t.time)}" + (f" (×{t.count})" if t.count > 1 else "")
                       for n in listed for t in n.nccl_transports]
    if transport_lines:
        lines += ["", "NCCL transport lines (first of each, RULES §8 D layer 1):", *transport_lines]
    return lines + [""] if rows or transport_lines else []


def _coverage(r: Result) -> list[str]:
    rows, counted = coverage_split(r)
    table = []
    for n, c in rows:
        xids = xids_in_row(n, c)
        live = ("n/a (HMA)" if c.source_kind != "kernel" else "—" if not c.log_stream else
                _hours(c.empty_hours) if c.liveness_read or c.empty_hours else "not proven")
        stream = md_code(c.log_stream) if c.log_stream else "none"
        table.append(f"| {md_code(n.instance_id)} | {md_code(c.log_group)} | {stream} | {_t(c.first_event)} | "
                     f"{_t(c.last_event)} | {live} | {_cell(c.kernel_lines_ever)} | {xids} | **{c.status}** |")
    lines = ["## GPU error log coverage", ""]
    lines += _table("| Node | Log group | Log stream | First event | Last event | Live across window | "
                    "Kernel lines ever | Xids in window | Status |", table)
    if counted:
        lines += ["", f"Past {EVERY_NODE_UP_TO} nodes the rows proven live every hour are counted (RULES §11); the "
                      "rows above are every one short of that:" if table else
                      f"Past {EVERY_NODE_UP_TO} nodes the rows proven live every hour are counted (RULES §11); "
                      "no row falls short of that:",
                  *[f"- {md_inline(counted_rows_text(k))}" for k in counted]]
    notes = [f"- {md_code(n.instance_id)} · {md_code(c.log_stream or c.log_group)}: {md_inline(c.note)}"
             for n, c in rows if c.note]
    if notes:
        lines += ["", "Coverage notes:", *notes]
    return lines + [""] if table or counted else []


def _errors(r: Result) -> list[str]:
    if fleet_size(r):
        rows = []
        for g in error_groups(r.nodes):
            label = (f"Xid {g.code}" if g.code is not None else "—") + (f" ({g.meaning})" if g.meaning else "")
            node, e = g.example if g.example else ("", None)
            example = (f"{md_code(node)}: {md_code(e.log_group)} / {md_code(e.log_stream)}: {_cell(quote(e.message))}"
                       if e else "—")
            rows.append(f"| {_cell(label)} | {g.class_} | {g.lines:,} | "
                        f"{len(g.nodes):,}: {md_inline(some_ids(g.nodes))} | "
                        f"{_t(g.first)} | {_t(g.last)} | {example} |")
        if not rows:
            return []
        return ["## GPU errors", "", f"Past {EVERY_NODE_UP_TO} nodes, lines alike are counted (each node's own under "
                "Node verdicts; every line verbatim in the JSON result).", "",
                *_table("| Xid | Class | Lines | Nodes | First | Last | First line (node, source, verbatim) |", rows),
                ""]
    table = []
    for n in worst_first(r.nodes):
        for e in n.gpu_errors:
            label = f"Xid {e.code}" if e.code is not None else "—"
            if e.meaning:
                label += f" ({e.meaning})"
            source = f"{md_code(e.log_group)} / {md_code(e.log_stream)}"
            if e.hma_reason:
                source += f" (HMA reason {md_inline(e.hma_reason)})"
            table.append(f"| {md_code(n.instance_id)} | {_t(e.time)} | "
                         f"{_t(e.last_time)} | {e.count} | {_cell(label)} | {e.class_} | {_cell(e.pci)} "
                         f"| {source} | {_cell(quote(e.message))} |")
    if not table:
        return []
    return ["## GPU errors", "", *_table("| Node | First | Last | Count | Xid | Class | PCI | Source | Line |", table),
            ""]


def render(result: Result) -> str:
    r = result
    listed, healthy = split_healthy(r.nodes)
    lines: list[str] = []
    kind = r.cluster.kind
    if r.mode == "preflight":
        lines.append(f"# gpuaudit pre-flight: {md_inline(r.cluster.name)} ({md_inline(r.cluster.region)}) — "
                     f"{md_inline(r.planned_run or 'planned run')}")
    else:
        lines.append(f"# gpuaudit {r.mode} audit: {md_inline(r.cluster.name)} ({md_inline(r.cluster.region)})")
    lines += ["", f"- Impact window: {_t(r.window.start)} → {_t(r.window.end)} (source: {r.window.source}); "
                  f"coverage tested over the padded window {_t(r.window.padded_start)} → {_t(r.window.padded_end)}",
              *([f"- {md_inline(onset)}"] if (onset := onset_sentence(r)) else []),
              f"- Orchestrator: {kind}", f"- Generated: {_t(r.generated_at)}", ""]
    if r.mode == "preflight" and r.ready:
        lines += [f"## {ready_line(r)}", ""]
    lines += ["## Verdict", "", md_inline(r.headline), "", f"Confidence: **{r.confidence}**"
              + (f" — {md_inline(r.confidence_basis)}" if r.confidence_basis else ""), ""]
    # RULES §11: in incident mode the root cause and the branch table come right after the verdict
    lines += _root_cause(r)
    lines += ["## Node verdicts", ""] + ([_node_line(n) for n in listed] + _healthy_lines(healthy) or ["- none"]) + [""]
    lines += ["## Pre-flight checks", "", *_table("| # | Check | Result | Evidence | Action |", [
        f"| {chk.id} | {_cell(chk.title)} | **{chk.result}** | {_cell(chk.evidence)} | {_cell(chk.action)} |"
        for chk in sorted(r.checks, key=lambda k: (check_rank(k.result), int(k.id[1:])))]), ""] if r.checks else []
    lines += _timeline(r) + _capability(r, listed, healthy) + _coverage(r) + _errors(r)
    for f in r.findings:
        lines += [f"## {md_inline(f.question)}", "",
                  f"**{md_inline(f.answer)}**" + (f" — {f.label}" if f.label else ""), ""]
        steps = _table("| Step | Status | Evidence |", [f"| {_cell(name)} | {status} | {_cell(evidence)} |"
                                                          for name, status, evidence in grouped_steps(f.steps)])
        lines += [*steps, ""] if steps else []
        if f.action:
            lines += [f"Action (not executed): {md_inline(f.action)}", ""]
    services = [f"- {md_code(n.instance_id)}: {md_inline(n.service_action)}" for n in r.nodes if n.service_action]
    lines += ["## Cluster state", ""]
    lines += [f"- {md_inline(s)}" for s in r.cluster_state] or ["- not read"]
    if services:
        lines += ["", "What the service itself did:", *services]
    lines += ["", "## Recommended operator actions (not executed)", ""]
    lines += [f"{i}. {md_inline(a)}" for i, a in enumerate(action_lines(r), 1)] or ["- none"]
    if r.config_overrides:
        lines += ["", "## Configuration overrides", "", *[f"- {md_inline(o)}" for o in r.config_overrides]]
    lines += ["", "## Visibility gaps", ""]
    lines += [f"- {md_inline(g)}" for g in r.visibility_gaps] or ["- none"]
    calls = ", ".join(f"{c.service} {c.operation} ×{c.count}" for c in r.calls)
    lines += ["", "## Calls made", "", md_inline(calls or "none"), "", f"**{md_inline(r.self_check)}**", "",
              GLOSSARY_LINE, ""]
    return redact("\n".join(lines))


LISTED_IDS = 10  # node IDs a grouped action names in the report; the JSON result and the IDs file hold all


def action_lines(r: Result) -> list[str]:
    """The actions, a grouped node action naming its first LISTED_IDS nodes and where the rest are."""
    short = {}
    for g in r.action_groups:
        if len(g.nodes) > LISTED_IDS:
            where = f"{g.ids_at or f'{IDS_AT}.{g.ids_file}'} and the JSON result" if g.ids_file else "the JSON result"
            head = g.action[: g.action.rindex(", ".join(g.nodes))]
            short[g.action] = (f"{head}{', '.join(g.nodes[:LISTED_IDS])} … and {len(g.nodes) - LISTED_IDS:,} more "
                               f"(all in {where})")
    return [short.get(a, a) for a in r.actions]


def ids_files(r: Result) -> dict[str, str]:
    """The IDs files grouped actions read (`<report stem>.<name>`): one instance ID a line."""
    return {g.ids_file: "\n".join(g.nodes) + "\n" for g in r.action_groups if g.ids_file}


def finalize(result: Result, evidence: Evidence) -> Result:
    """Render the report from the judged result (the self-check already ran: rules/consistency.py)."""
    accounts = frozenset(a for a in [_arn_account(evidence.cluster.arn),
                                      *(g.owner_account for g in evidence.log_groups)] if a)
    report = render(result)
    return result.model_copy(update={"report_markdown": redact(report, accounts)}).with_account_ids(accounts)


def _arn_account(arn: str | None) -> str | None:
    parts = (arn or "").split(":")
    return parts[4] if len(parts) > 4 and parts[4].isdigit() else None
