"""From Evidence to Result: the whole judgement of one audit, pure (no AWS, no clock)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING

from gpuaudit.domain.capability import fabric_class
from gpuaudit.domain.markers import FABRIC_MANAGER_STARTED
from gpuaudit.domain.streams import (
    NodeIndex,
    message_node_ids,
    nccl_host_node_ids,
    status_line_node_ids,
    stream_node_ids,
)
from gpuaudit.domain.timing import KERNEL_LOOKBACK, TIMELINE_MARGIN
from gpuaudit.domain.window import padded
from gpuaudit.model.evidence import Evidence, GpuLine, NodeInfo
from gpuaudit.model.result import (
    Branch,
    Call,
    Check,
    ClusterRef,
    Finding,
    GapNodes,
    NodeResult,
    NodeSignals,
    Readiness,
    Result,
    TimelineEntry,
    WindowOut,
)
from gpuaudit.model.timeutil import iso
from gpuaudit.rules import actions as action_rules
from gpuaudit.rules import branches as branch_rules
from gpuaudit.rules import findings as finding_rules
from gpuaudit.rules import preflight as preflight_rules
from gpuaudit.rules import timeline as timeline_rules
from gpuaudit.rules.acted import already_done, replacements
from gpuaudit.rules.bootstrap import BootstrapFailure, bootstrap_failure, host_ip
from gpuaudit.rules.consistency import check_consistency
from gpuaudit.rules.context import JudgeConfig, Judged
from gpuaudit.rules.control_plane import control_gaps, control_logs
from gpuaudit.rules.coverage import StreamIndex, hma_group_live, node_coverage
from gpuaudit.rules.efa_counters import efa_gaps, node_counters, with_efa_counters
from gpuaudit.rules.fabric_manager import fabric_manager_of, with_fabric_manager
from gpuaudit.rules.gpu_count import gpu_count_gaps, with_gpu_count
from gpuaudit.rules.history import Memory, actions_after, audit_id
from gpuaudit.rules.node_lines import ParsedLine, parse_lines
from gpuaudit.rules.node_verdict import DIRECT_CHECK, AgentStreams
from gpuaudit.rules.nodes import assess_node
from gpuaudit.rules.onset import failure_onset, unread_signals
from gpuaudit.rules.reboots import reboot_times, reboots_by_node
from gpuaudit.rules.straggler import with_stragglers
from gpuaudit.rules.summary import cluster_state, confidence_for, headline_for
from gpuaudit.rules.xid_routing import NodeRouting

if TYPE_CHECKING:
    pass


def kernel_streams_read_from(evidence: Evidence, fallback: datetime) -> datetime:
    """Where the kernel-stream read began (its earliest query), else `fallback`: the span a node's kernel lines were
    looked for in (the kernel look-back the collectors planned)."""
    starts = [q.start for q in evidence.queries if q.purpose == "kernel-streams"]
    return min(starts) if starts else fallback


NONE_SEEN = "no reboot or replacement of this node seen; "


def with_replacements(nodes: list[NodeResult], evidence: Evidence) -> list[NodeResult]:
    """HyperPod gives a replaced node a new instance ID (RULES §5.7): a node found only by its streams (no longer
    listed) is named beside the node of the same group that launched next after its last line, as a likely
    replacement (a hypothesis from group and time, said so); its detections still count for the window."""
    notes: dict[str, str] = {}
    replaced = replacements(nodes, evidence)
    for old, r in replaced.items():
        group = next((n.instance_group for n in nodes if n.instance_id == old), None)
        notes[old] = (f"no longer listed by the cluster; likely replaced by {r.new} (group {group or '—'}, launched "
                      f"{iso(r.launched)}, {r.minutes_after} min after this "
                      f"node's last line; matched by group and time)")
        notes[r.new] = f"likely the replacement of {old}, whose detections still count for the window"
    return [n.model_copy(update={"service_action": "; ".join(x for x in (
        notes[n.instance_id], _without_none_seen(n.service_action) if n.instance_id in replaced else n.service_action)
        if x)}) if n.instance_id in notes else n for n in nodes]


def _without_none_seen(action: str | None) -> str | None:
    """A node matched to its replacement was replaced: "no reboot or replacement seen" would contradict that (only the
    CloudTrail/cluster-event reads saw none), so the line keeps the NodeRecovery setting alone."""
    return action.replace(NONE_SEEN, "") if action else action


def service_action(node: NodeInfo, evidence: Evidence,
                   lines: list[ParsedLine]) -> str | None:
    """What HyperPod/ParallelCluster itself did to the node, distinct from the operator's action (RULES §7)."""
    parts: list[str] = []
    # Each distinct judgement of the agent once, at its first detection (a node can be judged application-caused,
    # then flagged for hardware: the later word is what HyperPod acted on).
    for p in lines:
        if p.hma and p.hma.reason:
            did = {"XidUserAppError": "HMA judged it application-caused and took no node action",
                   "XidHardwareFailure": "HMA flagged hardware failure"}.get(p.hma.reason, "HMA detection")
            extra = f"; RepairAction/Recommendation: {p.hma.repair_action or p.hma.recommendation}" \
                if (p.hma.repair_action or p.hma.recommendation) else ""
            said = (f"{did} (reason {p.hma.reason}{', condition ' + p.hma.condition if p.hma.condition else ''}"
                    f"{extra})")
            if not any(x.startswith(said) for x in parts):
                parts.append(f"{said} at {iso(p.line.time)}")
    # A Batch*ClusterNodes call is an API caller's act: the service's own only when an AWS service made it; a user's
    # or a role's call is the operator's (the timeline names it), never what the service itself did.
    operator_calls = False
    for e in evidence.cloudtrail or []:
        if e.event_name.startswith("Batch") and node.instance_id in str(e.request_parameters or {}):
            if (e.username or "").endswith(".amazonaws.com"):
                parts.append(f"{e.event_name} at {iso(e.time)} (CloudTrail, by {e.username})")
            else:
                operator_calls = True
    for ce in evidence.cluster_events or []:
        if ce.instance_id == node.instance_id:
            parts.append(f"cluster event at {iso(ce.time)}: {ce.description}")
    if evidence.cluster.kind.startswith("hyperpod"):
        recovery = evidence.cluster.node_recovery or "unknown"
        if not any("Batch" in p or "cluster event" in p for p in parts):
            # an operator's reboot was seen, so "no reboot seen" would be false: NodeRecovery alone is said
            parts.append(f"{'' if operator_calls else NONE_SEEN}NodeRecovery is {recovery}")
    elif node.discovered_by == "log-streams":
        parts.append("instance no longer returned by DescribeInstances (terminated); found by its log streams")
    return "; ".join(parts) or None


