"""A private EKS endpoint, read through the in-VPC KubeRead function (#19 item 3), over real TLS.

The API server is real HTTPS on 127.0.0.1 with its own CA (tests/helpers/kube_server.py); the KubeRead handler is
the deployed one; only Lambda's Invoke transport is in-process (`InProcessLambda`: JSON in, JSON out, an uncaught
error as FunctionError, as Lambda answers a synchronous Invoke). The audit around it is the full pipeline on a
HyperPod EKS world whose cluster endpoint is that server."""

from __future__ import annotations

import base64
import io
import json
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from botocore.exceptions import ClientError
from handlers import kube_read

from gpuaudit.collectors import kubernetes
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.kubernetes import NODES_PATH, list_nodes, reader_connector
from gpuaudit.domain.kube_access import RBAC_MANIFEST, READER_GROUP
from tests.handlers.lambda_harness import LambdaContext
from tests.helpers.kube_server import kube_server, new_ca
from tests.helpers.worlds import REGION, HyperPodWorld, audit, node_of
from tests.rules.test_eks_node_health import EKS, SINCE, UNTIL, eks_world

READER = "gpuaudit-KubeReadHpEksOrchestrator"


class InProcessLambda:
    """Lambda's synchronous Invoke contract around the real handler: what the collector's client meets."""

    def __init__(self, denied: bool = False) -> None:
        self.denied, self.payloads = denied, list[dict[str, Any]]()

    def invoke(self, FunctionName: str, Payload: bytes) -> dict[str, Any]:  # noqa: N803 (boto3's names)
        if self.denied:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized to perform: "
                                         "lambda:InvokeFunction"}}, "Invoke")
        event = json.loads(Payload)
        self.payloads.append(event)
        try:
            answer: Any = kube_read.handler(event, LambdaContext(function_name=FunctionName))
            return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(answer).encode())}
        except Exception as err:  # Lambda reports an uncaught error in the payload, not as an API error
            return {"StatusCode": 200, "FunctionError": "Unhandled",
                    "Payload": io.BytesIO(json.dumps({"errorMessage": str(err),
                                                      "errorType": type(err).__name__}).encode())}


@pytest.fixture(autouse=True)
def _reader_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """KubeRead's own role, as Lambda gives it: credentials in the environment (the token is presigned locally)."""
    for name, value in {"AWS_ACCESS_KEY_ID": "AKIAKUBEREADTEST0001", "AWS_SECRET_ACCESS_KEY": "secret",
                        "AWS_SESSION_TOKEN": "session", "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)


def fat(node: dict[str, Any]) -> dict[str, Any]:
    """A node as the API server returns it: images, addresses and managed fields the rules never read."""
    status = {**node["status"], "images": [{"names": [f"registry/image-{i}:{'x' * 60}"], "sizeBytes": i}
                                           for i in range(300)], "addresses": [{"type": "InternalIP",
                                                                                "address": "10.1.2.3"}]}
    return {**node, "metadata": {**node["metadata"], "managedFields": [{"manager": "kubelet"}] * 20}, "status": status}


def private_world(labels: list[str | None], url: str, ca_data: str) -> HyperPodWorld:
    w = eks_world(labels)
    cluster = w.raw["eks"]["clusters"][0]
    cluster.update({"endpoint": url, "certificateAuthority": {"data": ca_data}})
    return w


def reading_port(w: HyperPodWorld, transport: InProcessLambda) -> Aws:
    aws = w.aws()
    aws.kube_connector = reader_connector(aws, {EKS: READER})
    aws._clients["lambda"] = transport
    return aws


def test_a_private_endpoint_is_read_through_the_in_vpc_reader_and_decides_verdicts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubernetes, "PAGE", 2)
    labels = ["UnschedulablePendingReplacement", "Schedulable", "UnschedulablePendingReboot", "Schedulable", None]
    w = eks_world(labels)
    nodes = [fat(n) for n in w.raw["eks"]["clusters"][0]["kubernetes"]["nodes"]]
    with kube_server(nodes) as server:
        w = private_world(labels, server.url, server.ca_data)
        transport = InProcessLambda()
        result = audit(reading_port(w, transport), w.cluster, mode="incident", since=SINCE, until=UNTIL)
    verdicts = [node_of(result, n.instance_id).verdict for n in w.gpu]
    assert verdicts == ["REPLACE", None, "REBOOT", None, None]
    node_pages = [r for r in server.requests if r[0] == NODES_PATH]
    assert len(node_pages) == 3 and [q.get("continue") for _p, q, _a in node_pages] == [None, ["2"], ["4"]]
    token = node_pages[0][2].removeprefix("Bearer k8s-aws-v1.")
    signed = urlparse(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())
    query = parse_qs(signed.query)
    assert signed.netloc == f"sts.{REGION}.amazonaws.com" and query["Action"] == ["GetCallerIdentity"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0] and query["X-Amz-Credential"][0].startswith(
        "AKIAKUBEREADTEST0001/")  # KubeRead's own role, the principal its access entry names
    assert all(p["path"] in (NODES_PATH, kubernetes.EVENTS_PATH) for p in transport.payloads)
    assert calls_of(result, "lambda", "Invoke") == len(transport.payloads) >= 3


