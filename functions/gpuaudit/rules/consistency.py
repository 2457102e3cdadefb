"""The auditor checks its own result before emitting it (RULES §11).

Two kinds of judgement, both run by `judge` last, so the report only renders what they decided:
* repairs: a claim that is merely under-stated (a verdict with no evidence, an unlabelled hypothesis) is
  fixed or downgraded and said so;
* invariants: named properties every Result must have. A broken invariant is a bug: the Result says so
  plainly (self-check FAILED, which claims, why), the alert leads with it, and the test suite fails on it
  (tests/conftest.py turns any broken invariant into a test failure).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuaudit.domain.streams import (
    HMA_PREFIX,
    HYPERPOD_NODE_STREAM,
    PCLUSTER_STREAM,
    is_hma_group,
    is_pcluster_group,
)
from gpuaudit.domain.timing import TIMELINE_MARGIN
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import NodeResult, Result
from gpuaudit.rules.host_events import a_signals, host_events
from gpuaudit.rules.node_verdict import agent_live
from gpuaudit.rules.straggler import stragglers

HARDWARE_WORDS = re.compile(r"(?i)(?<!no )(?<!not a )hardware (error|fault|failure)")
NO_ERRORS = "No GPU errors"


def _gpu_nodes(result: Result) -> list[NodeResult]:
    return [n for n in result.nodes if n.gpu_count != 0 and n.role in ("compute", "unknown")]


def claims_rest_on_reads(result: Result, evidence: Evidence) -> list[str]:
    """`Ruled out`, `PASS`, `Measured`, `No HMA detections`, `LEAVE ALONE` only on inputs that were read."""
    broken = []
    partial = any(g.scope == "node-list" for g in evidence.gaps)
    gpu = _gpu_nodes(result)
    for b in result.branches:
        if b.status != "Ruled out":
            continue
        if b.branch in ("A", "F") and (partial or not gpu):
            broken.append(f"branch {b.branch} Ruled out over an incomplete or empty node list")
        if b.branch in ("A", "F") and any(n.xid_status == "Not observable" for n in gpu):
            broken.append(f"branch {b.branch} Ruled out while a GPU node's coverage is Not observable")
        if b.branch == "B" and evidence.capacity_reservations is None:
            broken.append("branch B Ruled out without capacity reservations read")
        if b.branch == "E" and (evidence.cloudtrail is None or not evidence.cloudtrail_complete):
            broken.append("branch E Ruled out without every CloudTrail change event read")
    capacity_checks = {"P1", "P10"}
    for c in result.checks:
        if c.result == "PASS" and c.id in capacity_checks and evidence.capacity_reservations is None:
            broken.append(f"{c.id} PASS without capacity reservations read")
    for n in result.nodes:
        rows = [r.status for r in n.coverage]
        if n.xid_status == "Measured" and "Measured" not in rows:
            broken.append(f"{n.instance_id} Measured with no Measured coverage row")
        if n.xid_status == "No HMA detections" and evidence.hma_streams is None:
            broken.append(f"{n.instance_id} No HMA detections although the HMA streams were not listed")
        if n.verdict == "LEAVE ALONE" and n.xid_status == "Not observable" and not agent_live(
                n.instance_id, evidence, result.window.start, result.window.end):
            # RULES §7 precedence: only the node's own live health-agent stream lets LEAVE ALONE stand on a gap
            broken.append(f"{n.instance_id} LEAVE ALONE on Not observable coverage with no live health-agent stream")
    return broken


def _hardware_signal(n: NodeResult) -> bool:
    """A hardware-class row of the node's GPU errors. A 154 restates the action of the Xid it summarizes (RULES §6
    rule 154): beside another Xid, that Xid's class says whether the grounds are hardware (a GSP fault recurring is
    driver/firmware); alone, the 154 is the signal."""
    others = any(e.code != 154 for e in n.gpu_errors)
    return any(e.class_ == "hardware" and (e.code != 154 or not others) for e in n.gpu_errors)


def no_ruled_out_beside_a_signal(result: Result, evidence: Evidence) -> list[str]:
    """A branch is never Ruled out while a node carries a signal of that branch's class, from any source."""
    by = {b.branch: b.status for b in result.branches}
    broken = []
    gpu = _gpu_nodes(result)
    if by.get("A") == "Ruled out":
        hardware = [n.instance_id for n in gpu if _hardware_signal(n)]
        failed = [n.instance_id for n in gpu if n.status == "Failure"]
        impaired = [s.instance_id for s in evidence.instance_status or []
                    if "impaired" in (s.system_status, s.instance_status)]
        impaired += [e.resource for e in a_signals(host_events(evidence, {n.instance_id for n in gpu}),
                                                   evidence.window.start - TIMELINE_MARGIN,
                                                   evidence.window.end + TIMELINE_MARGIN)
                     if e.resource not in impaired]
        if hardware or failed or impaired:
            broken.append("branch A Ruled out beside a hardware-class signal on "
                          + ", ".join(hardware + failed + impaired))
    if by.get("F") == "Ruled out":
        app = [n.instance_id for n in gpu if any(e.class_ == "application" for e in n.gpu_errors)]
        if app:
            broken.append("branch F Ruled out beside an application-class Xid on " + ", ".join(app))
    return broken


