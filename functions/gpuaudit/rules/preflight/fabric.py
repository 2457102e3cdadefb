"""Network and GPU fabric (RULES §10 P7, P12, P14–P16): EFA width, NCCL transport, IP headroom, EFA security group,
bootstrap route."""

from __future__ import annotations

import re

from gpuaudit.domain.streams import HYPERPOD_CLUSTER_LOG
from gpuaudit.domain.timing import TIMELINE_MARGIN
from gpuaudit.model.planned_reads import RouteTableInfo
from gpuaudit.model.result import Check, NcclTransport, NodeResult
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.capacity import need_per_node
from gpuaudit.rules.context import Context, id_list
from gpuaudit.rules.fabric import NCCL_COMMAND, open_egress, self_rule, sg_names, sg_sets
from gpuaudit.rules.fabric_manager import Boot, fabric_manager_of
from gpuaudit.rules.preflight.common import Part, combine, make_check

BOOTSTRAP_FAILED = re.compile(r"Found the following bootstrap failure nodes|Node bootstrap error|protected mode|"
                              r"bootstrap failure")


def _efa_types(ctx: Context) -> tuple[list[str], list[str]]:
    """(accelerated types that support EFA, types whose EFA support is unknown)."""
    efa, unknown = [], []
    for t in sorted({g.instance_type for g in ctx.groups if g.instance_type}):
        profile = ctx.ev.profiles.get(t)
        if profile is None or profile.efa_supported is None:
            unknown.append(t)
        elif profile.efa_supported:
            efa.append(t)
    return efa, unknown


def p7(ctx: Context) -> Check:
    efa, unknown = _efa_types(ctx)
    if not efa:
        if unknown:
            return make_check("P7", "UNVERIFIED", f"EFA support of {', '.join(unknown)} unknown (DescribeInstanceTypes "
                                                  "not read)", "`aws ec2 describe-instance-types --instance-types "
                                                               + " ".join(unknown) + "`")
        return make_check("P7", "PASS", "not applicable: no accelerated type of the cluster supports EFA ("
                          + ", ".join(sorted({g.instance_type or '?' for g in ctx.groups})) + ")")
    sets, unread = sg_sets(ctx)
    parts: list[Part] = []
    if unread:
        parts.append(Part("Not checked", f"EFA security group rules: {unread}", f"Re-run with read access: {unread}"))
    for where, sgs in sets:
        inbound = [g for g in sgs if self_rule(g, g.ingress)]
        outbound = [g for g in sgs if self_rule(g, g.egress)]
        opened = [g for g in sgs if open_egress(g)]
        names = sg_names(sgs)
        if not inbound:
            target = sgs[0].group_id if sgs else "<sg>"
            parts.append(Part("FAIL", f"{where}: security groups {names} — no self-referencing all-traffic inbound "
                                      "rule (EFA traffic between the nodes is dropped)",
                              f"Add an all-traffic inbound rule from {target} to itself: `aws ec2 "
                              f"authorize-security-group-ingress --group-id {target} --ip-permissions "
                              f"'IpProtocol=-1,UserIdGroupPairs=[{{GroupId={target}}}]'`"))
        elif not outbound and not opened:
            parts.append(Part("FAIL", f"{where}: security groups {names} — self-referencing inbound rule on "
                                      f"{sg_names(inbound)}, but no outbound rule reaching the group",
                              f"Add an all-traffic outbound rule to the group itself on {inbound[0].group_id}: "
                              f"`aws ec2 authorize-security-group-egress --group-id {inbound[0].group_id} "
                              f"--ip-permissions "
                              f"'IpProtocol=-1,UserIdGroupPairs=[{{GroupId={inbound[0].group_id}}}]'`"))
        elif not outbound:
            note = " (on HyperPod this is a RISK: see P15)" if ctx.hyperpod else ""
            parts.append(Part("PASS", f"{where}: self-referencing all-traffic inbound rule on {sg_names(inbound)}; "
                                      f"outbound to the group only through all traffic to 0.0.0.0/0 on "
                                      f"{sg_names(opened)}{note}"))
        else:
            parts.append(Part("PASS", f"{where}: self-referencing all-traffic rule inbound ({sg_names(inbound)}) "
                                      f"and outbound ({sg_names(outbound)})"))
    parts += _efa_width(ctx, efa)
    return combine("P7", parts)


