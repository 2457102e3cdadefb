"""Control-plane liveness (#15 item 3; RULES §0.2, §0.4, §0.5, §4): the logs that explain why a node left, failed
to launch or never bootstrapped — ParallelCluster's head-node `clustermgtd`, `slurm_resume` and `slurmctld`, the
HyperPod cluster log group — are binned per hour like kernel streams. A stream with no line across the padded
window is a visibility gap naming the group, the stream and its last event; when it is the log that would decide
a cause, the root cause is `Not observable` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from gpuaudit.domain.streams import HMA_PREFIX, HYPERPOD_CLUSTER_LOG, PCLUSTER_STREAM, pcluster_control_log
from gpuaudit.domain.window import Padded
from gpuaudit.model.evidence import Evidence, StreamActivity
from gpuaudit.model.timeutil import floor_hour, iso
from gpuaudit.rules.coverage import empty_hours

ControlState = Literal["live", "gaps", "silent", "missing", "unread"]

# What each log would have shown, and where to look on the node instead.
RECORDS = {
    "clustermgtd": "node bootstrap failures, protected mode, and unhealthy-node replacement and termination",
    "slurm_resume": "node launch results (e.g. InsufficientInstanceCapacity); it writes only when Slurm resumes "
                    "nodes, so an idle cluster leaves it quiet",
    "slurmctld": "the scheduler's view of the nodes (DOWN, not responding, powered down)",
    HYPERPOD_CLUSTER_LOG: "lifecycle-script results (`LifecycleConfig/…`), cluster metrics and health-agent output",
}
ON_NODE = {
    "clustermgtd": "on the head node: `sudo tail -n 200 /var/log/parallelcluster/clustermgtd`",
    "slurm_resume": "on the head node: `sudo tail -n 200 /var/log/parallelcluster/slurm_resume.log`",
    "slurmctld": "on the head node: `sudo tail -n 200 /var/log/slurmctld.log`",
}
SHIPPING = "and check that the CloudWatch agent ships it (`systemctl status amazon-cloudwatch-agent`)"
HYPERPOD_CHECK = ("confirm the cluster's nodes ship to it (ClusterMetrics, LifecycleConfig streams) and read "
                  "`aws sagemaker list-cluster-events` where NodeProvisioningMode is Continuous")


@dataclass(frozen=True)
class ControlLog:
    log_group: str
    log_stream: str | None
    role: str
    state: ControlState
    instance_id: str | None = None
    last_event: datetime | None = None
    empty_hours: list[datetime] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.log_group} / {self.log_stream}" if self.log_stream else f"{self.log_group} (no stream)"

    @property
    def what(self) -> str:
        return self.role + (f" of head node {self.instance_id}" if self.instance_id else "")


def control_logs(evidence: Evidence, pad: Padded) -> list[ControlLog]:
    """Every control-plane log of the cluster the audit could place, with its hourly state."""
    out: list[ControlLog] = []
    if evidence.cluster.kind == "parallelcluster":
        for a in evidence.stream_activity:
            role = pcluster_control_log(a.log_group, a.log_stream, evidence.cluster.name)
            if role is not None:
                match = PCLUSTER_STREAM.match(a.log_stream)
                out.append(_binned(a.log_group, a.log_stream, role, match["iid"] if match else None, [a], pad))
    elif evidence.cluster.kind.startswith("hyperpod") and evidence.hma_log_group:
        group = evidence.hma_log_group
        others = [a for a in evidence.stream_activity
                  if a.log_group == group and not a.log_stream.startswith(HMA_PREFIX)]
        if others:
            # RULES §4: hours before the cluster existed are not expected, as hours before a node's launch are not
            out.append(_binned(group, None, HYPERPOD_CLUSTER_LOG, None, others, pad, evidence.cluster.creation_time))
    for c in evidence.control_streams or []:
        out.append(ControlLog(log_group=c.log_group, log_stream=c.log_stream, role=c.role, instance_id=c.instance_id,
                              state="silent" if c.listed and c.log_stream else "missing", last_event=c.last_event))
    return out


def _binned(group: str, stream: str | None, role: str, instance_id: str | None, activity: list[StreamActivity],
            pad: Padded, since: datetime | None = None) -> ControlLog:
    """One stream, or (HyperPod) the union of a group's streams: live in an hour if any of them wrote in it; only
    the hours from `since` (the cluster's creation) on are expected to hold a line."""
    hours = pad.hours if since is None else [h for h in pad.hours if h >= floor_hour(since)]
    empties = [empty_hours(a, hours, pad) for a in activity]
    last = max((a.last_event for a in activity if a.last_event), default=None)
    if any(e == [] for e in empties):
        return ControlLog(group, stream, role, "live", instance_id, last)
    if any(e is None for e in empties):
        return ControlLog(group, stream, role, "unread", instance_id, last)
    empty = sorted(set.intersection(*(set(e or []) for e in empties)))
    return ControlLog(group, stream, role, "gaps" if empty else "live", instance_id, last, empty)


def control_gaps(logs: list[ControlLog], pad: Padded) -> list[str]:
    """The visibility gaps: silent and missing streams first (the operator believes they work), then empty hours."""
    out = []
    for c in sorted(logs, key=lambda c: ("silent", "missing", "unread", "gaps", "live").index(c.state)):
        records = RECORDS.get(c.role, "its events")
        check = ON_NODE.get(c.role, HYPERPOD_CHECK)
        if c.state == "silent":
            since = (f"its last event was {iso(c.last_event)}, {_before(c.last_event, pad.start)} before the padded "
                     "window (DescribeLogStreams)") if c.last_event else "DescribeLogStreams gives no event time"
            out.append(f"Control-plane log silent: `{c.where}` ({c.what}) has no line from {iso(pad.start)} to "
                       f"{iso(pad.end)}; {since}. What it records — {records} — is Not observable for the window: "
                       f"{check} {SHIPPING if c.role in ON_NODE else ''}".rstrip())
        elif c.state == "missing":
            out.append(f"Control-plane log missing: `{c.where}` ({c.what}) is not in the group (DescribeLogStreams "
                       f"lists no such stream), so what it records — {records} — is Not observable: {check}"
                       + (f" {SHIPPING}" if c.role in ON_NODE else ""))
        elif c.state == "unread":
            out.append(f"Control-plane log `{c.where}` ({c.what}): its per-hour detail could not be read (see "
                       "visibility gaps); liveness not proven")
        elif c.state == "gaps":
            out.append(f"Control-plane log `{c.where}` ({c.what}) had no line in {len(c.empty_hours)} hour(s) of "
                       f"the padded window: {', '.join(iso(h) for h in c.empty_hours)}"
                       + ("; it writes only when nodes are resumed" if c.role == "slurm_resume" else ""))
    return out


def _before(last: datetime, start: datetime) -> str:
    delta = start - last
    if delta.total_seconds() <= 0:
        return "0 h"
    days, hours = delta.days, delta.seconds // 3600
    return f"{days} day(s) {hours} h" if days else f"{hours} h {delta.seconds % 3600 // 60} min"


# The service's node states that need the control plane's word to be explained (RULES §8 node-state thresholds).
UNEXPLAINED_STATES = {"Failure", "Pending", "NotFound", "ShuttingDown", "terminated", "shutting-down", "stopped",
                      "stopping", "pending"}


def deciding_silence(evidence: Evidence, logs: list[ControlLog]) -> tuple[ControlLog, str] | None:
    """The silent control-plane log that would decide why nodes left or did not start, and that question; None
    when no node needs it or the log that decides was read. ParallelCluster: clustermgtd (it bootstraps,
    replaces and terminates compute nodes). HyperPod: the cluster log group, unless ListClusterEvents answered."""
    compute = [n for n in evidence.nodes if n.role in ("compute", "unknown")]
    gone = [n.instance_id for n in compute if n.discovered_by in ("log-streams", "cloudtrail")
            or n.status in UNEXPLAINED_STATES]
    short = [g.name for g in evidence.cluster.instance_groups if g.current_count is not None
             and g.target_count is not None and g.current_count < g.target_count]
    if not gone and not short:
        return None
    if evidence.cluster.kind == "parallelcluster":
        role = "clustermgtd"
    elif evidence.cluster.kind.startswith("hyperpod") and evidence.cluster_events is None:
        role = HYPERPOD_CLUSTER_LOG
    else:
        return None
    dead = next((c for c in logs if c.role == role and c.state in ("silent", "missing")), None)
    if dead is None:
        return None
    nodes = ", ".join(gone[:5]) + (f" (+{len(gone) - 5} more)" if len(gone) > 5 else "")
    question = (f"why {nodes} left or did not start" if gone else "") + \
        (" and " if gone and short else "") + (f"why {', '.join(short)} is below target" if short else "")
    return dead, question


def not_observable_headline(dead: ControlLog, question: str) -> str:
    since = f"last event {iso(dead.last_event)}" if dead.last_event else "no event time listed"
    state = "has no line in the window" if dead.state == "silent" else "does not exist"
    return (f"Root cause: Not observable — the log that would decide {question}, `{dead.where}` ({dead.what}), "
            f"{state} ({since}). Restore it, or read it on the node, before naming a cause.")
