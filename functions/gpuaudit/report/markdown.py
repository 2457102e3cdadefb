"""The Markdown report of RULES §11, rendered only from the Result."""

from __future__ import annotations

from datetime import datetime

from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import BRANCH_NAMES, NodeResult, Result, check_rank
from gpuaudit.model.timeutil import iso
from gpuaudit.report.escape import md_cell, md_code, md_inline, quote
from gpuaudit.report.fleet import healthy_summary, nccl_summary, onset_sentence, split_healthy
from gpuaudit.report.redact import redact


def _t(value: datetime | None) -> str:
    return iso(value) if value else "—"


_cell = md_cell  # every table cell is account text until proven otherwise


def _hours(hours: list[datetime]) -> str:
    if not hours:
        return "yes"
    shown = ", ".join(iso(h)[:13] + "h" for h in hours[:6])
    more = f" (+{len(hours) - 6} more)" if len(hours) > 6 else ""
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
        lines += [f"## Ready: {r.ready}", ""]
    lines += ["## Verdict", "", md_inline(r.headline), "", f"Confidence: **{r.confidence}**", ""]
    lines += ["## Node verdicts", ""] + [_node_line(n) for n in listed] + _healthy_lines(healthy) + [""]
    if r.checks:
        lines += ["## Pre-flight checks", "", "| # | Check | Result | Evidence | Action |", "|---|---|---|---|---|"]
        for chk in sorted(r.checks, key=lambda k: (check_rank(k.result), int(k.id[1:]))):
            lines.append(f"| {chk.id} | {_cell(chk.title)} | **{chk.result}** | {_cell(chk.evidence)} | "
                         f"{_cell(chk.action)} |")
        lines.append("")
    if r.timeline:
        lines += ["## Timeline (UTC)", "", "| Time | Source | Resource | Event |", "|---|---|---|---|"]
        lines += [f"| {_t(e.time)} | {_cell(e.source)} | {_cell(e.resource)} | {_cell(e.event)} |" for e in r.timeline]
        lines.append("")
    lines += ["## Node capability and fabric", "",
              "| Node | Type | GPUs | EFA attached/max | NVSwitch | Fabric Manager | NCCL transport |",
              "|---|---|---|---|---|---|---|"]
    for n in listed:
        lines.append(f"| {md_code(n.instance_id)} | {_cell(n.instance_type or 'unknown')} | {_cell(n.gpu_count)} | "
                     f"{_cell(n.efa)} | {_cell(n.nvswitch)} | {_cell(n.signals.fabric_manager)} | "
                     f"{_cell(nccl_summary(n))} |")
    if healthy:
        lines += ["", *_healthy_lines(healthy)]
    transport_lines = [f"- {md_code(n.instance_id)} {md_inline(t.transport)} (**{t.assessment}**: {md_inline(t.why)})"
                       f" — {md_code(quote(t.message))} in {md_code(t.log_group)} / {md_code(t.log_stream)} at "
                       f"{_t(t.time)}" + (f" (×{t.count})" if t.count > 1 else "")
                       for n in listed for t in n.nccl_transports]
    if transport_lines:
        lines += ["", "NCCL transport lines (first of each, RULES §8 D layer 1):", *transport_lines]
    lines += ["", "## GPU error log coverage", "",
              "| Node | Log group | Log stream | First event | Last event | Live across window | Kernel lines ever | "
              "Xids in window | Status |", "|---|---|---|---|---|---|---|---|---|"]
    for n in listed:
        xids = len([e for e in n.gpu_errors if e.code is not None and e.source != "history"])
        for c in n.coverage:
            live = _hours(c.empty_hours) if c.source_kind == "kernel" else "n/a (HMA)"
            stream = md_code(c.log_stream) if c.log_stream else "none"
            lines.append(f"| {md_code(n.instance_id)} | {md_code(c.log_group)} | {stream} | {_t(c.first_event)} | "
                         f"{_t(c.last_event)} | {live} | {_cell(c.kernel_lines_ever)} | {xids} | **{c.status}** |")
    notes = [f"- {md_code(n.instance_id)} · {md_code(c.log_stream or c.log_group)}: {md_inline(c.note)}"
             for n in listed for c in n.coverage
             if c.note]
    if healthy:
        lines += ["", *_healthy_lines(healthy)]
    if notes:
        lines += ["", "Coverage notes:", *notes]
    errors = [(n, e) for n in r.nodes for e in n.gpu_errors]
    if errors:
        lines += ["", "## GPU errors", "", "| Node | First | Last | Count | Xid | Class | PCI | Source | Line |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for n, e in errors:
            label = f"Xid {e.code}" if e.code is not None else "—"
            if e.meaning:
                label += f" ({e.meaning})"
            source = f"{md_code(e.log_group)} / {md_code(e.log_stream)}"
            if e.hma_reason:
                source += f" (HMA reason {md_inline(e.hma_reason)})"
            lines.append(f"| {md_code(n.instance_id)} | {_t(e.time)} | {_t(e.last_time)} | {e.count} | {_cell(label)} | "
                         f"{e.class_} | {_cell(e.pci)} | {source} | {_cell(quote(e.message))} |")
    if r.branches:
        lines += ["", "## Root cause", ""]
        lines += [f"- Branch {b.branch} ({BRANCH_NAMES[b.branch]}): **{b.status}**"
                  + (f" — {b.label}" if b.label else "") + f". {md_inline(b.evidence)}"
                  + (f" Confirming measurement: {md_inline(b.confirming_measurement)}"
                     if b.confirming_measurement else "")
                  for b in r.branches if b.status in ("Root cause", "Contributing", "UNVERIFIED")]
        lines += ["", "| Branch | Status | Label | Evidence | Confirming measurement |", "|---|---|---|---|---|"]
        lines += [f"| {b.branch} — {BRANCH_NAMES[b.branch]} | {b.status} | {_cell(b.label)} | {_cell(b.evidence)} | "
                  f"{_cell(b.confirming_measurement)} |" for b in r.branches]
    for f in r.findings:
        lines += ["", f"## {md_inline(f.question)}", "",
                  f"**{md_inline(f.answer)}**" + (f" — {f.label}" if f.label else ""), "",
                  "| Step | Status | Evidence |", "|---|---|---|"]
        lines += [f"| {_cell(s.name)} | {s.status} | {_cell(s.evidence)} |" for s in f.steps]
        if f.action:
            lines += ["", f"Action (not executed): {md_inline(f.action)}"]
    services = [f"- {md_code(n.instance_id)}: {md_inline(n.service_action)}" for n in r.nodes if n.service_action]
    lines += ["", "## Cluster state", ""]
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
    lines += ["", "## Calls made", "", md_inline(calls or "none"), "", f"**{md_inline(r.self_check)}**", ""]
    return redact("\n".join(lines))


LISTED_IDS = 10  # node IDs a grouped action names in the report; the JSON result and the IDs file hold all


def action_lines(r: Result) -> list[str]:
    """The actions, a grouped node action naming its first LISTED_IDS nodes and where the rest are."""
    short = {}
    for g in r.action_groups:
        if len(g.nodes) > LISTED_IDS:
            where = f"<report>.{g.ids_file} and the JSON result" if g.ids_file else "the JSON result"
            head = g.action[: g.action.rindex(", ".join(g.nodes))]
            short[g.action] = f"{head}{', '.join(g.nodes[:LISTED_IDS])} … and {len(g.nodes) - LISTED_IDS:,} more (all in {where})"
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