def judge(evidence: Evidence, config: JudgeConfig, generated_at: datetime) -> Result:
    pad = padded(evidence.window, evidence.now)
    index = StreamIndex.build(evidence, evidence.nodes)
    hyperpod = evidence.cluster.kind.startswith("hyperpod")
    hma_live = hma_group_live(evidence, pad) if hyperpod else None
    parsed = parse_lines(evidence.gpu_lines)
    lines_by_node: dict[str, list[ParsedLine]] = defaultdict(list)
    node_index = NodeIndex(evidence.nodes)
    unassigned = []
    for p in parsed:
        # An NCCL line names its own host: a job's stdout gathers every rank's lines in one stream
        owners = (nccl_host_node_ids(p.line.message, node_index) or stream_node_ids(p.line.log_stream, node_index)
                  or status_line_node_ids(p.line.log_stream, p.line.message, node_index)
                  or (message_node_ids(p.line.message, node_index) if p.xid is not None else []))
        for iid in owners:
            lines_by_node[iid].append(p)
        if not owners:
            unassigned.append(p)
    life = kernel_streams_read_from(evidence, pad.start)
    boot_by_node: dict[str, list[GpuLine]] = defaultdict(list)
    for line in evidence.boot_lines:
        for iid in stream_node_ids(line.log_stream, node_index):
            boot_by_node[iid].append(line)
    nodes: list[NodeResult] = []
    routings: dict[str, NodeRouting] = {}
    this_audit = audit_id(evidence, config.asked())
    agents = AgentStreams.of(evidence)
    efa = node_counters(evidence)  # RULES §8 D layer 3, per node (rules/efa_counters.py)
    for node in evidence.nodes:
        coverage = node_coverage(node, evidence, index, pad, life, hma_live)
        lines = lines_by_node.get(node.instance_id, [])
        result, routing = assess_node(node, evidence, coverage, lines, config.xid_overrides,
                                      Memory.of(evidence, node.instance_id, this_audit), agents)
        result = result.model_copy(update={"service_action": service_action(node, evidence, lines),
                                           "signals": boot_signals(result, boot_by_node.get(node.instance_id, []))})
        result = with_efa_counters(result, evidence, efa)
        result, routing = with_fabric_manager(result, routing, fabric_manager_of(
            [p.line for p in lines], boot_by_node.get(node.instance_id, []), fm_expected(evidence, node),
            evidence.window.start - TIMELINE_MARGIN, min(evidence.window.end, evidence.now), result.coverage))
        result, routing = with_gpu_count(result, routing, node, evidence)
        if routing is not None:
            routings[node.instance_id] = routing
        nodes.append(result)
    nodes = with_replacements(nodes, evidence)
    control = control_logs(evidence, pad)
    boot = bootstrap_failure(evidence, evidence.gpu_lines)
    if boot is not None:
        nodes = [bootstrap_verdict(n, node, boot) for n, node in zip(nodes, evidence.nodes, strict=True)]
    judged = Judged(evidence, nodes, routings, lines_by_node, unassigned, control, boot, dict(boot_by_node))
    if evidence.gpu_peers:  # RULES §8 straggler GPU: its label reads the failure's onset
        nodes = judged.nodes = with_stragglers(nodes, evidence, (o.time if (o := failure_onset(judged)) else None))

    node_gaps, gap_nodes = coverage_gaps(judged)
    gaps = [g.prose() for g in evidence.gaps] + control_gaps(control, pad) + node_gaps \
        + finding_rules.observability_gaps(judged, gap_nodes) + gpu_count_gaps(evidence, nodes) \
        + efa_gaps(evidence, nodes)
    groups = action_rules.grouped(evidence, [
        action_rules.NodeAction(n.verdict, n.instance_id, text.replace(n.instance_id, action_rules.NODE),
                                _detail(judged.routings.get(n.instance_id)))
        for n, text in node_action_texts(judged) if n.verdict is not None])
    actions = [g.action for g in groups]
    timeline = build_timeline(judged) if evidence.mode == "incident" else gpu_timeline(judged)
    branches: list[Branch] = []
    branch_headline: str | None = None
    branch_actions: list[str] = []
    checks: list[Check] = []
    ready: Readiness | None = None
    findings: list[Finding] = []
    if evidence.mode == "incident":
        branches, branch_headline, branch_actions = branch_rules.assess(judged)
        findings = finding_rules.assess(judged, branches)
        branch_headline = finding_rules.headline_with(branch_headline, findings)
        branch_actions += [f.action for f in findings if f.action and (f.label or f.id == "idle-reserved-gpus")]
    if evidence.mode == "preflight":
        checks, ready = preflight_rules.assess(judged, config)
        actions += [f"{c.id}: {c.action}" for c in checks if c.action and c.result in ("FAIL", "RISK", "UNVERIFIED")]
    headline, _ = headline_for(judged, branch_headline, ready, checks)
    confidence, confidence_basis = confidence_for(judged, branches if evidence.mode == "incident" else None)
    onset = failure_onset(judged) if evidence.mode == "incident" else None
    resources = sorted({evidence.cluster.name, *(n.instance_id for n in nodes),
                        *(c.log_group for n in nodes for c in n.coverage if c.log_group.startswith("/")),
                        *(r.reservation_id for r in evidence.capacity_reservations or []),
                        *(f.file_system_id for f in evidence.file_systems or [])})
    return check_consistency(with_actions_asked(Result(
        audit_id=this_audit, mode=evidence.mode,
        cluster=ClusterRef(name=evidence.cluster.name, kind=evidence.cluster.kind, region=evidence.cluster.region,
                           arn=evidence.cluster.arn),
        window=WindowOut(start=evidence.window.start, end=evidence.window.end, source=evidence.window.source,
                         padded_start=pad.start, padded_end=pad.end, onset=onset.time if onset else None,
                         onset_source=onset.source if onset else None,
                         onset_unread=unread_signals(evidence) if evidence.mode == "incident" and not onset else None),
        generated_at=generated_at, headline=headline, confidence=confidence, confidence_basis=confidence_basis,
        nodes=nodes, branches=branches,
        checks=checks, findings=findings, ready=ready,
        planned_run=planned_run(evidence, config) if evidence.mode == "preflight" else None,
        timeline=timeline, resources=resources, cluster_state=cluster_state(evidence),
        narrowed_to=evidence.node_scope.narrowed_to if evidence.node_scope else None,
        visibility_gaps=gaps, gap_nodes=gap_nodes, actions=_unique(actions + branch_actions), action_groups=groups,
        config_overrides=[f"Xid {code} class overridden to {klass} by configuration"
                          for code, klass in sorted(config.xid_overrides.items())],
        calls=[Call(service=c.service, operation=c.operation, count=c.count) for c in evidence.calls]), evidence),
        evidence)


