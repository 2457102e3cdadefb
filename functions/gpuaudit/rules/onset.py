"""The failure's onset (RULES §0.5): what "before the failure" is measured from.

The operator's stated onset (`--onset`) wins. Without one, it is the first failure signal read on the affected
nodes inside the impact window: an NCCL timeout line, a node status change (a HyperPod cluster event naming a node
failure, a Kubernetes node turning NotReady). The window's start is a search bound and is never the onset: with no
stated onset and no signal read, the onset is unknown and no cause can be shown to precede it. Pure: no AWS, no
clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from gpuaudit.domain.markers import NCCL_TIMEOUT_MARKERS
from gpuaudit.domain.timing import TIMELINE_MARGIN
from gpuaudit.model.timeutil import iso

if TYPE_CHECKING:
    from gpuaudit.rules.context import Judged

NCCL_HANG = re.compile("|".join(NCCL_TIMEOUT_MARKERS) + r"|NCCL WARN[^\n]*(?i:timed? ?out)")
# A HyperPod cluster event about a node that is a failure, not a launch or a completed step.
NODE_FAILURE = re.compile(r"(?i)\b(fail(ed|ure)?|unhealthy|faulty|replac(e|ing|ement)|reboot(ing)?|terminat(ed|ing)|"
                          r"not ?ready|error)\b")
NOT_READY_EVENTS = ("NodeNotReady", "NodeNotSchedulable", "Rebooted")


@dataclass(frozen=True)
class Onset:
    time: datetime
    source: str  # where it came from, named as read (flag, log group / stream, API)
    stated: bool = False  # the operator's own word


def failure_onset(j: Judged) -> Onset | None:
    """The stated onset, else the earliest failure signal read in the window; None when neither exists."""
    ev = j.evidence
    if ev.window.onset is not None:
        return Onset(ev.window.onset, "stated by the operator (--onset)", stated=True)
    found = [o for o in (_nccl_timeout(j), _cluster_event(j), _kube_change(j)) if o is not None]
    return min(found, key=lambda o: o.time) if found else None


def _in_window(j: Judged, time: datetime) -> bool:
    w = j.evidence.window
    return w.start - TIMELINE_MARGIN <= time <= w.end


def _nccl_timeout(j: Judged) -> Onset | None:
    lines = [*(p for v in j.lines_by_node.values() for p in v), *j.unassigned_lines]
    first = min((p for p in lines if NCCL_HANG.search(p.line.message) and _in_window(j, p.line.time)),
                key=lambda p: p.line.time, default=None)
    if first is None:
        return None
    return Onset(first.line.time, f"first NCCL timeout line, {first.line.log_group} / {first.line.log_stream}")


def _cluster_event(j: Judged) -> Onset | None:
    nodes = {n.instance_id for n in j.nodes}
    first = min((e for e in j.evidence.cluster_events or [] if e.instance_id in nodes
                 and NODE_FAILURE.search(e.description) and _in_window(j, e.time)), key=lambda e: e.time, default=None)
    if first is None:
        return None
    return Onset(first.time, f"node status change of {first.instance_id} (ListClusterEvents: "
                             f"\"{first.description[:160]}\")")


def _kube_change(j: Judged) -> Onset | None:
    ev = j.evidence
    changes: list[tuple[datetime, str]] = []
    for k in ev.kube_nodes or []:
        for c in k.conditions:
            if c.type == "Ready" and c.status != "True" and c.last_transition and _in_window(j, c.last_transition):
                changes.append((c.last_transition, f"node {k.name} condition Ready became {c.status} (Kubernetes "
                                                   "lastTransitionTime)"))
    for e in ev.kube_events or []:
        if e.reason in NOT_READY_EVENTS and _in_window(j, e.time):
            changes.append((e.time, f"Kubernetes event {e.reason} on node {e.node}"))
    if not changes:
        return None
    time, source = min(changes)
    return Onset(time, f"node status change: {source}")


def onset_text(onset: Onset | None) -> str:
    """How a rule names the onset it measured against (never the window's start)."""
    if onset is None:
        return "no onset stated (--onset) and no failure signal read (NCCL timeout, node status change)"
    return f"the onset {iso(onset.time)}, {onset.source}"