def one_story(result: Result, evidence: Evidence) -> list[str]:
    """Headline, node verdicts, the GPU errors table and the branch table never disagree."""
    broken = []
    with_errors = [n.instance_id for n in result.nodes if n.gpu_errors]
    if NO_ERRORS in result.headline and with_errors:
        broken.append("headline says no GPU errors while the GPU errors table lists " + ", ".join(with_errors))
    # a persisting straggler GPU (RULES §8) is a REBOOT on CWAgent metrics, which hold no Xid row
    straggling = {s.instance_id for s in stragglers(evidence) if s.persists}
    for n in result.nodes:
        if n.verdict in ("REPLACE", "REBOOT") and not n.gpu_errors and not (
                n.verdict == "REBOOT" and n.instance_id in straggling):
            broken.append(f"{n.instance_id} {n.verdict} with no row in the GPU errors table")
    # REPLACE/REBOOT on hardware grounds; a driver-config code (e.g. Xid 151) reboots without being hardware
    hard = [n for n in result.nodes if n.verdict in ("REPLACE", "REBOOT") and _hardware_signal(n)]
    by = {b.branch: b for b in result.branches}
    if "A" in by and by["A"].status == "Root cause" and not any(n.verdict in ("REPLACE", "REBOOT")
                                                                  for n in result.nodes):
        broken.append("branch A Root cause with no REPLACE/REBOOT node verdict")
    if "A" in by and hard and by["A"].status in ("Ruled out", "Not assessed"):
        broken.append(f"branch A {by['A'].status} beside REPLACE/REBOOT on " + ", ".join(n.instance_id for n in hard))
    for b in result.branches:
        if b.status == "Root cause" and b.label != "Proven":
            broken.append(f"branch {b.branch} Root cause not labelled Proven")
    return broken


def no_node_dropped(result: Result, evidence: Evidence) -> list[str]:
    """The node list is never smaller than the inventory plus the nodes the cluster's own streams name, within the
    audit's scope: an audit narrowed to some nodes (an Xid watch audit, `Evidence.node_scope`) lists every one of
    those."""
    listed = {n.instance_id for n in result.nodes}
    expected = {n.instance_id for n in evidence.nodes}
    cluster = evidence.cluster
    keys = [*((a.log_group, a.log_stream) for a in evidence.stream_activity),
            *((s.log_group, s.log_stream) for s in evidence.listed_streams)]
    for group, stream in keys:
        if cluster.kind == "parallelcluster" and is_pcluster_group(group, cluster.name):
            match = PCLUSTER_STREAM.match(stream)
        elif cluster.kind != "parallelcluster" and is_hma_group(group, cluster.name):
            match = HYPERPOD_NODE_STREAM.match(stream)
        else:
            match = None
        if match:
            expected.add(match["iid"])
    narrowed = evidence.node_scope.narrowed_to if evidence.node_scope else None
    if narrowed is not None:
        expected &= set(narrowed)
    missing = sorted(expected - listed)
    return [f"node(s) read but missing from the result: {', '.join(missing)}"] if missing else []


INVARIANTS: dict[str, Callable[[Result, Evidence], list[str]]] = {
    "claims rest on reads": claims_rest_on_reads,
    "no Ruled out beside a signal": no_ruled_out_beside_a_signal,
    "one story": one_story,
    "no node dropped": no_node_dropped,
}


def broken_invariants(result: Result, evidence: Evidence) -> list[str]:
    return [f"{name}: {detail}" for name, check in INVARIANTS.items() for detail in check(result, evidence)]


def check_consistency(result: Result, evidence: Evidence) -> Result:
    result = _repair(result)
    broken = broken_invariants(result, evidence)
    if broken:
        outcome = (f"Self-check: FAILED — {len(broken)} invariant(s) broken, this result contradicts itself or claims "
                   "more than was read (a bug in gpuaudit; trust the visibility gaps over the claims): "
                   + "; ".join(broken) + ". " + result.self_check)
        return result.model_copy(update={"self_check": outcome, "invariants_broken": broken})
    return result


def _repair(result: Result) -> Result:
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
