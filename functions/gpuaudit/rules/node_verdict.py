"""The node's one verdict and its precedence (RULES §4, §7): a hardware bar met on what was read wins over a
coverage gap; LEAVE ALONE stands on a live health-agent stream with the kernel gap stated; else NOT OBSERVABLE.
And the Xid the verdict rests on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpuaudit.domain.streams import HMA_PREFIX
from gpuaudit.model.evidence import Evidence, GpuLine, StreamActivity
from gpuaudit.model.planned_reads import KubeNode
from gpuaudit.model.result import Verdict
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.coverage import NodeCoverage
from gpuaudit.rules.xid_routing import NodeRouting

DIRECT_CHECK = "`dmesg -T | grep -i nvrm`, `journalctl -k | grep -i xid`"


@dataclass(frozen=True)
class AgentStreams:
    """The evidence's health-agent signs of life by node, indexed once per audit (a scan of every stream per node
    was quadratic: 60 s of a 10,000-node judge). Each list keeps the evidence's order."""

    live: dict[str, list[StreamActivity]]  # the node's own HMA streams with lines in the padded window
    detections: dict[str, list[GpuLine]]  # detection lines of the node's own HMA stream
    kube: dict[str, KubeNode]  # by instance ID and by name, the first listed

    @classmethod
    def of(cls, evidence: Evidence) -> AgentStreams:
        live: dict[str, list[StreamActivity]] = {}
        for a in evidence.stream_activity:
            if a.log_group == evidence.hma_log_group and a.log_stream.startswith(HMA_PREFIX) and a.lines > 0:
                live.setdefault(a.log_stream.rsplit("/", 1)[-1], []).append(a)
        detections: dict[str, list[GpuLine]] = {}
        for g in evidence.gpu_lines:
            if g.log_stream.startswith(HMA_PREFIX):
                detections.setdefault(g.log_stream.rsplit("/", 1)[-1], []).append(g)
        kube: dict[str, KubeNode] = {}
        for k in evidence.kube_nodes or []:
            for key in (k.instance_id, k.name):
                if key:
                    kube.setdefault(key, k)
        return cls(live, detections, kube)


def agent_live(instance_id: str, evidence: Evidence, start: datetime, end: datetime,
               agents: AgentStreams | None = None) -> str | None:
    """Was the node's own health-agent stream live in the window (RULES §4: a node's own HMA stream with a line
    inside the padded window is live; §7 precedence)? Said with the stream it rests on; None when not shown.
    Read from the per-stream summary over the padded window, else a detection line of the node inside the window,
    else an EKS node-health condition of the node that changed inside the window. `agents`: the evidence's index
    (AgentStreams.of), built once by a caller asking for every node."""
    agents = agents or AgentStreams.of(evidence)
    for a in agents.live.get(instance_id, []):
        last = f", last {iso(a.last_event)}" if a.last_event else ""
        return (f"the node's own health-agent stream {a.log_group} / {a.log_stream} was live in the window "
                f"({a.lines} line(s) in the padded window{last})")
    seen = [g for g in agents.detections.get(instance_id, []) if start <= g.time <= end]
    if seen:
        return (f"the node's own health-agent stream {seen[-1].log_group} / {seen[-1].log_stream} was live in the "
                f"window (a detection at {iso(seen[-1].time)})")
    kube = agents.kube.get(instance_id)
    changed = [c for c in (kube.conditions if kube else []) if c.last_transition and start <= c.last_transition <= end]
    if kube is not None and changed:
        return (f"the EKS node {kube.name}'s health conditions were live in the window ({changed[-1].type} changed at "
                f"{iso(changed[-1].last_transition or end)})")
    return None


def kernel_gap(coverage: NodeCoverage) -> str | None:
    """The node's kernel-log coverage when none of it is Measured (None when a kernel source proves it)."""
    kernel = [r for r in coverage.rows if r.source_kind == "kernel" and r.log_group.startswith("/")]
    if any(r.status == "Measured" for r in kernel):
        return None
    if not kernel:
        return "no kernel-log source names this node (HyperPod does not ship the kernel log)"
    return "; ".join(f"{r.log_group} / {r.log_stream or 'no stream'}: {r.status}" for r in kernel)