def _efa_width(ctx: Context, efa_types: list[str]) -> list[Part]:
    parts = []
    for grp in ctx.groups:
        if grp.instance_type not in efa_types:
            continue
        profile = ctx.ev.profiles[grp.instance_type]
        if ctx.hyperpod:
            parts.append(Part("UNVERIFIED", f"{grp.label}: EFA attached Not observable (HyperPod instances live in a "
                                            f"service account; DescribeInstances cannot see them) of "
                                            f"{profile.max_efa_interfaces} supported",
                              "On a node, `fi_info -p efa -t FI_EP_RDM` must list every EFA device; keep "
                              "`InstanceStress` and `InstanceConnectivity` deep health checks on"))
            continue
        short = [n for n in grp.nodes if n.efa_attached is not None and profile.max_efa_interfaces is not None
                 and n.efa_attached < profile.max_efa_interfaces]
        unread = [n for n in grp.nodes if n.efa_attached is None or profile.max_efa_interfaces is None]
        if unread:  # a width not read is never a PASS (RULES §0)
            parts.append(Part("UNVERIFIED", f"{grp.label}: EFA interfaces attached not read for "
                              + id_list(n.instance_id for n in unread)
                              + f" (supported: {profile.max_efa_interfaces or 'unknown'})",
                              f"`aws ec2 describe-instances --instance-ids {' '.join(n.instance_id for n in unread)} "
                              "--query 'Reservations[].Instances[].NetworkInterfaces[].InterfaceType'`"))
        if short:
            parts.append(Part("RISK", f"{grp.label}: fewer EFA interfaces than supported — "
                              + ", ".join(f"`{n.instance_id}` {n.efa_attached} of {profile.max_efa_interfaces}"
                                          for n in short) + " (less inter-node bandwidth)",
                              f"Launch {grp.instance_type} with all {profile.max_efa_interfaces} EFA interfaces "
                              "(launch template NetworkInterfaces, InterfaceType efa or efa-only)"))
        elif read := [n for n in grp.nodes if n not in unread]:
            parts.append(Part("PASS", f"{grp.label}: " + ", ".join(
                f"`{n.instance_id}` {n.efa_attached} of {profile.max_efa_interfaces}" for n in read)
                + " EFA interfaces attached"))
    return parts


def p12(ctx: Context) -> Check:
    """RULES §10 P12: branch D layer 1 per node (the one classification, domain/nccl.py, read from each node's
    result) and Fabric Manager."""
    nodes = ctx.gpu_nodes()
    if not nodes:
        return make_check("P12", "UNVERIFIED", "no GPU compute node running: the transport of the last run is Not "
                                               "observable", f"Run the next job with `{NCCL_COMMAND}`")
    parts: list[Part] = []
    nccl_seen = False
    for n in nodes:
        nccl_seen = nccl_seen or n.signals.nccl == "Observable"
        fm_failed = _fabric_manager_faults(ctx, n)
        if fm_failed:
            b = fm_failed[-1]
            where = (f" — \"{b.line.message[:160]}\" (`{b.line.log_group}` / `{b.line.log_stream}` at "
                     f"{iso(b.line.time)})") if b.line else ""
            parts.append(Part("FAIL", f"`{n.instance_id}` ({n.instance_type}): Fabric Manager {b.state}{where} "
                                      "(RULES §8 D layer 2)",
                              f"Reboot `{n.instance_id}` (REPLACE if Fabric Manager fails again)"))
        for t in n.nccl_transports:
            said = (f"`{n.instance_id}` ({n.instance_type}): NCCL used {t.transport} (`{t.marker}`) — {t.why} "
                    f"({_where_t(t)})")
            if t.assessment == "bad" and t.transport == "Socket":
                parts.append(Part("FAIL", said, "Fix the EFA path (aws-ofi-nccl plugin, `FI_PROVIDER=efa`, security "
                                                "group self rule) and re-run an all_reduce test"))
            elif t.assessment == "bad":
                parts.append(Part("RISK", said,
                                  "Check NCCL_P2P_DISABLE / container IPC settings" if t.transport == "SHM"
                                  else "Install and select the aws-ofi-nccl plugin"))
            elif t.assessment == "unverified":
                parts.append(Part("UNVERIFIED", said, "`aws ec2 describe-instance-types --instance-types "
                                                      f"{n.instance_type}`"))
        if n.signals.nccl == "Observable" and not fm_failed and not any(
                t.assessment in ("bad", "unverified") for t in n.nccl_transports):
            good = ", ".join(f"{t.transport} (`{t.marker}`)" for t in n.nccl_transports) or "no transport line"
            fm = f"; Fabric Manager {n.signals.fabric_manager}" if (n.nvswitch or "").startswith("NVSwitch") else ""
            parts.append(Part("PASS", f"`{n.instance_id}`: NCCL lines read, no socket fallback ({good}){fm}"))
    if not nccl_seen and not any(p.result == "FAIL" for p in parts):
        ids = id_list(n.instance_id for n in nodes)
        return make_check("P12", "UNVERIFIED",
                          f"no `NCCL INFO`/`NCCL WARN` lines from {ids} in the window: the transport "
                                               "of the last run is Not observable",
                          f"Run the next job (or an all_reduce test) with `{NCCL_COMMAND}`")
    return combine("P12", parts)


