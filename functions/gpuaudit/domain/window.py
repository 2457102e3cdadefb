"""Audit windows (RULES §1, §4): defaults per mode and the padded coverage window."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from gpuaudit.model.evidence import Mode, Window
from gpuaudit.model.timeutil import HOUR, floor_hour, hours_between

DEFAULT_LENGTH = {"coverage": timedelta(hours=24), "incident": timedelta(hours=24), "preflight": timedelta(hours=24)}
LAST = {"24h": (timedelta(hours=24), "default-24h"), "72h": (timedelta(hours=72), "default-72h"),
        "7d": (timedelta(days=7), "default-7d")}


class BadWindow(ValueError):
    pass


# The longest window one audit reads: every hour is binned per stream, and CloudWatch Logs Insights is
# usually queried within log retention; 90 days covers a Capacity Block's life with margin.
MAX_WINDOW = timedelta(days=90)


def resolve_window(mode: Mode, now: datetime, since: datetime | None = None, until: datetime | None = None,
                   last: str | None = None) -> Window:
    """`--since` alone runs to now; `--last` picks a length ending now; nothing → the mode's default."""
    if last is not None:
        if since or until:
            raise BadWindow("--last cannot be combined with --since/--until")
        if last not in LAST:
            raise BadWindow(f"--last must be one of {', '.join(LAST)}; got {last!r}")
        length, _ = LAST[last]
        return Window(start=now - length, end=now, source="user")
    if since is None and until is None:
        return Window(start=now - DEFAULT_LENGTH[mode], end=now, source="default-24h")
    end = until or now
    start = since or end - DEFAULT_LENGTH[mode]
    if start >= end:
        raise BadWindow(f"window start {start.isoformat()} is not before its end {end.isoformat()}")
    if start > now:
        raise BadWindow(f"window start {start.isoformat()} is in the future (now {now.isoformat()})")
    if end - start > MAX_WINDOW:
        raise BadWindow(f"window {start.isoformat()} → {end.isoformat()} is longer than the maximum of "
                        f"{MAX_WINDOW.days} days (an audit reads every hour of it; split it into several audits)")
    return Window(start=start, end=min(end, now) if until is None else end, source="user")


def scheduled_window(now: datetime) -> Window:
    """The hourly audit: 24 h ending at the last whole hour."""
    end = floor_hour(now)
    return Window(start=end - timedelta(hours=24), end=end, source="default-24h")


@dataclass(frozen=True)
class Padded:
    """The window padded by one hour each side, never past the query time (RULES §4)."""

    start: datetime
    end: datetime
    now: datetime

    @cached_property
    def hours(self) -> list[datetime]:
        return hours_between(self.start, self.end)

    @cached_property
    def partial_last_hour(self) -> datetime | None:
        """The current hour when the padded window ends at `now` mid-hour."""
        last = floor_hour(self.end)
        return last if self.end == self.now and last != self.end else None


def padded(window: Window, now: datetime) -> Padded:
    return Padded(start=floor_hour(window.start - HOUR), end=min(window.end + HOUR, now), now=now)
