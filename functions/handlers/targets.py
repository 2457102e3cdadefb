"""From a trigger to the audits to run: which clusters, which mode, which window.

Windows are derived from the trigger's own time, never from the Lambda's clock, so a trigger
delivered twice (EventBridge is at-least-once) plans the same window, hence the same audit_id,
and the sinks write and alert once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.discovery import DiscoveredKind, discovered_clusters
from gpuaudit.collectors.inventory import PCLUSTER_TAG, instance_pages
from gpuaudit.domain.window import scheduled_window
from gpuaudit.model.evidence import (
    FAILED_CLUSTER_STATES,
    AuditRequest,
    FileSystemId,
    InstanceId,
    LogGroupName,
    Mode,
)
from gpuaudit.settings import XID_WATCH_ALARM_INFIX, Settings
from handlers.models import (
    AuditTarget,
    CapacityBlockWarning,
    HyperPodEvent,
    Plan,
    ScheduledEvent,
    Trigger,
    XidWatchAlarm,
)

EVENT_LOOKBACK = timedelta(hours=24)  # an event-triggered audit looks back one day from the event


class DiscoveryTag(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1)
    value: str


class PlanSettings(BaseModel):
    """The deployment's audited set (GPUAUDIT_* environment of the Plan function)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clusters: list[str] = Field(default_factory=list)
    discover: bool = False
    discovery_tag: DiscoveryTag | None = None
    log_groups: dict[str, list[LogGroupName]] = Field(default_factory=dict)  # per cluster, named log sources
    instances: dict[str, list[InstanceId]] = Field(default_factory=dict)  # per name, a self-managed fleet's IDs
    file_systems: dict[str, list[FileSystemId]] = Field(default_factory=dict)  # per name, FSx file systems

    @field_validator("clusters", "log_groups", "instances", "file_systems", mode="before")
    @classmethod
    def _json(cls, value: object) -> object:
        return json.loads(value) if isinstance(value, str) else value

    @classmethod
    def of(cls, settings: Settings) -> PlanSettings:
        """The audited set of the deployment (settings.Settings.audited: the deployment document the stack ships,
        GPUAUDIT_DEPLOYMENT, else the GPUAUDIT_* variables)."""
        return cls.model_validate(settings.audited.model_dump(exclude={"member_roles"}))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> PlanSettings:
        return cls.of(Settings.from_env(environ))

    def request(self, cluster: str, mode: Mode, since: datetime, until: datetime) -> AuditRequest:
        """One audit of a configured cluster, with the log groups, instances and file systems configured for it."""
        return AuditRequest(cluster=cluster, mode=mode, since=since, until=until,
                            log_groups=self.log_groups.get(cluster, []), instance_ids=self.instances.get(cluster, []),
                            file_system_ids=self.file_systems.get(cluster, []))


    def scoped(self, request: AuditRequest) -> AuditRequest:
        """A slim request (handlers/models.AuditTarget scope "deployment") with its configured scope added back."""
        name = request.cluster
        return request.model_copy(update={"log_groups": self.log_groups.get(name, []),
                                          "instance_ids": self.instances.get(name, []),
                                          "file_system_ids": self.file_systems.get(name, [])})


def slim(target: AuditTarget) -> AuditTarget:
    """Only what the cluster's child execution needs from Plan: the configured scope stays in the deployment
    document (Inventory adds it back), so a target is a few hundred bytes whatever the fleet's size."""
    if target.trigger == "console":
        return target
    return target.model_copy(update={"scope": "deployment", "request": target.request.model_copy(
        update={"log_groups": [], "instance_ids": [], "file_system_ids": []})})


def to_minute(value: datetime) -> datetime:
    return value.replace(second=0, microsecond=0)


def audited_clusters(aws: Aws, settings: PlanSettings, gaps: list[str], discovered: list[str] | None = None,
                     kinds: tuple[DiscoveredKind, ...] = ("hyperpod", "parallelcluster")) -> list[str]:
    """The configured names, plus every discovered HyperPod cluster and ParallelCluster when enabled (`discovered`:
    a discovery already made this period, handlers/discovery_cache.py)."""
    names = dict.fromkeys(settings.clusters)
    if settings.discover:
        found = discovered if discovered is not None else discover_clusters(aws, settings.discovery_tag, gaps, kinds)
        names.update(dict.fromkeys(found))
    return list(names)


def discover_clusters(aws: Aws, tag: DiscoveryTag | None, gaps: list[str],
                      kinds: tuple[DiscoveredKind, ...] = ("hyperpod", "parallelcluster")) -> list[str]:
    return sorted({name for name, _kind in discovered_clusters(aws, tag, gaps, kinds)})


def clusters_on_reservation(aws: Aws, reservation_id: str, gaps: list[str]) -> list[str]:
    """ParallelClusters whose instances run in the reservation (HyperPod's are not visible here). EC2 selects them
    (`capacity-reservation-id`): the read is the reservation's instances (a Capacity Block holds at most 64), not
    every ParallelCluster instance of the region."""
    found: set[str] = set()
    try:
        for instance in instance_pages(aws, Filters=[{"Name": "capacity-reservation-id", "Values": [reservation_id]},
                                                     {"Name": "tag-key", "Values": [PCLUSTER_TAG]}]):
            found.update(t["Value"] for t in instance.get("Tags", []) if t.get("Key") == PCLUSTER_TAG)
    except CallFailed as failed:
        gaps.append(failed.gap_for(f"clusters running in {reservation_id} not identified").prose())
    return sorted(found)


