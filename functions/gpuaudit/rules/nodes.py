"""One node's result: coverage (§4), its GPU errors collapsed (§6), signals, and its verdict (§7), composed from the
readers of each signal beside it (node_lines, memory_signals, service_word, kube_labels, node_signals, reboots) and
the verdict's precedence (node_verdict)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from gpuaudit.domain.capability import accelerated_by_family, fabric_class, is_accelerated
from gpuaudit.model.evidence import Evidence, NodeInfo
from gpuaudit.model.result import NodeResult
from gpuaudit.rules.coverage import NodeCoverage
from gpuaudit.rules.history import PERSISTING_SIGNALS, Memory, remember
from gpuaudit.rules.kube_labels import kube_disagreement, kube_node_of, kube_routing, kube_rows, kube_text
from gpuaudit.rules.memory_signals import memory_signal_routing, memory_signal_rows, sram_threshold
from gpuaudit.rules.node_lines import ParsedLine, collapse, deciding_rows, node_xids
from gpuaudit.rules.node_signals import efa_text, nccl_transports, signals
from gpuaudit.rules.node_verdict import AgentStreams, agent_live, deciding_xid, verdict_for
from gpuaudit.rules.reboots import reboot_times, with_reboots_between
from gpuaudit.rules.service_word import service_routing, service_rows
from gpuaudit.rules.xid_routing import NodeRouting, is_blackwell, route_node


def _signal_times(lines: Sequence[ParsedLine], end: datetime) -> dict[str, list[datetime]]:
    return {marker: times for marker in PERSISTING_SIGNALS
            if (times := sorted(p.line.time for p in lines if marker in p.line.message and p.line.time <= end))}


def assess_node(node: NodeInfo, evidence: Evidence, coverage: NodeCoverage, lines: Sequence[ParsedLine],
                overrides: Mapping[int, str] | None, memory: Memory | None = None,
                agents: AgentStreams | None = None) -> tuple[NodeResult, NodeRouting | None]:
    """The node's result over the audit window and the routing its verdict rests on; what the service itself did to
    the node (`service_action`) is the judge's to add."""
    window_start, window_end = evidence.window.start, evidence.window.end
    accelerated = is_accelerated(node, evidence)
    profile = evidence.profiles.get(node.instance_type or "")
    kube = kube_node_of(node, evidence)
    gpu_errors = sorted([*collapse(lines, overrides, window_start, window_end),
                         *memory_signal_rows(lines, window_start, window_end),
                         *service_rows(lines, window_start, window_end), *kube_rows(kube, evidence)],
                        key=lambda e: e.time)
    xids = node_xids(lines, window_end)
    reboots = reboot_times(node, evidence, lines)
    routing = route_node(xids, node_running=node.status in ("Running", "running"), overrides=overrides,
                         reboot_times=reboots, blackwell=is_blackwell(node.instance_type, profile.gpu_name if profile
                                                                      else None),
                         sram_threshold=sram_threshold(lines, window_end)) if xids else None
    routing = memory_signal_routing(lines, reboots, routing)
    routing = service_routing(lines, window_end, routing)
    routing = kube_routing(kube, routing)
    remembered = remember(node, memory or Memory("off"), routing, xids, _signal_times(lines, window_end), reboots,
                          overrides, accelerated)
    routing = remembered.routing
    history_rows = remembered.rows if not any(e.class_ == "hardware" for e in gpu_errors) else []
    gpu_errors = with_reboots_between(sorted([*gpu_errors, *history_rows,
                                              *deciding_rows(lines, routing, gpu_errors, overrides, window_start)],
                                             key=lambda e: e.time), reboots)
    verdict, evidence_text = verdict_for(routing, coverage, accelerated,
                                         agent_live(node.instance_id, evidence, window_start, window_end, agents))
    signal = max((e.last_time or e.time for e in gpu_errors if e.class_ == "hardware" and e.code is not None),
                 default=None)
    if (disagreement := kube_disagreement(kube, verdict, signal)) is not None:
        evidence_text = f"{evidence_text}; {disagreement}" if evidence_text else disagreement
    efa = efa_text(node, profile, evidence.cluster.kind.startswith("hyperpod"))
    fabric = fabric_class(node.instance_type, profile)
    return NodeResult(
        instance_id=node.instance_id, instance_group=node.instance_group, instance_type=node.instance_type,
        status=node.status, role=node.role, discovered_by=node.discovered_by,
        gpu_count=profile.gpu_count if profile else (0 if accelerated_by_family(node.instance_type) is False else None),
        verdict=verdict,
        verdict_evidence=evidence_text, deciding_xid=deciding_xid(routing, verdict),
        xid_status=coverage.xid_status, coverage=coverage.rows,
        gpu_errors=gpu_errors,
        signals=signals(lines, fabric[1], accelerated),
        nccl_transports=nccl_transports(lines, profile),
        efa=efa, nvswitch=fabric[0],
        kubernetes=kube_text(kube) if kube else None,
        history=remembered.note), routing
