"""HyperPod EKS: the health agent's verdict from the cluster's own API (#19). Written from RULES §7 ("HMA
XidHardwareFailure with a replace recommendation, or EKS label UnschedulablePendingReplacement" → REPLACE;
"EKS label UnschedulablePendingReboot" → REBOOT) and the operator's question: "Kubernetes has this node tainted
and pending replacement while SageMaker says Running — what do I do?"."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaudit.collectors import kubernetes
from gpuaudit.domain.kube_access import RBAC_MANIFEST, READER_GROUP, READER_ROLE
from gpuaudit.model.result import Result
from tests.helpers.worlds import ACCOUNT, REGION, HyperPodWorld, at, node_of

SINCE, UNTIL = at(6), at(10)
HEALTH = "sagemaker.amazonaws.com/node-health-status"
EKS = "hp-eks-orchestrator"


def eks_world(labels: list[str | None], fault: dict[str, Any] | None = None) -> HyperPodWorld:
    """A HyperPod cluster orchestrated by EKS; node i of the GPU group carries node-health-status labels[i]."""
    w = HyperPodWorld(gpu_nodes=len(labels), gpu_type="ml.p5.48xlarge")
    w.described["Orchestrator"] = {"Eks": {"ClusterArn": f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{EKS}"}}
    for group in w.described["InstanceGroups"]:
        group.pop("SlurmConfig", None)
    w.cluster_metrics(at(-10), at(12, 25))
    nodes = []
    for node, label in zip(w.gpu, labels, strict=True):
        node_labels = {"sagemaker.amazonaws.com/compute-type": "hyperpod"}
        if label is not None:
            node_labels[HEALTH] = label
        unhealthy = label not in (None, "Schedulable")
        nodes.append({
            "metadata": {"name": f"hyperpod-{node.instance_id}", "labels": node_labels},
            "spec": {"providerID": f"aws:///{REGION}a/{node.instance_id}",
                     "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}] if unhealthy
                     else []},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at(-30)}]}})
    w.raw["eks"] = {"clusters": [{"name": EKS, "endpoint": "https://example.gr7.us-west-2.eks.amazonaws.com",
                                  "certificateAuthority": {"data": "LS0tLS1CRUdJTg=="},
                                  "kubernetes": {"nodes": nodes}}]}
    if fault:
        w.raw.setdefault("faults", []).append(fault)
    return w


def audited(w: HyperPodWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)


def test_every_node_health_label_gives_its_rules_verdict() -> None:
    labels = ["UnschedulablePendingReplacement", "UnschedulablePendingReboot", "Schedulable", "Unschedulable", None]
    w = eks_world(labels)
    result = audited(w)
    got = {label: node_of(result, n.instance_id) for label, n in zip(labels, w.gpu, strict=True)}
    assert {label: n.verdict for label, n in got.items()} == {
        "UnschedulablePendingReplacement": "REPLACE", "UnschedulablePendingReboot": "REBOOT",
        "Schedulable": None, "Unschedulable": None, None: None}
    replace = got["UnschedulablePendingReplacement"]
    assert f"{HEALTH}=UnschedulablePendingReplacement" in (replace.verdict_evidence or "")
    assert replace.gpu_errors and replace.gpu_errors[0].log_stream == f"node/hyperpod-{w.gpu[0].instance_id}"
    assert "taint node.kubernetes.io/unschedulable" in (replace.kubernetes or "")
    assert f"{HEALTH}=Schedulable" in (got["Schedulable"].kubernetes or "")
    assert not result.invariants_broken
    assert f"Kubernetes: node hyperpod-{w.gpu[0].instance_id}" in result.report_markdown
    assert any("batch-replace-cluster-nodes" in a and w.gpu[0].instance_id in a for a in result.actions)


def test_a_label_that_disagrees_with_the_logs_is_said() -> None:
    w = eks_world(["Schedulable"])
    w.hma_detection(w.gpu[0], at(7, 3), code=79, reason="XidHardwareFailure", recommendation="Replace")
    n = node_of(audited(w), w.gpu[0].instance_id)
    assert n.verdict == "REPLACE"  # the logs decide; the disagreement is stated, not resolved silently
    assert "the sources disagree" in (n.verdict_evidence or "")


@pytest.mark.parametrize("error", ["Forbidden", "Unauthorized", "Timeout"])
def test_an_unreadable_api_is_a_gap_naming_the_access_never_healthy_nodes(error: str) -> None:
    w = eks_world(["UnschedulablePendingReplacement"],
                  fault={"service": "kubernetes", "operation": "ListNodes", "error": error})
    result = audited(w)
    n = node_of(result, w.gpu[0].instance_id)
    assert n.verdict is None and n.kubernetes is None  # no claim from a label that was not read
    (gap,) = [g for g in result.visibility_gaps if "kubernetes" in g]
    # The fix that is really missing, by how the API server refused: never the view policy (it cannot list nodes).
    needed = {"Forbidden": f"kubectl apply -f {RBAC_MANIFEST}", "Unauthorized": f"--kubernetes-groups {READER_GROUP}",
              "Timeout": "answer was not read"}[error]
    assert needed in gap and EKS in gap and "AmazonEKSViewPolicy" not in gap


def test_nodes_are_read_page_by_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubernetes, "PAGE", 1)
    labels = ["Schedulable", "UnschedulablePendingReboot", "Schedulable"]
    w = eks_world(labels)
    result = audited(w)
    assert node_of(result, w.gpu[1].instance_id).verdict == "REBOOT"  # found on the second page
    assert all(node_of(result, n.instance_id).kubernetes for n in w.gpu)


def _with_deep_health(w: HyperPodWorld, statuses: list[str]) -> HyperPodWorld:
    for group in w.described["InstanceGroups"]:  # the setting itself is set: only the labels decide P5
        group["OnStartDeepHealthChecks"] = ["InstanceStress", "InstanceConnectivity"]
    for node, status in zip(w.raw["eks"]["clusters"][0]["kubernetes"]["nodes"], statuses, strict=True):
        node["metadata"]["labels"]["sagemaker.amazonaws.com/deep-health-check-status"] = status
    return w


def test_preflight_p5_reads_the_deep_health_check_labels() -> None:
    def p5(w: HyperPodWorld) -> tuple[str, str]:
        (check,) = [c for c in w.audit(w.cluster, mode="preflight").checks if c.id == "P5"]
        return check.result, check.evidence

    failed = p5(_with_deep_health(eks_world(["Schedulable", "Unschedulable"]), ["Passed", "Failed"]))
    assert failed[0] == "RISK" and "deep-health-check-status=Failed" in failed[1] and "hyperpod-i-" in failed[1]
    running = p5(_with_deep_health(eks_world(["Schedulable", "Unschedulable"]), ["Passed", "InProgress"]))
    assert running[0] == "UNVERIFIED"
    unread = p5(_with_deep_health(eks_world(["Schedulable"], fault={"service": "kubernetes", "operation": "ListNodes",
                                                                    "error": "Forbidden"}), ["Failed"]))
    assert unread[0] == "Not checked" and "not read" in unread[1]


def test_self_managed_eks_nodes_come_from_the_kubernetes_api() -> None:
    """`--eks-cluster`: the nodes are the instances the Kubernetes nodes name (providerID), each with its
    conditions, e.g. the node monitoring agent's AcceleratedHardwareReady=False with its transition time."""
    from gpuaudit.model.evidence import AuditRequest
    from gpuaudit.pipeline import run_audit
    from tests.helpers.worlds import PClusterWorld

    w = PClusterWorld("self-eks", n_compute=2)
    for node in w.compute:
        w.healthy(node, at(-48), at(12, 25))
    sick, well = w.compute
    items = [{"metadata": {"name": f"ip-10-0-0-{i}.{REGION}.compute.internal", "labels": {}},
              "spec": {"providerID": f"aws:///{REGION}a/{n.instance_id}"},
              "status": {"conditions": [
                  {"type": "Ready", "status": "True", "lastTransitionTime": at(-48)},
                  {"type": "AcceleratedHardwareReady", "status": "False" if n is sick else "True",
                   "reason": "NvidiaXidError" if n is sick else "", "lastTransitionTime": at(7)}]}}
             for i, n in enumerate(w.compute)]
    w.raw["eks"] = {"clusters": [{"name": "train-eks", "endpoint": "https://example.eks.amazonaws.com",
                                  "certificateAuthority": {"data": "LS0t"}, "kubernetes": {"nodes": items}}]}
    request = AuditRequest(cluster="self-eks", since=SINCE, until=UNTIL, eks_cluster="train-eks")  # type: ignore[arg-type]
    result = run_audit(w.aws(), request)
    assert result.cluster.kind == "eks"
    assert {n.instance_id for n in result.nodes} == {sick.instance_id, well.instance_id}  # the head node is not one
    assert "AcceleratedHardwareReady=False (NvidiaXidError) since 2026-10-01T07:00:00Z" in (
        node_of(result, sick.instance_id).kubernetes or "")
    assert "AcceleratedHardwareReady" not in (node_of(result, well.instance_id).kubernetes or "")
    incident = run_audit(w.aws(), request.model_copy(update={"mode": "incident"}))
    assert any(t.resource == sick.instance_id and "AcceleratedHardwareReady became False (NvidiaXidError)" in t.event
               and t.time.isoformat().startswith("2026-10-01T07:00") for t in incident.timeline)

    w.raw.setdefault("faults", []).append({"service": "kubernetes", "operation": "ListNodes", "error": "Forbidden"})
    blind = run_audit(w.aws(), request)
    assert blind.nodes == [] and "no claim about GPU errors is made" in blind.headline and blind.confidence == "Low"
    assert any(READER_ROLE in g and RBAC_MANIFEST in g for g in blind.visibility_gaps)


