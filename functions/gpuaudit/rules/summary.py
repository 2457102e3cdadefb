"""The answer's summary prose, built from what was judged: the headline and its confidence (the few worst nodes
named, the rest counted; readiness; coverage; storage) and the cluster-state lines (groups, nodes not Running, file
systems, deep health checks, HyperPod recovery)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Literal

from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import Branch, Check, Readiness, Verdict, readiness_reasons
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.context import Judged
from gpuaudit.rules.node_state import deep_health_checks
from gpuaudit.rules.storage import SUSTAINED_MINUTES
from gpuaudit.rules.storage_decision import maintenance_in_window


def storage_summary(evidence: Evidence, fs_id: str) -> str:
    """One named file system's saturation, quoted as reported (RULES §0.6)."""
    if evidence.fsx_metrics is None:
        return "saturation metrics not read (see visibility gaps)"
    peaks = [m for m in evidence.fsx_metrics if m.file_system_id == fs_id and m.datapoints]
    if not peaks:
        return "no AWS/FSx saturation datapoints in the window"
    saturated = [m for m in peaks if m.minutes_at_or_above_90 >= SUSTAINED_MINUTES]
    near = [m for m in peaks if (m.peak or 0.0) >= 90.0]  # RULES §8 C's bar, as rules/storage.py
    shown = saturated or near or [max(peaks, key=lambda m: m.peak or 0.0)]
    # a peak at or above 90 % for less than 5 minutes is not flagged but is no "not saturated" either: the same words
    # as branch C's row (RULES §8 C)
    words = ("saturated" if saturated else f"near saturation, not for {SUSTAINED_MINUTES}+ min" if near
             else "not saturated, highest")
    return f"{words}: " + "; ".join(f"{m.metric} {m.dimensions} Maximum {m.peak} % ({m.minutes_at_or_above_90} min "
                                    "≥ 90 %)" for m in shown)


def file_system_lines(evidence: Evidence) -> list[str]:
    """`--filesystem`: each named FSx for Lustre file system's details, maintenance window and saturation."""
    lines = []
    for f in evidence.file_systems or []:
        if f.file_system_id not in evidence.named_file_systems:
            continue
        maintenance = maintenance_in_window(f.weekly_maintenance, evidence.window.start, evidence.window.end)
        kind = (f"{f.file_system_type}, {f.deployment_type or 'no deployment type'}, "
                f"{f.storage_type or 'no storage type'}")
        lines.append(f"file system {f.file_system_id} ({kind}): weekly maintenance "
                     f"{f.weekly_maintenance or 'not returned'} (UTC, day 1 = Monday)"
                     + (f", starting {iso(maintenance)} within the audit window" if maintenance else "")
                     + f"; {storage_summary(evidence, f.file_system_id)}")
    return lines


def cluster_state(evidence: Evidence) -> list[str]:
    c = evidence.cluster
    # an Xid watch audit: first, which nodes it judges and why (issue #51), or why it is the whole cluster's
    lines = [evidence.node_scope.said] if evidence.node_scope else []
    lines += file_system_lines(evidence)
    for g in c.instance_groups:
        if g.current_count is None:
            continue
        extra = ""
        if g.on_start_deep_health_checks or c.kind.startswith("hyperpod"):
            extra = f", OnStartDeepHealthChecks {g.on_start_deep_health_checks or '[] (none)'}"
        if g.current_image_id and g.desired_image_id and g.current_image_id != g.desired_image_id:
            extra += f", image update pending ({g.current_image_id} → {g.desired_image_id})"
        lines.append(f"group `{g.name}` ({g.instance_type}, {g.node_role}): CurrentCount {g.current_count}, "
                     f"TargetCount {g.target_count}{extra}")
    not_running = [f"{n.instance_id} ({n.status}{': ' + n.status_message if n.status_message else ''})"
                   for n in evidence.nodes if n.status not in ("Running", "running")]
    complete = not any(g.scope == "node-list" for g in evidence.gaps)
    listed = ", ".join(not_running) if not_running else "none"
    lines.append(f"nodes not Running: {listed}" + ("" if complete else " among the nodes listed (the node list is "
                                                                      "incomplete: see visibility gaps)"))
    lines += [f"deep health check: {run.text()}" for run in deep_health_checks(evidence)]  # RULES §8 A thresholds
    if c.kind.startswith("hyperpod"):
        recovery = c.node_recovery or "not returned"
        meaning = ("HyperPod reboots or replaces a node it finds faulty" if recovery == "Automatic" else
                   "nothing replaces a faulty node automatically")
        lines.append(f"NodeRecovery: {recovery} — {meaning}; a job resumes only with checkpoints plus auto-resume "
                     "(`srun --auto-resume=1` on HyperPod Slurm)")
        lines.append(f"NodeProvisioningMode: {c.node_provisioning_mode or 'not set (ListClusterEvents unavailable)'}")
    return lines


# The headline feeds alerts and the findings summary: at any fleet size it names the few worst nodes and counts
# the rest (the report lists every node).
HEADLINE_NODES = 5
VERDICT_WEIGHT: dict[Verdict, int] = {"REPLACE": 0, "REBOOT": 1, "MONITOR": 2, "LEAVE ALONE": 3}


