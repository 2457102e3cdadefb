"""The EKS cluster's own word about its nodes (issue #19): labels, taints and conditions from the Kubernetes API.

Read-only by construction: `eks:DescribeCluster` for the endpoint and CA, a token made from the caller's own
credentials the way `aws eks get-token` makes one (a presigned STS GetCallerIdentity naming the cluster), and
plain HTTPS GETs of `/api/v1/nodes` (paginated with limit/continue). No write verb, no kubeconfig, no client
library. A world's embedded backend answers the same paths through the session it wires (WorldBackend.attach).
An unreachable or forbidden API is a gap naming what would allow the read, never healthy nodes: on 401 the access
entry (EKS knows no Kubernetes identity for the role), on 403 the RBAC (the shipped ClusterRole and its binding to
the access entry's group, deploy/kubernetes/gpuaudit-reader.yaml).
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from botocore.signers import RequestSigner

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.domain.kube_access import RBAC_MANIFEST, READER_GROUP, READER_ROLE
from gpuaudit.model.evidence import Evidence, Gap, GapScope
from gpuaudit.model.evidence_parts import KubeEventsPart, KubeNodesPart
from gpuaudit.model.planned_reads import KubeCondition, KubeEvent, KubeNode, PlannedRead
from gpuaudit.model.timeutil import parse_time

NODES_PATH = "/api/v1/nodes"
EVENTS_PATH = "/api/v1/events"
PAGE = 500
MAX_PAGES = 100  # 50,000 nodes
TOKEN_SECONDS = 60
TIMEOUT_SECONDS = 10
def access_needed(cluster: str, failed: CallFailed) -> str:
    """What would allow the read, from how the API server refused it: 401 is authentication (the access entry),
    403 is authorization (RBAC, or an access entry without the group the binding names)."""
    if failed.service != "kubernetes":  # eks:DescribeCluster itself: the API server was never asked
        return f"the endpoint and CA of EKS cluster {cluster} were not read ({failed.service}:{failed.operation})"
    code = failed.code
    entry = (f"an EKS access entry for the auditor's role with Kubernetes group `{READER_GROUP}` (cdk.json "
             f"`eks_access_entries` creates it for the stack's roles; else `aws eks create-access-entry --cluster-name "
             f"{cluster} --principal-arn <role> --type STANDARD --kubernetes-groups {READER_GROUP}`)")
    rbac = (f"the ClusterRole `{READER_ROLE}` (get/list/watch on nodes and events) and its ClusterRoleBinding to "
            f"group `{READER_GROUP}` on cluster {cluster} (`kubectl apply -f {RBAC_MANIFEST}`)")
    if code == "401":
        return f"EKS did not authenticate the auditor's role: needs {entry}"
    if code == "403":
        return f"Kubernetes RBAC refused the read: needs {rbac}, and the role's access entry carrying that group"
    return f"the API server's answer was not read ({code}); reading it needs {entry} and {rbac}"


PROVIDER_ID = re.compile(r"(i-[0-9a-f]{8,17})\b")


class KubeApi(Protocol):
    def get(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        """One GET; raises CallFailed (service "kubernetes") on an HTTP error or a timeout."""
        ...


KubeConnector = Callable[[str, str, str], KubeApi]  # (cluster name, endpoint, CA data) -> API


def eks_token(session: boto3.Session, cluster: str, region: str) -> str:
    """`aws eks get-token`: a presigned GetCallerIdentity URL carrying the cluster name, base64url, prefixed."""
    sts = session.client("sts", region_name=region)
    signer = RequestSigner(sts.meta.service_model.service_id, region, "sts", "v4",
                           session.get_credentials(), session.events)
    url = signer.generate_presigned_url(
        {"method": "GET", "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
         "body": {}, "headers": {"x-k8s-aws-id": cluster}, "context": {}},
        region_name=region, expires_in=TOKEN_SECONDS, operation_name="")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class HttpsKubeApi:
    """The cluster's API server over HTTPS, trusting only the cluster's own CA."""

    def __init__(self, endpoint: str, ca_data: str, token: str) -> None:
        self.endpoint, self.token = endpoint.rstrip("/"), token
        self.context = ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())

    def get(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        url = f"{self.endpoint}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, method="GET", headers={"Authorization": f"Bearer {self.token}",
                                                                     "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=self.context) as response:
                document: dict[str, Any] = json.loads(response.read())
                return document
        except urllib.error.HTTPError as err:
            raise CallFailed("kubernetes", f"GET {path}", str(err.code), _status_message(err)) from None
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            cause = getattr(err, "reason", err)
            # A certificate the cluster's CA did not sign is not a timeout: it says who answered is not the cluster.
            code = "TLSFailed" if isinstance(cause, ssl.SSLError) else \
                "Timeout" if isinstance(cause, TimeoutError) else "Unreachable"
            raise CallFailed("kubernetes", f"GET {path}", code, str(cause)) from None


def _status_message(err: urllib.error.HTTPError) -> str:
    """The API server's own words from its Status body (a 403 names the verb, resource and group refused)."""
    try:
        status = json.loads(err.read(64_000) or b"{}")
    except (ValueError, OSError):
        status = {}
    message = status.get("message") if isinstance(status, dict) else None
    return str(message or err.reason or "HTTP error")[:500]


