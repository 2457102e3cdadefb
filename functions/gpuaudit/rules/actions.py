"""Operator actions for the nodes (RULES §7, §11): text, never calls. Identical actions on many nodes are one
action with the list of nodes (RULES §11), worst verdict first (the order of report/order.py): at 2,000 nodes, 279
REBOOT
nodes are one action, and its command takes every ID from an IDs file written beside the report, chunked as the
API allows (`xargs -n`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import IDS_AT, ActionGroup, Verdict

# IDs one call takes: BatchRebootClusterNodes and BatchReplaceClusterNodes accept 1 to 25 node IDs. EC2
# RebootInstances documents no maximum; 100 keeps each request, and what one failed request leaves undone, small.
HYPERPOD_IDS_PER_CALL = 25
EC2_IDS_PER_CALL = 100
NODE = "{node}"
# Where a node's own detail stands in its action (the process and PID its Xid names): nodes differing only there
# are one action, which points to each node's Xid line for it.
DETAIL = "{detail}"
EACH_DETAIL = " (each node's process and PID: its Xid line, in the GPU errors and the JSON result)"
# Worst first, the order of report/order.py (rules do not import report/): REPLACE, NOT OBSERVABLE, REBOOT, …
ACTION_ORDER: tuple[Verdict, ...] = ("REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR",
                                     "LEAVE ALONE")  # where one node's ID stands in an action's text


# A gap or action names this many node IDs at most; past that it counts them and names the exceptions.
NAMED_UP_TO = 10


def nodes_phrase(named: Sequence[str], population: Sequence[str], noun: str) -> str:
    """Which of `population` (the `noun` nodes) a statement is about, readable at any fleet size: every ID while
    few are named; "all 2,000 NVSwitch nodes"; "1,980 of 2,000 NVSwitch nodes (all but i-…)" naming the exceptions
    only; else a count and the first few. Callers keep the full list in the result (`gap_nodes`)."""
    n, m = len(named), len(population)
    if n == m and m > NAMED_UP_TO:
        return f"all {m:,} {noun} nodes"
    if n <= NAMED_UP_TO:
        whole = f"the one {noun} node" if m == 1 else f"all {m:,} {noun} nodes"
        return f"{', '.join(named)} ({whole if n == m else f'{n:,} of {m:,} {noun} nodes'})"
    chosen = set(named)
    others = [iid for iid in population if iid not in chosen]
    if len(others) <= NAMED_UP_TO:
        return f"{n:,} of {m:,} {noun} nodes (all but {', '.join(others)})"
    return (f"{n:,} of {m:,} {noun} nodes (first {', '.join(named[:NAMED_UP_TO])}; all {n:,} in the JSON result's "
            "gap_nodes)")


@dataclass(frozen=True)
class NodeAction:
    """One node's action with its ID as NODE: nodes whose actions are the same text are one action."""

    verdict: Verdict
    node: str
    template: str
    detail: str = ""  # what stands for DETAIL in this node's own text


def ids_file(verdict: Verdict) -> str:
    """The IDs file of a verdict's grouped action, beside the report: `<report stem>.reboot-ids.txt`."""
    return f"{verdict.lower().replace(' ', '-')}-ids.txt"


def grouped(evidence: Evidence, actions: list[NodeAction]) -> list[ActionGroup]:
    """One action per distinct text, with every node it applies to, worst verdict first (then the commonest)."""
    groups: dict[tuple[Verdict, str], list[NodeAction]] = {}
    for a in actions:
        groups.setdefault((a.verdict, a.template), []).append(a)
    out = []
    for (verdict, template), members in groups.items():
        nodes = [a.node for a in members]
        if len(nodes) == 1:
            text, file = template.replace(NODE, nodes[0]).replace(DETAIL, members[0].detail), None
        else:
            text, file = _group_text(evidence, verdict, template.replace(DETAIL, EACH_DETAIL), nodes)
        out.append(ActionGroup(verdict=verdict, nodes=nodes, action=text, ids_file=file))
    return sorted(out, key=lambda g: (ACTION_ORDER.index(g.verdict), -len(g.nodes)))


def _group_text(evidence: Evidence, verdict: Verdict, template: str, nodes: list[str]) -> tuple[str, str | None]:
    """The action for many nodes: a command taking every ID from the IDs file where one exists, else the one
    node's words for each of them; the full node list last."""
    listed = ", ".join(nodes)
    count = f"{len(nodes):,} nodes"
    hyperpod = evidence.cluster.kind.startswith("hyperpod")
    file = ids_file(verdict)
    verb = "Replace" if verdict == "REPLACE" else "Reboot"
    if template.startswith(f"{verb} {NODE}: ") and (hyperpod or verdict == "REBOOT"):
        if hyperpod:
            api = "batch-replace-cluster-nodes" if verdict == "REPLACE" else "batch-reboot-cluster-nodes"
            command = (f"`xargs -n {HYPERPOD_IDS_PER_CALL} aws sagemaker {api} --cluster-name {evidence.cluster.name} "
                       f"--node-ids < {IDS_AT}.{file}` ({HYPERPOD_IDS_PER_CALL} IDs per call, the API's limit; "
                       f"Slurm: `scontrol update node=<node> state=fail reason=\"Action:{verb}\"` for each)")
        else:
            command = (f"drain them, then `xargs -n {EC2_IDS_PER_CALL} aws ec2 reboot-instances --instance-ids < "
                       f"{IDS_AT}.{file}` ({EC2_IDS_PER_CALL} IDs per call)")
        return f"{verb} {count} ({verdict}): {command} — the IDs file beside the report lists them: {listed}", file
    if verdict == "NOT OBSERVABLE" and "; meanwhile" not in template and "; confirm" not in template:
        return (f"On each of {count} (NOT OBSERVABLE): `dmesg -T | grep -i nvrm` and `journalctl -k | grep -i xid`; "
                f"then fix kernel log shipping for them (IDs in {IDS_AT}.{file}): {listed}"), file
    return f"{count} ({verdict}): " + template.replace(NODE, "each node") + f": {listed}", None
