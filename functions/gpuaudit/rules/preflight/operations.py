"""Operations (RULES §10 P10, P11, P13): capacity end alarmed, software minimums, cluster management healthy."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuaudit.domain.timing import KERNEL_LOOKBACK
from gpuaudit.model.result import Check
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.capacity import holding_for
from gpuaudit.rules.context import Context, id_list
from gpuaudit.rules.preflight.common import Part, combine, make_check

EXPIRATION_WARNING = "Capacity Block Expiration Warning"
# DLAMI P6 requirements (RULES §10): driver branch, and the rest as (CUDA, kernel, EFA installer, AWS OFI NCCL).
DRIVER_MINIMUM = {"p6-b200.48xlarge": 570, "p6-b300.48xlarge": 580, "p6e-gb200": 570}
OTHER_MINIMUMS = {"p6-b200.48xlarge": ("12.8", "6.1", "1.41.0", "1.15.0"),
                  "p6-b300.48xlarge": ("13.0", "6.1", "1.44.0", "1.17.1"),
                  "p6e-gb200": ("12.8", "6.12", "1.42.0", "1.15.0")}
DRIVER_LOADED = re.compile(r"NVRM: loading NVIDIA UNIX (?:Open Kernel Module for )?(?:x86_64|aarch64)"
                           r"(?: Kernel Module)?\s+(?P<version>(?P<major>\d+)\.\d+(?:\.\d+)?)")


def p10(ctx: Context) -> Check:
    ev = ctx.ev
    ends = []
    for g in ctx.groups:
        h, _ = holding_for(ctx, g)
        if h is not None and h.end is not None:
            ends.append(h)
    unread = [call for call, missing in (("`aws ec2 describe-capacity-reservations`", ev.capacity_reservations is None),
                                         ("`aws sagemaker describe-training-plan`", ev.training_plans is None and any(
                                             g.training_plan_arn for g in ev.cluster.instance_groups))) if missing]
    if not ends and unread:
        return make_check("P10", "Not checked",
                          "whether a Capacity Block or training plan ends is unknown: the capacity "
                          "it would show was not read — " + ", ".join(unread),
                          "Re-run with read access: " + ", ".join(unread))
    if not ends:
        return make_check("P10", "PASS", "not applicable: no Capacity Block or training plan with an end date holds "
                                         "the cluster's accelerated capacity (see P1)")
    held = ", ".join(sorted({h.resource for h in ends}))
    if ev.event_rules is None:
        return make_check("P10", "Not checked", f"capacity {held} ends, but EventBridge rules were not read — "
                                                "`aws events list-rules`",
                                                "Re-run with read access: `aws events list-rules`")
    matching = [r for r in ev.event_rules if EXPIRATION_WARNING in (r.event_pattern or "")]
    enabled = [r for r in matching if (r.state or "").upper() == "ENABLED"]
    action = (f"Create an EventBridge rule on `{EXPIRATION_WARNING}` with an alert target: `aws events put-rule "
              f"--name {ev.cluster.name}-capacity-expiry --event-pattern "
              "'{\"source\":[\"aws.ec2\"],\"detail-type\":[\"Capacity Block Expiration Warning\"]}'` and "
              "`aws events put-targets` to an SNS topic")
    if enabled:
        return make_check("P10", "PASS", f"capacity {held} ends; EventBridge rule(s) on `{EXPIRATION_WARNING}`: "
                          + id_list(r.name for r in enabled))
    if matching:
        return make_check("P10", "RISK",
                          f"capacity {held} ends; the rule(s) on `{EXPIRATION_WARNING}` are not enabled: "
                          + id_list(f"{r.name} ({r.state})" for r in matching), f"Enable {matching[0].name}")
    return make_check("P10", "RISK", f"capacity {held} ends, and none of the {len(ev.event_rules)} EventBridge rule(s) "
                                     f"read on the default bus matches `{EXPIRATION_WARNING}` (emitted 40 min before "
                                     "EndDate)", action)


def _minimum_key(instance_type: str | None) -> str | None:
    if instance_type is None:
        return None
    if instance_type in DRIVER_MINIMUM:
        return instance_type
    return "p6e-gb200" if instance_type.startswith("p6e-gb200") else None


def p11(ctx: Context) -> Check:
    nodes = ctx.gpu_nodes()
    if not nodes:
        return make_check("P11", "UNVERIFIED", "no GPU compute node to read a driver version from",
                          "Re-run once the compute nodes are up")
    parts = []
    for n in nodes:
        found = [(p.line, m) for p in ctx.lines([n.instance_id]) if (m := DRIVER_LOADED.search(p.line.message))] \
            or [(g, m) for g in ctx.j.boot_lines_by_node.get(n.instance_id,
                                                             []) if (m := DRIVER_LOADED.search(g.message))]
        key = _minimum_key(n.instance_type)
        if not found:
            parts.append(Part("UNVERIFIED", f"`{n.instance_id}` ({n.instance_type}): driver version unreadable — no "
                                            "`NVRM: loading NVIDIA UNIX … Kernel Module <version>` line in any source "
                                            "since the node's launch (searched at most "
                                            f"{KERNEL_LOOKBACK.days} days before the window; it is logged at boot)",
                              f"On `{n.instance_id}`: `nvidia-smi --query-gpu=driver_version --format=csv,noheader`"))
            continue
        line, m = found[-1]
        version, major = m.group("version"), int(m.group("major"))
        where = f"`{n.instance_id}` ({n.instance_type}): driver {version} (R{major}) from `{line.log_group}` / " \
                f"`{line.log_stream}` at {iso(line.time)}"
        if key is None:
            parts.append(Part("UNVERIFIED", where + f"; no published minimum for {n.instance_type} (RULES §10 lists P6 "
                                                    "types only): compare with the current DLAMI stack, not pass/fail",
                              "Compare the driver with the current Deep Learning AMI release notes for this type"))
            continue
        cuda, kernel, efa, ofi = OTHER_MINIMUMS[key]
        rest = (f"; CUDA ≥ {cuda}, kernel ≥ {kernel}, EFA installer ≥ {efa}, AWS OFI NCCL ≥ {ofi} are not readable "
                "from the logs")
        if major < DRIVER_MINIMUM[key]:
            parts.append(Part("FAIL", where + f" is below the minimum R{DRIVER_MINIMUM[key]}{rest}",
                              f"Move {n.instance_type} nodes to a DLAMI with driver R{DRIVER_MINIMUM[key]} or later"))
        else:
            parts.append(Part("PASS", where + f" meets the minimum R{DRIVER_MINIMUM[key]}{rest}"))
    return combine("P11", parts)




def _names_cluster(text: str, names: Iterable[str]) -> bool:
    """The cluster's name as a whole token; a hyphen may follow only before a capitalised suffix
    (`<cluster>-HeadNode-…`), so cluster `llm` does not claim `llm-pretrain-…`'s alarms."""
    return any(re.search(rf"(?<![A-Za-z0-9-]){re.escape(n)}(?:$|[^A-Za-z0-9-]|-(?=[A-Z]))", text)
               for n in names if n)