def with_actions_asked(result: Result, evidence: Evidence) -> Result:
    """Each node's actions as the history will hold them after this audit (open, or done by it): read from the
    history whichever store holds it; left None with no history read."""
    asked = actions_after(result, evidence, reboots_by_node(evidence))
    if asked is None:
        return result
    return result.model_copy(update={"nodes": [n.model_copy(update={"actions_asked": asked.get(n.instance_id, [])})
                                               for n in result.nodes]})


def bootstrap_verdict(result: NodeResult, node: NodeInfo, boot: BootstrapFailure) -> NodeResult:
    """RULES §7: a node clustermgtd names as a bootstrap failure is a configuration or lifecycle failure —
    LEAVE ALONE when it is Running on proven coverage with no GPU verdict of its own; never REPLACE for it (a
    hardware verdict from its own Xids stands)."""
    ip = host_ip(node.private_dns)
    if ip is None or ip not in boot.failed_ips or result.verdict in ("REPLACE", "REBOOT"):
        return result
    said = (f"clustermgtd lists it as a bootstrap failure node ({boot.where}): a configuration or lifecycle "
            "failure, not hardware; read its `cloud-init-output` / `bootstrap_error_msg` stream for the reason")
    if result.verdict is None and result.xid_status == "Measured" and node.status.lower() == "running":
        return result.model_copy(update={"verdict": "LEAVE ALONE", "verdict_evidence": said})
    return result.model_copy(update={"verdict_evidence": "; ".join(x for x in (result.verdict_evidence, said) if x)})


