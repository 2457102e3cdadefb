"""The auditor checks its own result before emitting it (RULES §11): a claim that breaks a
rule is fixed or downgraded, never emitted as is, and the outcome is one line of the report.

Judgement, so a rule: `judge` ends with it, and the report only renders what it decided."""

from __future__ import annotations

import re

from gpuaudit.domain.streams import HMA_PREFIX
from gpuaudit.model.result import Result

HARDWARE_WORDS = re.compile(r"(?i)(?<!no )(?<!not a )hardware (error|fault|failure)")


def check_consistency(result: Result) -> Result:
    fixes: list[str] = []
    nodes = []
    for node in result.nodes:
        update: dict[str, object] = {}
        # Every "no errors" rests on a Measured node: an unproven GPU node is NOT OBSERVABLE, never clean.
        if node.xid_status == "Not observable" and node.verdict is None and (node.gpu_count or 0) != 0:
            update["verdict"] = "NOT OBSERVABLE"
            update["verdict_evidence"] = "coverage could not be proven for this node; check the node directly"
            fixes.append(f"{node.instance_id}: no-verdict on an unproven node downgraded to NOT OBSERVABLE")
        if (update.get("verdict") or node.verdict) and not (update.get("verdict_evidence") or node.verdict_evidence):
            update["verdict_evidence"] = "verdict without stated evidence: treat as unverified"
            fixes.append(f"{node.instance_id}: verdict had no evidence")
        rows = []
        for row in node.coverage:
            if row.source_kind == "hma" and row.log_stream and not row.log_stream.startswith(HMA_PREFIX):
                fixes.append(f"{node.instance_id}: HMA row named a non-HMA stream")
                row = row.model_copy(update={"status": "Not observable"})
            if row.status == "Not observable" and not row.note and not row.empty_hours:
                row = row.model_copy(update={"note": "not observable: check the node directly (`dmesg -T | grep -i "
                                                      "nvrm`) and fix log shipping"})
                fixes.append(f"{node.instance_id}: absent signal lacked what to collect")
            rows.append(row)
        update["coverage"] = rows
        nodes.append(node.model_copy(update=update))
    branches = []
    for b in result.branches:
        if b.status == "Root cause" and b.label != "Proven":
            fixes.append(f"branch {b.branch}: unproven root cause downgraded to UNVERIFIED")
            b = b.model_copy(update={"status": "UNVERIFIED", "label": "Hypothesis (to validate)"})
        if b.status == "UNVERIFIED" and b.label is None:
            b = b.model_copy(update={"label": "Hypothesis (to validate)"})
            fixes.append(f"branch {b.branch}: unlabelled cause labelled Hypothesis")
        branches.append(b)
    headline = result.headline
    hardware_verdict = any(n.verdict in ("REPLACE", "REBOOT") for n in nodes)
    if HARDWARE_WORDS.search(headline) and not hardware_verdict:
        headline = HARDWARE_WORDS.sub("GPU signal", headline)
        fixes.append("headline named hardware without a REPLACE/REBOOT verdict")
    if not headline:
        headline = "No verdict could be formed: see visibility gaps."
        fixes.append("result had no headline")
    if not result.calls:
        fixes.append("no AWS call was recorded: every number is unverified")
    outcome = ("Self-check: passed — every claim rests on evidence read in this run" if not fixes else
               f"Self-check: {len(fixes)} claim(s) fixed or downgraded before emitting — " + "; ".join(fixes))
    return result.model_copy(update={"nodes": nodes, "branches": branches, "headline": headline,
                                     "self_check": outcome})