def https_connector(session: boto3.Session, region: str) -> KubeConnector:
    """The cluster's real endpoint, with a token made from this session's credentials."""
    return lambda name, endpoint, ca: HttpsKubeApi(endpoint, ca, eks_token(session, name, region))


def connector_for(aws: Aws) -> KubeConnector:
    """The port's own connector when it has one (the deployed path's in-VPC reader), the world's API when the
    session is wired to one, else the cluster's real endpoint."""
    chosen: KubeConnector | None = aws.kube_connector or getattr(aws.session, "gpuaudit_kubernetes", None)
    return chosen or https_connector(aws.session, aws.region)


# The fields the rules read (kube_node, read_events): a private endpoint's answers cross a Lambda response, at most
# 6 MB, and a node's status.images alone can be tens of KB; nothing else is kept.
NODE_FIELDS = {"metadata": ("name", "labels"), "spec": ("providerID", "taints"), "status": ("conditions",)}
EVENT_FIELDS = {"metadata": ("creationTimestamp",), "involvedObject": ("kind", "name")}
EVENT_SCALARS = ("lastTimestamp", "eventTime", "type", "reason", "message")


def slim_list(path: str, document: dict[str, Any]) -> dict[str, Any]:
    """A node or event list keeping only what the rules read, and its `continue` token."""
    def keep(item: dict[str, Any], fields: dict[str, tuple[str, ...]], scalars: tuple[str, ...] = ()) -> dict[str, Any]:
        slim = {part: {k: (item.get(part) or {})[k] for k in keys if k in (item.get(part) or {})}
                for part, keys in fields.items()}
        return {**slim, **{k: item[k] for k in scalars if k in item}}
    fields, scalars = (NODE_FIELDS, ()) if path == NODES_PATH else (EVENT_FIELDS, EVENT_SCALARS)
    token = (document.get("metadata") or {}).get("continue")
    return {"items": [keep(i, fields, scalars) for i in document.get("items") or []],
            "metadata": {"continue": token} if token else {}}


