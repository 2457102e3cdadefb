"""Incident questions answered beside the branches (RULES §8): why a failed node was not replaced, whether the
reserved GPUs were used, and what a hang with idle GPUs can and cannot be blamed on.

Each finding checks its steps in a fixed order and shows every one: the step that decided the answer with the
evidence it read (API field names as the API returns them), the others as cleared, not checked (with the call that
would settle it) or not observable (with what to collect). Pure: no AWS, no clock.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gpuaudit.domain.capacity import DEFAULT_RUN_HOURS, cluster_reservations
from gpuaudit.model.result import Branch, CauseLabel, Finding, FindingStep, FindingStepStatus, GapNodes
from gpuaudit.model.timeutil import iso
from gpuaudit.rules import actions as action_rules
from gpuaudit.rules.capacity import affected_groups, capacity_step, subnet_step
from gpuaudit.rules.context import Context, GpuGroup, Plan, gpu_groups, id_list
from gpuaudit.rules.fabric import NCCL_COMMAND, deep_health_step, sg_step
from gpuaudit.rules.onset import NCCL_HANG
from gpuaudit.rules.steps import all_lines, line_at, merge, quote, step

if TYPE_CHECKING:
    from gpuaudit.rules.context import Judged
    from gpuaudit.rules.node_lines import ParsedLine

FAILED_LINE = re.compile(r"(?i)error|fail")
OBSERVABILITY_ADDON = ("the HyperPod observability add-on (Amazon Managed Service for Prometheus and Grafana, "
                       "DCGM exporter: `DCGM_FI_DEV_GPU_UTIL` per node)")
IDLE_PERCENT = 5.0
HEADLINE_ANSWER = 300  # characters of a finding's answer quoted in the headline; the finding holds it whole


def assess(j: Judged, branches: Sequence[Branch]) -> list[Finding]:
    ctx = Context(j, Plan(j.evidence.now, DEFAULT_RUN_HOURS, False, None), tuple(gpu_groups(j.evidence)))
    found = [why_no_replacement(ctx), idle_reserved_gpus(ctx), hang_with_idle_gpus(ctx, branches)]
    return [f for f in found if f is not None]


def headline_with(headline: str, findings: Sequence[Finding]) -> str:
    """A blocked replacement read from the API or the replacement's own log is the stated cause of the question
    'why was it not replaced' (RULES §0.5: Proven), not `Root cause: Not observable`; beside a branch cause it is
    added, never substituted."""
    blocked = next((f for f in findings if f.id == "why-no-replacement" and f.label), None)
    if blocked is None:
        return headline
    answer = blocked.answer if len(blocked.answer) <= HEADLINE_ANSWER else blocked.answer[:HEADLINE_ANSWER] + "…"
    stated = f"{'Recovery blocked (Proven)' if blocked.label == 'Proven' else 'Recovery blocked (Hypothesis)'}: " \
             f"{answer} (see the finding)."
    if headline.startswith("Root cause: Not observable"):
        return f"{stated} Cause of the node's failure: Not observable (see visibility gaps)."
    return f"{headline.rstrip('.')}. {stated}"


def _lifecycle_step(ctx: Context, groups: list[GpuGroup]) -> FindingStep:
    """The replacement's own `LifecycleConfig/<group>/<instance-id>` stream: its lifecycle script failing keeps the
    new instance out of the group (RULES §5.3, §8 A)."""
    name = "the replacement's lifecycle script"
    ev = ctx.ev
    parts: list[tuple[FindingStepStatus, str]] = []
    read = ev.gpu_lines_read(ev.hma_log_group) if ev.hma_log_group else False
    for g in groups:
        prefix = f"LifecycleConfig/{g.name}/"
        failed = [p for p in all_lines(ctx.j) if p.line.log_stream.startswith(prefix)
                  and FAILED_LINE.search(p.line.message)]
        streams = sorted({a.log_stream for a in ev.stream_activity if a.log_stream.startswith(prefix)})
        if failed:
            first = failed[0]
            iid = first.line.log_stream.removeprefix(prefix)
            known = {n.instance_id: n for n in ev.nodes}
            listed = iid in known and known[iid].discovered_by == "api"
            who = (f"`{iid}` (status {known[iid].status})" if listed else
                   f"`{iid}`, not in ListClusterNodes (a replacement that never joined the group)")
            parts.append(("Blocked", f"{g.label}: lifecycle script of {who} failed — {quote(first.line.message)} in "
                                     f"{line_at(first)}" + (f" (+{len(failed) - 1} more failing line(s))"
                                                           if len(failed) > 1 else "")))
        elif not read:
            parts.append(("Not checked", f"{g.label}: the cluster log group's lifecycle lines were not read — "
                                         f"`aws logs filter-log-events --log-group-name <cluster log group> "
                                         f"--log-stream-name-prefix {prefix}`"))
        elif streams:
            parts.append(("Cleared", f"{g.label}: " + ", ".join(f"`{s}`" for s in streams) + " read in `"
                                     f"{ev.hma_log_group}`: no ERROR or FAIL line"))
        else:
            parts.append(("Not checked", f"{g.label}: no `{prefix}<instance-id>` stream in `{ev.hma_log_group}` in the "
                                         "window — no replacement instance ran its lifecycle script"))
    return merge(name, parts)


def _count_step(groups: list[GpuGroup]) -> FindingStep:
    parts: list[tuple[FindingStepStatus, str]] = []
    for g in groups:
        grp = g.group
        if grp is None or grp.current_count is None or grp.target_count is None:
            parts.append(("Not checked", f"{g.label}: DescribeCluster returned no CurrentCount/TargetCount"))
        elif grp.current_count < grp.target_count:
            parts.append(("Blocked", f"{g.label}: CurrentCount {grp.current_count} below TargetCount "
                                     f"{grp.target_count} (DescribeCluster): "
                                     f"{grp.target_count - grp.current_count} node(s) not replaced"))
        else:
            parts.append(("Cleared", f"{g.label}: CurrentCount {grp.current_count}, TargetCount {grp.target_count}"))
    return merge("CurrentCount against TargetCount", parts)


def _recovery_step(ctx: Context) -> FindingStep:
    recovery = ctx.ev.cluster.node_recovery
    if recovery is None:
        return step("NodeRecovery", "Not checked", "DescribeCluster returned no NodeRecovery")
    if recovery == "None":
        return step("NodeRecovery", "Blocked", "NodeRecovery None (DescribeCluster): nothing replaces a faulty node "
                                                "automatically")
    return step("NodeRecovery", "Cleared", f"NodeRecovery {recovery} (DescribeCluster)")


def why_no_replacement(ctx: Context) -> Finding | None:
    """RULES §8 A: a node stuck in Failure/Pending with CurrentCount < TargetCount means replacement is blocked.
    Checked in order: capacity, the replacement's lifecycle script, the counts, subnet IPs, NodeRecovery."""
    if not ctx.hyperpod:
        return None
    groups = affected_groups(ctx)
    if not groups:
        return None
    steps = [capacity_step(ctx, groups), _lifecycle_step(ctx, groups), _count_step(groups),
             subnet_step(ctx, groups), _recovery_step(ctx)]
    causes = [s for s in steps if s.status == "Blocked" and s.name != "CurrentCount against TargetCount"]
    labels = ", ".join(g.label for g in groups)
    label: CauseLabel | None
    if causes:
        lead = causes[0]
        # Proven: a value read from the API or the replacement's own log, with no other blocker beside it.
        label = "Proven" if len(causes) == 1 else "Hypothesis (to validate)"
        others = f" (also blocked: {', '.join(s.name for s in causes[1:])})" if len(causes) > 1 else ""
        answer = f"Replacement blocked by {lead.name}: {lead.evidence}{others}"
        action = RECOVERY_ACTIONS[lead.name]
    else:
        label = None
        unread = [s.name for s in steps if s.status == "Not checked"]
        short = steps[2].status == "Blocked"
        answer = (("Replacement not completed (" + steps[2].evidence + ") and " if short else f"For {labels}: ")
                  + "no blocker found among the steps read"
                  + (f"; not checked: {', '.join(unread)}" if unread else ""))
        action = ("Read the cluster events (`aws sagemaker list-cluster-events --cluster-name "
                  f"{ctx.ev.cluster.name}`) and `aws sagemaker describe-cluster-node` of the failed node")
    return Finding(id="why-no-replacement", question="A node failed and was not replaced: why?", answer=answer,
                   label=label, steps=steps, action=action)


