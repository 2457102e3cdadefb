"""Kubernetes RBAC as the API server applies it (issue #33 item 4).

The paths are not a hand-kept list: every audit mode runs against the local HTTPS API server (tests/helpers/
kube_server.py), which records what the collectors request, and so does the in-VPC KubeRead handler for every path
its event model accepts. Each recorded request is then evaluated against the shipped manifest
(deploy/kubernetes/gpuaudit-reader.yaml) by the RBAC model of tests/helpers/kube_rbac.py, and the server itself
enforces that manifest: a rule missing from it is a 403 with the API server's Status body, and the gap then names
what is really missing (the ClusterRole and binding on 403, the access entry's group on 401)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import boto3
import pytest
from handlers import kube_read

from gpuaudit.collectors import kubernetes
from gpuaudit.collectors.kubernetes import https_connector
from gpuaudit.domain.kube_access import RBAC_MANIFEST, READER_GROUP, READER_ROLE
from gpuaudit.model.result import Result
from tests.handlers.lambda_harness import LambdaContext
from tests.helpers.kube_rbac import Identity, Rbac, Rule, forbidden_status, request_info
from tests.helpers.kube_server import AUDITOR, KubeServer, kube_server
from tests.helpers.worlds import REGION, HyperPodWorld, at, audit
from tests.rules.test_eks_node_health import EKS, SINCE, UNTIL, eks_world

USER = "arn:aws:sts::123456789012:assumed-role/auditor/{{SessionName}}"


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The auditor's role credentials, from which the EKS token is presigned locally."""
    for name, value in {"AWS_ACCESS_KEY_ID": "AKIARBACTEST00000001", "AWS_SECRET_ACCESS_KEY": "secret",
                        "AWS_SESSION_TOKEN": "session", "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)


def world_on(server: KubeServer, labels: list[str | None]) -> HyperPodWorld:
    w = eks_world(labels)
    cluster = w.raw["eks"]["clusters"][0]
    server.nodes = cluster["kubernetes"]["nodes"]
    server.events = [{"metadata": {"creationTimestamp": at(7)}, "involvedObject": {"kind": "Node",
                      "name": server.nodes[0]["metadata"]["name"]}, "type": "Warning", "reason": "NodeNotReady",
                      "message": "Node is not ready", "lastTimestamp": at(7, 30)}]
    cluster.update({"endpoint": server.url, "certificateAuthority": {"data": server.ca_data}})
    return w


def audit_directly(w: HyperPodWorld, mode: str) -> Result:
    """An audit whose Kubernetes reads go over HTTPS to the cluster's endpoint, as the deployed collectors do."""
    aws = w.aws()
    aws.kube_connector = https_connector(boto3.Session(region_name=REGION), REGION)
    if mode == "preflight":
        w.cluster_metrics(at(-30), at(-10))
        return audit(aws, w.cluster, mode=mode)
    return audit(aws, w.cluster, mode=mode, since=SINCE, until=UNTIL)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server([]) as s:
        yield s


def requested_by_the_collectors(monkeypatch: pytest.MonkeyPatch,
                                server: KubeServer) -> list[tuple[str, dict[str, list[str]]]]:
    """Every request the collectors make in every mode (with pages), and KubeRead for each path it accepts."""
    monkeypatch.setattr(kubernetes, "PAGE", 2)
    for mode in ("coverage", "incident", "preflight"):
        audit_directly(world_on(server, ["Schedulable", "UnschedulablePendingReboot", None]), mode)
    for path in get_args(kube_read.KubeReadRequest.model_fields["path"].annotation):
        answer = kube_read.handler({"cluster": EKS, "endpoint": server.url, "ca_data": server.ca_data, "path": path,
                                    "query": {"limit": "2"}}, LambdaContext())
        assert "document" in answer, answer
    return [(path, query) for path, query, _auth in server.requests]


def test_every_path_the_collectors_request_is_allowed_by_the_shipped_rbac_and_nothing_more_is_granted(
        monkeypatch: pytest.MonkeyPatch, server: KubeServer) -> None:
    requested = requested_by_the_collectors(monkeypatch, server)
    infos = [request_info(path, query) for path, query in requested]
    rbac = Rbac.from_manifest()
    assert {(i.path, i.verb) for i in infos} == {("/api/v1/nodes", "list"), ("/api/v1/events", "list")}
    assert len(requested) > 4  # pages: continue tokens were followed, each page authorized on its own
    for info in infos:
        assert info.resource_request and info.cluster_wide and rbac.allows(AUDITOR, info), info
    # Exactly the resources read: the ClusterRole grants get/list/watch on these and on nothing else.
    read = {(i.api_group, i.resource) for i in infos}
    assert {(g, r) for g, r, _v in rbac.granted_resources()} == read
    assert {v for _g, _r, v in rbac.granted_resources()} == {"get", "list", "watch"}
    assert all(rbac.cluster_roles) and set(rbac.cluster_roles) == {READER_ROLE}


def test_the_view_policy_would_not_do_it_a_namespaced_binding_cannot_list_nodes() -> None:
    """AmazonEKSViewPolicy mirrors the namespaced `view` role; bound in one namespace, even a rule naming nodes and
    events reads neither the node list nor events across namespaces (RBAC ignores cluster-scoped resources there)."""
    (rules,) = Rbac.from_manifest().cluster_roles.values()
    namespaced = Rbac(roles={("default", "view"): rules},
                      bindings=[("Role", "view", "default", (("Group", READER_GROUP),))])
    who = Identity(user=USER, groups=(READER_GROUP,))
    assert not namespaced.allows(who, request_info("/api/v1/nodes"))
    assert not namespaced.allows(who, request_info("/api/v1/events"))
    assert namespaced.allows(who, request_info("/api/v1/namespaces/default/events"))
    assert not namespaced.allows(who, request_info("/api/v1/namespaces/kube-system/events"))


@pytest.mark.parametrize(("path", "query", "attributes"), [
    ("/api/v1/nodes", {}, ("", "nodes", "", "", "", "list")),
    ("/api/v1/nodes", {"watch": ["true"]}, ("", "nodes", "", "", "", "watch")),
    ("/api/v1/nodes/ip-10-0-0-1", {}, ("", "nodes", "", "", "ip-10-0-0-1", "get")),
    ("/api/v1/nodes/ip-10-0-0-1/proxy", {}, ("", "nodes", "proxy", "", "ip-10-0-0-1", "get")),
    ("/api/v1/namespaces/default/events", {}, ("", "events", "", "default", "", "list")),
    ("/api/v1/namespaces/kube-system", {}, ("", "namespaces", "", "kube-system", "kube-system", "get")),
    ("/apis/events.k8s.io/v1/events", {}, ("events.k8s.io", "events", "", "", "", "list")),
    ("/api/v1/watch/nodes", {}, ("", "nodes", "", "", "", "watch")),
])
def test_request_attributes_are_derived_as_the_api_server_derives_them(
        path: str, query: dict[str, list[str]], attributes: tuple[str, ...]) -> None:
    info = request_info(path, query)
    assert (info.api_group, info.resource, info.subresource, info.namespace, info.name, info.verb) == attributes


@pytest.mark.parametrize(("path", "method", "allowed"), [
    ("/api/v1/nodes", "GET", True),
    ("/api/v1/nodes/ip-10-0-0-1", "GET", True),
    ("/api/v1/events", "GET", True),
    ("/api/v1/namespaces/default/events", "GET", True),  # a ClusterRoleBinding reaches every namespace
    ("/api/v1/nodes/ip-10-0-0-1/proxy", "GET", False),   # a subresource is its own resource
    ("/api/v1/nodes/ip-10-0-0-1", "DELETE", False),
    ("/api/v1/nodes", "POST", False),
    ("/apis/events.k8s.io/v1/events", "GET", False),      # the same kind in another API group
    ("/api/v1/pods", "GET", False),
    ("/api/v1/namespaces/default/secrets", "GET", False),
    ("/version", "GET", False),                           # a non-resource URL: not in any rule
])
def test_the_shipped_rules_allow_reads_of_nodes_and_events_only(path: str, method: str, allowed: bool) -> None:
    assert Rbac.from_manifest().allows(AUDITOR, request_info(path, {}, method)) is allowed


def test_rules_match_on_every_attribute_and_only_for_bound_subjects() -> None:
    rule = Rule(api_groups=("",), resources=("nodes",), verbs=("list",), resource_names=())
    rbac = Rbac(cluster_roles={"r": [rule]}, bindings=[("ClusterRole", "r", "", (("User", USER),))])
    assert rbac.allows(Identity(user=USER, groups=()), request_info("/api/v1/nodes"))
    assert not rbac.allows(Identity(user="someone-else", groups=(READER_GROUP,)), request_info("/api/v1/nodes"))
    assert not rbac.allows(Identity(user=USER, groups=()), request_info("/api/v1/nodes/a"))  # get, not list
    named = Rbac(cluster_roles={"r": [Rule(("",), ("nodes",), ("get",), ("a",))]},
                 bindings=[("ClusterRole", "r", "", (("Group", "g"),))])
    who = Identity(user=USER, groups=("g",))
    assert named.allows(who, request_info("/api/v1/nodes/a")) and not named.allows(who, request_info("/api/v1/nodes/b"))
    wild = Rbac(cluster_roles={"r": [Rule(("*",), ("*",), ("get", "list"))]},
                bindings=[("ClusterRole", "r", "", (("Group", "g"),))])
    assert wild.allows(who, request_info("/apis/apps/v1/namespaces/x/deployments"))
    assert not wild.allows(who, request_info("/api/v1/nodes", {"watch": ["1"]}))


def test_the_forbidden_answer_is_the_api_servers_status() -> None:
    status = forbidden_status(Identity(user=USER, groups=()), request_info("/api/v1/nodes"))
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in API group "" '
                                 "at the cluster scope",
                      "reason": "Forbidden", "details": {"kind": "nodes"}, "code": 403}
    named = forbidden_status(Identity(user=USER, groups=()),
                             request_info("/apis/events.k8s.io/v1/namespaces/default/events/e1"))
    assert named["message"] == (f'events.events.k8s.io "e1" is forbidden: User "{USER}" cannot get resource "events" '
                                'in API group "events.k8s.io" in the namespace "default"')