def _fabric_manager_faults(ctx: Context, n: NodeResult) -> list[Boot]:
    """The node's Fabric Manager failed, restarting or absent in a boot read: the one reading of §8 D layer 2
    (rules/fabric_manager.py), over the lines the node's own verdict read."""
    ev = ctx.ev
    profile = ev.profiles.get(n.instance_type or "")
    reading = fabric_manager_of([p.line for p in ctx.lines([n.instance_id])],
                                ctx.j.boot_lines_by_node.get(n.instance_id, []),
                                profile is not None and profile.fabric_manager_expected,
                                ev.window.start - TIMELINE_MARGIN, min(ev.window.end, ev.now), n.coverage)
    return reading.faulty if reading is not None else []


def _where_t(t: NcclTransport) -> str:
    return f"`{t.log_group}` / `{t.log_stream}` at {iso(t.time)}: \"{t.message[:160]}\""


def p14(ctx: Context) -> Check:
    ev = ctx.ev
    if ev.subnets is None:
        return make_check("P14", "Not checked", "subnets not read — `aws ec2 describe-subnets --subnet-ids "
                                                + " ".join(ev.cluster.subnet_ids) + "`", "Re-run with read access")
    nets = {n.instance_id: n for n in ev.instance_network or []}
    compute_subnets = {nets[i].subnet_id for g in ctx.groups for i in g.node_ids if i in nets and nets[i].subnet_id}
    wanted = compute_subnets or set(ev.cluster.subnet_ids)
    subnets = [s for s in ev.subnets if s.subnet_id in wanted]
    if not subnets:
        return make_check("P14", "UNVERIFIED", "no subnet of the cluster's compute nodes is known",
                          "Name the compute subnets and check `AvailableIpAddressCount`")
    needs = [(g, *need_per_node(ctx, g)) for g in ctx.groups]
    grp, ips, enis, how = max(needs, key=lambda x: x[1])
    free = ", ".join(f"`{s.subnet_id}` ({s.availability_zone}) {s.available_ips} free IPs" for s in subnets)
    parts = []
    best = max((s.available_ips or 0) for s in subnets)
    if best < ips:
        parts.append(Part("RISK", f"one replacement {grp.instance_type} needs {how}; {free}: no subnet can take it",
                          f"Free IPs or add a larger subnet in the capacity's Availability Zone (need ≥ {ips})"))
    else:
        parts.append(Part("PASS", f"one replacement {grp.instance_type} needs {how}; {free}"))
    quota = next((q for q in ev.service_quotas or [] if q.quota_code == "L-DF5E4CA3"), None)
    if quota is None or quota.value is None:
        why = f" ({quota.error})" if quota and quota.error else ""
        parts.append(Part("Not checked", f"ENI quota L-DF5E4CA3 not read{why} — `aws service-quotas get-service-quota "
                                         "--service-code vpc --quota-code L-DF5E4CA3`", "Re-run with read access"))
    else:
        per_group = [(g, need_per_node(ctx, g)[1]) for g in ctx.groups]
        used = sum(e * max(g.size, 1) for g, e in per_group) + sum(
            1 for n in ev.nodes if not any(n.instance_id in g.node_ids for g in ctx.groups))
        need = used + enis
        text = (f"ENI quota L-DF5E4CA3 (Network interfaces per Region) = {quota.value:g}; this cluster at target "
                f"needs about {used} interfaces, {need} with one replacement ({enis} per {grp.instance_type}); other "
                "ENIs in the Region are not counted (`aws ec2 describe-network-interfaces` not read)")
        if quota.value < need:
            parts.append(Part("RISK", text, "Request a higher `Network interfaces per Region` quota (L-DF5E4CA3)"))
        else:
            parts.append(Part("PASS", text))
    return combine("P14", parts)


