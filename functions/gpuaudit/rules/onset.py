"""The failure's onset (RULES §0.5): what "before the failure" is measured from.

The operator's stated onset (`--onset`) wins. Without one, it is the first failure signal read on the affected
nodes inside the impact window: an NCCL timeout line, a sustained throughput or step-time drop in a job log read
(`sustained_drop`), a node status change (a HyperPod cluster event naming a node failure, a Kubernetes node turning
NotReady, a HyperPod node replaced under a new instance ID, an EC2 status check turning impaired); and where none of
those was read, a drop of an in-scope file system's own client I/O (RULES §8 C). The
window's start is a search bound and is never the onset: with no stated onset and no signal read,
the onset is unknown and no cause can be shown to precede it. A job log whose figures could not be read gives no
onset and is said beside whatever onset was found (an earlier drop there is not excluded), never "no drop". Pure:
no AWS, no clock.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median
from typing import TYPE_CHECKING

from gpuaudit.domain.markers import NCCL_TIMEOUT_MARKERS
from gpuaudit.domain.throughput import FORM_BY_MEASURE
from gpuaudit.domain.timing import FSX_BUCKET, TIMELINE_MARGIN
from gpuaudit.model.evidence import Evidence, JobFigure
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.acted import replacements
from gpuaudit.rules.storage import client_io_drop, file_systems_in_scope

if TYPE_CHECKING:
    from gpuaudit.rules.context import Judged

NCCL_HANG = re.compile("|".join(NCCL_TIMEOUT_MARKERS) + r"|NCCL WARN[^\n]*(?i:timed? ?out)")
# A HyperPod cluster event about a node that is a failure, not a launch or a completed step.
NODE_FAILURE = re.compile(r"(?i)\b(fail(ed|ure)?|unhealthy|faulty|replac(e|ing|ement)|reboot(ing)?|terminat(ed|ing)|"
                          r"not ?ready|error)\b")
NOT_READY_EVENTS = ("NodeNotReady", "NodeNotSchedulable", "Rebooted")
# A sustained drop (docs/decisions.md): DROP_READINGS consecutive readings each below DROP_RATIO of the baseline,
# the median of up to BASELINE_MAX readings just before them (at least BASELINE_MIN: a drop is told against what
# the job did, never against nothing). A step time is read as its inverse, so it doubling is a drop to 50 %.
DROP_RATIO = 0.7
DROP_READINGS = 3
BASELINE_MIN, BASELINE_MAX = 5, 30


@dataclass(frozen=True)
class Drop:
    time: datetime  # the first reading below the bar
    before: float  # the baseline's median, as printed (a throughput, or a step time)
    after: float  # the median of the sustained readings
    readings: int  # how many consecutive readings stayed below the bar (at least DROP_READINGS)


@dataclass(frozen=True)
class Onset:
    time: datetime
    source: str  # where it came from, named as read (flag, log group / stream, API)
    stated: bool = False  # the operator's own word
    resolution: timedelta = timedelta(0)  # how far before `time` the change may have begun (a bucketed reading)


def failure_onset(j: Judged) -> Onset | None:
    """The stated onset, else the earliest failure signal read in the window; None when neither exists."""
    ev = j.evidence
    if ev.window.onset is not None:
        return Onset(ev.window.onset, "stated by the operator (--onset)", stated=True)
    found = [o for o in (_nccl_timeout(j), _job_drop(j), _cluster_event(j), _kube_change(j),
                                   _replaced_node(j), _status_check(j)) if o is not None]
    if not found:
        found = [o for o in (_file_system_drop(j),) if o is not None]
    if not found:
        return None
    first = min(found, key=lambda o: o.time)
    unread = ev.job_figure_unread_groups
    return first if not unread else Onset(first.time, f"{first.source}; {_unread_jobs(unread)}")


def unread_signals(ev: Evidence) -> str | None:
    """The failure signals that could not be read (a job log's figures), said beside an onset not known."""
    return _unread_jobs(ev.job_figure_unread_groups) if ev.job_figure_unread_groups else None


def _unread_jobs(groups: Sequence[str]) -> str:
    return (f"the throughput and step-time lines of {', '.join(groups)} were not read: an earlier drop there is not "
            "excluded")


def sustained_drop(readings: Sequence[JobFigure], higher_is_better: bool,
                   since: datetime | None = None) -> Drop | None:
    """The first sustained drop of one figure of one stream beginning at or after `since`, oldest reading first
    (see DROP_RATIO); readings before `since` still count in the baseline."""
    values = [r.value for r in readings]
    rates = [v if higher_is_better else 1.0 / v for v in values]
    for i in range(BASELINE_MIN, len(rates) - DROP_READINGS + 1):
        if since is not None and readings[i].time < since:
            continue
        baseline = slice(max(0, i - BASELINE_MAX), i)
        bar = DROP_RATIO * median(rates[baseline])
        if all(rate < bar for rate in rates[i:i + DROP_READINGS]):
            run = next((k for k in range(i, len(rates)) if rates[k] >= bar), len(rates)) - i
            return Drop(readings[i].time, median(values[baseline]), median(values[i:i + run]), run)
    return None


def _job_drop(j: Judged) -> Onset | None:
    """The earliest sustained throughput or step-time drop in the job log groups read, inside the window."""
    series: dict[tuple[str, str, str], list[JobFigure]] = defaultdict(list)
    for figure in j.evidence.job_figures:
        if figure.measure in FORM_BY_MEASURE and figure.value > 0:
            series[(figure.log_group, figure.log_stream, figure.measure)].append(figure)
    found: list[Onset] = []
    for (group, stream, measure), readings in series.items():
        higher = FORM_BY_MEASURE[measure].higher_is_better
        drop = sustained_drop(sorted(readings, key=lambda r: r.time), higher, j.evidence.window.start - TIMELINE_MARGIN)
        if drop is None or not _in_window(j, drop.time):
            continue
        moved = "fell" if higher else "rose"
        found.append(Onset(drop.time, f"job {'throughput' if higher else 'step time'} drop: {measure} {moved} from "
                                      f"{drop.before:g} (median before) to {drop.after:g} over {drop.readings} "
                                      f"consecutive readings, {group} / {stream}"))
    return min(found, key=lambda o: o.time, default=None)


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


def _status_check(j: Judged) -> Onset | None:
    """An EC2 status check of an affected node turning impaired (DescribeInstanceStatus): a node status change.
    Its time is the check's own `ImpairedSince`; a check read impaired with no such date gives no time, so no onset."""
    nodes = {n.instance_id for n in j.nodes}
    first = min((s for s in j.evidence.instance_status or [] if s.instance_id in nodes
                 and "impaired" in (s.system_status, s.instance_status) and s.impaired_since is not None
                 and _in_window(j, s.impaired_since)), key=lambda s: s.impaired_since or j.evidence.window.end,
                default=None)
    if first is None or first.impaired_since is None:
        return None
    return Onset(first.impaired_since, f"node status change of {first.instance_id} (DescribeInstanceStatus: system "
                                       f"status check {first.system_status}, instance status check "
                                       f"{first.instance_status}, impaired since {iso(first.impaired_since)})")


def _replaced_node(j: Judged) -> Onset | None:
    """A HyperPod node no longer listed whose group launched a new node after its last line was replaced: a node
    status change read from ListClusterNodes (RULES §5.7). The replacement's launch is when the change is known to
    have happened; it may have begun as early as the old node's last line (the resolution)."""
    changes = [Onset(r.launched, f"node status change: {old} no longer listed by ListClusterNodes; {r.new} launched "
                                 f"in its group at {iso(r.launched)} (its likely replacement, matched by group and "
                                 "time)", resolution=timedelta(minutes=r.minutes_after))
               for old, r in replacements(j.nodes, j.evidence).items() if _in_window(j, r.launched)]
    return min(changes, key=lambda o: o.time, default=None)


def _file_system_drop(j: Judged) -> Onset | None:
    """RULES §8 C: where no other failure signal was read (an audit scoped to the file system alone), a drop of the
    file system's own client I/O (DataReadBytes + DataWriteBytes, or MetadataOperations) starting inside the window
    is the stall's onset — read from 10-minute means, so known to within one bucket."""
    ev = j.evidence
    drops = [d for fs in file_systems_in_scope(ev)[0] if (d := client_io_drop(ev, fs)) is not None
             and _in_window(j, d.time)]
    first = min(drops, key=lambda d: d.time, default=None)
    if first is None:
        return None
    return Onset(first.time, f"drop of {first.file_system_id}'s own client I/O: {first.metrics} fell from "
                             f"{first.before:,.0f} to {first.after:,.0f} (10-minute means, AWS/FSx)",
                 resolution=FSX_BUCKET)


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


def onset_text(onset: Onset | None, unread_jobs: Sequence[str] = ()) -> str:
    """How a rule names the onset it measured against (never the window's start); with none, the job logs whose
    figures could not be read are named (unread, never "no drop")."""
    if onset is None:
        return ("no onset stated (--onset) and no failure signal read (NCCL timeout, job throughput or step-time "
                "drop, node status change)" + (f"; {_unread_jobs(unread_jobs)}" if unread_jobs else ""))
    return f"the onset {iso(onset.time)}, {onset.source}"
