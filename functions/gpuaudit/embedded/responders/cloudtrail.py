"""CloudTrail: LookupEvents over the world's management events, newest first."""

from __future__ import annotations

from typing import Any

from gpuaudit.embedded.responders.registry import ApiError, Backend, page, responds
from gpuaudit.model.timeutil import parse_time


@responds("cloudtrail", "LookupEvents")
def _lookup_events(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    events = b.world.section("cloudtrail", "events")
    start, end = p.get("StartTime"), p.get("EndTime")
    attrs = p.get("LookupAttributes") or []
    if len(attrs) > 1:
        raise ApiError("InvalidLookupAttributesException", "Only one lookup attribute is allowed")
    selected = []
    for e in events:
        t = parse_time(e["EventTime"])
        if (start and t < parse_time(start)) or (end and t > parse_time(end)):
            continue
        if attrs:
            key, value = attrs[0]["AttributeKey"], attrs[0]["AttributeValue"]
            if key == "EventName" and e.get("EventName") != value:
                continue
            if key == "EventSource" and e.get("EventSource") != value:
                continue
            if key == "ResourceName" and value not in [r.get("ResourceName") for r in e.get("Resources", [])]:
                continue
            if key == "Username" and e.get("Username") != value:
                continue
        selected.append(e)
    selected.sort(key=lambda e: parse_time(e["EventTime"]), reverse=True)  # newest first, as CloudTrail
    return page(selected, p, "Events", default=50)