def fm_expected(evidence: Evidence, node: NodeInfo) -> bool:
    return fabric_class(node.instance_type, evidence.profiles.get(node.instance_type or ""))[1]


def boot_signals(node: NodeResult, boot: list[GpuLine]) -> NodeSignals:
    """Fabric Manager starts at boot: a start line since the node's launch makes it Observable (RULES §2)."""
    if node.signals.fabric_manager == "Not observable" and any(m in g.message for g in boot
                                                               for m in FABRIC_MANAGER_STARTED):
        return node.signals.model_copy(update={"fabric_manager": "Observable"})
    return node.signals


def boot_search_span(evidence: Evidence) -> str:
    """Where the search for boot-time lines began: the boot-lines query, else the GPU-lines window only."""
    boot = [q.start for q in evidence.queries if q.purpose == "boot-lines"]
    if boot:
        return (f"from {iso(min(boot))} (each node's launch, at most {KERNEL_LOOKBACK.days} days before the window) "
                "to the window's end")
    groups = {g for q in evidence.queries for g in q.log_groups}
    window = [q.start for g in groups for q in evidence.gpu_line_reads(g)]
    if window and evidence.mode == "coverage":
        return (f"in the window only (from {iso(min(window))}): a coverage audit does not search boot-time lines; an "
                "incident or pre-flight audit searches since launch")
    return f"from {iso(min(window))} to the window's end" if window else "(no log source could be read)"


