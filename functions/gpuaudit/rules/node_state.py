"""HyperPod node-state thresholds (RULES §8 A, "HyperPod node state thresholds"): a deep health check is normal for
45–90 min (DCGM level 4 alone) and flagged only well past 2 h, with how long it has run and since what.

How long: from the latest start read for the node — its launch (ListClusterNodes `LaunchTime`: a new or replaced node
checks on start), a `StartClusterHealthCheck` call naming it (CloudTrail), or a cluster event naming the node's deep
health check (ListClusterEvents) — to the query time. Pure: the Evidence in, the runs out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuaudit.model.evidence import Evidence, NodeInfo
from gpuaudit.model.timeutil import iso

DEEP_HEALTH_CHECK = "DeepHealthCheckInProgress"
NORMAL = (timedelta(minutes=45), timedelta(minutes=90))  # DCGM level 4 alone (RULES §8 A)
FLAG_PAST = timedelta(hours=2)  # "well past 2 h": flagged beyond it (docs/decisions.md)


@dataclass(frozen=True)
class DeepHealthCheckRun:
    instance_id: str
    since: datetime | None  # None: no start time was read
    since_what: str
    running_for: timedelta | None

    @property
    def flagged(self) -> bool:
        return self.running_for is not None and self.running_for > FLAG_PAST

    def text(self) -> str:
        if self.since is None or self.running_for is None:
            return (f"{self.instance_id}: {DEEP_HEALTH_CHECK} for an unknown time (no launch time, health-check call "
                    "or cluster event read for it): its duration is Not observable — `aws sagemaker "
                    "describe-cluster-node` and the `DeepHealthCheckResults/` stream say where it stands")
        took = duration(self.running_for)
        head = f"{self.instance_id}: {DEEP_HEALTH_CHECK} for {took} (since {iso(self.since)}, {self.since_what})"
        if self.flagged:
            return (f"{head} — well past the 2 h a deep health check takes (45–90 min is normal for DCGM level 4 "
                    f"alone): flagged; read its `DeepHealthCheckResults/{self.instance_id}` stream and "
                    "`aws sagemaker describe-cluster-node` for the check that hangs")
        if self.running_for > NORMAL[1]:
            return f"{head} — longer than the usual 45–90 min, not yet past 2 h: not flagged"
        return f"{head} — within the normal 45–90 min (DCGM level 4 alone)"


def duration(d: timedelta) -> str:
    minutes = int(d.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def _started(node: NodeInfo, evidence: Evidence) -> tuple[datetime | None, str]:
    """The latest start read for the node's deep health check, and what it was."""
    starts: list[tuple[datetime, str]] = []
    if node.launch_time is not None:
        starts.append((node.launch_time, "its launch, ListClusterNodes LaunchTime"))
    starts += [(e.time, "StartClusterHealthCheck (CloudTrail)") for e in evidence.cloudtrail or []
               if e.event_name == "StartClusterHealthCheck" and not e.error_code
               and node.instance_id in str(e.request_parameters or {})]
    starts += [(e.time, "cluster event (ListClusterEvents)") for e in evidence.cluster_events or []
               if e.instance_id == node.instance_id and "DeepHealthCheck" in e.description.replace(" ", "")]
    starts = [s for s in starts if s[0] <= evidence.now]
    if not starts:
        return None, ""
    return max(starts, key=lambda s: s[0])


def deep_health_checks(evidence: Evidence) -> list[DeepHealthCheckRun]:
    """Every node the service lists in a deep health check, with how long it has run at the query time."""
    out = []
    for node in evidence.nodes:
        if node.status != DEEP_HEALTH_CHECK:
            continue
        since, what = _started(node, evidence)
        out.append(DeepHealthCheckRun(node.instance_id, since, what,
                                      evidence.now - since if since is not None else None))
    return out
