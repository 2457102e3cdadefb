"""Service Quotas: the account's quotas by service and quota code."""

from __future__ import annotations

from typing import Any

from gpuaudit.embedded.responders.registry import ApiError, Backend, page, responds


@responds("service-quotas", "ListServiceQuotas")
def _list_service_quotas(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    quotas = [q for q in b.world.section("servicequotas", "quotas") if q.get("ServiceCode") == p["ServiceCode"]]
    return page(quotas, p, "Quotas", default=100)


@responds("service-quotas", "GetServiceQuota")
def _get_service_quota(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    for q in b.world.section("servicequotas", "quotas"):
        if q.get("ServiceCode") == p["ServiceCode"] and q.get("QuotaCode") == p["QuotaCode"]:
            return {"Quota": q}
    raise ApiError("NoSuchResourceException", f"Quota {p['ServiceCode']}/{p['QuotaCode']} not found")