class LambdaKubeApi:
    """A private endpoint, read through the stack's KubeRead function in the cluster's VPC (handlers/kube_read.py):
    the same GETs, one synchronous Invoke each; the reader's error (HTTP status, timeout) or a failed Invoke is a
    CallFailed of service "kubernetes", so the collector names the same gap as for a direct read."""

    def __init__(self, aws: Aws, function: str, cluster: str, endpoint: str, ca_data: str) -> None:
        self.aws, self.function = aws, function
        self.target = {"cluster": cluster, "endpoint": endpoint, "ca_data": ca_data}

    def get(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        operation = f"GET {path}"
        self.aws.counts[("lambda", "Invoke")] += 1
        try:
            out = self.aws.client("lambda").invoke(FunctionName=self.function, Payload=json.dumps(
                {**self.target, "path": path, "query": query}).encode())
            answer = json.loads(out["Payload"].read() or b"null")
        except ClientError as err:
            error = err.response.get("Error", {})
            raise CallFailed("kubernetes", operation, error.get("Code", "Unknown"),
                             f"Invoke of {self.function}: {error.get('Message', err)}") from None
        except (BotoCoreError, ValueError) as err:
            raise CallFailed("kubernetes", operation, type(err).__name__, f"Invoke of {self.function}: {err}") from None
        if out.get("FunctionError") or not isinstance(answer,
                                                      dict) or "document" not in answer and "error" not in answer:
            message = answer.get("errorMessage") if isinstance(answer, dict) else None
            raise CallFailed("kubernetes", operation, "ReaderFailed", f"{self.function}: {message or 'no answer'}")
        if "error" in answer:
            raise CallFailed("kubernetes", operation, str(answer["error"].get("code", "Unknown")),
                             str(answer["error"].get("message", "")))
        document: dict[str, Any] = answer["document"]
        return document


def reader_connector(aws: Aws, readers: dict[str, str]) -> KubeConnector:
    """EKS clusters with a private endpoint go through their in-VPC reader; the others are read directly."""
    direct = https_connector(aws.session, aws.region)

    def connect(name: str, endpoint: str, ca: str) -> KubeApi:
        function = readers.get(name)
        return LambdaKubeApi(aws, function, name, endpoint, ca) if function else direct(name, endpoint, ca)
    return connect


def read_nodes(aws: Aws, evidence: Evidence, read: PlannedRead) -> KubeNodesPart:
    """The HyperPod EKS orchestrator's nodes (a read-plan source)."""
    if evidence.cluster.eks_cluster is None:
        return KubeNodesPart()
    gaps: list[Gap] = []
    return KubeNodesPart(kube_nodes=list_nodes(aws, evidence.cluster.eks_cluster, gaps), gaps=gaps)


def read_events(aws: Aws, evidence: Evidence, read: PlannedRead) -> KubeEventsPart:
    """Node Events in the planned span (NodeNotReady, Rebooted, the node problem detector's reports)."""
    name = evidence.cluster.eks_cluster
    if name is None or read.start is None or read.end is None:
        return KubeEventsPart()
    gaps: list[Gap] = []
    try:
        api = _api(aws, name)
        items = _all(api, EVENTS_PATH, {"fieldSelector": "involvedObject.kind=Node"}, gaps, name)
    except CallFailed as failed:
        return KubeEventsPart(gaps=[*gaps, failed.gap_for(f"node Events of EKS cluster {name} not read; "
                                                          + access_needed(name, failed))])
    events, malformed = [], []
    for e in items:
        try:
            event = kube_event(e)
        except Malformed as bad:
            malformed.append(bad)
            continue
        if event is not None and read.start <= event.time <= read.end:
            events.append(event)
    if malformed:
        gaps.append(_malformed_gap(EVENTS_PATH, name, malformed, "Events"))
    return KubeEventsPart(kube_events=sorted(events, key=lambda e: e.time), gaps=gaps)


class Malformed(ValueError):
    """A Kubernetes object whose field is not of the API's type (untrusted: a proxy, a bad controller)."""

    def __init__(self, name: str, field: str, got: object) -> None:
        super().__init__(f"{name or '(unnamed)'}: {field} is {type(got).__name__}, not the API's type")
        self.name, self.field = name, field


def _malformed_gap(path: str, cluster: str, malformed: list[Malformed], what: str,
                   scope: GapScope | None = None) -> Gap:
    said = "; ".join(str(m) for m in malformed[:3]) + (f" and {len(malformed) - 3} more" if len(malformed) > 3 else "")
    return Gap(kind="not-read", service="kubernetes", operation=f"GET {path}", target=cluster, outcome="not read",
               error_code="Malformed", error_message=said[:300],
               unseen=f"{len(malformed)} {what} of a shape the API does not give: not read", scope=scope)


def _mapping(value: object, name: str, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(name, field, value)
    return value


def _listing(value: object, name: str, field: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Malformed(name, field, value)
    return value


def _time(value: object, name: str, field: str) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):  # the API writes times as RFC 3339 text, never a number
        raise Malformed(name, field, value)
    try:
        return parse_time(value)
    except (ValueError, OverflowError):
        raise Malformed(name, field, value) from None


def kube_event(e: object) -> KubeEvent | None:
    """One node Event, None when it carries no time; Malformed when a field is not of the API's type."""
    item = _mapping(e, "", "the Event")
    metadata = _mapping(item.get("metadata"), "", "metadata")
    name = str(metadata.get("name", ""))
    time = _time(item.get("lastTimestamp") or item.get("eventTime") or metadata.get("creationTimestamp"), name,
                 "lastTimestamp")
    if time is None:
        return None
    involved = _mapping(item.get("involvedObject"), name, "involvedObject")
    return KubeEvent(node=str(involved.get("name", "")), time=time, type=_text(item.get("type")),
                     reason=_text(item.get("reason")), message=str(item.get("message", "")))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _api(aws: Aws, name: str) -> KubeApi:
    described = aws.call("eks", "DescribeCluster", name=name)["cluster"]
    return connector_for(aws)(name, described.get("endpoint", ""),
                              (described.get("certificateAuthority") or {}).get("data", ""))


def _all(api: KubeApi, path: str, query: dict[str, str], gaps: list[Gap], name: str,
         scope: GapScope | None = None) -> list[dict[str, Any]]:
    """Every item of a Kubernetes list, page by page (limit/continue); past MAX_PAGES a gap says so."""
    items: list[dict[str, Any]] = []
    page_query = {**query, "limit": str(PAGE)}
    for _ in range(MAX_PAGES):
        page = api.get(path, page_query)
        listed = page.get("items") if isinstance(page, dict) else page
        if not isinstance(page, dict) or not isinstance(listed, list | None) \
                or not isinstance(page.get("metadata") or {}, dict):
            raise CallFailed("kubernetes", f"GET {path}", "Malformed",
                             f"a list answered as {type(page).__name__} with items of {type(listed).__name__}: not "
                             "the Kubernetes API's answer")
        items += listed or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        page_query = {**query, "limit": str(PAGE), "continue": token}
    gaps.append(Gap(kind="truncated", service="kubernetes", operation=f"GET {path}", target=name,
                    unseen=f"more than {PAGE * MAX_PAGES} items: the rest not read", scope=scope))
    return items


def list_nodes(aws: Aws, name: str, gaps: list[Gap], scope: GapScope | None = None) -> list[KubeNode] | None:
    """Every node of the EKS cluster; None and a gap naming the access that would allow it when not read."""
    try:
        items = _all(_api(aws, name), NODES_PATH, {}, gaps, name, scope)
    except CallFailed as failed:
        unseen = f"node health labels of EKS cluster {name} not read: verdicts rest on the logs alone; " + \
            access_needed(name, failed)
        gaps.append(failed.gap_for(unseen, scope=scope))
        return None
    nodes, malformed = [], []
    for item in items:
        try:
            nodes.append(kube_node(item))
        except Malformed as bad:  # its health not read: a gap (of the node list, when the list is the inventory)
            malformed.append(bad)
    if malformed:
        gaps.append(_malformed_gap(NODES_PATH, name, malformed, "node(s)", scope))
    return nodes


def kube_node(item: object) -> KubeNode:
    """One node as listed; Malformed when a field is not of the API's type (labels a list, taints a string…)."""
    node = _mapping(item, "", "the node")
    metadata = _mapping(node.get("metadata"), "", "metadata")
    name = str(metadata.get("name", ""))
    spec, status = _mapping(node.get("spec"), name, "spec"), _mapping(node.get("status"), name, "status")
    found = PROVIDER_ID.search(str(spec.get("providerID", ""))) or PROVIDER_ID.search(name)
    return KubeNode(
        name=name, instance_id=found.group(1) if found else None,
        labels={str(k): str(v) for k, v in _mapping(metadata.get("labels"), name, "metadata.labels").items()},
        taints=[f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
                for t in _listing(spec.get("taints"), name, "spec.taints")],
        conditions=[KubeCondition(type=str(c.get("type")), status=str(c.get("status")), reason=_text(c.get("reason")),
                                  last_transition=_time(c.get("lastTransitionTime"), name,
                                                        "status.conditions[].lastTransitionTime"))
                    for c in _listing(status.get("conditions"), name, "status.conditions")])
