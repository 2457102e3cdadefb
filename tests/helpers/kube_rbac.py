"""Kubernetes RBAC as the API server applies it, for the test API server (kube_server.py) and the RBAC tests.

Two halves of kube-apiserver, modelled from the Kubernetes docs ("Using RBAC Authorization", "Authorization
overview: request attributes"):
- `request_info`: a request's path, query and method → the attributes the authorizer sees (API group, resource,
  subresource, namespace, name, verb), as the API server's RequestInfoFactory derives them: `/api/v1/...` is the
  core group "", `/apis/<group>/<version>/...` a named group; `GET` of a collection is `list`, with `watch=true`
  `watch`, of one object `get`; anything outside `/api` and `/apis` is a non-resource URL.
- `Rbac.allows`: the RBAC authorizer. A ClusterRoleBinding grants its ClusterRole's rules everywhere (cluster-scoped
  resources, every namespace, lists across all namespaces); a RoleBinding grants its Role's (or ClusterRole's) rules
  only inside its own namespace, never on a cluster-scoped resource nor a list across namespaces. A rule matches
  when its apiGroups, resources (`resource/subresource` for a subresource) and verbs each contain the request's value
  or "*", and its resourceNames (if any) contain the object's name. Deny is the default; there is no deny rule.
- `forbidden_status`: the 403 Status body the API server returns, its message worded as kube-apiserver words it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuaudit.domain.kube_access import RBAC_MANIFEST

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_MANIFEST = ROOT / RBAC_MANIFEST
CLUSTER_SCOPED = {"nodes", "namespaces", "persistentvolumes", "clusterroles", "clusterrolebindings",
                  "customresourcedefinitions", "storageclasses", "priorityclasses", "csinodes", "runtimeclasses"}
VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class RequestInfo:
    path: str
    verb: str
    resource_request: bool
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def cluster_wide(self) -> bool:
        """Cluster scope as RBAC sees it: no namespace in the request (a cluster-scoped resource, or a list
        across all namespaces of a namespaced one)."""
        return not self.namespace


def request_info(path: str, query: dict[str, list[str]] | None = None, method: str = "GET") -> RequestInfo:
    query = query or {}
    parts = [p for p in path.strip("/").split("/") if p]
    verb = VERBS.get(method.upper(), method.lower())
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return RequestInfo(path=path, verb=verb, resource_request=False)
    if not rest:  # discovery of the group version itself
        return RequestInfo(path=path, verb=verb, resource_request=False)
    if rest[0] == "watch":  # the deprecated /watch/ prefix
        rest, verb = rest[1:], "watch"
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces" and len(rest) == 2:  # GET /api/v1/namespaces/<name>: the namespace object
        return RequestInfo(path=path, verb=verb, resource_request=True, api_group=group, resource="namespaces",
                           namespace=rest[1], name=rest[1])
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if verb == "get" and not name:
        verb = "watch" if (query.get("watch") or [""])[0].lower() in ("true", "1") else "list"
    if verb == "delete" and not name:
        verb = "deletecollection"
    return RequestInfo(path=path, verb=verb, resource_request=True, api_group=group, resource=resource,
                       subresource=subresource, namespace=namespace, name=name)


@dataclass(frozen=True)
class Identity:
    """Who a bearer token authenticates as: the access entry's username and its Kubernetes groups."""

    user: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    def matches(self, info: RequestInfo) -> bool:
        if "*" not in self.verbs and info.verb not in self.verbs:
            return False
        if not info.resource_request:
            return any(u == info.path or u == "*" or (u.endswith("*") and info.path.startswith(u[:-1]))
                       for u in self.non_resource_urls)
        if "*" not in self.api_groups and info.api_group not in self.api_groups:
            return False
        resources = set(self.resources)
        if not ({"*", info.full_resource} & resources or
                (info.subresource and f"*/{info.subresource}" in resources)):
            return False
        return not self.resource_names or info.name in self.resource_names


