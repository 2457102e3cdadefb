"""`gpuaudit history`: a node's timeline across audits (issue #18 item 3), rendered from a HistoryRead only.

Markdown (one table per node), JSON (`gpu-audit-history/1`) and HTML (one strip per node across the look-back,
like the coverage heatmap: a segment per span coloured and labelled by its verdict, hatched where coverage was
Not observable, a triangle per hardware-class Xid, a bar per reboot). Everything in the history came from audited
accounts: escaped for each format, account IDs redacted.
"""

from __future__ import annotations

import json
from datetime import datetime
from html import escape

from gpuaudit.model.history import HistoryRead, HistorySpan, HistoryXid
from gpuaudit.model.redaction import MASK, redact, redact_tree
from gpuaudit.model.timeutil import iso
from gpuaudit.report.escape import md_cell, md_code, md_inline, visible
from gpuaudit.report.order import verdict_rank

SCHEMA = "gpu-audit-history/1"
STRIP_W, STRIP_H, LABEL_W = 900, 18, 190
VERDICT_CLASS = {"REPLACE": "v-replace", "REBOOT": "v-reboot", "MONITOR": "v-monitor", "LEAVE ALONE": "v-leave",
                 "NOT OBSERVABLE": "v-unobs", None: "v-none"}
VERDICT_SHORT = {"REPLACE": "REPLACE", "REBOOT": "REBOOT", "MONITOR": "MONITOR", "LEAVE ALONE": "LEAVE",
                 "NOT OBSERVABLE": "N/O", None: "—"}


def by_node(read: HistoryRead) -> dict[str, list[HistorySpan]]:
    """Each node's spans in time order; the nodes worst latest verdict first (a closed one ranks as no verdict),
    then by instance ID."""
    nodes: dict[str, list[HistorySpan]] = {}
    for span in sorted(read.spans, key=lambda s: (s.instance_id, s.audit_time, s.audit_id)):
        nodes.setdefault(span.instance_id, []).append(span)
    latest = {iid: None if spans[-1].closed else spans[-1].verdict for iid, spans in nodes.items()}
    return dict(sorted(nodes.items(), key=lambda kv: (verdict_rank(latest[kv[0]]), kv[0])))


def _signal(x: HistoryXid) -> str:
    what = f"Xid {x.code}" if x.code is not None else f"`{x.signal}`"
    when = iso(x.first) + (f" … {iso(x.last)}" if x.last != x.first else "")
    return what + (f" on PCI {x.pci}" if x.pci else "") + f" at {when}"


def _changes(spans: list[HistorySpan]) -> int:
    return sum(1 for a, b in zip(spans, spans[1:], strict=False) if a.verdict != b.verdict)


def verdict_text(span: HistorySpan) -> str:
    """A span's verdict as the history shows it; a closing span says why the verdict ended."""
    return f"closed: {span.closed}" if span.closed else span.verdict or "none"


def summary_line(spans: list[HistorySpan]) -> str:
    audits = sum(s.audits for s in spans)
    xids = sum(len(s.xids) for s in spans)
    reboots = len({r for s in spans for r in s.reboots})
    return (f"{audits} audit(s) in {len(spans)} span(s); verdict changes {_changes(spans)}; hardware signals {xids}; "
            f"reboots {reboots}; latest verdict "
            + (f"closed: {spans[-1].closed}" if spans[-1].closed else
               f"{spans[-1].verdict or 'none'} ({spans[-1].xid_status})"))


# --------------------------------------------------------------------------- Markdown


