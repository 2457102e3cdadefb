"""UTC time helpers shared by collectors, rules and the report. No wall clock here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator

HOUR = timedelta(hours=1)


def as_utc(value: datetime) -> datetime:
    """An aware time on the standard library's UTC object. pydantic gives each time it parses its own `TzInfo`, and
    comparing two times whose tzinfo objects differ asks both for their offset: ~12x dearer than two times sharing
    `datetime.UTC` (961 vs 79 ns measured), and the rules compare millions of times at fleet size (issue #50)."""
    if value.tzinfo is None or value.tzinfo is UTC:
        return value
    return value.astimezone(UTC)


# Every time a model holds: whatever a JSON document or a caller gave, the model keeps it on `datetime.UTC`
# (tests/unit/test_utc_times.py checks every time field of every model is one).
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


def parse_time(value: str | float | datetime) -> datetime:
    """ISO-8601 string, epoch milliseconds or datetime -> aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value / 1000.0, tz=UTC)
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text.replace(" ", "T", 1) if "T" not in text and " " in text else text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def iso(value: datetime) -> str:
    """Full UTC date-time, second precision, `Z` suffix."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def floor_hour(value: datetime) -> datetime:
    return value.replace(minute=0, second=0, microsecond=0)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """Hour starts h with start <= h < end, start floored to the hour."""
    hours = []
    current = floor_hour(start)
    while current < end:
        hours.append(current)
        current += HOUR
    return hours


def to_epoch_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)
