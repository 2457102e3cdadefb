"""The EFA fabric's preconditions (RULES §8 D layer 4, §10 P7, P15): the security groups per place, their
self-referencing all-traffic rules, and the NCCL collection command. Read by branch D, the hang finding and the
pre-flight checks alike. Pure: no AWS, no clock."""

from __future__ import annotations

import re

from gpuaudit.model.planned_reads import SecurityGroupInfo, SgRule
from gpuaudit.model.result import FindingStep, FindingStepStatus
from gpuaudit.rules.actions import nodes_phrase
from gpuaudit.rules.context import Context
from gpuaudit.rules.steps import all_lines, line_at, merge, quote, step

NCCL_COMMAND = ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,P2P,SHM,NVLS "
                "NCCL_DEBUG_FILE=/fsx/nccl_%h_%p.log")


def self_rule(sg: SecurityGroupInfo, rules: list[SgRule]) -> bool:
    """An all-traffic rule naming the group itself (EFA needs one inbound and one outbound)."""
    return any(r.protocol == "-1" and sg.group_id in r.group_ids for r in rules)


def sg_sets(ctx: Context) -> tuple[list[tuple[str, list[SecurityGroupInfo]]], str | None]:
    """Security groups per place (the cluster's VpcConfig, or each EC2 compute node), or the unread call."""
    ev = ctx.ev
    if ev.security_groups is None:
        return [], "security groups not read — `aws ec2 describe-security-groups`"
    by_id = {g.group_id: g for g in ev.security_groups}
    if ctx.hyperpod:
        ids = ev.cluster.security_group_ids
        if not ids:
            return [], "DescribeCluster returned no VpcConfig.SecurityGroupIds"
        return [(f"cluster `{ev.cluster.name}` VpcConfig", [by_id[i] for i in ids if i in by_id])], None
    if ev.instance_network is None:
        return [], "the nodes' network attachment not read — `aws ec2 describe-instances`"
    gpu_ids = {i for g in ctx.groups for i in g.node_ids}
    sets: dict[tuple[str, ...], list[str]] = {}
    for net in ev.instance_network:
        if net.instance_id in gpu_ids:
            sets.setdefault(tuple(net.security_group_ids), []).append(net.instance_id)
    if not sets:
        return [], "no running GPU compute node to read security groups from"
    population = sorted(gpu_ids)
    return [(f"nodes {nodes_phrase(nodes, population, 'GPU compute')}", [by_id[i] for i in ids if i in by_id])
            for ids, nodes in sets.items()], None


def open_egress(sg: SecurityGroupInfo) -> bool:
    """An all-traffic outbound rule to 0.0.0.0/0 (the default egress rule of a new security group)."""
    return any(r.protocol == "-1" and "0.0.0.0/0" in r.cidrs for r in sg.egress)


def sg_names(sgs: list[SecurityGroupInfo]) -> str:
    return ", ".join(f"`{g.group_id}` ({g.group_name})" if g.group_name else f"`{g.group_id}`" for g in sgs) or "none"


def sg_step(ctx: Context) -> FindingStep:
    """RULES §8 D layer 4: the EFA security group's self-referencing all-traffic rules, inbound and outbound."""
    name = "EFA security group self-referencing rules"
    sets, unread = sg_sets(ctx)
    if unread is not None:
        return step(name, "Not checked", unread)
    parts: list[tuple[FindingStepStatus, str]] = []
    for where, sgs in sets:
        if not sgs:
            parts.append(("Not checked", f"{where}: its security groups were not returned"))
            continue
        inbound = [g for g in sgs if self_rule(g, g.ingress)]
        outbound = [g for g in sgs if self_rule(g, g.egress)]
        opened = [g for g in sgs if open_egress(g)]  # all traffic to 0.0.0.0/0 reaches the group's members too
        if inbound and outbound:
            parts.append(("Cleared", f"{where}: {sg_names(sgs)} — all-traffic rules naming "
                                     f"{sg_names(inbound[:1])} inbound and {sg_names(outbound[:1])} outbound"))
        elif inbound and opened and not ctx.hyperpod:
            parts.append(("Cleared", f"{where}: {sg_names(sgs)} — all-traffic inbound rule naming "
                                     f"{sg_names(inbound[:1])}; outbound reaches the group through all traffic to "
                                     f"0.0.0.0/0 on {sg_names(opened[:1])}"))
        else:
            # HyperPod: all traffic to 0.0.0.0/0 instead of the self rule is documented to fail its EFA health checks
            missing = " and ".join(d for d, ok in (("inbound", inbound),
                                                   ("outbound", outbound or (opened and not ctx.hyperpod))) if not ok)
            instead = (f"; outbound only through all traffic to 0.0.0.0/0 on {sg_names(opened[:1])}, documented to "
                       "fail HyperPod's EFA health checks (P15)" if ctx.hyperpod and opened and not outbound else "")
            parts.append(("Blocked", f"{where}: {sg_names(sgs)} — no all-traffic {missing} rule naming the group "
                                     f"itself (EFA needs both){instead}"))
    return merge(name, parts)


