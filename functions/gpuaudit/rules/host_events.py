"""What EC2 and AWS Health say about the hosts (RULES §5 sources 4–5, §8 A): EC2 status checks (with the time a
check began failing), EC2 scheduled events (`instance-retirement`, `system-reboot`, `system-maintenance`…) and AWS
Health events on the cluster's nodes. One reading feeds both the timeline and branch A, so what one shows the other
judges. Pure: no AWS, no clock (the query time is the Evidence's `now`).

An event belongs in the timeline when it happened inside the window ± margin, or when it was announced or updated
there even though its own date lies later (§5): then it stands at its announcement, with its date. EC2 does not say
when it announced a scheduled event, so one dated after the span stands at the query time when that is inside the
span, and is otherwise named only in branch A (docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import HealthEvent, InstanceStatusInfo, ScheduledEvent
from gpuaudit.model.timeutil import iso

# RULES §8 A: a status check failure, and an event AWS raises because the host's hardware is failing. AWS retires an
# instance "when it detects irreparable failure of the underlying hardware" (EC2 User Guide, instance retirement).
HARDWARE_CODES = frozenset({"instance-retirement"})
# Health event types naming failing hardware (AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED, …_HARDWARE_…, …_DEGRADED…).
HARDWARE_TYPE_WORDS = ("RETIREMENT", "HARDWARE", "DEGRADED", "IMPAIRED", "FAILURE")
# Host maintenance: the node is rebooted or stopped by AWS at the event's date — a cause only when that date falls
# where the failure is, never a sign of failing hardware by itself.
MAINTENANCE_TYPE_WORDS = ("MAINTENANCE", "REBOOT", "STOP")
PAST_MARKS = ("[Completed]", "[Canceled]", "[Cancelled]")

Kind = Literal["hardware", "maintenance", "status"]


@dataclass(frozen=True)
class HostEvent:
    """One host-side event on a node (or on the cluster, for a Health event naming no node)."""

    resource: str  # the instance ID (or Health entities) it is about
    source: str  # "EC2 status checks", "EC2 scheduled events", "AWS Health"
    kind: Kind  # hardware: failing hardware; maintenance: an AWS reboot/stop at a date; status: a check not ok
    text: str  # what was read, quoted
    date: datetime | None  # its own date: when the check began failing, the scheduled start, the Health start
    announced: datetime | None  # when AWS posted or last updated it (Health); None when the source does not say
    canceled: bool = False

    @property
    def impaired(self) -> bool:
        return self.kind == "status" and "impaired" in self.text


def _status_event(s: InstanceStatusInfo) -> HostEvent | None:
    if s.system_status in (None, "ok", "not-applicable") and s.instance_status in (None, "ok", "not-applicable"):
        return None
    since = f", impaired since {iso(s.impaired_since)}" if s.impaired_since else ""
    return HostEvent(s.instance_id, "EC2 status checks", "status",
                     f"system status check {s.system_status}, instance status check {s.instance_status}{since} "
                     "(DescribeInstanceStatus)", s.impaired_since, None)


def _scheduled_event(instance_id: str, e: ScheduledEvent) -> HostEvent:
    kind: Kind = "hardware" if e.code in HARDWARE_CODES else "maintenance"
    window = (f" from {iso(e.not_before)}" if e.not_before else "") + (f" to {iso(e.not_after)}" if e.not_after else "")
    return HostEvent(instance_id, "EC2 scheduled events", kind,
                     f"scheduled event {e.code}{window}: {e.description[:200]}".rstrip(": "),
                     e.not_before, None, canceled=any(m in e.description for m in PAST_MARKS[1:]))


def health_kind(h: HealthEvent) -> Kind | None:
    code = (h.event_type or "").upper()
    if any(w in code for w in HARDWARE_TYPE_WORDS):
        return "hardware"
    if any(w in code for w in MAINTENANCE_TYPE_WORDS) or h.category == "scheduledChange":
        return "maintenance"
    return None


def _health_event(h: HealthEvent, kind: Kind) -> HostEvent:
    when = (f", starts {iso(h.start)}" if h.start else "") + (f", ends {iso(h.end)}" if h.end else "")
    return HostEvent(", ".join(h.entities) or (h.service or ""), "AWS Health", kind,
                     f"{h.event_type} ({h.category or 'category unknown'}, {h.status}{when})", h.start, h.last_updated)


def health_entry(h: HealthEvent) -> HostEvent:
    """Any Health event as a timeline entry (RULES §5 source 4), judged by branch A or not: placed by
    `timeline_time` like the host events, so one announced in the span with a later start stands at its
    announcement, with its date."""
    return _health_event(h, health_kind(h) or "maintenance")


def on_cluster(ev: Evidence, h: HealthEvent, node_ids: set[str]) -> bool:
    """A Health event names one of `node_ids` or the cluster itself among its affected entities."""
    return bool(set(h.entities) & (node_ids | {ev.cluster.name, ev.cluster.arn or ev.cluster.name}))


def host_events(ev: Evidence, node_ids: set[str]) -> list[HostEvent]:
    """Every status check not ok, scheduled event and hardware or maintenance Health event read for `node_ids`
    (a Health event also counts when it names the cluster itself)."""
    out: list[HostEvent] = []
    for s in ev.instance_status or []:
        if s.instance_id not in node_ids:
            continue
        if (status := _status_event(s)) is not None:
            out.append(status)
        out += [_scheduled_event(s.instance_id, e) for e in s.events]
    for h in ev.health_events or []:
        if not on_cluster(ev, h, node_ids):
            continue
        if (kind := health_kind(h)) is not None:
            out.append(_health_event(h, kind))
    return out


def timeline_time(e: HostEvent, start: datetime, end: datetime, now: datetime) -> datetime | None:
    """Where the event stands in a timeline spanning [start, end] (RULES §5), or None when it is not in it: at its
    own date when that falls inside; at its announcement when that falls inside and the date is later; an EC2
    event dated later (EC2 gives no announcement) or a check failing with no since-time, at the query time when
    that is inside."""
    if e.date is not None and start <= e.date <= end:
        return e.date
    if e.announced is not None and start <= e.announced <= end:
        return e.announced
    if e.announced is None and (e.date is None or e.date > end) and start <= now <= end:
        return now
    return None


def timeline_text(e: HostEvent, at: datetime) -> str:
    """The entry's words: what was read, and its own date when the entry stands elsewhere (announced earlier)."""
    if e.date is not None and e.date != at:
        lead = "announced or updated" if e.announced == at else "seen at the query time"
        return f"{e.text} — {lead}, dated {iso(e.date)}"
    return e.text


