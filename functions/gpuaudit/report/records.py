"""Findings as records (`--format ndjson`, `--format csv`): one record per node, then one per branch (incident) or
check (preflight), each self-describing, for jq, a spreadsheet or Athena.

The schema is FINDINGS_SCHEMA, versioned like the Result: fields may be added at the end; none is renamed,
reordered or changes meaning without a new version. Every record has every field (null/empty when it does not
apply), so a CSV header and an Athena table fit all three kinds. Account IDs are redacted as in the Result JSON;
CSV cells that a spreadsheet would run as a formula are neutralised.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from typing import Any

from gpuaudit.model.redaction import redact_trees
from gpuaudit.model.result import NodeResult, Result, verdict_code
from gpuaudit.model.timeutil import iso
from gpuaudit.report.escape import visible
from gpuaudit.report.order import verdict_rank, worst_first, xid_codes

FINDINGS_SCHEMA = "gpu-audit-finding/1"
# The fields of every record, in this order (the CSV header).
FIELDS = ("schema", "audit_id", "cluster", "region", "mode", "window_start", "window_end", "record", "id",
          "verdict", "severity_rank", "reason_code", "reason", "xid_codes", "xid_classes", "pci_bus",
          "coverage_status", "log_group", "log_stream", "instance_group", "instance_type", "status", "role",
          "result", "label", "title", "actions",
          # the verdict's machine form (`NOT_OBSERVABLE` beside `NOT OBSERVABLE`): what a filter or a rule matches
          "verdict_code")
LIST_FIELDS = ("xid_codes", "xid_classes", "pci_bus", "log_group", "log_stream", "actions")
# A spreadsheet runs a cell starting with these as a formula (OWASP CSV injection); tab and CR start one too.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def reason_code(node: NodeResult) -> str:
    """A short, stable code for why the node has its verdict (the sentence is in `reason`)."""
    if node.verdict is None:
        return "no-gpu-signal"
    if node.verdict == "NOT OBSERVABLE":
        return "no-log-stream" if not node.coverage else "coverage-not-proven"
    sources = {e.source for e in node.gpu_errors}
    classes = {e.class_ for e in node.gpu_errors}
    if node.verdict in ("REPLACE", "REBOOT"):
        if "history" in sources:
            return "recurring-hardware-signal"
        if "hma" in sources:
            return "hma-detection"
        # the Xid the verdict rests on, by its class: an informational Xid 63 routed to REBOOT (a row remap pending)
        # is `informational-xid`, a driver-config Xid 119 `driver-config-xid`, never a bare node status
        deciding = next((e for e in node.gpu_errors if node.deciding_xid is not None and e.code == node.deciding_xid
                         and e.source == "kernel"), None)
        if deciding is not None:
            return f"{deciding.class_}-xid"
        if any(e.code is None and e.source == "kernel" for e in node.gpu_errors):
            return "memory-signal"  # a non-Xid memory line (Remapping Failure Occurred, Pending Page Blacklist, …)
        if "hardware" in classes:
            return "hardware-xid"
        if node.kubernetes:
            return "kubernetes-health"
        return "node-status"
    if node.verdict == "MONITOR":
        return "unverified-signal" if "unverified" in classes or not classes else "watch-signal"
    return "application-xid" if classes else "no-gpu-error"


def _node_record(node: NodeResult, actions: Sequence[str]) -> dict[str, Any]:
    streams = [r for r in node.coverage]
    return {
        "record": "node",
        "id": node.instance_id,
        "verdict": node.verdict,
        "verdict_code": verdict_code(node.verdict),
        "severity_rank": verdict_rank(node.verdict),
        "reason_code": reason_code(node),
        "reason": node.verdict_evidence,
        "xid_codes": xid_codes(node),  # the Xid the verdict rests on first
        "xid_classes": sorted({e.class_ for e in node.gpu_errors}),
        "pci_bus": sorted({e.pci for e in node.gpu_errors if e.pci}),
        "coverage_status": node.xid_status,
        "log_group": list(dict.fromkeys(r.log_group for r in streams)),
        "log_stream": list(dict.fromkeys(r.log_stream for r in streams if r.log_stream)),
        "instance_group": node.instance_group,
        "instance_type": node.instance_type,
        "status": node.status,
        "role": node.role,
        "actions": [a for a in actions if node.instance_id in a]
        + ([node.service_action] if node.service_action else []),
    }


def records(result: Result, nodes: Sequence[NodeResult] | None = None) -> list[dict[str, Any]]:
    """Every record of one audit: nodes worst first (`nodes` when filtered), then branches, then checks."""
    common = {"schema": FINDINGS_SCHEMA, "audit_id": result.audit_id, "cluster": result.cluster.name,
              "region": result.cluster.region, "mode": result.mode, "window_start": iso(result.window.start),
              "window_end": iso(result.window.end)}
    rows = [_node_record(n, result.actions) for n in worst_first(result.nodes if nodes is None else nodes)]
    rows += [{"record": "branch", "id": b.branch, "result": b.status, "label": b.label, "reason": b.evidence,
              "title": b.confirming_measurement} for b in result.branches]
    rows += [{"record": "check", "id": c.id, "result": c.result, "title": c.title, "reason": c.evidence,
              "actions": [c.action] if c.action else []} for c in result.checks]
    empty: dict[str, Any] = {f: ([] if f in LIST_FIELDS else None) for f in FIELDS}
    return redact_trees(({**empty, **common, **row} for row in rows), account_ids=result.account_ids)


def to_ndjson(rows: Sequence[dict[str, Any]]) -> str:
    # ensure_ascii: control characters from log lines leave as \u escapes, as in the Result JSON
    return "".join(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n" for r in rows)


def _item(value: Any) -> str:
    """One value of a cell: on one line, control and invisible characters escaped (a result read back by `report`
    is as untrusted as the account), and never a formula."""
    text = visible(re.sub(r"[\r\n]+", " ", str(value)))
    return "'" + text if text.startswith(FORMULA_START) else text


def _cell(value: Any) -> str:
    if value is None:
        return ""
    # each item of a list on its own: a spreadsheet that splits the cell on `;` would run `=…` in the second one
    return ";".join(_item(v) for v in value) if isinstance(value, list) else _item(value)


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """RFC 4180 CSV with a header row; lists joined by `;`; formula-starting cells and list items prefixed with `'`;
    control characters, line separators and invisible characters escaped as in every other output."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(FIELDS)
    for row in rows:
        writer.writerow([_cell(row[f]) for f in FIELDS])
    return buffer.getvalue()