def calls_of(result: Any, service: str, operation: str) -> int:
    return sum(c.count for c in result.calls if (c.service, c.operation) == (service, operation))


def test_the_reader_answers_only_the_fields_the_rules_read() -> None:
    w = eks_world(["Schedulable"])
    node = fat(w.raw["eks"]["clusters"][0]["kubernetes"]["nodes"][0])
    with kube_server([node]) as server:
        answer = kube_read.handler({"cluster": EKS, "endpoint": server.url, "ca_data": server.ca_data,
                                    "path": NODES_PATH, "query": {"limit": "500"}}, LambdaContext())
    (item,) = answer["document"]["items"]
    assert set(item) == {"metadata", "spec", "status"} and set(item["status"]) == {"conditions"}
    assert item["metadata"] == {"name": node["metadata"]["name"], "labels": node["metadata"]["labels"]}
    assert len(json.dumps(answer)) < len(json.dumps(node)) / 10  # a 500-node page stays far under 6 MB
    assert kubernetes.kube_node(item) == kubernetes.kube_node(node)  # the rules see the same node


@pytest.mark.parametrize("event", [
    {"path": "/api/v1/secrets"}, {"path": "/api/v1/nodes/x/proxy"}, {"query": {"watch": "true"}},
    {"endpoint": "http://127.0.0.1:1"}, {"method": "DELETE"}])
def test_the_reader_refuses_anything_but_the_two_list_gets_before_connecting(event: dict[str, Any]) -> None:
    with kube_server([]) as server:
        base = {"cluster": EKS, "endpoint": server.url, "ca_data": server.ca_data, "path": NODES_PATH}
        answer = kube_read.handler({**base, **event}, LambdaContext())
    assert answer["error"]["code"] == "InvalidRequest" and server.requests == []


@pytest.mark.parametrize(("status", "code"), [(403, "403"), (401, "401")])
def test_a_forbidden_private_api_is_a_gap_naming_the_access_entry(status: int, code: str) -> None:
    with kube_server([]) as server:
        server.status = status
        w = private_world(["Schedulable"], server.url, server.ca_data)
        gaps: list[Any] = []
        assert list_nodes(reading_port(w, InProcessLambda()), EKS, gaps) is None
    (gap,) = gaps
    needed = {"403": f"kubectl apply -f {RBAC_MANIFEST}", "401": f"--kubernetes-groups {READER_GROUP}"}[code]
    assert gap.error_code == code and needed in (gap.unseen or "") and "AmazonEKSViewPolicy" not in (gap.unseen or "")


def test_a_server_the_clusters_ca_did_not_sign_is_never_read() -> None:
    with kube_server([{"metadata": {"name": "impostor"}}], signed_by=new_ca()) as server:
        w = private_world(["Schedulable"], server.url, server.ca_data)
        gaps: list[Any] = []
        assert list_nodes(reading_port(w, InProcessLambda()), EKS, gaps) is None
        assert server.requests == []  # the handshake failed: no request, no token sent
    assert gaps[0].error_code == "TLSFailed"


def test_an_invoke_that_fails_is_a_gap_not_healthy_nodes() -> None:
    w = private_world(["UnschedulablePendingReplacement"], "https://127.0.0.1:9", "LS0t")
    gaps: list[Any] = []
    assert list_nodes(reading_port(w, InProcessLambda(denied=True)), EKS, gaps) is None
    assert gaps[0].kind == "denied" and READER in (gaps[0].error_message or "")
    result = audit(reading_port(w, InProcessLambda(denied=True)), w.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert node_of(result, w.gpu[0].instance_id).verdict is None and not result.invariants_broken


def test_a_reader_that_crashes_is_a_named_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_request: Any) -> Any:
        raise MemoryError("out of memory")
    monkeypatch.setattr(kube_read, "connect", broken)
    w = private_world(["Schedulable"], "https://127.0.0.1:9", "LS0t")
    gaps: list[Any] = []
    assert list_nodes(reading_port(w, InProcessLambda()), EKS, gaps) is None
    assert gaps[0].error_code == "ReaderFailed" and "out of memory" in (gaps[0].error_message or "")