RECOVERY_ACTIONS = {
    "capacity to replace into": "Free or add capacity the group can launch into (extend the Capacity Block or "
                                "training plan, or move the group to capacity with a spare), then "
                                "`aws sagemaker batch-replace-cluster-nodes`",
    "the replacement's lifecycle script": "Fix the lifecycle script (the group's LifeCycleConfig OnCreate script "
                                          "under SourceS3Uri) where its `LifecycleConfig/<group>/<instance-id>` "
                                          "stream shows the failure; HyperPod retries the replacement once it succeeds",
    "free IPs in the cluster's subnets": "Free IPs in the cluster's subnets or add a subnet with room for one node "
                                         "to the cluster's VpcConfig",
    "NodeRecovery": "Turn automatic recovery on (`aws sagemaker update-cluster --node-recovery Automatic`) and "
                    "replace the failed node (`aws sagemaker batch-replace-cluster-nodes`)",
}


# -- idle reserved GPUs (RULES §8) ------------------------------------------------------------------------------
def idle_reserved_gpus(ctx: Context) -> Finding | None:
    """Hours in the window where every GPU of a reserved node stayed below 5 % `GPUPowerUtilization` (a percent,
    quoted as reported); a missing datapoint is counted missing, never idle or busy."""
    ev = ctx.ev
    question = "Are the reserved GPUs being used?"
    if not ctx.groups:
        return None
    if ctx.hyperpod:
        held = [g for g in ctx.groups if (g.group is not None and g.group.training_plan_arn)
                or cluster_reservations(ev, g.instance_type, g.node_ids)]
        if not held:
            return None
        nodes = id_list(i for g in held for i in g.node_ids)
        return Finding(id="idle-reserved-gpus", question=question,
                       answer=f"Not observable: HyperPod exports no system metrics to CloudWatch, so GPU activity of "
                              f"{nodes} cannot be read there",
                       steps=[step("GPU activity", "Not observable", f"GPUPowerUtilization is not published for "
                                                                      f"HyperPod nodes; collect it with "
                                                                      f"{OBSERVABILITY_ADDON}")],
                       action=f"Install {OBSERVABILITY_ADDON}")
    if ev.capacity_reservations is None:
        return Finding(id="idle-reserved-gpus", question=question, answer="Not checked: capacity reservations not read",
                       action="Re-run with `ec2:DescribeCapacityReservations`")
    reserved = {n.instance_id: cluster_reservations(ev, n.instance_type, [n.instance_id])
                for g in ctx.groups for n in g.nodes if n.instance_type}
    reserved = {i: rs for i, rs in reserved.items() if rs}
    if not reserved:
        return None
    if ev.gpu_activity is None:
        return Finding(id="idle-reserved-gpus", question=question,
                       answer="Not checked: GPUPowerUtilization not read — `aws cloudwatch list-metrics --namespace "
                              "AWS/EC2 --metric-name GPUPowerUtilization` and `get-metric-data`",
                       action="Re-run with read access to CloudWatch metrics")
    activity = {a.instance_id: a for a in ev.gpu_activity}
    steps = []
    per_reservation: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # idle, busy, missing, idle GPU-h
    for iid, reservations in sorted(reserved.items()):
        a = activity.get(iid)
        names = ", ".join(f"`{r.reservation_id}`" for r in reservations)
        if a is None or not a.gpus:
            steps.append(step(f"`{iid}`", "Not observable",
                               f"on {names}: no AWS/EC2 GPUPowerUtilization series per GpuId (ListMetrics) — publish "
                               "GPU metrics (CloudWatch agent `nvidia_gpu`)"))
            continue
        missing = max(a.hours_in_span - a.idle_hours - a.busy_hours, 0)
        gpus = f"GpuId {', '.join(a.gpu_ids)}" if a.gpu_ids else f"{a.gpus} GPUs"
        steps.append(step(f"`{iid}`", "Measured" if a.hours_observed else "Not observable",
                           f"on {names}, {gpus}: {a.idle_hours} h idle, {a.busy_hours} h busy, {missing} h missing "
                           f"of {a.hours_in_span} h ({iso(a.start)} → {iso(a.end)})"
                           + (f"; Not observable (no datapoint, neither idle nor busy) in UTC hour(s) "
                              f"{utc_hours(a.missing_hours)}" if a.missing_hours else "")))
        for r in reservations[:1]:  # a node is counted against the one reservation it runs on
            tally = per_reservation[r.reservation_id]
            tally[0] += a.idle_hours
            tally[1] += a.busy_hours
            tally[2] += missing
            tally[3] += a.idle_hours * a.gpus
    idle = sum(t[0] for t in per_reservation.values())
    busy = sum(t[1] for t in per_reservation.values())
    missing = sum(t[2] for t in per_reservation.values())
    by_reservation = "; ".join(f"`{rid}`: {t[0]} idle node-hours ({t[3]} GPU-hours), {t[1]} busy, {t[2]} missing"
                               for rid, t in sorted(per_reservation.items()))
    answer = (f"{idle} idle node-hours on reserved capacity (every GPU below {IDLE_PERCENT:g} % GPUPowerUtilization, "
              f"values as reported in percent), {busy} busy, {missing} missing (no datapoint: neither idle nor busy)"
              + (f" — {by_reservation}" if by_reservation else ""))
    blind = [s.name for s in steps if s.status == "Not observable"]
    if blind:  # every node by name in the steps; a long list counted (RULES §11)
        named = action_rules.nodes_phrase(blind, [s.name for s in steps], "reserved")
        answer += f"; GPU activity Not observable on {named}"
    return Finding(id="idle-reserved-gpus", question=question, answer=answer, steps=steps,
                   action=("Paid-for capacity sat idle: start the workload, or release the capacity it does not need"
                           if idle else None))


