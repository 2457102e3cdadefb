"""Recovery and visibility (RULES §10 P4–P6): automatic recovery, deep health checks, GPU faults visible."""

from __future__ import annotations

from gpuaudit.domain.kube_access import RBAC_MANIFEST, READER_GROUP
from gpuaudit.model.result import Check, NodeResult
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.context import Context, id_list
from gpuaudit.rules.kube_labels import DEEP_HEALTH_LABEL
from gpuaudit.rules.preflight.common import Part, combine, make_check


def p4(ctx: Context) -> Check:
    c = ctx.ev.cluster
    resume = ("a job resumes only with checkpoints plus the orchestrator's auto-resume (`srun --auto-resume=1` on "
              "HyperPod Slurm) — ask the operator whether jobs are submitted that way")
    if ctx.hyperpod:
        if c.node_recovery == "None":
            return make_check("P4", "FAIL", f"cluster `{c.name}`: setting `NodeRecovery` = None — HyperPod neither "
                                            f"reboots nor replaces a faulty node; {resume}",
                              f"`aws sagemaker update-cluster --cluster-name {c.name} --node-recovery Automatic`")
        if c.node_recovery == "Automatic":
            return make_check("P4", "PASS", f"cluster `{c.name}`: setting `NodeRecovery` = Automatic — HyperPod "
                                            f"reboots or replaces a node it finds faulty; {resume}",
                              "Confirm jobs are submitted with `srun --auto-resume=1` and resume from checkpoints")
        return make_check("P4", "UNVERIFIED", f"cluster `{c.name}`: `NodeRecovery` "
                                              f"{c.node_recovery or 'not returned by DescribeCluster'}; {resume}",
                          f"`aws sagemaker describe-cluster --cluster-name {c.name} --query NodeRecovery`")
    if c.kind == "parallelcluster":
        return make_check("P4", "PASS", f"ParallelCluster `{c.name}` has no NodeRecovery setting: its clustermgtd "
                                        "always replaces nodes failing EC2 health checks or marked down by Slurm; GPU "
                                        "health checks (`HealthChecks/Gpu/Enabled`) live in the cluster config, which "
                                        "this audit does not read; jobs resume only with checkpoints and `--requeue`",
                          f"Confirm `HealthChecks: Gpu: Enabled: true` in the queues of `{c.name}` "
                          f"(`pcluster describe-cluster --cluster-name {c.name}`) and submit with checkpoints")
    return make_check("P4", "UNVERIFIED",
                      f"self-managed cluster `{c.name}`: no automatic node recovery setting to read",
                      "Confirm what replaces a failed node (ASG health checks, EKS node auto-repair) before the run")


def p5(ctx: Context) -> Check:
    if not ctx.hyperpod:
        return make_check("P5", "UNVERIFIED", f"`OnStartDeepHealthChecks` is a HyperPod setting; {ctx.ev.cluster.kind} "
                                              "nodes are tested before work only if a custom boot script runs a DCGM "
                                              "diagnostic, which this audit cannot read",
                          "Run `dcgmi diag -r 3` from the compute nodes' boot "
                          "script (ParallelCluster: OnNodeConfigured)")
    parts = []
    for grp in ctx.groups:
        checks = grp.group.on_start_deep_health_checks if grp.group else []
        if not checks:
            parts.append(Part("RISK", f"{grp.label}: setting `OnStartDeepHealthChecks` is empty — new and replaced "
                                      "nodes take work without InstanceStress or InstanceConnectivity tests",
                              f"Set `OnStartDeepHealthChecks: [\"InstanceStress\", \"InstanceConnectivity\"]` on "
                              f"group `{grp.name}` (`aws sagemaker update-cluster --cluster-name "
                              f"{ctx.ev.cluster.name} --instance-groups file://groups.json`)"))
        else:
            parts.append(Part("PASS", f"{grp.label}: `OnStartDeepHealthChecks` = {', '.join(checks)}"))
    return combine("P5", parts + _deep_health_labels(ctx))