def _gaps(result: Result) -> list[str]:
    return [g for g in result.visibility_gaps if EKS in g]


def test_a_clusterrole_without_events_is_a_403_whose_gap_names_the_clusterrole(
        monkeypatch: pytest.MonkeyPatch, server: KubeServer) -> None:
    (rule,) = server.rbac.cluster_roles[READER_ROLE]
    server.rbac.cluster_roles[READER_ROLE] = [Rule(rule.api_groups, ("nodes",), rule.verbs)]
    result = audit_directly(world_on(server, ["UnschedulablePendingReboot"]), "incident")
    (gap,) = _gaps(result)
    assert "node Events" in gap and f"ClusterRole `{READER_ROLE}`" in gap and f"kubectl apply -f {RBAC_MANIFEST}" in gap
    assert 'cannot list resource "events" in API group "" at the cluster scope' in gap  # the API server's words
    assert "AmazonEKSViewPolicy" not in gap
    assert result.nodes and any(n.verdict == "REBOOT" for n in result.nodes)  # the nodes were still read


def test_an_access_entry_without_the_group_is_refused_and_the_gap_says_so(server: KubeServer) -> None:
    server.identity = Identity(user=AUDITOR.user, groups=("system:authenticated",))
    result = audit_directly(world_on(server, ["UnschedulablePendingReplacement"]), "incident")
    gaps = _gaps(result)
    assert any("node health labels" in g and "access entry carrying that group" in g and "403" in g for g in gaps)
    assert not any(n.verdict == "REPLACE" for n in result.nodes)  # no claim from a label that was not read


def test_no_access_entry_is_a_401_whose_gap_names_the_access_entry_and_its_group(server: KubeServer) -> None:
    server.identity = None
    result = audit_directly(world_on(server, ["Schedulable"]), "incident")
    gaps = _gaps(result)
    assert gaps and all(f"--kubernetes-groups {READER_GROUP}" in g and "EKS did not authenticate" in g for g in gaps)
    assert all("AmazonEKSViewPolicy" not in g for g in gaps)


def test_the_server_answers_what_rbac_allows_and_refuses_the_rest(server: KubeServer) -> None:
    """The stand-in itself: a path the collectors never request is refused before anything is served."""
    api = kubernetes.HttpsKubeApi(server.url, server.ca_data, "k8s-aws-v1.token")
    server.nodes = [{"metadata": {"name": "n1"}}]
    assert api.get("/api/v1/nodes", {})["items"] == server.nodes
    with pytest.raises(kubernetes.CallFailed) as refused:
        api.get("/api/v1/namespaces/default/secrets", {})
    assert refused.value.code == "403" and 'cannot list resource "secrets"' in refused.value.message