def placement_step(ctx: Context) -> FindingStep:
    """RULES §8 D layer 4: the nodes of one job split across subnets or Availability Zones. EFA's OS-bypass traffic
    is not routed: an EFA reaches only EFAs in its own subnet, so one AZ is not enough. The job the auditor can
    see is a GPU group (a ParallelCluster queue and type, a HyperPod instance group): its nodes run one job's ranks
    (docs/decisions.md). Only EFA-capable groups of two or more nodes are judged."""
    name = "EFA placement: nodes of one job in one subnet"
    ev = ctx.ev
    groups = [g for g in ctx.groups if len(g.nodes) > 1
              and (p := ev.profiles.get(g.instance_type or "")) is not None and p.efa_supported]
    if not groups:
        return step(name, "Not applicable", "no EFA-capable group of two or more nodes")
    if ctx.hyperpod:
        subnets = ", ".join(f"`{s}`" for s in ev.cluster.subnet_ids) or "none returned"
        return step(name, "Not checked", f"which subnet each HyperPod node is in is not read (VpcConfig subnets "
                                         f"{subnets}) — `aws sagemaker describe-cluster-node` Placement per node")
    if ev.instance_network is None:
        return step(name, "Not checked", "the nodes' subnets not read — `aws ec2 describe-instances`")
    subnet_of = {n.instance_id: n.subnet_id for n in ev.instance_network}
    zone_of = {s.subnet_id: s.availability_zone for s in ev.subnets or []}
    parts: list[tuple[FindingStepStatus, str]] = []
    for g in groups:
        where: dict[str, list[str]] = {}
        for iid in g.node_ids:
            if (subnet := subnet_of.get(iid)) is not None:
                where.setdefault(subnet, []).append(iid)
        unseen = [i for i in g.node_ids if subnet_of.get(i) is None]
        places = "; ".join(f"`{s}` ({zone_of.get(s) or 'AZ not read'}): {nodes_phrase(ids, g.node_ids, 'group')}"
                           for s, ids in sorted(where.items()))
        if len(where) > 1:
            zones = {zone_of.get(s) for s in where}
            across = "Availability Zones and subnets" if len(zones) > 1 and None not in zones else "subnets"
            parts.append(("Blocked", f"{g.label} split across {len(where)} {across} — {places}: EFA traffic does "
                                     "not cross a subnet"))
        elif unseen:
            parts.append(("Not checked", f"{g.label}: subnet not read for {', '.join(unseen)}"
                                         + (f"; {places}" if places else "")))
        else:
            parts.append(("Cleared", f"{g.label}: every node in {places}"))
    return merge(name, parts)


DEEP_HEALTH_FAILED = re.compile(r"(?i)error|fail")


def deep_health_step(ctx: Context) -> FindingStep:
    """RULES §8 D layer 4: failed deep health checks (`InstanceStress` includes EFA loopback, `InstanceConnectivity`
    runs a multi-node NCCL all_reduce), read from the `DeepHealthCheckResults/` streams; the connectivity line first.
    Read by the hang finding and by branch D (a failed check with layers 1–3 Not observable is D's hypothesis)."""
    name = "deep health checks (InstanceConnectivity)"
    if not ctx.hyperpod:
        return step(name, "Not applicable", "deep health checks are a HyperPod feature")
    lines = [p for p in all_lines(ctx.j) if p.line.log_stream.startswith("DeepHealthCheckResults/")]
    failed = [p for p in lines if DEEP_HEALTH_FAILED.search(p.line.message)]
    if failed:
        connectivity = [p for p in failed if "InstanceConnectivity" in p.line.message] or failed
        return step(name, "Blocked", f"{quote(connectivity[0].line.message)} in {line_at(connectivity[0])}")
    streams = sorted({a.log_stream for a in ctx.ev.stream_activity
                      if a.log_stream.startswith("DeepHealthCheckResults/")})
    if streams:
        return step(name, "Cleared", ", ".join(f"`{s}`" for s in streams) + " read: no FAIL or ERROR line")
    checks = "; ".join(f"group `{g.name}` OnStartDeepHealthChecks {g.group.on_start_deep_health_checks or '[] (none)'}"
                       for g in ctx.groups if g.group is not None)
    return step(name, "Not checked", f"no `DeepHealthCheckResults/<instance-id>` stream in the window ({checks}); "
                                      "InstanceConnectivity runs a multi-node "
                                      "NCCL all_reduce — run a deep health check on the nodes of the job")