def _deep_health_labels(ctx: Context) -> list[Part]:
    """HyperPod EKS: what the deep health checks concluded, as the nodes' labels say (issue #19)."""
    if not ctx.ev.cluster.eks_cluster:
        return []
    if ctx.ev.kube_nodes is None:
        return [Part("Not checked", f"the nodes of EKS cluster `{ctx.ev.cluster.eks_cluster}` were not read (see "
                                    "visibility gaps): their deep-health-check labels are unknown",
                     "Give the auditor's role read access to the nodes (the gap names what is missing: the EKS "
                     f"access entry with Kubernetes group `{READER_GROUP}`, or `kubectl apply -f {RBAC_MANIFEST}`) "
                     "and re-run")]
    by_status: dict[str, list[str]] = {}
    for k in ctx.ev.kube_nodes:
        if DEEP_HEALTH_LABEL in k.labels:
            by_status.setdefault(k.labels[DEEP_HEALTH_LABEL], []).append(k.name)
    failed, running = by_status.get("Failed", []), by_status.get("InProgress", [])
    if failed:
        return [Part("RISK", f"label `{DEEP_HEALTH_LABEL}=Failed` on {id_list(failed)}: these nodes failed their "
                             "deep health check and take no work until HyperPod reboots or replaces them",
                     f"Confirm NodeRecovery is Automatic or replace them: `aws sagemaker batch-replace-cluster-nodes "
                     f"--cluster-name {ctx.ev.cluster.name} --node-ids <instance ids>`")]
    if running:
        return [Part("UNVERIFIED", f"deep health checks still running on {id_list(running)} "
                                   f"(`{DEEP_HEALTH_LABEL}=InProgress`): 45–90 min is normal",
                     "Re-run the pre-flight once they finish")]
    return [Part("PASS", f"no node labelled `{DEEP_HEALTH_LABEL}=Failed` or `InProgress` among "
                         f"{len(ctx.ev.kube_nodes)} Kubernetes node(s)")]


def _coverage_text(n: NodeResult) -> str:
    rows = []
    for r in n.coverage:
        empty = (f", {len(r.empty_hours)} empty hour(s) from {iso(r.empty_hours[0])}" if r.empty_hours else "")
        rows.append(f"`{r.log_group}` / `{r.log_stream or 'no stream'}`: {r.status}{empty}")
    return "; ".join(rows) or "no log source found"


def p6(ctx: Context) -> Check:
    nodes = ctx.gpu_nodes()
    if not nodes:
        return make_check("P6", "UNVERIFIED", "no GPU compute node to prove coverage on (none running): whether GPU "
                                              "faults reach the logs is Not observable until nodes launch",
                          "Re-run the pre-flight once the compute nodes are up")
    blind = [n for n in nodes if n.xid_status == "Not observable"]
    if blind:
        text = "; ".join(f"`{n.instance_id}` (group {n.instance_group or '—'}): Not observable — "
                         f"{_coverage_text(n)}" for n in blind)
        return make_check("P6", "FAIL",
                          f"GPU error coverage Not observable on {len(blind)} of {len(nodes)} GPU compute "
                                        f"node(s): {text}",
                          f"Fix GPU error log shipping for {id_list(n.instance_id for n in blind)} (kernel log to "
                          "CloudWatch; on HyperPod confirm "
                          "`sagemaker-health-monitoring-agent.service` runs); meanwhile check the "
                          "node directly: `dmesg -T | grep -i nvrm`")
    text = "; ".join(f"`{n.instance_id}` (group {n.instance_group or '—'}): {n.xid_status} — {_coverage_text(n)}"
                     for n in nodes)
    if ctx.ev.cluster.eks_cluster and ctx.ev.kube_nodes is None:
        # On EKS the health agent's verdicts are node labels: unreadable labels hide a REPLACE/REBOOT it asked for.
        return make_check("P6", "RISK", f"coverage proven on all {len(nodes)} GPU compute node(s), but the node-health "
                                        f"labels of EKS cluster `{ctx.ev.cluster.eks_cluster}` could not be read (see "
                                        f"visibility gaps): {text}",
                          f"Give the auditor's roles read access to the nodes: "
                          f"EKS access entries with Kubernetes group `{READER_GROUP}` (cdk.json "
                          f"`eks_access_entries`) and the ClusterRole bound to it (`kubectl apply -f "
                          f"{RBAC_MANIFEST}`); the visibility gap says which is missing")
    return make_check("P6", "PASS", f"coverage proven on all {len(nodes)} GPU compute node(s): {text}")


