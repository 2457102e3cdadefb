"""EventBridge: the product's own PutEvents (the strict stand-in) and the account's rules."""

from __future__ import annotations

from typing import Any

from gpuaudit.embedded.eventbridge import PutEventsRefused
from gpuaudit.embedded.responders.registry import ApiError, Backend, page, responds


@responds("events", "PutEvents")
def _put_events(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    """The product's own write (findings as events), not a read of the audited account: the strict stand-in."""
    assert b.eventbridge is not None
    try:
        return b.eventbridge.put_events(p)
    except PutEventsRefused as refused:
        raise ApiError(refused.code, refused.message) from None


@responds("events", "ListRules")
def _list_rules(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    rules = [r for r in b.world.section("events", "rules")
             if not p.get("NamePrefix") or r.get("Name", "").startswith(p["NamePrefix"])]
    return page(rules, p, "Rules", limit="Limit", default=100)
