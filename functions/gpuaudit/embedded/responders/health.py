"""AWS Health: events and the entities they affect."""

from __future__ import annotations

from typing import Any

from gpuaudit.embedded.responders.registry import Backend, page, responds


@responds("health", "DescribeEvents")
def _describe_health_events(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    flt = p.get("filter") or {}
    events = []
    for e in b.world.section("health", "events"):
        if flt.get("services") and e.get("service") not in flt["services"]:
            continue
        events.append(e)
    return page(events, p, "events", token="nextToken", limit="maxResults", default=100)


@responds("health", "DescribeAffectedEntities")
def _describe_affected(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    arns = set((p.get("filter") or {}).get("eventArns", []))
    entities = [dict(ent, eventArn=e.get("arn")) for e in b.world.section("health", "events")
                if e.get("arn") in arns for ent in e.get("AffectedEntities", [])]
    return page(entities, p, "entities", token="nextToken", limit="maxResults", default=100)
