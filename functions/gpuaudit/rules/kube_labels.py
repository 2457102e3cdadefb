"""HyperPod's own verdict on an EKS node as its Kubernetes labels state it (RULES §7): the labels that ask for a
node action, the node's health word, its GPU errors rows, and where the labels and the logs disagree."""

from __future__ import annotations

from datetime import datetime

from gpuaudit.model.evidence import Evidence, NodeInfo
from gpuaudit.model.planned_reads import KubeNode
from gpuaudit.model.result import GpuError, Verdict
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.signal_verdict import STRENGTH
from gpuaudit.rules.xid_routing import NodeRouting

# RULES §7: HyperPod's own verdict as the EKS node labels state it (the AWS label names, and the values that ask for
# a node action): node health, and a failed deep health check.
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HEALTH_LABELS = (HEALTH_LABEL, DEEP_HEALTH_LABEL, "sagemaker.amazonaws.com/fault-type",
                 "sagemaker.amazonaws.com/fault-reason")
LABEL_VERDICT: dict[tuple[str, str], Verdict] = {(HEALTH_LABEL, "UnschedulablePendingReplacement"): "REPLACE",
                                                 (HEALTH_LABEL, "UnschedulablePendingReboot"): "REBOOT",
                                                 (DEEP_HEALTH_LABEL, "Failed"): "REPLACE"}


def kube_node_of(node: NodeInfo, evidence: Evidence) -> KubeNode | None:
    return next((k for k in evidence.kube_nodes or [] if node.instance_id in (k.instance_id, k.name)), None)


def kube_text(k: KubeNode) -> str:
    """The node's own health word: labels, taints, conditions not in their healthy state, as the API writes them."""
    labels = [f"{name}={k.labels[name]}" for name in HEALTH_LABELS if name in k.labels]
    # Ready, AcceleratedHardwareReady, KernelReady…: True is healthy; MemoryPressure, DiskPressure…: True is not.
    unhealthy = [f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "") + (
        f" since {iso(c.last_transition)}" if c.last_transition else "") for c in k.conditions
                 if (c.status != "True") == c.type.endswith("Ready")]
    parts = [f"node {k.name}", *labels, *(f"taint {t}" for t in k.taints), *(f"condition {c}" for c in unhealthy)]
    return "; ".join(parts)


def labels_asking(k: KubeNode | None) -> list[tuple[str, Verdict]]:
    """The node's labels that ask for a node action, as `name=value`, strongest first."""
    asked = [(f"{name}={value}", verdict) for (name, value), verdict in LABEL_VERDICT.items()
             if k is not None and k.labels.get(name) == value]
    return sorted(asked, key=lambda a: -STRENGTH[a[1]])


def kube_routing(k: KubeNode | None, routing: NodeRouting | None) -> NodeRouting | None:
    """A label that asks for REPLACE or REBOOT is that verdict (RULES §7) when it asks for more than the logs."""
    asked = labels_asking(k)
    if k is None or not asked or (routing is not None and STRENGTH[routing.verdict] >= STRENGTH[asked[0][1]]):
        return routing
    label, verdict = asked[0]
    return NodeRouting(verdict=verdict, hardware=True,
                       verdict_evidence=f"Kubernetes {k.name}: label {label} → {verdict} (HyperPod's own verdict on "
                                        "the EKS node, RULES §7)")


def kube_rows(k: KubeNode | None, evidence: Evidence) -> list[GpuError]:
    """A label asking for REPLACE/REBOOT is a row of the GPU errors table (no code), so the verdict shows it."""
    if k is None:
        return []
    changed = [c.last_transition for c in k.conditions if c.last_transition]
    return [GpuError(time=max(changed) if changed else evidence.now, code=None, class_="hardware",
                     log_group=f"kubernetes {evidence.cluster.eks_cluster}", log_stream=f"node/{k.name}",
                     message=label, source="hma",
                     meaning="node label set by HyperPod on the EKS node (RULES §7)")
            for label, _verdict in labels_asking(k)]


def kube_disagreement(k: KubeNode | None, verdict: Verdict | None, signal: datetime | None = None) -> str | None:
    """The label and the logs tell different stories: said, never silently resolved. A node that turned Ready again
    after the signal (`signal`: the latest the verdict rests on) shows its state after recovery: a healthy label
    there is not a disagreement, and is said as such."""
    if k is None:
        return None
    label = k.labels.get(HEALTH_LABEL)
    asked = labels_asking(k)
    labelled = asked[0][1] if asked else None
    back = max((c.last_transition for c in k.conditions if c.type == "Ready" and c.status == "True"
                and c.last_transition and signal is not None and c.last_transition > signal), default=None)
    if verdict in ("REPLACE", "REBOOT") and labelled is None and back is not None and signal is not None:
        return (f"the EKS node {k.name} is labelled {HEALTH_LABEL}={label or '(absent)'} and Ready since {iso(back)}, "
                f"after the signal at {iso(signal)}: the label shows the node after its recovery, not a disagreement")
    if verdict in ("REPLACE", "REBOOT") and labelled is None:
        return (f"the EKS node {k.name} is labelled {HEALTH_LABEL}={label or '(absent)'}: the node's own health "
                "status does not ask for it — the sources disagree")
    if labelled is not None and verdict != labelled:  # weaker or stronger than the logs: said either way
        return f"the EKS node {k.name} is labelled {asked[0][0]} while the logs give {verdict or 'no verdict'}"
    return None