def plan_for(trigger: Trigger, settings: PlanSettings, aws: Aws, discovered: list[str] | None = None) -> Plan:
    """The audits a trigger asks for. `discovered`: this period's discovery, when one was kept; a HyperPod event
    without one discovers only HyperPod clusters (ListClusters), never the ParallelCluster instance scan."""
    gaps: list[str] = []
    if isinstance(trigger, AuditRequest):
        return Plan(trigger="console", targets=[AuditTarget(request=trigger, trigger="console")])
    if isinstance(trigger, XidWatchAlarm):
        return _xid_watch_plan(trigger, settings)
    kinds: tuple[DiscoveredKind, ...] = ("hyperpod",) if isinstance(trigger, HyperPodEvent) else \
        ("hyperpod", "parallelcluster")
    audited = audited_clusters(aws, settings, gaps, discovered, kinds)
    if isinstance(trigger, ScheduledEvent):
        window = scheduled_window(trigger.time)
        targets = [AuditTarget(request=settings.request(c, "coverage", window.start, window.end),
                               trigger="schedule", window_source="schedule") for c in audited]
        return Plan(trigger="schedule", targets=targets, gaps=gaps)
    end = to_minute(trigger.time)
    if isinstance(trigger, HyperPodEvent):
        return _hyperpod_plan(trigger, audited, end, gaps, settings)
    return _capacity_plan(trigger, audited, end, aws, gaps, settings)


def _hyperpod_plan(trigger: HyperPodEvent, audited: list[str], end: datetime, gaps: list[str],
                   settings: PlanSettings) -> Plan:
    named = trigger.detail.cluster or ""
    cluster = next((c for c in audited if c in _names(trigger)), None)
    if (trigger.detail.level or "").lower() == "info":
        return Plan(trigger="hyperpod-event", targets=[], gaps=gaps,
                    skipped=[f"{named}: informational {trigger.detail_type} (EventLevel Info) — no audit"])
    status = trigger.detail.ClusterStatus
    if trigger.detail_type == "SageMaker HyperPod Cluster State Change" and status not in FAILED_CLUSTER_STATES:
        return Plan(trigger="hyperpod-event", targets=[], gaps=gaps,
                    skipped=[f"{named}: cluster state {status} is not a failure — no audit"])
    if cluster is None:
        return Plan(trigger="hyperpod-event", targets=[], gaps=gaps,
                    skipped=[f"{named}: not in the audited set ({', '.join(audited) or 'empty'})"])
    request = settings.request(cluster, "incident", end - EVENT_LOOKBACK, end)
    return Plan(trigger="hyperpod-event", gaps=gaps,
                targets=[AuditTarget(request=request, trigger="hyperpod-event", window_source="event")])


def _xid_watch_plan(trigger: XidWatchAlarm, settings: PlanSettings) -> Plan:
    """The Xid watch's alarm entered ALARM: an incident audit of the configured cluster the alarm is named after
    (`<stack>-xid-watch-<cluster>`, infra/xid_watch.py), 24 h up to the alarm's minute. The alarm carries no node,
    so the audit is the cluster's. Only configured clusters are watched: the set needs no discovery."""
    name = trigger.detail.alarmName
    if trigger.detail.state.value != "ALARM":
        return Plan(trigger="xid-watch", targets=[],
                    skipped=[f"{name}: alarm state {trigger.detail.state.value} is not ALARM — no audit"])
    cluster = next((c for c in settings.clusters if name.endswith(XID_WATCH_ALARM_INFIX + c)), None)
    if cluster is None:
        return Plan(trigger="xid-watch", targets=[],
                    skipped=[f"{name}: not the Xid watch alarm of an audited cluster — no audit"])
    end = to_minute(trigger.time)
    request = settings.request(cluster, "incident", end - EVENT_LOOKBACK, end)
    return Plan(trigger="xid-watch", targets=[AuditTarget(request=request, trigger="xid-watch",
                                                          window_source="event")])


def _names(trigger: HyperPodEvent) -> set[str]:
    """Every way the event names its cluster: a configured name may also be the cluster ARN."""
    detail = trigger.detail
    inner = detail.EventDetails
    return {n for n in (detail.ClusterName, detail.ClusterArn, inner and inner.ClusterName,
                        inner and inner.ClusterArn, *trigger.resources) if n}


def _capacity_plan(trigger: CapacityBlockWarning, audited: list[str], end: datetime, aws: Aws,
                   gaps: list[str], settings: PlanSettings) -> Plan:
    reservation = trigger.detail.capacity_reservation_id
    running = clusters_on_reservation(aws, reservation, gaps)
    affected = [c for c in audited if c in running] if running else list(audited)
    skipped = [f"{c}: runs in {reservation} but is not in the audited set" for c in running if c not in audited]
    if not running:
        skipped.append(f"no audited instance names {reservation} (HyperPod capacity is not visible to "
                       f"DescribeInstances): preflight for every audited cluster")
    targets = [AuditTarget(request=settings.request(c, "preflight", end - EVENT_LOOKBACK, end),
                           trigger="capacity-block-warning", window_source="event") for c in affected]
    return Plan(trigger="capacity-block-warning", targets=targets, skipped=skipped, gaps=gaps)
