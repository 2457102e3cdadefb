"""EFA counters (RULES §8 D layer 3): `efa_retrans_pkts`, `efa_retrans_timeout_events`,
`efa_impaired_remote_conn_events`, `efa_unresponsive_remote_events`, `efa_rx_dropped`, `efa_rdma_read_wr_err`,
`efa_rdma_write_wr_err` — "a rise at or before the hang supports D; a rise after it is an effect". Pure: the series
were read by collectors/efa_counters.py (CWAgent, EC2 nodes); the hang is handed in.

A rise (docs/decisions.md): a node's counter, summed over its EFA devices and ports per 5-minute period, above
its own baseline — the periods of the read before the window (`EFA_BASELINE`). The bar is the larger of
RISE_FACTOR times the baseline's mean per period and the baseline's largest period, so a counter that never moved
before rises on its first count, and one that is busy in normal running must clearly exceed what it already did.
A counter with fewer than MIN_BASELINE_PERIODS periods of data before the window has no baseline: its rise is not
judged (a gap, never a clean result). A rise is "at or before the hang" when its period starts at or before it.

HyperPod publishes its `node_amazonefa_*` counters to the observability add-on's Prometheus, not to CloudWatch:
there they are Not observable, and said so naming the add-on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuaudit.domain.readplan import EFA_COUNTERS
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import NodeResult, Signal
from gpuaudit.model.timeutil import iso

RISE_FACTOR = 3.0
MIN_BASELINE_PERIODS = 6  # 30 minutes of 5-minute periods
HYPERPOD_ADDON = ("HyperPod publishes its EFA counters (`node_amazonefa_*`) to the HyperPod observability add-on "
                  "(Amazon Managed Service for Prometheus and Grafana), not to CloudWatch; read them there")
COLLECT = ("add the `efa` section to the CloudWatch agent's `metrics_collected` (with the `host` dimension or "
           "`append_dimensions` InstanceId)")


@dataclass(frozen=True)
class Rise:
    """The first period a counter of a node went above its bar."""

    instance_id: str
    metric: str
    at: datetime  # the period's start
    value: float  # the period's count, summed over the node's EFA devices and ports
    baseline: float  # mean count per period before the window
    bar: float

    def said(self) -> str:
        return (f"{self.instance_id}: `{self.metric}` ({EFA_COUNTERS.get(self.metric, self.metric)}) {self.value:g} in "
                f"the 5 min from {iso(self.at)}, against {self.baseline:.3g} per 5 min before the window (bar "
                f"{self.bar:.3g}; CWAgent)")


@dataclass(frozen=True)
class NodeEfa:
    instance_id: str
    read: tuple[str, ...]  # counters with a series for the node
    rises: tuple[Rise, ...]  # the first rise of each counter that rose, oldest first
    no_baseline: tuple[str, ...]  # counters read without enough data before the window to judge a rise


def node_counters(ev: Evidence) -> dict[str, NodeEfa]:
    """Per node with any CWAgent EFA series read: what was read, what rose, what could not be judged. A reported
    period not listed in a series counted zero (model/planned_reads.py::EfaCounterSeries)."""
    read: dict[str, set[str]] = defaultdict(set)
    rises: dict[str, list[Rise]] = defaultdict(list)
    unjudged: dict[str, list[str]] = defaultdict(list)
    for s in sorted(ev.efa_counters or [], key=lambda x: (x.instance_id, x.metric)):
        read[s.instance_id].add(s.metric)
        if s.periods_before_window < MIN_BASELINE_PERIODS:
            unjudged[s.instance_id].append(s.metric)
            continue
        counted = list(zip(s.times, s.values, strict=False))
        before = [v for t, v in counted if t < ev.window.start]
        base = sum(before) / s.periods_before_window
        bar = max(RISE_FACTOR * base, max(before, default=0.0))
        first = next(((t, v) for t, v in sorted(counted) if t >= ev.window.start and v > bar), None)
        if first is not None:
            rises[s.instance_id].append(Rise(s.instance_id, s.metric, first[0], first[1], base, bar))
    return {node: NodeEfa(node, tuple(sorted(metrics)), tuple(sorted(rises[node], key=lambda r: (r.at, r.metric))),
                          tuple(unjudged[node])) for node, metrics in read.items()}


def _efa_type(ev: Evidence, instance_type: str | None) -> bool | None:
    profile = ev.profiles.get(instance_type or "")
    return None if profile is None else profile.efa_supported


def node_signal(ev: Evidence, node: NodeResult, counters: dict[str, NodeEfa]) -> tuple[Signal, str | None]:
    """RULES §4 other signals: the node's EFA counters Observable, Not observable or Not applicable, and, in an
    incident (the mode that reads them), what they said: a rise and when, none, or why they were not read."""
    if _efa_type(ev, node.instance_type) is False:
        return "Not applicable", None
    if ev.mode != "incident":
        return "Not observable", None  # not read outside an incident: nothing to say per node at fleet size
    if ev.cluster.kind.startswith("hyperpod"):
        return "Not observable", HYPERPOD_ADDON
    if ev.efa_counters is None:
        return "Not observable", "CWAgent `efa_*` counters could not be read (see visibility gaps)"
    got = counters.get(node.instance_id)
    if got is None:
        return "Not observable", f"no CWAgent `efa_*` series for this node: {COLLECT}"
    judged = [m for m in got.read if m not in got.no_baseline]
    parts = []
    if got.rises:
        parts.append(f"rose: {'; '.join(r.said() for r in got.rises)}")
    elif judged:
        parts.append(f"no rise above each counter's baseline ({', '.join(judged)})")
    if got.no_baseline:
        parts.append(f"no baseline before the window for {', '.join(got.no_baseline)}: a rise there is not judged")
    return "Observable", "; ".join(parts)


def with_efa_counters(node: NodeResult, ev: Evidence, counters: dict[str, NodeEfa]) -> NodeResult:
    signal, said = node_signal(ev, node, counters)
    return node.model_copy(update={"signals": node.signals.model_copy(
        update={"efa_counters": signal, "efa_counters_detail": said})})


def efa_gaps(ev: Evidence, nodes: Sequence[NodeResult]) -> list[str]:
    """The visibility gaps of layer 3 in an incident: HyperPod's counters elsewhere, EFA nodes without series."""
    if ev.mode != "incident":
        return []
    efa = [n for n in nodes if _efa_type(ev, n.instance_type) is not False and n.gpu_count]
    if not efa:
        return []
    if ev.cluster.kind.startswith("hyperpod"):
        return [f"EFA counters (RULES §8 D layer 3) Not observable on the cluster's {len(efa)} GPU node(s): "
                f"{HYPERPOD_ADDON}"]
    if ev.efa_counters is None:
        return []  # the failed read is its own gap, naming the call
    silent = [n.instance_id for n in efa if n.signals.efa_counters == "Not observable"]
    return [f"EFA counters (RULES §8 D layer 3) Not observable on {len(silent)} EFA node(s) "
            f"({', '.join(silent[:10])}{' …' if len(silent) > 10 else ''}): no CWAgent `efa_*` series; {COLLECT}"
            ] if silent else []


