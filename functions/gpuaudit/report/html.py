"""The HTML report (RULES §11), rendered only from the Result: one self-contained file.

No network fetch, no script: inline CSS and SVG, `<details>` for expansion, and a
Content-Security-Policy that forbids anything else. The coverage heatmap is report/heatmap.py. Past
100 nodes (RULES §11) the tables count what is alike (report/fleet.py), so a 2,000-node report stays
a few hundred kilobytes. Every string is escaped, every account ID redacted (OUTPUT-CONTRACT privacy).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape

from gpuaudit.model.redaction import MASK, redact
from gpuaudit.model.result import BRANCH_NAMES, NodeResult, Result, check_rank
from gpuaudit.model.timeutil import iso
from gpuaudit.report.escape import quote
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
from gpuaudit.report.heatmap import STATUS_BADGE, heatmap
from gpuaudit.report.heatmap import html_text as _e
from gpuaudit.report.markdown import GLOSSARY_LINE, NO_TIMED_EVENT, action_lines, ready_line
from gpuaudit.report.order import GAP_RANK, VERDICT_SEVERITY, coverage_gap, worst_first

# The node tables that start open, at any size: what on-call must act on (a new node, a node nothing proves healthy,
# a reboot) and the coverage gaps of nodes that need nothing else. The rest start collapsed (#49 item 2).
OPEN_ALWAYS = ("REPLACE", "NOT OBSERVABLE", "REBOOT", "coverage gap")

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
svg .strip-count{font-size:10px}
.live,.key-live{fill:var(--live)}.empty,.key-empty{fill:url(#pat-empty);stroke:#5a3a00;stroke-width:.6}
.na,.key-na{fill:var(--na)}.unobs,.key-unobs{fill:url(#pat-unobs)}.hma-none,.key-hma-none{fill:var(--hma)}
.agg-empty{fill:url(#pat-empty)}
.tick{stroke:#999;stroke-width:1}.grid{stroke:#fff;stroke-width:1}
.win{stroke:var(--ink);stroke-width:1.5;stroke-dasharray:4 3}
.mk{stroke:#fff;stroke-width:1.2}.mk-hardware{fill:var(--verm)}.mk-application{fill:var(--blue)}
.mk-sympathetic{fill:var(--purple)}.mk-other{fill:#111}
ol li,ul li{margin:3px 0}
@media print{.scroll{max-height:none;overflow:visible}details{display:block}}
@media (max-width:640px){body{padding:8px 10px 32px}h1{font-size:19px}
.badge{white-space:normal}summary,.meta,p,li{overflow-wrap:anywhere}code{word-break:break-all}
table,tbody,tr,td{display:block;width:auto}thead{display:none}
tr{border:1px solid var(--line);border-radius:4px;margin:0 0 8px}
td{border:0;border-top:1px solid #eee;white-space:normal}td:first-child{border-top:0;white-space:normal}
td[data-label]::before{content:attr(data-label);display:block;font-size:12px;font-weight:600;color:var(--muted)}
.cov td:nth-child(2),.cov td:nth-child(3){min-width:0}
.scroll{max-height:none;overflow:visible;border:0}.hscroll{max-width:100%}.vscroll{width:auto}}
"""

DEFS = """<svg width="0" height="0" style="position:absolute" aria-hidden="true" focusable="false"><defs>
<pattern id="pat-empty" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
<rect width="6" height="6" fill="#E69F00"/><rect width="2.4" height="6" fill="#3d2600"/></pattern>
<pattern id="pat-unobs" width="5" height="5" patternUnits="userSpaceOnUse">
<rect width="5" height="5" fill="#d4d4d4"/><rect y="2" width="5" height="1.2" fill="#8a8a8a"/></pattern>
</defs></svg>"""

VERDICT_BADGE = {"REPLACE": ("b-bad", "✖"), "REBOOT": ("b-warn", "↻"), "LEAVE ALONE": ("b-ok", "✓"),
                 "MONITOR": ("b-info", "◐"), "NOT OBSERVABLE": ("b-grey", "?")}
CHECK_BADGE = {"PASS": ("b-ok", "✓"), "RISK": ("b-warn", "▲"), "FAIL": ("b-bad", "✖"), "UNVERIFIED": ("b-grey", "?"),
               "Needs input": ("b-info", "✎"), "Not checked": ("b-grey", "–")}
