"""A node signal read outside the Xids (Fabric Manager, the GPUs CloudWatch sees) joining the node's result: its
verdict where it is stronger than the node's (RULES §7: exactly one verdict; the evidence the node had is kept beside
it), said beside a verdict as strong, and its line a row of the GPU errors table (a REPLACE or REBOOT always shows the
row it rests on)."""

from __future__ import annotations

from gpuaudit.model.result import GpuError, NodeResult, Verdict
from gpuaudit.rules.xid_routing import NodeRouting

# How much each verdict asks of the operator: a signal replaces the node's verdict only when it asks for more.
STRENGTH: dict[Verdict | None, int] = {None: 0, "LEAVE ALONE": 1, "MONITOR": 2, "NOT OBSERVABLE": 2, "REBOOT": 3,
                                      "REPLACE": 4}


def with_signal(result: NodeResult, routing: NodeRouting | None, verdict: Verdict, said: str, row: GpuError,
                hardware: bool) -> tuple[NodeResult, NodeRouting | None]:
    errors = sorted([*result.gpu_errors, row], key=lambda e: e.time)
    if STRENGTH[verdict] > STRENGTH[result.verdict]:
        text = said + (f"; also: {result.verdict_evidence}" if result.verdict_evidence else "")
        update = {"verdict": verdict, "verdict_evidence": text}
        routing = (routing.model_copy(update={**update, "hardware": routing.hardware or hardware})
                   if routing is not None else NodeRouting(verdict=verdict, verdict_evidence=text, hardware=hardware))
        return result.model_copy(update={**update, "gpu_errors": errors}), routing
    text = f"{result.verdict_evidence}; {said}" if result.verdict_evidence else said
    if routing is not None and hardware and not routing.hardware and verdict == routing.verdict:
        routing = routing.model_copy(update={"hardware": True})  # the same bar met on hardware grounds too
    return result.model_copy(update={"verdict_evidence": text, "gpu_errors": errors}), routing