@dataclass(frozen=True)
class Layer3:
    """Branch D layer 3 on the audited nodes against the hang."""

    before: tuple[Rise, ...]  # rises at or before the hang (every rise when no hang is known)
    after: tuple[Rise, ...]  # rises after the hang: its effect
    text: str  # what layer 3 read, for the branch's evidence
    observable: bool = True  # some node's counters were read


def layer3(ev: Evidence, nodes: Sequence[NodeResult], hang: datetime | None) -> Layer3:
    """What layer 3 says of the nodes: each node's first rise placed against the hang, or why nothing was read."""
    head = "layer 3, EFA counters"
    if ev.cluster.kind.startswith("hyperpod"):
        return Layer3((), (), f"{head} — Not observable: {HYPERPOD_ADDON}", False)
    if ev.efa_counters is None:
        return Layer3((), (), f"{head} — Not observable: CWAgent `efa_*` counters not read", False)
    counters = node_counters(ev)
    read = [counters[n.instance_id] for n in nodes if n.instance_id in counters]
    if not read:
        return Layer3((), (), f"{head} — Not observable: no CWAgent `efa_*` series for the nodes; {COLLECT}", False)
    firsts = [min(c.rises, key=lambda r: r.at) for c in read if c.rises]
    before = tuple(r for r in firsts if hang is None or r.at <= hang)
    after = tuple(r for r in firsts if hang is not None and r.at > hang)
    judged = [c for c in read if set(c.read) - set(c.no_baseline)]
    parts = []
    if before:
        where = f"at or before the hang at {iso(hang)}" if hang is not None else "(no hang or failure onset read)"
        parts.append(f"rose {where}: " + "; ".join(r.said() for r in before))
    if after:
        parts.append(f"rose only after the hang at {iso(hang) if hang else '—'} — an effect of it, not its cause: "
                     + "; ".join(r.said() for r in after))
    quiet = [c.instance_id for c in judged if not c.rises]
    if quiet:
        parts.append(f"no rise above the baseline before the window on {', '.join(quiet)}")
    unjudged = [c.instance_id for c in read if c not in judged]
    if unjudged:
        parts.append(f"no baseline before the window on {', '.join(unjudged)}: a rise there is not judged")
    unread = [n.instance_id for n in nodes if n.instance_id not in counters]
    if unread:
        parts.append(f"no series for {', '.join(unread[:10])}{' …' if len(unread) > 10 else ''}")
    return Layer3(before, after, f"{head} (CWAgent, 5-min sums against each counter's own baseline): "
                  + "; ".join(parts))