def utc_hours(hours: Sequence[datetime]) -> str:
    """Every hour start, as UTC (RULES §8: missing metric hours are listed by UTC hour, like §4's empty hours)."""
    return ", ".join(iso(h) for h in hours)


def observability_gaps(j: Judged, gap_nodes: list[GapNodes]) -> list[str]:
    """What the incident or pre-flight could not see of GPU activity (RULES §4 other signals, §8 idle reserved
    GPUs): HyperPod's nodes, whose system metrics are not in CloudWatch, and every hour an EC2 node's
    GPUPowerUtilization has no datapoint. Each is a visibility gap with what collects it, never an idle hour."""
    ev = j.evidence
    if ev.mode == "coverage":
        return []
    ctx = Context(j, Plan(ev.now, DEFAULT_RUN_HOURS, False, None), tuple(gpu_groups(ev)))
    if ctx.hyperpod:
        ids = [i for g in ctx.groups for i in g.node_ids]
        if not ctx.groups:
            return []
        return [f"GPU activity Not observable in CloudWatch for the HyperPod nodes {id_list(ids)} (groups "
                f"{', '.join(g.name for g in ctx.groups)}): HyperPod exports no system metrics (no "
                f"GPUPowerUtilization, no CWAgent NVIDIA metrics) — collect it with {OBSERVABILITY_ADDON}"]
    # Nodes missing the same hours are one gap (RULES §11: readable at fleet size); gap_nodes keeps each node.
    alike: dict[tuple[str, int, tuple[datetime, ...]], list[str]] = defaultdict(list)
    for a in ev.gpu_activity or []:
        if a.missing_hours:
            alike[(a.metric, a.hours_in_span, tuple(a.missing_hours))].append(a.instance_id)
    read = [a.instance_id for a in ev.gpu_activity or []]
    out = []
    for (metric, span, missing), ids in alike.items():
        if len(ids) == 1:
            out.append(f"{metric} of `{ids[0]}` has no datapoint in {len(missing)} of {span} UTC hour(s) "
                       f"({utc_hours(missing)}): Not observable then, neither idle nor busy — publish GPU metrics "
                       "(CloudWatch agent `nvidia_gpu`)")
        else:
            out.append(f"{metric} has no datapoint in {len(missing)} of {span} UTC hour(s) ({utc_hour_runs(missing)}) "
                       f"for {action_rules.nodes_phrase(ids, read, 'GPU')}: Not observable then, neither idle nor "
                       "busy — publish GPU metrics (CloudWatch agent `nvidia_gpu`)")
            gap_nodes.append(GapNodes(gap=out[-1], nodes=ids))
    return out