BRANCH_BADGE = {"Root cause": ("b-bad", "●"), "Contributing": ("b-warn", "◑"), "Ruled out": ("b-ok", "✓"),
                "Not assessed": ("b-grey", "–"), "UNVERIFIED": ("b-grey", "?")}


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
    """A table, or nothing when it has no row (RULES §11: no empty table)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    # data-label: on a narrow screen each row is a card and each cell shows its column's name (CSS only)
    labels = [f' data-label="{_e(h)}"' for h in headers]
    body = "".join("<tr>" + "".join(f"<td{label}>{c}</td>" for label, c in zip(labels, row, strict=False)) + "</tr>"
                   for row in rows)
    if not body:
        return ""
    table = f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>' if css else (
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return f'<div class="scroll">{table}</div>' if scroll else table


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
        out.append(f'<p><span class="badge {css}">{_e(ready_line(r))}</span></p>')
    out.append(f'<p class="headline">{_prose(r.headline)}</p>')
    confidence = {"High": "b-ok", "Medium": "b-warn", "Low": "b-grey"}[r.confidence]
    verdicts: dict[str, int] = {}
    for n in worst_first(r.nodes):
        key = n.verdict or "no verdict"
        verdicts[key] = verdicts.get(key, 0) + 1
    tally = " ".join(f"{_badge(k, VERDICT_BADGE)} ×{v}" for k, v in verdicts.items())
    basis = f" — {_e(r.confidence_basis)}" if r.confidence_basis else ""  # RULES §11: confidence with its basis
    out.append(f'<p>Confidence: <span class="badge {confidence}">{_e(r.confidence)}</span>{basis} · '
               f"Node verdicts: {tally}</p>")
    return "".join(out)


def _healthy_note(groups: dict[str, list[NodeResult]]) -> str:
    """The healthy nodes a fleet-size table does not list, counted per group."""
    if not groups:
        return ""
    items = "".join(f"<li>{len(nodes)} more node(s) of group <code>{_e(g)}</code> ({_e(healthy_summary(nodes))}), "
                    "no GPU signal, no empty hour</li>" for g, nodes in sorted(groups.items()))
    return f'<ul class="meta">{items}</ul><p class="meta">Every node is in the JSON result.</p>'


def _node_row(n: NodeResult) -> tuple[str, ...]:
    return (f"<code>{_e(n.instance_id)}</code>", _or_dash(n.instance_group), _or_dash(n.instance_type),
            _e(n.status), _e(n.role), _badge(n.verdict, VERDICT_BADGE) if n.verdict else "no verdict (no GPU signal)",
            _badge(n.xid_status, STATUS_BADGE),
            _or_dash(n.verdict_evidence) + (f"<br>Kubernetes: {_e(n.kubernetes)}" if n.kubernetes else "")
            + (f"<br>Earlier audits: {_prose(n.history)}" if n.history else ""))


def _node_verdicts(r: Result) -> str:
    """The listed nodes worst first, one `<details>` per verdict (OPEN_ALWAYS open: no script, the CSP stays), a
    coverage gap on a node that needs nothing else in its own table just above LEAVE ALONE."""
    listed, healthy = split_healthy(r.nodes)
    headers = ("Node", "Group / queue", "Type", "Status", "Role", "Verdict", "Xid status", "Evidence")
    out = ["<h2>Node verdicts</h2>"]
    gaps = [n for n in listed if n.verdict in ("LEAVE ALONE", None) and coverage_gap(n)]
    gap_ids = {n.instance_id for n in gaps}
    # A coverage gap on a node that needs nothing else is read before the healthy rows (#49 item 6): its own table
    groups: list[tuple[str | None, str, list[NodeResult]]] = [
        (
            verdict,
            _badge(verdict, VERDICT_BADGE) if verdict else "no verdict (no GPU signal)",
            [n for n in listed if n.verdict == verdict and n.instance_id not in gap_ids],
        )
        for verdict in (*VERDICT_SEVERITY, None)
    ]
    groups.insert(GAP_RANK, ("coverage gap", '<span class="badge b-grey">? coverage gap</span> (LEAVE ALONE or no '
                             "verdict; what was not seen is in its row)", gaps))
    for verdict, title, nodes in groups:
        if not nodes:
            continue
        title += f" ×{len(nodes):,}"
        state = " open" if verdict in OPEN_ALWAYS else ""
        out.append(f'<details class="verdict"{state}><summary>{title}</summary>'
                   f"{_table(headers, [_node_row(n) for n in nodes], scroll=len(nodes) > 40)}</details>")
    return "".join(out) + _healthy_note(healthy)


def _capability(r: Result) -> str:
    headers = ("Node", "Type", "GPUs", "EFA attached/max", "NVSwitch", "Fabric Manager", "NCCL transport")
    if fleet_size(r):
        grouped = [(f"{len(k.nodes):,} node(s): {_e(some_ids(k.nodes))}", _or_dash(k.instance_type),
                    _or_dash(k.gpu_count), _or_dash(k.efa), _or_dash(k.nvswitch), _e(k.fabric_manager), _e(k.nccl))
                   for k in capability_rows(r.nodes)]
        transports = "".join(f"<li><code>{_e(n.instance_id)}</code>: {_nccl_cell(n)}</li>"
                             for n in split_healthy(r.nodes)[0] if n.nccl_transports)
        return ("<h2>Node capability and fabric</h2>" + _table(headers, grouped)
                + f'<p class="meta">Every node of the {len(r.nodes):,} is in one row (nodes alike in type and fabric '
                  "share it).</p>" + (f"<ul>{transports}</ul>" if transports else ""))
    listed, healthy = split_healthy(r.nodes)
    rows: list[tuple[str, ...]] = [(f"<code>{_e(n.instance_id)}</code>", _or_dash(n.instance_type or "unknown"),
                                    _or_dash(n.gpu_count),
             _or_dash(n.efa), _or_dash(n.nvswitch), _e(n.signals.fabric_manager), _nccl_cell(n),
             _e(n.signals.efa_counters) + (f"<br>{_e(n.signals.efa_counters_detail)}" if n.signals.efa_counters_detail
                                           else ""), _e(n.signals.gpu_activity)) for n in listed]
    return "<h2>Node capability and fabric</h2>" + _table(
        (*headers, "EFA counters", "GPU activity"), rows, scroll=len(rows) > 40) + _healthy_note(healthy)


def _nccl_cell(n: NodeResult) -> str:
    """The transports, then each first line quoted with its group and stream (log text is untrusted: escaped)."""
    lines = "".join(f"<br><b>{_e(t.transport)}</b> ({_e(t.assessment)}: {_e(t.why)}): <code>{_e(quote(t.message))}"
                    f"</code> in <code>{_e(t.log_group)}</code> / <code>{_e(t.log_stream)}</code> at {_e(iso(t.time))}"
                    + (f" (×{t.count})" if t.count > 1 else "") for t in n.nccl_transports)
    return _e(nccl_summary(n)) + lines


def _coverage_table(r: Result) -> str:
    rows = []
    listed, counted = coverage_split(r)
    for n, c in listed:
        xids = xids_in_row(n, c)
        if not c.log_stream:
            live = "no stream"
        elif c.source_kind == "kernel":
            live = (f"no — {len(c.empty_hours)} empty hour(s) from {_e(iso(c.empty_hours[0]))}" if c.empty_hours
                    else f"yes ({c.live_hours} h)" if c.liveness_read else "not proven")
        else:
            live = "n/a (HMA)"
        rows.append((f"<code>{_e(n.instance_id)}</code>", f"<code>{_e(c.log_group)}</code>",
                     f"<code>{_e(c.log_stream)}</code>" if c.log_stream else "none", _e(_t(c.first_event)),
                     _e(_t(c.last_event)), live, _or_dash(c.kernel_lines_ever), str(xids),
                     _badge(c.status, STATUS_BADGE), _or_dash(c.note)))
    count = "".join(f"<li>{_e(counted_rows_text(k))}</li>" for k in counted)
    note = (f'<p class="meta">Past {EVERY_NODE_UP_TO} nodes the rows proven live every hour are counted (RULES '
            f"§11); the table lists every row short of that.</p><ul class=\"meta\">{count}</ul>" if counted else "")
    return "<h3>GPU error log coverage</h3>" + _table(
        ("Node", "Log group", "Log stream", "First event", "Last event", "Live across window", "Kernel lines ever",
         "Xids in window", "Status", "Note"), rows, scroll=len(rows) > 40, css="cov") + note


def _errors(r: Result) -> str:
    if fleet_size(r):
        grouped = []
        for g in error_groups(r.nodes):
            label = (f"Xid {g.code}" if g.code is not None else "—") + (f" ({g.meaning})" if g.meaning else "")
            example = "—"
            if g.example:
                node, e = g.example
                example = (f"<code>{_e(node)}</code>: <code>{_e(e.log_group)}</code> / <code>{_e(e.log_stream)}</code>"
                           f': <span class="mono">{_e(quote(e.message))}</span>')
            grouped.append((_e(label), _e(g.class_), f"{g.lines:,}", f"{len(g.nodes):,}: {_e(some_ids(g.nodes))}",
                            _e(_t(g.first)), _e(_t(g.last)), example))
        table = _table(("Xid", "Class", "Lines", "Nodes", "First", "Last", "First line (node, source, verbatim)"),
                       grouped)
        return (f'<h3>GPU errors</h3><p class="meta">Past {EVERY_NODE_UP_TO} nodes, lines alike are counted (each '
                "node's own in the node table; every line verbatim in the JSON result).</p>" + table) if table else ""
    rows = []
    for n in worst_first(r.nodes):
        for e in n.gpu_errors:
            label = f"Xid {e.code}" if e.code is not None else "—"
            if e.meaning:
                label += f" ({e.meaning})"
            source = f"<code>{_e(e.log_group)}</code> / <code>{_e(e.log_stream)}</code>"
            if e.hma_reason:
                source += f" (HMA reason {_e(e.hma_reason)})"
            rows.append((f"<code>{_e(n.instance_id)}</code>", _e(_t(e.time)), _e(_t(e.last_time)), str(e.count),
                         _e(label), _e(e.class_), _or_dash(e.pci), source,
                         f'<span class="mono">{_e(quote(e.message))}</span>'))
    table = _table(("Node", "First", "Last", "Count", "Xid", "Class", "PCI", "Source", "Line (verbatim)"), rows,
                   scroll=len(rows) > 40)
    return "<h3>GPU errors</h3>" + table if table else ""


def _timeline(r: Result) -> str:
    rows = [(_e(_t(t.time)), _e(t.source), f"<code>{_e(t.resource)}</code>", _prose(t.what))
            for t in collapsed_timeline(r.timeline, by_kind=fleet_size(r))]
    if not rows:  # RULES §11: an incident report holds its timeline; an empty one is said, not dropped
        return f"<h2>Timeline (UTC)</h2><p>{_e(NO_TIMED_EVENT)}</p>" if r.mode == "incident" else ""
    return (f"<h2>Timeline (UTC)</h2><details{' open' if len(rows) <= 30 else ''}><summary>{len(rows)} row(s), "
            f"{len(r.timeline)} event(s)</summary>"
            f"{_table(('Time', 'Source', 'Resource', 'Event'), rows, scroll=len(rows) > 40)}</details>")


def _checks(r: Result) -> str:
    if not r.checks:
        return ""
    ordered = sorted(r.checks, key=lambda c: (check_rank(c.result), int(c.id[1:])))
    rows = [(_e(c.id), _e(c.title), _badge(c.result, CHECK_BADGE), _prose(c.evidence), _or_dash(c.action))
            for c in ordered]
    return "<h2>Pre-flight checks</h2>" + _table(("#", "Check", "Result", "Evidence", "Action"), rows)


LONG_EVIDENCE = 1_000  # characters: past this a branch's evidence opens from its first SHOWN_EVIDENCE characters
SHOWN_EVIDENCE = 400


def _evidence(text: str) -> str:
    """A branch's evidence: whole when short; a long one (naming every node of a fleet) behind its beginning, so the
    branch table stays a screen tall (no script: `<details>`)."""
    if len(text) <= LONG_EVIDENCE:
        return _prose(text)
    return (f"<details><summary>{_e(text[:SHOWN_EVIDENCE])}… ({len(text):,} characters: open for all)</summary>"
            f"{_prose(text)}</details>")


def _branches(r: Result) -> str:
    if not r.branches:
        return ""
    # The leading branches first, with their evidence when short (a long one is in the table right below).
    leading = [f"<li>Branch {_e(b.branch)} ({_e(BRANCH_NAMES[b.branch])}): {_badge(b.status, BRANCH_BADGE)}"
               + (f" — <b>{_e(b.label)}</b>" if b.label else "")
               + (f". {_prose(b.evidence)}" if len(b.evidence) <= LONG_EVIDENCE else ": evidence in the table below.")
               + (f" <i>Confirming measurement:</i> {_prose(b.confirming_measurement)}" if b.confirming_measurement
                  else "") + "</li>"
               for b in r.branches if b.status in ("Root cause", "Contributing", "UNVERIFIED")]
    rows = [(f"{_e(b.branch)} — {_e(BRANCH_NAMES[b.branch])}", _badge(b.status, BRANCH_BADGE), _or_dash(b.label),
             _evidence(b.evidence), _or_dash(b.confirming_measurement)) for b in r.branches]
    return ("<h2>Root cause</h2>" + (f"<ul>{''.join(leading)}</ul>" if leading else "")
            + _table(("Branch", "Status", "Label", "Evidence", "Confirming measurement"), rows))


def _findings(r: Result) -> str:
    out = []
    for f in r.findings:
        rows = [(_e(name), _e(status), _prose(evidence)) for name, status, evidence in grouped_steps(f.steps)]
        out.append(f"<h2>{_e(f.question)}</h2><p><b>{_prose(f.answer)}</b>"
                   + (f" — {_e(f.label)}" if f.label else "") + "</p>"
                   + _table(("Step", "Status", "Evidence"), rows)
                   + (f"<p>Action (not executed): {_prose(f.action)}</p>" if f.action else ""))
    return "".join(out)


def _actions(r: Result) -> str:
    actions = "".join(f"<li>{_prose(a)}</li>" for a in action_lines(r))
    return "<h2>Recommended operator actions (not executed)</h2>" + (
        f"<ol>{actions}</ol>" if actions else "<p>none</p>"
    )


def _lists(r: Result) -> str:
    state = "".join(f"<li>{_prose(s)}</li>" for s in r.cluster_state) or "<li>not read</li>"
    services = "".join(f"<li><code>{_e(n.instance_id)}</code>: {_prose(n.service_action)}</li>"
                       for n in r.nodes if n.service_action)
    gaps = "".join(f"<li>{_prose(g)}</li>" for g in r.visibility_gaps) or "<li>none</li>"
    calls = ", ".join(f"{_e(c.service)} {_e(c.operation)} ×{c.count}" for c in r.calls) or "none"
    return (f"<h2>Cluster state</h2><ul>{state}</ul>"
            + (f"<h3>What the service itself did</h3><ul>{services}</ul>" if services else "")
            + f"<h2>Visibility gaps</h2><ul>{gaps}</ul>"
            + f"<h2>Calls made</h2><p>{calls}</p><p><b>{_e(r.self_check)}</b></p><p>{_e(GLOSSARY_LINE)}</p>")


def render_html(result: Result) -> str:
    r = result
    # The picture first: headline, then the heatmap, then the tables it summarises.
    # RULES §11: in incident mode the root cause and the branch table come right after the verdict.
    # On-call acts first: the recommended actions right under the verdict (issue #49 item 2); a pre-flight's checks
    # right after its readiness (in the verdict); in incident mode the branches then (RULES §11).
    body = (_header(r) + _verdict(r) + _checks(r) + _actions(r) + _branches(r)
            + "<h2>GPU error log coverage, hour by hour</h2>" + heatmap(r) + _node_verdicts(r)
            + _timeline(r) + _capability(r) + _coverage_table(r) + _errors(r)
            + _findings(r) + _lists(r))
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(_title(r))}</title><style>{CSS}</style></head><body>{DEFS}{body}</body></html>")
    # A last pass for an account ID that slipped through (the audit's known accounts included, masked even where
    # one reads as a log group's timestamp); a raw mask would read as a tag, so escape it.
    return redact(page, result.account_ids).replace(MASK, escape(MASK))