def _rule(raw: dict[str, Any]) -> Rule:
    return Rule(api_groups=tuple(raw.get("apiGroups") or ()), resources=tuple(raw.get("resources") or ()),
                verbs=tuple(raw.get("verbs") or ()), resource_names=tuple(raw.get("resourceNames") or ()),
                non_resource_urls=tuple(raw.get("nonResourceURLs") or ()))


@dataclass
class Rbac:
    """Roles and bindings as the API server holds them after `kubectl apply`."""

    cluster_roles: dict[str, list[Rule]] = field(default_factory=dict)
    roles: dict[tuple[str, str], list[Rule]] = field(default_factory=dict)  # (namespace, name)
    # (role kind, role name, binding namespace or "" for a ClusterRoleBinding, subjects as (kind, name))
    bindings: list[tuple[str, str, str, tuple[tuple[str, str], ...]]] = field(default_factory=list)

    @classmethod
    def from_documents(cls, documents: Iterable[dict[str, Any]]) -> Rbac:
        rbac = cls()
        for doc in documents:
            kind, meta = doc.get("kind"), doc.get("metadata") or {}
            if kind == "ClusterRole":
                rbac.cluster_roles[meta["name"]] = [_rule(r) for r in doc.get("rules") or []]
            elif kind == "Role":
                rbac.roles[(meta.get("namespace", "default"),
                            meta["name"])] = [_rule(r) for r in doc.get("rules") or []]
            elif kind in ("ClusterRoleBinding", "RoleBinding"):
                ref = doc["roleRef"]
                namespace = "" if kind == "ClusterRoleBinding" else meta.get("namespace", "default")
                subjects = tuple((s["kind"], s["name"]) for s in doc.get("subjects") or [])
                rbac.bindings.append((ref["kind"], ref["name"], namespace, subjects))
        return rbac

    @classmethod
    def from_manifest(cls, path: Path = SHIPPED_MANIFEST) -> Rbac:
        return cls.from_documents(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)

    def _rules_for(self, who: Identity, info: RequestInfo) -> Iterable[Rule]:
        for role_kind, role_name, namespace, subjects in self.bindings:
            if not any((k == "Group" and n in who.groups) or (k == "User" and n == who.user) for k, n in subjects):
                continue
            if namespace and namespace != info.namespace:  # a RoleBinding: its own namespace only
                continue
            rules = self.cluster_roles.get(role_name, []) if role_kind == "ClusterRole" else \
                self.roles.get((namespace, role_name), [])
            yield from rules

    def allows(self, who: Identity, info: RequestInfo) -> bool:
        return any(rule.matches(info) for rule in self._rules_for(who, info))

    def granted_resources(self) -> set[tuple[str, str, str]]:
        """(API group, resource, verb) of every ClusterRole rule reachable through a binding."""
        bound = {name for kind, name, _ns, _s in self.bindings if kind == "ClusterRole"}
        return {(g, r, v) for name in bound for rule in self.cluster_roles.get(name, [])
                for g in rule.api_groups for r in rule.resources for v in rule.verbs}


def forbidden_status(who: Identity, info: RequestInfo) -> dict[str, Any]:
    """The API server's 403 answer (k8s.io/apiserver: forbiddenMessage, then errors.NewForbidden)."""
    if not info.resource_request:
        reason = f'User "{who.user}" cannot {info.verb} path "{info.path}"'
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": f"forbidden: {reason}", "reason": "Forbidden", "details": {}, "code": 403}
    where = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    reason = (f'User "{who.user}" cannot {info.verb} resource "{info.full_resource}" in API group '
              f'"{info.api_group}" {where}')
    qualified = f"{info.resource}.{info.api_group}" if info.api_group else info.resource
    subject = f'{qualified} "{info.name}"' if info.name else qualified
    details: dict[str, Any] = {"kind": info.resource}
    if info.name:
        details["name"] = info.name
    if info.api_group:
        details["group"] = info.api_group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"{subject} is forbidden: {reason}", "reason": "Forbidden", "details": details, "code": 403}


UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized",
                "reason": "Unauthorized", "code": 401}
