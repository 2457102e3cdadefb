"""What was already done to a node after the signal its verdict rests on (RULES §7 precedence): a node the service
already replaced or rebooted gets no command to do it again; its line says what was done and what to check on the
replacement. Pure: reads the node results and the evidence of this run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import NodeResult
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.reboots import kubelet_reboots

GONE = {"terminated", "shutting-down", "shuttingdown", "notfound", "stopped",
        "stopping"}  # instance states: no longer there
REPLACEMENT_WITHIN = timedelta(hours=6)  # a replacement launches minutes to hours after the old node stops


@dataclass(frozen=True)
class Replacement:
    """The node of the same group that launched next after a vanished HyperPod node's last line."""

    new: str
    launched: datetime
    minutes_after: int


def replacements(nodes: Sequence[NodeResult], evidence: Evidence) -> dict[str, Replacement]:
    """HyperPod gives a replaced node a new instance ID (RULES §5.7): a node found only by its streams (no longer
    listed) is matched to the node of the same group that launched next after its last line (a hypothesis from
    group and time), each new node taken once."""
    if not evidence.cluster.kind.startswith("hyperpod"):
        return {}
    launched = {n.instance_id: n.launch_time for n in evidence.nodes if n.launch_time and n.discovered_by == "api"}
    taken: set[str] = set()
    found: dict[str, Replacement] = {}
    for old in sorted((n for n in nodes if n.discovered_by == "log-streams"), key=lambda n: n.instance_id):
        last = max((c.last_event for c in old.coverage if c.last_event), default=None)
        if last is None:
            continue
        later = sorted((t, n.instance_id) for n in nodes if n.instance_group == old.instance_group
                       and n.instance_id not in taken and (t := launched.get(n.instance_id)) is not None
                       and last <= t <= last + REPLACEMENT_WITHIN)
        if later:
            when, new = later[0]
            taken.add(new)
            found[old.instance_id] = Replacement(new, when, int((when - last).total_seconds() // 60))
    return found


@dataclass(frozen=True)
class Done:
    kind: Literal["replaced", "rebooted"]
    said: str  # what was done, with the source that shows it
    check: str  # what to check now


def already_done(n: NodeResult, evidence: Evidence, replaced: Mapping[str, Replacement],
                 reboots: Sequence[datetime], since: datetime | None = None) -> Done | None:
    """Replaced (the node is gone, or a replace call named it) or rebooted (a reboot call, a boot banner or a cluster
    event) after the latest signal its verdict rests on — or after `since`, the signal of an action an earlier audit
    asked for (fleet memory), when later; None when nothing shows it was done."""
    # A collapsed row's latest occurrence is the signal: one back after a reboot was not cleared by it.
    signal = max((*(e.last_time or e.time for e in n.gpu_errors), *((since,) if since else ())), default=None)

    def after(t: datetime) -> bool:
        return signal is None or t > signal
    hyperpod = evidence.cluster.kind.startswith("hyperpod")
    group = n.instance_group or "its group"
    if n.status.lower() in GONE or n.discovered_by in ("log-streams", "cloudtrail"):
        if hyperpod:
            r = replaced.get(n.instance_id)
            if r is not None:
                return Done("replaced", f"HyperPod already replaced it: no longer listed by the cluster, likely "
                            f"replaced by {r.new} (group {group}, launched {iso(r.launched)}, {r.minutes_after} min "
                            "after this node's last line; matched by group and time)", _check_new(r.new, group))
            return Done("replaced", "no longer listed by the cluster: HyperPod already replaced or removed it",
                        f"confirm group `{group}` is back at its TargetCount (`aws sagemaker list-cluster-nodes "
                        f"--cluster-name {evidence.cluster.name}`), then {_check_new('<new instance ID>', group)}")
        gone = "no longer returned by DescribeInstances" if n.discovered_by != "api" else f"instance state {n.status}"
        return Done("replaced", f"already terminated ({gone}): there is nothing to reboot or replace",
                    f"check its replacement, the instance launched in its place in {group}: its GPU error coverage "
                    "in this report, and that the fault does not return there")
    named = [e for e in evidence.cloudtrail or [] if not e.error_code and after(e.time)
             and n.instance_id in str(e.request_parameters or {})]
    for e in named:
        if e.event_name == "BatchReplaceClusterNodes":
            return Done("replaced", f"already replaced: BatchReplaceClusterNodes at {iso(e.time)} (CloudTrail"
                        + (f", by {e.username}" if e.username else "") + ")",
                        _check_new("the new instance ID", group))
    for ce in evidence.cluster_events or []:
        if ce.instance_id == n.instance_id and after(ce.time) and "replac" in ce.description.lower():
            return Done("replaced", f"already replaced: cluster event at {iso(ce.time)}: {ce.description}",
                        _check_new("the new instance ID", group))
    rebooted = [(e.time, f"BatchRebootClusterNodes at {iso(e.time)} (CloudTrail)") for e in named
                if e.event_name == "BatchRebootClusterNodes"]
    rebooted += [(ce.time, f"cluster event at {iso(ce.time)}: {ce.description}") for ce in evidence.cluster_events or []
                 if ce.instance_id == n.instance_id and after(ce.time) and "reboot" in ce.description.lower()]
    rebooted += [(t, f"the kubelet's `Rebooted` event at {iso(t)} (Kubernetes node events)")
                 for t in kubelet_reboots(n.instance_id, evidence) if after(t)]
    named_at = {t for t, _ in rebooted}  # a reboot already named by its call or event is not called a banner too
    rebooted += [(t, f"a boot at {iso(t)} (kernel banner in the node's log)") for t in reboots
                 if after(t) and t not in named_at]
    if rebooted:
        _, how = min(rebooted)
        return Done("rebooted", f"already rebooted after the signal{f' at {iso(signal)}' if signal else ''}: {how}",
                    _check_return(n))
    return None


def _check_new(new: str, group: str) -> str:
    return (f"check the replacement {new}: its `LifecycleConfig/{group}/{new}` stream (the lifecycle script ran "
            "clean), its deep health check (`DeepHealthCheckResults/…`; the group's OnStartDeepHealthChecks), and "
            "its own line in this report")


def _check_return(n: NodeResult) -> str:
    hardware = [e for e in n.gpu_errors if e.class_ == "hardware" and e.code is not None]
    if not hardware:
        return "check that the signal does not return after the reboot (its line in this report on the next audit)"
    last = max(hardware, key=lambda e: e.time)
    bus = f" on PCI {last.pci}" if last.pci else ""
    return (f"check that Xid {last.code} does not return{bus}: a hardware-class Xid back on the same PCI bus after a "
            "reboot is REPLACE (RULES §7)")