def planned_run(evidence: Evidence, config: JudgeConfig) -> str:
    start = iso(config.run_start or evidence.now)
    if config.run_hours is None:
        return f"run length not given: 24 h, 48 h and 72 h evaluated from {start}"
    return f"{config.run_hours:g} h run from {start}"


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def coverage_gaps(j: Judged) -> tuple[list[str], list[GapNodes]]:
    """The coverage gaps, and every node of each gap that names nodes (its text may count them instead)."""
    gaps = []
    gap_nodes: list[GapNodes] = []
    for n in j.nodes:
        if n.xid_status != "Not observable" or n.gpu_count == 0:
            continue
        rows = "; ".join(f"{r.log_group} / {r.log_stream or 'no stream'}"
                         + (f" ({len(r.empty_hours)} empty hour(s) from {iso(r.empty_hours[0])})"
                            if r.empty_hours else "")
                         for r in n.coverage)
        gaps.append(f"{n.instance_id}: GPU error evidence Not observable — {rows}. Collect on the node: "
                    "`dmesg -T | grep -i nvrm`, `journalctl -k | grep -i xid`; fix kernel log shipping")
    expecting_fm = [n.instance_id for n in j.nodes if n.signals.fabric_manager != "Not applicable"]
    unseen_fm = [n.instance_id for n in j.nodes if n.signals.fabric_manager == "Not observable"]
    if unseen_fm:
        span = boot_search_span(j.evidence)
        gap = (f"Fabric Manager start line (`Started \"Nvidia Fabric Manager\"`) not found for "
               f"{action_rules.nodes_phrase(unseen_fm, expecting_fm, 'NVSwitch')} in any source searched {span}: "
               "Fabric Manager Not observable. On the node: `systemctl status nvidia-fabricmanager` and "
               "`journalctl -u nvidia-fabricmanager`")
        gaps.append(gap)
        gap_nodes.append(GapNodes(gap=gap, nodes=unseen_fm))
    searched = {g.name for g in j.evidence.log_groups}
    used = {r.log_group for n in j.nodes for r in n.coverage}
    # a group whose lines were read as a node's (a job's NCCL lines in streams named by hostname) is neither dead
    # nor unrelated, even though it carries no node's kernel coverage
    used |= {p.line.log_group for lines in j.lines_by_node.values() for p in lines}
    dead = sorted(searched - used)
    if dead:
        gaps.append("Candidate log sources with no stream for any audited node in the window (dead or unrelated): "
                    + ", ".join(dead))
    for q in j.evidence.queries:
        if q.status == "Complete" and q.records_scanned == 0 and q.purpose == "stream-summary":
            gaps.append(f"Logs Insights scanned zero records over {', '.join(q.log_groups)} in the padded window: "
                        "either the sources are empty in the window or the query is wrong (group, region, time)")
    return gaps, gap_nodes


def node_action_texts(j: Judged) -> list[tuple[NodeResult, str]]:
    """Each node's action, in its own words (rules/actions.py groups identical ones)."""
    actions: list[tuple[NodeResult, str]] = []
    replaced = replacements(j.nodes, j.evidence)
    infos = {i.instance_id: i for i in j.evidence.nodes}
    for n in j.nodes:
        routing = j.routings.get(n.instance_id)
        info = infos.get(n.instance_id)
        done = already_done(n, j.evidence, replaced, reboot_times(info, j.evidence, j.lines_by_node.get(
            n.instance_id, [])) if info else []) if n.verdict in ("REPLACE", "REBOOT") else None
        if done is not None and (done.kind == "replaced" or n.verdict == "REBOOT"):
            # RULES §7: what was already done is not asked again; say it, and what to check now
            actions.append((n, f"{n.instance_id}: {done.said}; no command to run again — {done.check}"))
        elif n.verdict == "REPLACE":
            actions.append((n, f"Replace {n.instance_id}: " + _replace_step(j.evidence, n)))
        elif n.verdict == "REBOOT":
            actions.append((n, f"Reboot {n.instance_id}: " + _reboot_step(j.evidence, n)))
        elif n.verdict == "LEAVE ALONE" and routing is not None:
            unproven = "kernel-log coverage not proven" in (n.verdict_evidence or "")
            # A driver/firmware fault (a GSP fault recurring, UPDATE_SWFW) is the driver's action, not the process's
            driver = routing.cause_class == "driver-config"
            actions.append((n, f"Leave {n.instance_id} in service; "
                           + ("" if driver else _hand_off(routing))
                           + (f"{'' if driver else '; '}{routing.action_text}" if routing.action_text else "")
                           + (f"; kernel-log coverage not proven: check the node directly ({DIRECT_CHECK})"
                              if unproven else "")))
        elif n.verdict == "MONITOR" and routing is not None and routing.deciding_check:
            actions.append((n, f"On {n.instance_id}, run `{routing.deciding_check.split(':')[0]}` before any "
                           "reboot or replacement"))
        elif n.verdict == "MONITOR" and routing is not None and routing.action_text:
            # RULES §6: the catalog row's action (157: plan a replacement at the next maintenance window).
            actions.append((n, f"Watch {n.instance_id}: {routing.action_text}"))
        elif n.verdict == "NOT OBSERVABLE":
            # RULES §7: the application reading and its hand-off are still stated beside the gap
            app = routing is not None and routing.verdict == "LEAVE ALONE"
            # RULES §4: HMA Not observable (the cluster log group silent) asks to confirm the agent runs on the node
            agent = any(c.source_kind == "hma" and c.status == "Not observable" for c in n.coverage)
            actions.append((n, f"On {n.instance_id}: `dmesg -T | grep -i nvrm` and `journalctl -k | grep -i xid`; "
                           "then fix kernel log shipping for this node"
                           + (f"; confirm `{HMA_SERVICE}` runs on it" if agent else "")
                           + (f"; meanwhile {_hand_off(routing)}" if app and routing is not None else "")))
    return actions