def test_preflight_p6_is_a_risk_when_the_labels_cannot_be_read() -> None:
    def p6(w: HyperPodWorld) -> str:
        w.cluster_metrics(at(-30), at(-10))  # the cluster log group live across the default 24 h window too
        (check,) = [c for c in w.audit(w.cluster, mode="preflight").checks if c.id == "P6"]
        return check.result

    assert p6(eks_world(["Schedulable"])) == "PASS"
    assert p6(eks_world(["Schedulable"], fault={"service": "kubernetes", "operation": "ListNodes",
                                                "error": "Forbidden"})) == "RISK"


def test_node_events_of_the_window_are_timeline_entries() -> None:
    w = eks_world(["UnschedulablePendingReboot"])
    node = f"hyperpod-{w.gpu[0].instance_id}"
    w.raw["eks"]["clusters"][0]["kubernetes"]["events"] = [
        {"involvedObject": {"kind": "Node", "name": node}, "type": "Warning", "reason": "NodeNotReady",
         "message": "Node is not ready", "lastTimestamp": at(7, 30)},
        {"involvedObject": {"kind": "Node", "name": node}, "type": "Normal", "reason": "Rebooted",
         "message": "long before the window", "lastTimestamp": at(-40)},
        {"involvedObject": {"kind": "Pod", "name": "train-0"}, "type": "Warning", "reason": "BackOff",
         "message": "a pod, not a node", "lastTimestamp": at(7, 40)}]
    events = [t for t in audited(w).timeline if t.source.startswith("Kubernetes") and "events" in t.source]
    assert [(t.resource, t.event) for t in events] == [(node, "Warning NodeNotReady: Node is not ready")]
    unread = eks_world(["Schedulable"], fault={"service": "kubernetes", "operation": "ListEvents",
                                               "error": "Forbidden"})
    assert any("node Events" in g and f"ClusterRole `{READER_ROLE}`" in g for g in audited(unread).visibility_gaps)