def _shipped_kernel_gap(verdict: Verdict, coverage: NodeCoverage, accelerated: bool) -> str:
    """RULES §7: a hardware bar met on what was read wins over a coverage gap, and the gap is stated beside it — here a
    kernel-log source that names the node yet did not prove coverage (a stream gone silent, empty hours)."""
    if verdict not in ("REPLACE", "REBOOT") or not accelerated:
        return ""
    shipped = [r for r in coverage.rows if r.source_kind == "kernel" and r.log_group.startswith("/") and r.log_stream]
    gap = kernel_gap(coverage) if shipped else None
    if gap is None:
        return ""
    return (f"; kernel-log coverage not proven ({gap}): an Xid in its empty hours would not have been seen — check "
            f"the node directly ({DIRECT_CHECK}) and fix log shipping")


def verdict_for(routing: NodeRouting | None, coverage: NodeCoverage, accelerated: bool,
                live: str | None = None) -> tuple[Verdict | None, str | None]:
    """The node's one verdict (RULES §7) with its precedence: a hardware bar met on what was read wins over a
    coverage gap; LEAVE ALONE on what was read stands when the node's own health-agent stream was live (`live`),
    with the kernel-coverage gap stated and the direct check named; with nothing from the node live, NOT OBSERVABLE,
    still stating the application reading (the hand-off to its owner is in the actions)."""
    blind = coverage.xid_status == "Not observable" and accelerated
    if routing is not None and routing.verdict == "LEAVE ALONE":
        gap = kernel_gap(coverage) if accelerated else None
        if blind and live is None:
            # LEAVE ALONE claims there is no hardware-class Xid: on unproven coverage that was never read.
            return "NOT OBSERVABLE", (f"{routing.verdict_evidence} — but coverage could not be proven and nothing from "
                                      "the node was live in the window, so a hardware-class Xid cannot be ruled out: "
                                      f"check the node directly ({DIRECT_CHECK}) before leaving it alone")
        if gap is not None:
            agent = f"; {live}" if live else ""
            return "LEAVE ALONE", (f"{routing.verdict_evidence}{agent}; kernel-log coverage not proven ({gap}): a "
                                   "hardware-class Xid the agent does not report cannot be ruled out — check the node "
                                   f"directly ({DIRECT_CHECK})")
    if routing is not None and routing.verdict is not None:
        return routing.verdict, routing.verdict_evidence + _shipped_kernel_gap(routing.verdict, coverage, accelerated)
    if routing is not None and routing.hypothesis:
        # A held verdict (rule 48 split UNVERIFIED): watch the node, run the deciding check before acting.
        return "MONITOR", (f"Hypothesis (to validate): {routing.verdict_evidence} Deciding check: "
                           f"{routing.deciding_check}")
    if routing is not None and routing.cause_code is not None:
        return "MONITOR", routing.verdict_evidence
    if blind:
        where = "; ".join(f"{r.log_group} / {r.log_stream or 'no stream'}: {r.status}" for r in coverage.rows)
        return "NOT OBSERVABLE", (f"GPU error coverage could not be proven ({where}); check the node directly "
                                  f"({DIRECT_CHECK}) and fix log shipping")
    return None, None


def deciding_xid(routing: NodeRouting | None, verdict: Verdict | None) -> int | None:
    """The Xid the node's verdict rests on: the routing's cause when the verdict is the routing's (or the MONITOR a
    held or unmet routing shows as, `verdict_for`); None when a coverage gap or no Xid decided it."""
    if routing is None or routing.cause_code is None or verdict in (None, "NOT OBSERVABLE"):
        return None
    return routing.cause_code if verdict in (routing.verdict, "MONITOR") else None