def named(items: list[str], sep: str = ", ") -> str:
    """All of a short list; the first HEADLINE_NODES of a long one and how many more the report holds."""
    if len(items) <= HEADLINE_NODES:
        return sep.join(items)
    return (f"{len(items)} nodes, first {sep.join(items[:HEADLINE_NODES])} (+{len(items) - HEADLINE_NODES} more in "
            "the report)")


def headline_for(j: Judged, branch_headline: str | None, ready: Readiness | None,
                 checks: Sequence[Check] = ()) -> tuple[str, Literal["High", "Medium", "Low"]]:
    nodes = j.nodes
    accelerated = [n for n in nodes if n.gpu_count != 0]
    counts: dict[str, int] = defaultdict(int)
    for n in accelerated:
        counts[n.xid_status] += 1
    coverage = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    signalled = sorted((n for n in nodes if n.verdict and n.verdict != "NOT OBSERVABLE"),
                       key=lambda n: VERDICT_WEIGHT[n.verdict or "LEAVE ALONE"])
    verdicts = [f"{n.instance_id} {n.verdict}" for n in signalled]
    blind = [n.instance_id for n in accelerated if n.xid_status == "Not observable"]
    partial = any(g.scope == "node-list" for g in j.evidence.gaps)
    if branch_headline:
        head = branch_headline if branch_headline.rstrip().endswith((".", "!", "?")) else branch_headline.rstrip() + "."
    elif ready is not None:
        # RULES §10: the answer names the checks that make it (`Ready: No — FAIL P1, P6; RISK P3.`)
        why = readiness_reasons((c.id, c.result) for c in checks)
        head = f"Ready: {ready}" + (f" — {why}." if why else ".")
    elif verdicts:
        by_verdict = Counter(n.verdict for n in signalled)
        tally = ", ".join(f"{by_verdict[v]} {v}" for v in VERDICT_WEIGHT if by_verdict[v])
        head = (f"GPU signals found: {'; '.join(verdicts)}." if len(verdicts) <= HEADLINE_NODES else
                f"GPU signals found on {len(verdicts)} nodes ({tally}): {named(verdicts, '; ')}.")
    elif blind:
        head = f"GPU errors cannot be ruled out: coverage Not observable on {named(blind)}."
    elif not accelerated:
        head = "No GPU node was audited (see visibility gaps): no claim about GPU errors is made."
    elif partial:
        head = "No GPU errors on the nodes found, but the node list is incomplete: nodes it did not return were not " \
               "audited."
    else:
        head = "No GPU errors in the window, on proven coverage."
    head += f" Coverage of {len(accelerated)} GPU node(s): {coverage or 'none'}."
    named_fs = [f.file_system_id for f in j.evidence.file_systems or []
                if f.file_system_id in j.evidence.named_file_systems]
    if named_fs:
        head += " Storage: " + "; ".join(f"{fs} {storage_summary(j.evidence, fs)}" for fs in named_fs) + "."
    if partial and (branch_headline or ready is not None or verdicts or blind):
        head += " The node list is incomplete (see visibility gaps)."
    return head, confidence_for(j)[0]


Confidence = Literal["High", "Medium", "Low"]


def confidence_for(j: Judged, branches: Sequence[Branch] | None = None) -> tuple[Confidence, str]:
    """The answer's confidence and its basis in words (RULES §11). From the coverage and the reads; with the branches of
    an incident, High also needs a Proven root cause with nothing competing (RULES §8)."""
    accelerated = [n for n in j.nodes if n.gpu_count != 0]
    blind = sum(1 for n in accelerated if n.xid_status == "Not observable")
    unread = [g for g in j.evidence.gaps if g.scope != "cache"]  # a cache not kept left nothing unread
    partial = any(g.scope == "node-list" for g in j.evidence.gaps)
    by_status = Counter(n.xid_status for n in accelerated)
    said = [", ".join(f"{count} of {len(accelerated)} GPU node(s) {status}"
                      for status, count in sorted(by_status.items()))] if accelerated else []
    said.append(f"{len(unread)} read(s) failed or not made (see visibility gaps)" if unread else "every source read")
    confidence: Confidence
    if not accelerated or partial:
        confidence = "Low"
        said.insert(0, "no GPU node audited" if not accelerated else "the node list is incomplete")
    elif not blind and not unread:
        confidence = "High"
    elif blind < len(accelerated):
        confidence = "Medium"
    else:
        confidence = "Low"
    if branches is not None:
        root = [b for b in branches if b.status == "Root cause" and b.label == "Proven"]
        competing = [b for b in branches if b.status == "Contributing"]
        if not root:
            said.append("no Proven root cause (a cause is Proven only on the affected node, before the failure, with "
                        "nothing competing)")
        elif competing:
            said.append(f"root cause branch {root[0].branch} Proven, but branch(es) "
                        f"{', '.join(b.branch for b in competing)} also hold evidence")
        else:
            said.append(f"root cause branch {root[0].branch} Proven, nothing competing")
        if (not root or competing) and confidence == "High":
            confidence = "Medium"
    return confidence, "; ".join(said)
