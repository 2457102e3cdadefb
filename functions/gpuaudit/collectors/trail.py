"""CloudTrail LookupEvents within its rate: "limited to two per second, per account, per Region" (CloudTrail API
reference), shared by every audit of the account.

Events are looked up by event name, never by instance ID (RULES §5.7: a HyperPod replace gives the node a new ID),
so a read is account-wide, the same for every cluster of the account. Each read is kept in a `TrailShare` by event
name, and a later lookup of that name is answered from it: an audit whose range the kept read covers makes no call,
one whose range ends later reads only the tail, from SETTLE before where the kept read stopped (an event reaches
event history some minutes after its call), and keeps the longer read. The CLI keeps the share for one audit (an
incident reads RunInstances for its launched nodes and for its timeline once); the deployed Finish step keeps it in
the evidence bucket (handlers/trail_share.py), so the clusters of an execution, and the next hourly execution, share
one account-wide read. Calls are spaced at the documented rate and a throttled call backs off with jitter
(collectors/aws.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpuaudit.collectors.aws import Aws
from gpuaudit.model.timeutil import parse_time
from gpuaudit.model.trail import FORMAT, TrailRead, TrailShare

__all__ = ["FORMAT", "KEEP", "SETTLE", "TrailRead", "TrailShare", "lookup_by_name"]

# A kept read is trusted up to this long before the time it was read to; the tail from there is read again. CloudTrail
# delivers an event to event history typically within about 5 minutes of the call (not guaranteed).
SETTLE = timedelta(minutes=15)
# Kept events older than this before the newest read are dropped: the longest range an hourly audit asks is the
# launch lookback (24 h) before a window of at most a day or so; a longer lookup (a 7-day incident) reads again.
KEEP = timedelta(days=3)


def lookup_by_name(aws: Aws, name: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The events named `name` from `start` to `end`, newest first as CloudTrail lists them; CallFailed when
    CloudTrail could not be read. From the account's kept read when it covers the range (`aws.trail_share`)."""
    share = aws.trail_share if aws.trail_share is not None else TrailShare()
    aws.trail_share = share
    kept = share.reads.get(name)
    if kept is None or kept.start > start:
        read_start, head = start, []  # nothing kept from this far back: the whole range is read
    elif end <= kept.end:
        return _within(kept.events, start, end)
    else:
        read_start = max(kept.start, kept.end - SETTLE)
        head = [e for e in kept.events if _time(e) < read_start]
    # Read up to the clock, not only to `end`: a later audit of the account whose range ends before it is served.
    read_end = max(end, aws.clock())
    fresh = [_portable(e) for e in aws.paginate(
        "cloudtrail", "LookupEvents", "Events", StartTime=read_start, EndTime=read_end,
        LookupAttributes=[{"AttributeKey": "EventName", "AttributeValue": name}])]
    merged = sorted([*fresh, *head], key=_time, reverse=True)
    span_start = kept.start if kept is not None and kept.start <= start else start
    keep_from = min(max(span_start, read_end - KEEP), start)  # never drop what this lookup asked for
    share.reads[name] = TrailRead(start=keep_from, end=read_end, events=[e for e in merged if _time(e) >= keep_from])
    share.changed = True
    return _within(merged, start, end)


def _within(events: list[dict[str, Any]], start: datetime, end: datetime) -> list[dict[str, Any]]:
    return [e for e in events if start <= _time(e) <= end]


def _time(event: dict[str, Any]) -> datetime:
    return parse_time(event["EventTime"])


def _portable(event: dict[str, Any]) -> dict[str, Any]:
    """The event as JSON can keep it (boto3 gives EventTime as a datetime)."""
    when = event.get("EventTime")
    return {**event, "EventTime": when.isoformat() if isinstance(when, datetime) else when}
