"""Straggler GPU (RULES §8): one GPU clearly below its peers in the same job — CloudWatch agent per `index`: SM
clock, temperature, power draw, PCIe link width or generation → MONITOR, REBOOT if it persists; Hypothesis unless it
lines up with the slowdown. Pure: the series were read by collectors/gpu_peers.py; the onset is handed in.

The job the auditor can see is a GPU group (docs/decisions.md): every GPU of the group's nodes is a peer. An hour
judges a metric when at least MIN_PEERS other GPUs reported it. "Clearly below": a measured value under
CLEARLY_BELOW of the peers' median (clock, temperature, power); a PCIe width or generation under the value most peers
report (those are steps, not levels). "One GPU": at most one in GPUS_PER_STRAGGLER of the reporting GPUs is below in
that hour — more is the job's own pattern, not a straggler. It persists when it was below in at least PERSIST_HOURS
hours and in every hour it reported from its first such hour on.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from statistics import median

from gpuaudit.domain.readplan import STRAGGLER_METRICS
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import NodeResult, Verdict
from gpuaudit.model.timeutil import floor_hour, iso

CLEARLY_BELOW = 0.85
MIN_PEERS = 3
GPUS_PER_STRAGGLER = 8
PERSIST_HOURS = 2
STEPPED = frozenset({"nvidia_smi_pcie_link_width_current", "nvidia_smi_pcie_link_gen_current"})
CONFIRM = ("on the node while the job runs: `nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE` (clock and "
           "throttle reasons) and `nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.width.current "
           "--format=csv`, against a per-rank step time")

Gpu = tuple[str, str]  # (instance ID, index)


@dataclass(frozen=True)
class Straggler:
    instance_id: str
    index: str
    group: str
    below: tuple[str, ...]  # per metric, the worst hour: value against the peers'
    hours: tuple[datetime, ...]  # UTC hours it was clearly below on some metric
    reported: int  # hours it reported from its first straggling hour on
    persists: bool

    def lines_up(self, onset: datetime | None) -> bool:
        """Below its peers in the hour the failure began (RULES §0.5 onset: stated or the first failure signal)."""
        return onset is not None and floor_hour(onset) in self.hours

    def said(self) -> str:
        when = ", ".join(iso(h) for h in self.hours)
        return (f"GPU index {self.index} of {self.instance_id} clearly below its peers in "
                f"group `{self.group}` (CWAgent): {'; '.join(self.below)} — below in {len(self.hours)} of "
                f"{self.reported} hour(s) it reported from the first ({when})")


def _below(metric: str, value: float, peers: list[float]) -> float | None:
    """The peers' reference when `value` is clearly below it, else None."""
    if metric in STEPPED:
        usual = Counter(peers).most_common(1)[0][0]
        return usual if value < usual else None
    mid = median(peers)
    return mid if mid > 0 and value < CLEARLY_BELOW * mid else None


def stragglers(ev: Evidence) -> list[Straggler]:
    """Every GPU clearly below its group's peers on some metric in some hour of the read, one record per GPU."""
    group_of = {n.instance_id: n.instance_group or n.instance_type or "cluster" for n in ev.nodes}
    # (group, metric, hour) → GPU → value
    table: dict[tuple[str, str, datetime], dict[Gpu, float]] = defaultdict(dict)
    reported: dict[Gpu, set[datetime]] = defaultdict(set)
    for s in ev.gpu_peers or []:
        for hour, value in zip(s.hours, s.values, strict=False):
            table[(group_of.get(s.instance_id, "cluster"), s.metric, hour)][(s.instance_id, s.index)] = value
            reported[(s.instance_id, s.index)].add(hour)
    flagged: dict[Gpu, dict[datetime, list[tuple[str, float, float]]]] = defaultdict(lambda: defaultdict(list))
    for (_, metric, hour), values in table.items():
        if len(values) < MIN_PEERS + 1:
            continue
        low = {}
        for gpu, value in values.items():
            ref = _below(metric, value, [v for g, v in values.items() if g != gpu])
            if ref is not None:
                low[gpu] = (value, ref)
        if 0 < len(low) <= max(1, len(values) // GPUS_PER_STRAGGLER):
            for gpu, (value, ref) in low.items():
                flagged[gpu][hour].append((metric, value, ref))
    out = []
    for (iid, index), by_hour in sorted(flagged.items()):
        first = min(by_hour)
        seen = sorted(h for h in reported[(iid, index)] if h >= first)
        worst: dict[str, tuple[float, float, datetime]] = {}
        for hour, items in sorted(by_hour.items()):
            for metric, value, ref in items:
                if metric not in worst or value / (ref or 1) < worst[metric][0] / (worst[metric][1] or 1):
                    worst[metric] = (value, ref, hour)
        below = tuple(f"{STRAGGLER_METRICS.get(m, m)} {v:g} against the peers' {r:g} at {iso(h)}"
                      for m, (v, r, h) in sorted(worst.items()))
        out.append(Straggler(iid, index, group_of.get(iid, "cluster"), below, tuple(sorted(by_hour)), len(seen),
                             persists=len(by_hour) >= PERSIST_HOURS and all(h in by_hour for h in seen)))
    return out


def with_stragglers(nodes: list[NodeResult], ev: Evidence, onset: datetime | None) -> list[NodeResult]:
    """RULES §8: a straggler GPU's node → MONITOR, REBOOT when it persists; labelled Hypothesis (to validate) with
    its confirming measurement unless it lines up with the slowdown (Proven). The verdict is taken only over no
    verdict or a weaker one (MONITOR); a node holding another verdict keeps it and is told of the straggler."""
    found: dict[str, list[Straggler]] = defaultdict(list)
    for s in stragglers(ev):
        found[s.instance_id].append(s)
    out = []
    for n in nodes:
        mine = found.get(n.instance_id)
        if not mine:
            out.append(n)
            continue
        verdict: Verdict = "REBOOT" if any(s.persists for s in mine) else "MONITOR"
        label = next((f"Proven: it lines up with the slowdown at {iso(onset)}" for s in mine if s.lines_up(onset)
                      and onset is not None), None) or f"Hypothesis (to validate): {CONFIRM}"
        said = (f"Straggler GPU ({verdict}{', it persists' if verdict == 'REBOOT' else ''}): "
                + "; ".join(s.said() for s in mine) + f". {label}")
        if n.verdict is None or (n.verdict == "MONITOR" and verdict == "REBOOT"):
            out.append(n.model_copy(update={"verdict": verdict, "verdict_evidence": "; ".join(
                x for x in (said, n.verdict_evidence) if x)}))
        else:
            out.append(n.model_copy(update={"verdict_evidence": "; ".join(x for x in (n.verdict_evidence, said) if x)}))
    return out
