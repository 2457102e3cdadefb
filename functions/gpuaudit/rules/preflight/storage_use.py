"""Storage and use (RULES §10 P8, P9): FSx headroom, reserved GPUs used."""

from __future__ import annotations

from gpuaudit.domain.capacity import (
    cluster_reservations,
)
from gpuaudit.domain.timing import lookback
from gpuaudit.model.result import Check
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.context import Context, id_list
from gpuaudit.rules.preflight.common import make_check

IDLE_MAJORITY = 0.5  # RISK when most reserved GPU hours were idle
SATURATION_MINUTES = 5  # RULES §8 C: ≥ 90 % for 5+ min


def _dims(dimensions: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in dimensions.items())


def p8(ctx: Context) -> Check:
    ev = ctx.ev
    if ev.file_systems is None:
        return make_check("P8", "Not checked", "FSx file systems not read — `aws fsx describe-file-systems`",
                          "Re-run with read access: `aws fsx describe-file-systems`")
    if not ev.file_systems:
        where = "attached to the cluster" if ev.cluster_file_system_ids is not None else "in the Region"
        return make_check("P8", "PASS", f"not applicable: no FSx for Lustre file system {where}")
    scope = ("" if ev.cluster_file_system_ids is not None else
             "cluster mounts not resolved: every Lustre file system of the Region evaluated; ")
    ids = id_list(f.file_system_id for f in ev.file_systems)
    if ev.fsx_metrics is None:
        return make_check("P8", "Not checked", f"{scope}{ids}: saturation metrics not read — `aws cloudwatch "
                                               "list-metrics --namespace AWS/FSx` and `get-metric-data`",
                          "Re-run with read access to CloudWatch metrics")
    start, end = lookback(ev.now, ctx.plan.lengths[0] if ctx.plan.given else None)
    span = f"{iso(start)} → {iso(end)}"
    # DiskIopsUtilization is not a saturation signal on Scratch or HDD file systems (RULES §8 C).
    no_iops = {f.file_system_id for f in ev.file_systems
               if (f.deployment_type or "").startswith("SCRATCH") or f.storage_type == "HDD"}
    usable = [m for m in ev.fsx_metrics if m.datapoints
              and not (m.metric == "DiskIopsUtilization" and m.file_system_id in no_iops)]
    if not usable:
        return make_check("P8", "UNVERIFIED", f"{scope}{ids}: no AWS/FSx saturation datapoints over {span}: storage "
                                              "headroom Not observable from metrics",
                          "Time a `stat` or small-file open on the mount during a test run, or run a short load test")
    peaks = "; ".join(f"`{m.file_system_id}` {m.metric} ({_dims(m.dimensions)}) Maximum {m.peak:g} % "
                      f"({m.minutes_at_or_above_90} min ≥ 90 %)" for m in usable if m.peak is not None)
    saturated = [m for m in usable if m.minutes_at_or_above_90 >= SATURATION_MINUTES]
    if saturated:
        return make_check("P8", "RISK", f"{scope}saturation ≥ 90 % for {SATURATION_MINUTES}+ min over {span} "
                                        "(values as reported, percent): " + "; ".join(
                                            f"`{m.file_system_id}` {m.metric} ({_dims(m.dimensions)}) Maximum "
                                            f"{m.peak:g} % for "
                                            f"{m.minutes_at_or_above_90} min" for m in saturated),
                          "Raise the throughput of " + id_list(sorted({m.file_system_id for m in saturated}))
                          + " or spread I/O before the run (metadata-bound: fewer, larger files)")
    return make_check("P8", "PASS", f"{scope}storage not saturated over {span} (values as reported, percent): {peaks}")


def p9(ctx: Context) -> Check:
    ev = ctx.ev
    if ctx.hyperpod:
        ids = id_list(n.instance_id for n in ctx.gpu_nodes())
        return make_check("P9", "UNVERIFIED",
                          f"HyperPod exports no system metrics to CloudWatch: GPU activity of {ids} "
                                              "is Not observable there, so idle reserved GPU hours cannot be counted",
                          "Install the HyperPod observability add-on (Amazon Managed Service for Prometheus and "
                          "Grafana, DCGM exporter) to see GPU utilization per node")
    if ev.capacity_reservations is None:
        return make_check("P9", "Not checked",
                          "capacity reservations not read — `aws ec2 describe-capacity-reservations`",
                          "Re-run with read access")
    reserved = [n for g in ctx.groups for n in g.nodes if n.instance_type
                and cluster_reservations(ev, n.instance_type, [n.instance_id])]
    if not reserved:
        return make_check("P9", "PASS", "not applicable: no GPU compute node runs on reserved capacity")
    if ev.gpu_activity is None:
        return make_check("P9", "Not checked",
                          "GPU activity not read — `aws cloudwatch list-metrics --namespace AWS/EC2 "
                                               "--metric-name GPUPowerUtilization` and `get-metric-data`",
                          "Re-run with read access to CloudWatch metrics")
    activity = {a.instance_id: a for a in ev.gpu_activity}
    seen = [activity[n.instance_id] for n in reserved if n.instance_id in activity
            and activity[n.instance_id].hours_observed]
    blind = [n.instance_id for n in reserved if n.instance_id not in activity
             or not activity[n.instance_id].hours_observed]
    blind_text = (f"; GPU activity Not observable on {id_list(blind)} (no GPUPowerUtilization datapoints)"
                  if blind else "")
    if not seen:
        return make_check("P9", "UNVERIFIED",
                          f"GPU activity Not observable: no `AWS/EC2` GPUPowerUtilization datapoints "
                                              f"for {id_list(blind)}",
                          "Publish GPU metrics (CloudWatch agent `nvidia_gpu` → `nvidia_smi_utilization_gpu`)")
    observed = sum(a.hours_observed for a in seen)
    idle = sum(a.idle_hours for a in seen)
    span = f"{iso(seen[0].start)} → {iso(seen[0].end)}"
    per = ", ".join(f"`{a.instance_id}` {a.idle_hours} of {a.hours_observed} h idle ({a.gpus} GPUs)" for a in seen)
    text = (f"{idle} of {observed} node-hours on reserved capacity idle (every GPU below 5 % {seen[0].metric}) over "
            f"{span}: {per}{blind_text}")
    if observed and idle / observed > IDLE_MAJORITY:
        return make_check("P9", "RISK", text, "Start the workload as soon as the reservation is active, or release "
                                              "capacity that sits idle")
    return make_check("P9", "UNVERIFIED" if blind else "PASS", text,
                      "Publish GPU metrics for every reserved node" if blind else None)


