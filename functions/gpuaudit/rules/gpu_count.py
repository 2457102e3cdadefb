"""Fewer GPUs than the type has (RULES §6, §7 REPLACE): the GPUs a node reports in CloudWatch — distinct `GpuId` of
`AWS/EC2` metrics or `index` of `CWAgent` — against its type's GPU count (DescribeInstanceTypes). A node with no GPU
metric is Not observable, never "0 GPUs": only a count read from a series that reported is compared. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from gpuaudit.model.evidence import CapabilityProfile, Evidence, NodeInfo
from gpuaudit.model.planned_reads import GpuCount
from gpuaudit.model.result import GpuError, NodeResult
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.signal_verdict import with_signal
from gpuaudit.rules.xid_routing import NodeRouting

PUBLISH = ("publish per-GPU metrics (CloudWatch agent `nvidia_gpu` → `nvidia_smi_utilization_gpu` per `index`), or "
           "on the node `nvidia-smi -L` against the type's GPU count")


def best_count(counts: Sequence[GpuCount]) -> GpuCount | None:
    """The source that saw the most GPUs: a GPU one source misses and another sees is there (fail closed: REPLACE
    only when every source that reported reads short)."""
    reported = [c for c in counts if c.hour is not None]
    return max(reported, key=lambda c: len(c.gpu_ids)) if reported else None


def short_of_type(counts: Sequence[GpuCount], profile: CapabilityProfile | None) -> tuple[str, GpuError] | None:
    """(the REPLACE evidence, the row it rests on) when the node reports fewer GPUs than its type has."""
    if profile is None or not profile.gpu_count:
        return None
    best = best_count(counts)
    if best is None or best.hour is None or len(best.gpu_ids) >= profile.gpu_count:
        return None
    missing = sorted(set(best.listed_ids) - set(best.gpu_ids))
    gone = f"; listed but silent that hour: {', '.join(missing)}" if missing else ""
    said = (f"{len(best.gpu_ids)} of the {profile.gpu_count} GPUs of {profile.instance_type} report in CloudWatch "
            f"({best.source}: {', '.join(best.gpu_ids)} in the hour from {iso(best.hour)}{gone}) → REPLACE (fewer GPUs "
            "than the type has, RULES §6, §7)")
    row = GpuError(time=best.hour, code=None, class_="hardware", log_group=f"CloudWatch {best.source}",
                   log_stream=best.instance_id, message=f"{len(best.gpu_ids)} of {profile.gpu_count} GPUs reporting",
                   meaning="fewer GPUs than the instance type has (RULES §6)")
    return said, row


def with_gpu_count(result: NodeResult, routing: NodeRouting | None, node: NodeInfo,
                   evidence: Evidence) -> tuple[NodeResult, NodeRouting | None]:
    if evidence.gpu_counts is None:
        return result, routing
    counts = [c for c in evidence.gpu_counts if c.instance_id == node.instance_id]
    short = short_of_type(counts, evidence.profiles.get(node.instance_type or ""))
    if short is None:
        return result, routing
    return with_signal(result, routing, "REPLACE", short[0], short[1], hardware=True)


def gpu_count_gaps(evidence: Evidence, nodes: Sequence[NodeResult]) -> list[str]:
    """Accelerated EC2 nodes the read found no reporting GPU series for: their GPU count is Not observable."""
    if evidence.gpu_counts is None:
        return []
    seen = {c.instance_id for c in evidence.gpu_counts if c.hour is not None}
    read = [n for n in nodes if n.discovered_by in ("api", "user") and n.status.lower() == "running"
            and (n.gpu_count or 0) > 0]
    blind = [n.instance_id for n in read if n.instance_id not in seen]
    if not blind:
        return []
    return [f"GPU count per node Not observable on {', '.join(blind[:20])}"
            + (f" (+{len(blind) - 20} more)" if len(blind) > 20 else "")
            + " — no AWS/EC2 GPUPowerUtilization (GpuId) or CWAgent nvidia_smi_utilization_gpu (index) series with a "
              f"datapoint in the window (ListMetrics, GetMetricData): a missing metric is not a low count; {PUBLISH}"]