HMA_SERVICE = "sagemaker-health-monitoring-agent.service"


def _hand_off(routing: NodeRouting) -> str:
    """RULES §7: the process name and PID the Xid names go to the application owner (whichever the line names);
    they stand as DETAIL (`_detail`), so nodes that differ only there are one grouped action."""
    return f"hand the Xid {routing.cause_code}{action_rules.DETAIL} to the application owner"


def _detail(routing: NodeRouting | None) -> str:
    """The process name and PID the node's Xid names, as its action says them: " (process X, PID N)"."""
    if routing is None:
        return ""
    named = [f"process {routing.process}" if routing.process else "",
             f"PID {routing.pid}" if routing.pid is not None else ""]
    who = ", ".join(x for x in named if x)
    return f" ({who})" if who else ""


def _slurm_alternative(evidence: Evidence, action: str) -> str:
    """Slurm's own way to ask HyperPod for the action, said only where Slurm orchestrates (an EKS cluster has none)."""
    if evidence.cluster.kind != "hyperpod-slurm":
        return ""
    return f" (Slurm: `scontrol update node=<node> state=fail reason=\"Action:{action}\"`)"


def _replace_step(evidence: Evidence, n: NodeResult) -> str:
    if evidence.cluster.kind.startswith("hyperpod"):
        return (f"`aws sagemaker batch-replace-cluster-nodes --cluster-name {evidence.cluster.name} "
                f"--node-ids {n.instance_id}`" + _slurm_alternative(evidence, "Replace"))
    return f"drain it in Slurm, then stop/start or terminate {n.instance_id} so the scheduler launches a new one"


def _reboot_step(evidence: Evidence, n: NodeResult) -> str:
    if evidence.cluster.kind.startswith("hyperpod"):
        return (f"`aws sagemaker batch-reboot-cluster-nodes --cluster-name {evidence.cluster.name} "
                f"--node-ids {n.instance_id}`" + _slurm_alternative(evidence, "Reboot"))
    return f"drain it, then `aws ec2 reboot-instances --instance-ids {n.instance_id}`"


def gpu_timeline(j: Judged) -> list[TimelineEntry]:
    out = []
    for n in j.nodes:
        for e in n.gpu_errors:
            out.append(TimelineEntry(time=e.time, source=f"{e.log_group} / {e.log_stream}", resource=n.instance_id,
                                     event=f"Xid {e.code} ×{e.count} ({e.class_})"
                                     + (f", HMA reason {e.hma_reason}" if e.hma_reason else "")))
    return sorted(out, key=lambda t: t.time)


def build_timeline(j: Judged) -> list[TimelineEntry]:
    return timeline_rules.timeline(j)