def a_signals(events: list[HostEvent], start: datetime, end: datetime) -> list[HostEvent]:
    """Branch A's host signals (RULES §8 A): an impaired status check, failing hardware (a retirement, a Health
    hardware event) whatever its date — the hardware is failing now — and maintenance dated at or before the
    window's end (an AWS reboot or stop there can be the failure). Canceled events are not signals."""
    return [e for e in events if not e.canceled and (
        e.impaired or e.kind == "hardware" or (e.kind == "maintenance" and e.date is not None and e.date <= end)
        or (e.kind == "maintenance" and e.date is None and e.announced is not None and start <= e.announced <= end))]


def described(events: list[HostEvent]) -> str:
    return "; ".join(f"{e.resource}: {e.text} ({e.source})" for e in events)


def host_actions(events: list[HostEvent]) -> list[str]:
    """The operator's step for each node whose host AWS reports failing (RULES §8 A, §11 actions): an impaired status
    check or a retirement. AWS's documented remedy for both is a stop and start, which moves an EBS-backed instance to
    other hardware (a reboot keeps the host); before a retirement's date, or it stops or terminates the node itself."""
    by_node: dict[str, list[HostEvent]] = {}
    for e in events:
        if not e.canceled and (e.kind == "hardware" or e.impaired) and e.resource.startswith("i-"):
            by_node.setdefault(e.resource, []).append(e)
    out = []
    for node, seen in sorted(by_node.items()):
        dates = [e.date for e in seen if e.kind == "hardware" and e.date is not None]
        by = f" before {iso(min(dates))}" if dates else ""
        out.append(f"Stop and start {node}{by} so it moves to healthy hardware (`aws ec2 stop-instances --instance-ids "
                   f"{node}`, then `aws ec2 start-instances --instance-ids {node}`; EBS-backed instances only: "
                   f"data on instance-store volumes is lost) — AWS reports its host failing: {described(seen)}")
    return out
