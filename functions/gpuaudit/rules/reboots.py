"""When a node rebooted (a kernel banner in its own stream, or a reboot call naming it), and the reboots between
a collapsed row's first and last occurrence."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from gpuaudit.domain.markers import BOOT_BANNER
from gpuaudit.domain.streams import NodeIndex, stream_node_ids
from gpuaudit.model.evidence import Evidence, NodeInfo
from gpuaudit.model.result import GpuError
from gpuaudit.rules.node_lines import ParsedLine


def reboot_times(node: NodeInfo, evidence: Evidence, lines: Sequence[ParsedLine]) -> list[datetime]:
    """When the node booted again: a kernel banner in its own stream, a reboot call naming it, a HyperPod cluster
    event saying the service rebooted it, or the kubelet's `Rebooted` event on the EKS node (HyperPod ships no kernel
    log: the service's and the node's own events are the reboots it shows)."""
    times = [p.line.time for p in lines if BOOT_BANNER.search(p.line.message)]
    times += [e.time for e in evidence.cloudtrail or []
              if e.event_name == "BatchRebootClusterNodes" and not e.error_code
              and node.instance_id in str(e.request_parameters or {})]
    times += [ce.time for ce in evidence.cluster_events or []
              if ce.instance_id == node.instance_id and "reboot" in ce.description.lower()]
    times += kubelet_reboots(node.instance_id, evidence)
    return sorted(times)


def kubelet_reboots(instance_id: str, evidence: Evidence) -> list[datetime]:
    """On EKS the kubelet reports a new boot ID as the node's `Rebooted` event (named by node name or instance ID)."""
    names = {instance_id, *(k.name for k in evidence.kube_nodes or [] if instance_id in (k.instance_id, k.name))}
    return [ke.time for ke in evidence.kube_events or [] if ke.reason == "Rebooted" and ke.node in names]


def with_reboots_between(rows: Sequence[GpuError], reboots: Sequence[datetime]) -> list[GpuError]:
    """Each row collapsed from several occurrences names the reboots between its first and last one."""
    return [row.model_copy(update={"reboots_between": between}) if row.last_time is not None and (
        between := [r for r in reboots if row.time < r < row.last_time]) else row for row in rows]


def reboots_by_node(evidence: Evidence) -> dict[str, list[datetime]]:
    """Every node's reboots as `reboot_times` sees them (the history records them for later audits)."""
    index = NodeIndex(evidence.nodes)
    banners: dict[str, list[ParsedLine]] = defaultdict(list)
    for line in evidence.gpu_lines:
        if BOOT_BANNER.search(line.message):
            for iid in stream_node_ids(line.log_stream, index):
                banners[iid].append(ParsedLine(line, None, None))
    return {n.instance_id: reboot_times(n, evidence, banners.get(n.instance_id, [])) for n in evidence.nodes}
