"""Fewer GPUs than the type has (RULES §6, §7 REPLACE): the distinct `GpuId` of a node's `AWS/EC2` GPU metrics, or
`index` of `CWAgent`, against its type's GPU count (DescribeInstanceTypes). Missing metrics are Not observable, never
a low count: a node none of whose GPU series reported in the window says nothing of its GPUs, and a listed GPU
silent in the window is Not observable, not missing (docs/decisions.md). Pure."""

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


def reporting(counts: Sequence[GpuCount]) -> list[GpuCount]:
    """The sources with at least one datapoint of the node in the window: only those say anything of its GPUs."""
    return [c for c in counts if c.hour is not None]


def short_of_type(counts: Sequence[GpuCount], profile: CapabilityProfile | None) -> tuple[str, GpuError] | None:
    """(the REPLACE evidence, the row it rests on) when every source that reported lists fewer GPUs than the type has
    (a GPU one source misses and another lists is there: fail closed)."""
    read = reporting(counts)
    if profile is None or not profile.gpu_count or not read:
        return None
    best = max(read, key=lambda c: len(c.listed_ids))
    if best.hour is None or len(best.listed_ids) >= profile.gpu_count:
        return None
    said = (f"{len(best.listed_ids)} of the {profile.gpu_count} GPUs of {profile.instance_type} in CloudWatch "
            f"({best.source}: {', '.join(best.listed_ids)}; reporting until the hour from {iso(best.hour)}) → REPLACE "
            "(fewer GPUs than the type has, RULES §6, §7)")
    row = GpuError(time=best.hour, code=None, class_="hardware", log_group=f"CloudWatch {best.source}",
                   log_stream=best.instance_id, message=f"{len(best.listed_ids)} of {profile.gpu_count} GPUs listed",
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
    """Where the GPU count is Not observable: accelerated EC2 nodes with no GPU series reporting in the window, and
    listed GPUs silent there."""
    if evidence.gpu_counts is None:
        return []
    read = [n for n in nodes if n.discovered_by in ("api", "user") and n.status.lower() == "running"
            and (n.gpu_count or 0) > 0]
    by_node: dict[str, list[GpuCount]] = {}
    for c in evidence.gpu_counts:
        by_node.setdefault(c.instance_id, []).append(c)
    blind = [n.instance_id for n in read if not reporting(by_node.get(n.instance_id, []))]
    gaps = []
    if blind:
        gaps.append(f"GPU count per node Not observable on {', '.join(blind[:20])}"
                    + (f" (+{len(blind) - 20} more)" if len(blind) > 20 else "")
                    + " — no AWS/EC2 GPUPowerUtilization (GpuId) or CWAgent nvidia_smi_utilization_gpu (index) series "
                      f"with a datapoint in the window (ListMetrics, GetMetricData): a missing metric is not a low "
                      f"count; {PUBLISH}")
    for n in read:
        for c in reporting(by_node.get(n.instance_id, [])):
            silent = sorted(set(c.listed_ids) - set(c.gpu_ids))
            if silent:
                gaps.append(f"{n.instance_id}: GPU {', '.join(silent)} listed in {c.source} but with no datapoint in "
                            f"the window while the others reported: that GPU is Not observable (not counted missing); "
                            f"{PUBLISH}")
    return gaps