def utc_hour_runs(hours: Sequence[datetime]) -> str:
    """Every hour start as UTC, consecutive ones as one run (`A to B`, both hour starts included)."""
    runs: list[list[datetime]] = []
    for h in sorted(hours):
        if runs and h - runs[-1][-1] == timedelta(hours=1):
            runs[-1].append(h)
        else:
            runs.append([h])
    return ", ".join(iso(r[0]) if len(r) == 1 else f"{iso(r[0])} to {iso(r[-1])}" for r in runs)


# -- a hang with idle GPUs (RULES §8 D layer 4, E) -------------------------------------------------------------
def hang_with_idle_gpus(ctx: Context, branches: Sequence[Branch]) -> Finding | None:
    """NCCL timeouts reported: check the EFA preconditions AWS can see before naming a network cause, and name what
    it cannot see with the command that collects it."""
    timeouts = [p for p in all_lines(ctx.j) if NCCL_HANG.search(p.line.message)]
    if not timeouts:
        return None
    first = timeouts[0]
    steps = [_gpu_activity_step(ctx, first), sg_step(ctx), deep_health_step(ctx), _change_step(branches),
             _nccl_debug_step(ctx)]
    found = [s for s in steps if s.status == "Blocked"]
    label: CauseLabel | None = None
    if found and found[0].name == "EFA security group self-referencing rules":
        label = "Proven"  # RULES §8 D: a missing security-group rule is a proven precondition failure
        answer = f"EFA precondition failure: {found[0].evidence}"
    elif found:
        label = "Hypothesis (to validate)"
        answer = f"Leading hypothesis from {found[0].name}: {found[0].evidence}"
    else:
        answer = ("No network cause is shown by the evidence AWS holds: the deciding evidence (NCCL debug logs"
                  + (", GPU activity" if ctx.hyperpod else "") + ") is not in CloudWatch — collect it (see below)")
    answer = f"NCCL timeout at {iso(first.line.time)} ({line_at(first)}): {answer}"
    return Finding(id="hang-idle-gpus", question="Jobs hang with NCCL timeouts while the GPUs look idle: why?",
                   answer=answer, label=label, steps=steps,
                   action=f"Re-run the job with `{NCCL_COMMAND}` and read the "
                   f"per-rank logs before changing the network")