def p13(ctx: Context) -> Check:
    ev = ctx.ev
    if ev.alarms_in_alarm is None:
        return make_check("P13", "Not checked", "CloudWatch alarms not read — `aws cloudwatch describe-alarms "
                                                "--state-value ALARM`", "Re-run with read access")
    names = [ev.cluster.name, ev.cluster.cluster_id or ""]
    ids = {n.instance_id for n in ev.nodes}
    related = [a for a in ev.alarms_in_alarm
               if set(a.dimensions.values()) & (ids | {x for x in names if x})
               or any(i in a.name for i in ids) or _names_cluster(a.name, names)]
    if not related:
        return make_check("P13", "PASS",
                          f"no CloudWatch alarm in ALARM for cluster `{ev.cluster.name}`, its head node or "
                                         f"its instances ({len(ev.alarms_in_alarm)} alarm(s) in ALARM in the Region, "
                                         "none about this cluster)")
    items = []
    for a in related:
        since = (f" since {iso(a.state_since)} ({(ev.now - a.state_since).total_seconds() / 3600:.1f} h)"
                 if a.state_since else "")
        metric = f" — {a.namespace}/{a.metric} {a.dimensions}" if a.metric else ""
        items.append(f"`{a.name}` in ALARM{since}{metric}")
    return make_check("P13", "RISK", "; ".join(items),
                      f"Resolve {related[0].name} before the run (for `ClustermgtdHeartbeat`: clustermgtd on the head "
                      "node stopped; check `/var/log/parallelcluster/clustermgtd`)")