def p15(ctx: Context) -> Check:
    if not ctx.hyperpod:
        return make_check("P15", "PASS", f"not applicable: the outbound 0.0.0.0/0 rule is a HyperPod EFA finding; "
                                         f"cluster `{ctx.ev.cluster.name}` is {ctx.ev.cluster.kind} (EFA rules in P7)")
    efa, unknown = _efa_types(ctx)
    if not efa:
        if unknown:
            return make_check("P15", "UNVERIFIED", f"EFA support of {', '.join(unknown)} unknown",
                              "`aws ec2 describe-instance-types`")
        return make_check("P15", "PASS", "not applicable: no EFA instance type in the cluster")
    sets, unread = sg_sets(ctx)
    if unread:
        return make_check("P15", "Not checked", f"outbound rules: {unread}", f"Re-run with read access: {unread}")
    where, sgs = sets[0]
    outbound = [g for g in sgs if self_rule(g, g.egress)]
    opened = [g for g in sgs if open_egress(g)]
    if outbound:
        return make_check("P15", "PASS", f"{where}: outbound self-referencing all-traffic rule on {sg_names(outbound)}")
    target = (opened or sgs)[0].group_id if (opened or sgs) else "<sg>"
    action = (f"Add an all-traffic outbound rule from {target} to itself: `aws ec2 authorize-security-group-egress "
              f"--group-id {target} --ip-permissions 'IpProtocol=-1,UserIdGroupPairs=[{{GroupId={target}}}]'`")
    if opened:
        return make_check("P15", "RISK",
                          f"{where}: {sg_names(opened)} allow(s) outbound all traffic to 0.0.0.0/0 instead "
                                         "of a self-referencing rule — documented to fail HyperPod EFA health checks",
                          action)
    return make_check("P15", "RISK", f"{where}: no outbound rule reaching the group on {sg_names(sgs)} (see P7)",
                      action)


def _route_table(ctx: Context, subnet_id: str, vpc_id: str | None) -> RouteTableInfo | None:
    tables = ctx.ev.route_tables or []
    explicit = next((t for t in tables if subnet_id in t.subnet_ids), None)
    return explicit or next((t for t in tables if t.main and t.vpc_id == vpc_id), None)


def p16(ctx: Context) -> Check:
    ev = ctx.ev
    parts: list[Part] = []
    failures = [p for p in ctx.lines() if BOOTSTRAP_FAILED.search(p.line.message)]
    if failures:
        first, last = failures[0], failures[-1]
        parts.append(Part("RISK",
                          f"{len(failures)} bootstrap failure / protected-mode line(s) from {iso(first.line.time)}"
                                  f" to {iso(last.line.time)}, e.g. `{first.line.log_stream}`: "
                                  f"\"{first.line.message[:160]}\"",
                          "Read the head node's `clustermgtd` and `slurm_resume` logs (HyperPod: the "
                          "`LifecycleConfig/<group>/<instance-id>` streams), fix the cause, then restart the fleet "
                          "(`pcluster update-compute-fleet --status START_REQUESTED`)"))
    if not failures:
        parts += _bootstrap_log_unread(ctx)
    if ev.cluster.kind == "parallelcluster":
        parts += _public_subnet_parts(ctx)
    if not parts:
        scope = ("" if ev.cluster.kind == "parallelcluster" else
                 "; the public-subnet rule applies to ParallelCluster")
        return make_check("P16", "PASS", "no `bootstrap failure`, `Node bootstrap error` or protected-mode line in the "
                                         f"cluster's log sources over the window{scope}")
    return combine("P16", parts)


