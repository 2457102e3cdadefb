"""Fleet-scale reports lead with exceptions (#20): nodes the reader must see one by one, and the healthy rest
counted per group. The JSON result keeps every node (OUTPUT-CONTRACT); the Markdown and HTML reports use this."""

from __future__ import annotations

from gpuaudit.model.result import NodeResult, Result
from gpuaudit.model.timeutil import iso
from gpuaudit.report.order import worst_first

# Beyond this many healthy nodes, they are counted per group instead of listed (small clusters list every node).
HEALTHY_LISTED = 50
HEALTHY = ("Measured", "No HMA detections")


def is_exception(n: NodeResult) -> bool:
    """A node the reader must see: a verdict, a GPU line, a status short of proven, or an empty hour."""
    return bool(n.verdict or n.gpu_errors or n.xid_status not in HEALTHY or any(c.empty_hours for c in n.coverage)
                or "flapping:" in (n.history or "") or any(t.assessment == "bad" for t in n.nccl_transports))


def nccl_summary(n: NodeResult) -> str:
    """The NCCL transport cell (RULES §11): each transport the node's NCCL used with its assessment, bad first;
    `Not observable` without NCCL lines."""
    if not n.nccl_transports:
        return n.signals.nccl + (" (NCCL lines, none naming a transport)" if n.signals.nccl == "Observable" else "")
    seen: dict[str, str] = {}
    for t in n.nccl_transports:
        seen.setdefault(t.transport, t.assessment)
    return ", ".join(f"{name} ({assessment.upper() if assessment == 'bad' else assessment})"
                     for name, assessment in seen.items())


def split_healthy(nodes: list[NodeResult]) -> tuple[list[NodeResult], dict[str, list[NodeResult]]]:
    """(the nodes to list one by one, worst verdict first, the healthy rest per group)."""
    healthy = [n for n in nodes if not is_exception(n)]
    if len(healthy) <= HEALTHY_LISTED:
        return worst_first(nodes), {}
    groups: dict[str, list[NodeResult]] = {}
    for n in healthy:
        groups.setdefault(n.instance_group or "(no group)", []).append(n)
    return worst_first(n for n in nodes if is_exception(n)), groups


def healthy_summary(nodes: list[NodeResult]) -> str:
    """Their types and statuses, e.g. "p5.48xlarge: 9,900 Measured" (account text: escape per output)."""
    types = ", ".join(sorted({n.instance_type or "type unknown" for n in nodes}))
    statuses = ", ".join(f"{sum(1 for n in nodes if n.xid_status == s)} {s}" for s in HEALTHY
                         if any(n.xid_status == s for n in nodes))
    return f"{types}: {statuses}"


def onset_sentence(r: Result) -> str | None:
    """RULES §0.5, for every report format: what "before the failure" was measured from (incident mode); the
    window's start is never called the onset. Plain text: each renderer escapes it."""
    if r.mode != "incident":
        return None
    if r.window.onset is None:
        return ("Failure onset: not known — none stated (--onset) and no failure signal read (NCCL timeout, node "
                "status change); no cause is shown to precede it")
    return f"Failure onset: {iso(r.window.onset)} ({r.window.onset_source or 'source not recorded'})"
