"""Audit windows (RULES §1, §4): defaults per mode and the padded coverage window."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from gpuaudit.model.evidence import FIRST_YEAR, LAST_YEAR, Mode, Window
from gpuaudit.model.timeutil import HOUR, floor_hour, hours_between

DEFAULT_LENGTH = {"coverage": timedelta(hours=24), "incident": timedelta(hours=24), "preflight": timedelta(hours=24)}
# A length ending now, as kubectl/docker `--since` write it: minutes, hours or days (30m, 2h, 6h, 2d).
DURATION = re.compile(r"^([1-9][0-9]{0,5})([mhd])$")
UNIT = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}


class BadWindow(ValueError):
    pass


# The longest window one audit reads: every hour is binned per stream, and CloudWatch Logs Insights is
# usually queried within log retention; 90 days covers a Capacity Block's life with margin.
MAX_WINDOW = timedelta(days=90)


def parse_duration(text: str, flag: str = "--last") -> timedelta:
    """`30m`, `2h`, `6h`, `2d`: a whole number of minutes, hours or days, above zero and at most MAX_WINDOW."""
    match = DURATION.match(text.strip())
    if match is None:
        raise BadWindow(f"{flag} must be a length like 30m, 2h, 6h or 2d (minutes, hours, days); got {text!r}")
    length = int(match.group(1)) * UNIT[match.group(2)]
    if length > MAX_WINDOW:
        raise BadWindow(f"{flag} {text}: longer than the maximum window of {MAX_WINDOW.days} days (an audit reads "
                        "every hour of it; split it into several audits)")
    return length


def is_duration(text: str) -> bool:
    return DURATION.match(text.strip()) is not None


def resolve_window(mode: Mode, now: datetime, since: datetime | None = None, until: datetime | None = None,
                   last: str | None = None, onset: datetime | None = None) -> Window:
    """`--since` alone runs to now; `--last` picks a length ending now; nothing → the mode's default. A stated
    onset (`--onset`) must fall inside the window: the failure began where the audit looks (RULES §0.5)."""
    window = _window(mode, now, since, until, last)
    if onset is None:
        return window
    if not window.start <= onset <= min(window.end, now):
        raise BadWindow(f"--onset {onset.isoformat()} is outside the impact window {window.start.isoformat()} → "
                        f"{min(window.end, now).isoformat()}: give an onset inside it, or widen the window "
                        "(--since/--until)")
    return window.model_copy(update={"onset": onset})


def _window(mode: Mode, now: datetime, since: datetime | None, until: datetime | None, last: str | None) -> Window:
    if last is not None:
        if since or until:
            raise BadWindow("--last cannot be combined with --since/--until")
        length = parse_duration(last)
        return Window(start=now - length, end=now, source="user")
    if since is None and until is None:
        return Window(start=now - DEFAULT_LENGTH[mode], end=now, source="default-24h")
    end = until or now
    start = since or end - DEFAULT_LENGTH[mode]
    if start >= end:
        raise BadWindow(f"window start {start.isoformat()} is not before its end {end.isoformat()}")
    if not (start.year >= FIRST_YEAR and end.year <= LAST_YEAR):  # a default length can reach past a given time
        raise BadWindow(f"window {start.isoformat()} → {end.isoformat()} reaches outside the years "
                        f"{FIRST_YEAR}-{LAST_YEAR}, the bounds of every time input")
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