def _gpu_activity_step(ctx: Context, first: ParsedLine) -> FindingStep:
    name = "GPU activity at the hang"
    if ctx.hyperpod:
        return step(name, "Not observable", f"HyperPod exports no GPU metrics to CloudWatch; collect them with "
                                             f"{OBSERVABILITY_ADDON}")
    activity = ctx.ev.gpu_activity
    if activity is None:
        return step(name, "Not checked", "GPUPowerUtilization not read (read only for nodes on reserved capacity) — "
                                          "`aws cloudwatch get-metric-data`")
    seen = [a for a in activity if a.hours_observed]
    if not seen:
        return step(name, "Not observable", "no GPUPowerUtilization datapoints for the nodes — publish GPU metrics "
                                             "(CloudWatch agent `nvidia_gpu`)")
    return step(name, "Measured", "; ".join(f"`{a.instance_id}`: {a.idle_hours} h idle, {a.busy_hours} h busy of "
                                             f"{a.hours_in_span} h (GPUPowerUtilization, percent)" for a in seen))


def _change_step(branches: Sequence[Branch]) -> FindingStep:
    name = "recent cluster changes"
    e = next((b for b in branches if b.branch == "E"), None)
    if e is None or e.status == "Not assessed":
        return step(name, "Not checked", e.evidence if e else "CloudTrail not read")
    if e.status == "Ruled out":
        return step(name, "Cleared", e.evidence)
    return step(name, "Blocked", e.evidence)


def _nccl_debug_step(ctx: Context) -> FindingStep:
    name = "NCCL debug logs"
    transport = [p for p in all_lines(ctx.j) if "NCCL INFO" in p.line.message]
    if transport:
        return step(name, "Measured", f"{len(transport)} NCCL INFO line(s) read, first in {line_at(transport[0])}")
    return step(name, "Not observable", f"no NCCL INFO line in any source: AWS holds no NCCL debug log; collect with "
                                         f"`{NCCL_COMMAND}`")
