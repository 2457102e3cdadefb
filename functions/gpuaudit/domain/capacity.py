"""Capacity arithmetic (RULES §9) and which reservations hold a cluster's capacity (§10 P1–P3).

Pure: no AWS, no clock. The start of a planned run is given (the user's `--run-start`, else the
audit's `now`), and every value comes back as a full UTC date-time so the report can write it out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuaudit.domain.capability import is_ultraserver
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.planned_reads import CapacityReservation
from gpuaudit.model.timeutil import iso

DEFAULT_RUN_HOURS = (24.0, 48.0, 72.0)  # RULES §1: run length unknown → evaluate 24, 48 and 72 h
LIVE_STATES = ("active", "scheduled", "payment-pending")
# Capacity Block extensions: 1-day steps up to 14 days, then 7-day steps (EC2 user guide, "Extend Capacity Blocks").
DAY_STEP_LIMIT_HOURS = 14 * 24
MAX_EXTENSION_HOURS = 182 * 24
# EC2 On-Demand vCPU quotas by instance family (Service Quotas, service code ec2): the fallback evidence of P3.
EC2_FAMILY_QUOTAS = {
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "vt": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
}
_FAMILY = re.compile(r"^([a-z]+)\d")


def lead_time(instance_type: str | None) -> timedelta:
    """Instances on a Capacity Block end 30 min before EndDate, 60 min on UltraServer types (RULES §8 B, §9)."""
    return timedelta(minutes=60 if is_ultraserver(instance_type) else 30)


def _hours(value: float) -> str:
    return f"{value:g} h" if value == int(value) else f"{value:.2f} h"


@dataclass(frozen=True)
class RunFit:
    """A planned run against one capacity end date (RULES §9)."""

    end_date: datetime
    lead: timedelta
    start: datetime
    run_hours: float
    usable_until: datetime  # EndDate − lead time
    run_end: datetime  # start + run length
    hours_covered: float  # usable until − start, in hours
    latest_safe_start: datetime  # usable until − run length
    start_in_past: bool  # the latest safe start is already before `now`
    now: datetime

    @property
    def fits(self) -> bool:
        return self.run_end <= self.usable_until

    @property
    def shortfall(self) -> timedelta:
        return max(self.run_end - self.usable_until, timedelta(0))

    def final_checkpoint(self, checkpoint_minutes: float) -> datetime:
        """The run's last checkpoint on an every-M-minutes schedule: the first at or after its end."""
        step = timedelta(minutes=checkpoint_minutes)
        return self.start + step * math.ceil((self.run_end - self.start) / step)

    def checkpoint_in_lead(self, checkpoint_minutes: float) -> bool:
        """True when the run fits but its last checkpoint would land after `usable until` (inside the lead time
        or past the end), when the instances are already terminated."""
        return self.fits and self.final_checkpoint(checkpoint_minutes) > self.usable_until

    def describe(self) -> str:
        lead_min = int(self.lead.total_seconds() // 60)
        covered = (f"{_hours(self.hours_covered)} covered" if self.hours_covered > 0
                   else "0 h covered (usable until is not after the start)")
        safe = f"latest safe start {iso(self.latest_safe_start)}"
        if self.start_in_past:
            safe += f" — already in the past (now {iso(self.now)})"
        return (f"{_hours(self.run_hours)} run: EndDate {iso(self.end_date)} − {lead_min} min lead time = usable until "
                f"{iso(self.usable_until)}; start {iso(self.start)} + {_hours(self.run_hours)} = run end "
                f"{iso(self.run_end)}; {covered}; {safe}")


def run_fit(end_date: datetime, instance_type: str | None, start: datetime, run_hours: float,
            now: datetime) -> RunFit:
    lead = lead_time(instance_type)
    usable_until = end_date - lead
    run = timedelta(hours=run_hours)
    latest_safe_start = usable_until - run
    return RunFit(end_date=end_date, lead=lead, start=start, run_hours=run_hours, usable_until=usable_until,
                  run_end=start + run, hours_covered=(usable_until - start).total_seconds() / 3600,
                  latest_safe_start=latest_safe_start, start_in_past=latest_safe_start < now, now=now)


def extension_hours(shortfall: timedelta) -> int:
    """The smallest purchasable extension covering a shortfall (at least one day)."""
    hours = max(24, math.ceil(shortfall.total_seconds() / 3600))
    if hours <= DAY_STEP_LIMIT_HOURS:
        return math.ceil(hours / 24) * 24
    return min(math.ceil(hours / 168) * 168, MAX_EXTENSION_HOURS)


def ec2_family_quota(instance_type: str | None) -> tuple[str, str] | None:
    """(quota code, quota name) of the On-Demand quota an EC2 instance type counts against."""
    m = _FAMILY.match(instance_type or "")
    return EC2_FAMILY_QUOTAS.get(m.group(1)) if m else None


def cluster_reservations(evidence: Evidence, instance_type: str | None,
                         node_ids: Iterable[str] = ()) -> list[CapacityReservation]:
    """Live reservations holding this capacity: the nodes' own CapacityReservationId when EC2 shows it,
    else every live reservation of the instance type (HyperPod's `ml.` prefix is already stripped)."""
    live = [r for r in evidence.capacity_reservations or [] if r.state in LIVE_STATES]
    wanted = set(node_ids)
    by_node = {n.capacity_reservation_id for n in evidence.nodes
               if n.instance_id in wanted and n.capacity_reservation_id}
    if by_node:
        named = [r for r in live if r.reservation_id in by_node]
        if named:
            return named
    return [r for r in live if instance_type and r.instance_type == instance_type]


def holding_reservation(reservations: list[CapacityReservation], start: datetime) -> CapacityReservation | None:
    """The reservation a run starting at `start` runs on: one in force at the start, the latest-ending if
    several; a block starting later only if none is in force. Consecutive blocks do not chain: instances
    end with each block, so the run is cut at the first one's end."""
    in_force = [r for r in reservations if (r.start_date is None or r.start_date <= start)
                and (r.end_date is None or r.end_date > start)]
    if in_force:
        unlimited = [r for r in in_force if r.end_date is None]
        if unlimited:
            return unlimited[0]
        return max(in_force, key=lambda r: r.end_date or start)  # every end_date is set here
    later = [r for r in reservations if r.start_date is not None and r.start_date > start]
    return min(later, key=lambda r: r.start_date or start) if later else None  # every start_date is set


__all__ = ["DEFAULT_RUN_HOURS", "RunFit", "cluster_reservations", "ec2_family_quota", "extension_hours",
           "holding_reservation", "lead_time", "run_fit"]