def render_markdown(read: HistoryRead, cluster: str) -> str:
    nodes = by_node(read)
    lines = [f"# gpuaudit history: {md_inline(cluster)}", "",
             f"- Audits from {iso(read.since)} to {iso(read.until)}; read from {md_code(read.store)} "
             f"({read.items_read} item(s), {read.requests} request(s))",
             f"- Nodes: {len(nodes)}" + ("" if nodes else " — no audit of this cluster in the look-back")]
    for iid, spans in nodes.items():
        lines += ["", f"## {md_code(iid)}", "", summary_line(spans), "",
                  "| From | Through | Audits | Mode | Verdict | Coverage | Hardware signals | Reboots | Audit |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for s in spans:
            lines.append(f"| {iso(s.audit_time)} | {iso(s.through)} | {s.audits} | {md_cell(s.mode)} | "
                         f"{md_cell(verdict_text(s))} | {md_cell(s.xid_status)} | "
                         f"{md_cell('; '.join(_signal(x) for x in s.xids))} | "
                         f"{md_cell(', '.join(iso(r) for r in s.reboots))} | {md_code(s.audit_id)}"
                         + (f" … {md_code(s.last_audit_id)}" if s.last_audit_id != s.audit_id else "") + " |")
    return redact("\n".join(lines)) + "\n"


# --------------------------------------------------------------------------- JSON


def render_json(read: HistoryRead, cluster: str) -> str:
    doc = {"schema": SCHEMA, "cluster": cluster, "since": iso(read.since), "until": iso(read.until),
           "store": read.store, "items_read": read.items_read, "requests": read.requests,
           "nodes": [{"instance_id": iid, "summary": summary_line(spans),
                      "timeline": [s.model_dump(mode="json", exclude={"cluster", "instance_id"}) for s in spans]}
                     for iid, spans in by_node(read).items()]}
    return json.dumps(redact_tree(doc, keep=frozenset()), indent=2, ensure_ascii=True)


# --------------------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1b1b;margin:0 auto;max-width:1500px;
padding:16px 24px 48px}h1{font-size:22px}h2{font-size:16px;margin:18px 0 4px}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;background:#f3f3f3;padding:0 3px}
table{border-collapse:collapse;width:100%;margin:6px 0 10px}th,td{border:1px solid #d0d0d0;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#f4f4f4}.meta{color:#555}
svg text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:10.5px;fill:#1b1b1b}
.v-replace{fill:#D55E00}.v-reboot{fill:#E69F00}.v-monitor{fill:#CC79A7}.v-leave{fill:#0072B2}
.v-none{fill:#56B4E9}.v-unobs{fill:url(#pat-unobs)}.gap{fill:#ececec}.unobs-cov{fill:url(#pat-unobs);opacity:.55}
.xid{fill:#111;stroke:#fff;stroke-width:1}.reboot{stroke:#111;stroke-width:2;stroke-dasharray:2 1}
.legend span{margin-right:16px}
"""
DEFS = """<svg width="0" height="0" style="position:absolute" aria-hidden="true" focusable="false"><defs>
<pattern id="pat-unobs" width="5" height="5" patternUnits="userSpaceOnUse">
<rect width="5" height="5" fill="#d4d4d4"/><rect y="2" width="5" height="1.2" fill="#8a8a8a"/></pattern>
</defs></svg>"""


def _e(value: object) -> str:
    return escape(visible(redact(str(value))), quote=True)


def _x(when: datetime, read: HistoryRead) -> float:
    total = max((read.until - read.since).total_seconds(), 1.0)
    share = min(max((when - read.since).total_seconds() / total, 0.0), 1.0)
    return LABEL_W + share * STRIP_W


def strip(iid: str, spans: list[HistorySpan], read: HistoryRead) -> str:
    """One node across the look-back: a segment per span (from its first audit to its last, at least 2 px)."""
    parts = [f'<rect class="gap" x="{LABEL_W}" y="2" width="{STRIP_W}" height="{STRIP_H}"><title>no audit recorded'
             "</title></rect>",
             f'<text x="0" y="{STRIP_H - 2}">{_e(iid)}</text>']
    for s in spans:
        x0, x1 = _x(s.audit_time, read), _x(s.through, read)
        width = max(x1 - x0, 2.0)
        title = _e(f"{s.verdict or 'no verdict'} · {s.xid_status} · {s.audits} audit(s) {iso(s.audit_time)} → "
                   f"{iso(s.through)} · audit {s.audit_id}")
        parts.append(f'<rect class="{VERDICT_CLASS.get(s.verdict, "v-none")}" x="{x0:.1f}" y="2" width="{width:.1f}" '
                     f'height="{STRIP_H}"><title>{title}</title></rect>')
        if s.xid_status == "Not observable" and s.verdict != "NOT OBSERVABLE":
            parts.append(f'<rect class="unobs-cov" x="{x0:.1f}" y="2" width="{width:.1f}" height="{STRIP_H}"/>')
        if width > 60:
            parts.append(f'<text x="{x0 + 3:.1f}" y="{STRIP_H - 2}">{_e(VERDICT_SHORT.get(s.verdict, "?"))}</text>')
        for r in s.reboots:
            xr = _x(r, read)
            parts.append(f'<line class="reboot" x1="{xr:.1f}" x2="{xr:.1f}" y1="0" y2="{STRIP_H + 4}">'
                         f"<title>reboot at {_e(iso(r))}</title></line>")
        for x in s.xids:
            xx = _x(x.first, read)
            parts.append(f'<path class="xid" d="M{xx:.1f},1 l5,9 h-10 z"><title>{_e(_signal(x))} (audit '
                         f"{_e(s.audit_id)})</title></path>")
    return (f'<svg width="{LABEL_W + STRIP_W + 10}" height="{STRIP_H + 6}" role="img" '
            f'aria-label="history of {_e(iid)}">{"".join(parts)}</svg>')


def render_html(read: HistoryRead, cluster: str) -> str:
    nodes = by_node(read)
    legend = ('<p class="legend">' + "".join(
        f'<span><svg width="14" height="12"><rect class="{css}" width="14" height="12"/></svg> {_e(v or "no verdict")}'
        "</span>" for v, css in VERDICT_CLASS.items())
        + '<span><svg width="14" height="12"><path class="xid" d="M7,1 l5,9 h-10 z"/></svg> hardware-class Xid</span>'
        '<span><svg width="6" height="12"><line class="reboot" x1="3" x2="3" y1="0" y2="12"/></svg> reboot</span>'
        '<span><svg width="14" height="12"><rect class="gap" width="14" height="12"/></svg> no audit recorded</span>'
        "</p>")
    body = [f"<h1>gpuaudit history: {_e(cluster)}</h1>",
            f'<p class="meta">Audits from {_e(iso(read.since))} to {_e(iso(read.until))}; read from '
            f"<code>{_e(read.store)}</code> ({read.items_read} item(s), {read.requests} request(s)); "
            f"{len(nodes)} node(s)</p>", legend]
    if not nodes:
        body.append("<p>No audit of this cluster in the look-back.</p>")
    for iid, spans in nodes.items():
        rows = "".join(
            f"<tr><td>{_e(iso(s.audit_time))}</td><td>{_e(iso(s.through))}</td><td>{s.audits}</td>"
            f"<td>{_e(s.mode)}</td><td>{_e(verdict_text(s))}</td><td>{_e(s.xid_status)}</td>"
            f"<td>{_e('; '.join(_signal(x) for x in s.xids)) or '—'}</td>"
            f"<td>{_e(', '.join(iso(r) for r in s.reboots)) or '—'}</td><td><code>{_e(s.audit_id)}</code></td></tr>"
            for s in spans)
        body.append(f"<h2><code>{_e(iid)}</code></h2><p>{_e(summary_line(spans))}</p>{strip(iid, spans, read)}"
                    "<details><summary>spans</summary><table><tr><th>From</th><th>Through</th><th>Audits</th>"
                    "<th>Mode</th><th>Verdict</th><th>Coverage</th><th>Hardware signals</th><th>Reboots</th>"
                    f"<th>Audit</th></tr>{rows}</table></details>")
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>gpuaudit history: {_e(cluster)}</title><style>{CSS}</style></head><body>{DEFS}"
            + "".join(body) + "</body></html>")
    return redact(page).replace(MASK, escape(MASK))
