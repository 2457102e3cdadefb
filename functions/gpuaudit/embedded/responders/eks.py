"""EKS clusters and the Kubernetes API (nodes, events) of each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuaudit.embedded.responders.registry import ApiError, Backend, responds


def _eks_cluster(b: Backend, name: str) -> dict[str, Any]:
    found = next((c for c in b.world.section("eks", "clusters") if c.get("name") == name), None)
    if found is None:
        raise ApiError("ResourceNotFoundException", f"No cluster found for name: {name}.", 404)
    return found


@responds("eks", "DescribeCluster")
def _describe_eks_cluster(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    return {"cluster": {k: v for k, v in _eks_cluster(b, p["name"]).items() if k != "kubernetes"}}


@dataclass
class EmbeddedKubeApi:
    """GET /api/v1/nodes and /api/v1/events of a world's EKS cluster, paginated with limit/continue as the API
    server does; a fault of service "kubernetes" (operation ListNodes or ListEvents) answers its HTTP status
    (Unauthorized 401, Forbidden 403, InternalError 500) or a timeout."""

    backend: Backend
    cluster: str

    def get(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        from gpuaudit.collectors.aws import CallFailed

        kinds = {"/api/v1/nodes": ("ListNodes", "nodes"), "/api/v1/events": ("ListEvents", "events")}
        if path not in kinds:
            raise CallFailed("kubernetes", f"GET {path}", "404", "the embedded backend serves nodes and events only")
        operation, key = kinds[path]
        try:
            self.backend.inject_fault("kubernetes", operation)
        except ApiError as err:
            code = {"Unauthorized": "401", "Forbidden": "403", "InternalError": "500"}.get(err.code, err.code)
            raise CallFailed("kubernetes", f"GET {path}", code, err.message) from None
        nodes = (_eks_cluster(self.backend, self.cluster).get("kubernetes") or {}).get(key, [])
        if query.get("fieldSelector") == "involvedObject.kind=Node":
            nodes = [e for e in nodes if (e.get("involvedObject") or {}).get("kind") == "Node"]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(nodes) or 1)
        rest = start + limit < len(nodes)
        return {"kind": "NodeList", "items": nodes[start:start + limit],
                "metadata": {"continue": str(start + limit)} if rest else {}}