def _bootstrap_log_unread(ctx: Context) -> list[Part]:
    """No bootstrap-failure line means none only where the log that records them was read across the window:
    ParallelCluster's head-node `clustermgtd`, HyperPod's cluster log group (`LifecycleConfig/…`). Self-managed
    nodes have no such log: nothing to ask of them here."""
    kind = ctx.ev.cluster.kind
    if kind == "parallelcluster":
        role, where = "clustermgtd", "the head node's `clustermgtd` stream"
        action = ("On the head node: `sudo grep -i 'bootstrap failure\\|protected mode' "
                  "/var/log/parallelcluster/clustermgtd`, and ship that log to CloudWatch")
    elif kind.startswith("hyperpod"):
        role, where = HYPERPOD_CLUSTER_LOG, "the HyperPod cluster log group (`LifecycleConfig/…` streams)"
        action = (f"Read the `LifecycleConfig/<group>/<instance-id>` streams of cluster `{ctx.ev.cluster.name}` and "
                  "confirm the nodes ship to the cluster log group")
    else:
        return []
    logs = [c for c in ctx.j.control if c.role == role]
    if any(c.state in ("live", "gaps") for c in logs):
        return []
    said = "; ".join(f"`{c.log_group}` / `{c.log_stream or 'no stream'}` {c.state}" for c in logs) or "not found"
    return [Part("UNVERIFIED", f"no bootstrap failure or protected-mode line read, but {where} was not read across "
                               f"the window ({said}): recent bootstrap failures are Not observable", action)]


def _public_subnet_parts(ctx: Context) -> list[Part]:
    ev = ctx.ev
    if ev.instance_network is None:
        return [Part("Not checked", "the compute nodes' interfaces not read — `aws ec2 describe-instances`",
                     "Re-run with read access")]
    if ev.route_tables is None:
        return [Part("Not checked", "route tables not read — `aws ec2 describe-route-tables`",
                     "Re-run with read access")]
    nets = {n.instance_id: n for n in ev.instance_network}
    compute = [(g, nets[i]) for g in ctx.groups for i in g.node_ids if i in nets and nets[i].subnet_id]
    if not compute:
        return [Part("UNVERIFIED", "no running compute node to read its subnet from; the queues' SubnetIds are in the "
                                   "cluster config", "Check the compute subnets' route tables for a NAT gateway")]
    parts = []
    for grp, net in compute:
        subnet = net.subnet_id or ""
        table = _route_table(ctx, subnet, net.vpc_id)
        if table is None:
            parts.append(Part("UNVERIFIED", f"`{net.instance_id}`: no route table found for `{net.subnet_id}`",
                              "`aws ec2 describe-route-tables --filters Name=association.subnet-id,Values="
                              f"{net.subnet_id}`"))
            continue
        default = next((r for r in table.routes if r.destination == "0.0.0.0/0"), None)
        route = f"`{table.route_table_id}` 0.0.0.0/0 → {default.target if default else 'none'}"
        multi = net.interfaces > 1
        if default and default.target.startswith("igw-") and multi and not net.public_ip:
            parts.append(Part("FAIL",
                              f"`{net.instance_id}` ({grp.instance_type}) in `{net.subnet_id}`: {route}, no NAT; "
                                      f"{net.interfaces} interfaces ({net.efa_interfaces} EFA) and no public IP — it "
                                      "cannot reach the internet to bootstrap",
                              f"Move queue `{grp.name}` to a private subnet whose 0.0.0.0/0 route goes to a NAT "
                              "gateway (EFA nodes with several interfaces get no public IP)"))
        else:
            parts.append(Part("PASS", f"`{net.instance_id}` in `{net.subnet_id}`: {route}; {net.interfaces} "
                                      f"interface(s), public IP {'yes' if net.public_ip else 'no'}"))
    return parts


