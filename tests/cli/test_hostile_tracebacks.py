"""Tracebacks found by the hostile-input run of issue #48 (item 6), each a test: every one is now a precise
message (or a named gap), never a traceback."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.abc import MetaPathFinder
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from helpers.worlds import PClusterWorld, at
from typer.testing import CliRunner

from gpuaudit.agent.local_backend import LocalBackend
from gpuaudit.agent.schema import ToolProblem
from gpuaudit.cli import app
from gpuaudit.collectors import kubernetes
from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.devtools import demo
from gpuaudit.model.evidence import AuditRequest, Gap
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 2, 130


def world_file(tmp_path: Path) -> tuple[Path, list[str]]:
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-2), at(12, 25))
    path = tmp_path / "t.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    return path, ["audit", "--world", str(path), "--cluster", w.cluster, "--since", at(6), "--until", at(10)]


def no_traceback(out: Any) -> None:
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output


# -- AWS_PROFILE naming a profile that does not exist: a world or the demo reads no account -----------------------
def test_a_missing_aws_profile_does_not_break_a_world_audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    _, audit = world_file(tmp_path)
    out = CliRunner().invoke(app, [*audit, "--format", "json"])
    no_traceback(out)
    assert out.exit_code == EXIT_OK, out.output


def test_a_missing_aws_profile_does_not_break_the_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.setattr(demo, "demo_worlds", lambda worlds=demo.demo_worlds: worlds()[:1])  # one scenario is enough
    out = CliRunner().invoke(app, ["demo", "--out-dir", str(tmp_path / "demo")])
    no_traceback(out)
    assert out.exit_code == EXIT_OK, out.output
    assert os.environ["AWS_PROFILE"] == "no-such-profile"  # the caller's environment is given back as it was


# -- a 200 that is not the protocol's (a captive portal) ----------------------------------------------------------
class _Body:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def test_a_captive_portal_answering_200_is_a_failed_call_not_a_key_error() -> None:
    # Every HTTP request of the session answered by a hotel Wi-Fi sign-in page, as AWS's endpoints are behind one
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2")

    def portal(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 200, {"content-type": "text/html"},
                           _Body(b"<html><body>Sign in to the hotel Wi-Fi</body></html>"))  # type: ignore[arg-type]

    session.events.register_first("before-send", portal)
    aws = Aws(session=session, region="us-west-2")
    request = AuditRequest(cluster="hp-slurm", since=parse_time(at(6)), until=parse_time(at(10)))
    with pytest.raises(
        CallFailed, match="HTTP 200 without an AWS request ID: the endpoint's answer is not the (ec2|sagemaker) API"
    ):
        run_audit(aws, request)


# -- Kubernetes objects of the wrong shape ------------------------------------------------------------------------
GOOD = {
    "metadata": {"name": "ip-10-0-0-1", "labels": {"a": "b"}},
    "spec": {"providerID": "aws:///us-west-2a/i-0123456789abcdef0", "taints": [{"key": "k", "effect": "NoSchedule"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-09-27T10:00:00Z"}]},
}


@pytest.mark.parametrize(("bad", "field"), [
    ({"metadata": {"name": "n1", "labels": ["a", "b"]}}, "metadata.labels"),
    ({"metadata": {"name": "n2"}, "spec": {"taints": "NoSchedule"}}, "spec.taints"),
    ({"metadata": {"name": "n3"}, "status": {"conditions": "Ready"}}, "status.conditions"),
    ({"metadata": {"name": "n4"}, "status": {"conditions": [{"type": "Ready", "lastTransitionTime": "yesterday"}]}},
     "lastTransitionTime"),
    ({"metadata": {"name": "n5"}, "status": {"conditions": [{"type": "Ready", "lastTransitionTime": 12}]}},
     "lastTransitionTime"),
    ("a node that is a string", "the node"),
])
def test_a_kubernetes_node_of_the_wrong_shape_is_a_named_gap(monkeypatch: pytest.MonkeyPatch, bad: Any,
                                                            field: str) -> None:
    class Api:
        def get(self, path: str, query: dict[str, str]) -> dict[str, Any]:
            return {"items": [GOOD, bad], "metadata": {}}

    monkeypatch.setattr(kubernetes, "_api", lambda _aws, _name: Api())
    gaps: list[Gap] = []
    nodes = kubernetes.list_nodes(None, "eks-a", gaps, scope="node-list")  # type: ignore[arg-type]
    assert nodes is not None and [n.name for n in nodes] == ["ip-10-0-0-1"]  # the well-formed node is read
    (gap,) = gaps
    assert gap.scope == "node-list" and gap.error_code == "Malformed" and field in (gap.error_message or "")
    assert "1 node(s) of a shape the API does not give: not read" in gap.prose()


def test_a_kubernetes_list_whose_items_are_not_a_list_is_a_failed_read(monkeypatch: pytest.MonkeyPatch) -> None:
    class Api:
        def get(self, path: str, query: dict[str, str]) -> Any:
            return {"items": "everything is fine"}

    monkeypatch.setattr(kubernetes, "_api", lambda _aws, _name: Api())
    gaps: list[Gap] = []
    assert kubernetes.list_nodes(None, "eks-a", gaps) is None  # type: ignore[arg-type]
    assert "Malformed" in gaps[0].prose() and "not the Kubernetes API's answer" in gaps[0].prose()


# -- numbers and settings past what Python or datetime takes ------------------------------------------------------
def test_a_world_holding_a_5001_digit_integer_is_bad_input(tmp_path: Path) -> None:
    path, audit = world_file(tmp_path)
    raw = path.read_text(encoding="utf-8")
    path.write_text(raw[:-1] + ', "logs_concurrent_queries": ' + "9" * 5001 + "}", encoding="utf-8")
    out = CliRunner().invoke(app, audit)
    no_traceback(out)
    assert out.exit_code == EXIT_BAD_INPUT and "a number of more than 4,300 digits" in out.output, out.output


def test_a_huge_history_look_back_is_bad_input_naming_the_variable(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUAUDIT_HISTORY_DAYS", "99999999999999")
    _, audit = world_file(tmp_path)
    out = CliRunner().invoke(app, [*audit, "--history", str(tmp_path / "memory")])
    no_traceback(out)
    assert out.exit_code == EXIT_BAD_INPUT and "environment variable GPUAUDIT_HISTORY_DAYS" in out.output, out.output


def test_a_variable_that_is_not_json_is_bad_input_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUAUDIT_MEMBER_ROLES", "{not json")
    _, audit = world_file(tmp_path)
    out = CliRunner().invoke(app, audit)
    no_traceback(out)
    assert out.exit_code == EXIT_BAD_INPUT and "environment variable GPUAUDIT_MEMBER_ROLES: not JSON" in out.output, \
        out.output


# -- the process: stdout closed, Ctrl-C while the libraries load -------------------------------------------------
def test_a_closed_stdout_is_a_write_error_naming_it(tmp_path: Path) -> None:
    _, audit = world_file(tmp_path)
    done = subprocess.run([sys.executable, "-m", "gpuaudit", *audit, "--format", "json"], stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "NO_COLOR": "1"}, preexec_fn=lambda: os.close(1),
                          timeout=300, check=False)
    assert done.returncode == EXIT_BAD_INPUT and "stdout is closed" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


class _InterruptedImport(MetaPathFinder):
    """Ctrl-C arriving while the CLI's modules load: the import of gpuaudit.cli raises KeyboardInterrupt."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == "gpuaudit.cli":
            raise KeyboardInterrupt


def test_ctrl_c_while_the_cli_loads_ends_in_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from gpuaudit import launcher

    monkeypatch.delitem(sys.modules, "gpuaudit.cli")
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as ended:
        launcher.main()
    assert ended.value.code == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "gpuaudit: interrupted (Ctrl-C)\n"


# -- the MCP surfaces: a malformed Function URL event, a NUL in a fleet label -------------------------------------
def url_event(**changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "version": "2.0", "rawPath": "/mcp", "rawQueryString": "", "isBase64Encoded": False,
        "headers": {"host": "abc.lambda-url.us-west-2.on.aws", "content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/mcp", "sourceIp": "10.0.0.1"}},
        "body": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})}
    return {**event, **changes}


@pytest.mark.parametrize(("event", "said"), [
    (["not", "an", "object"], "the event is list"),
    (url_event(headers=["host"]), "headers is not an object"),
    (url_event(requestContext="POST"), "requestContext is not an object"),
    (url_event(requestContext={"http": "POST"}), "requestContext.http is not an object"),
    (url_event(isBase64Encoded=True, body="%%% not base64 %%%"), "not base64"),
    (url_event(body={"jsonrpc": "2.0"}), "body is not a string"),
    (url_event(headers={"host": "h", "x-name": "\u2603"}), "not latin-1"),
])
def test_the_mcp_endpoint_answers_a_malformed_function_url_event_400_naming_the_field(event: Any, said: str) -> None:
    from handlers import mcp_endpoint

    answer = mcp_endpoint.handler(event, None)  # type: ignore[arg-type]
    assert answer["statusCode"] == 400
    assert said in json.loads(answer["body"])["error"]["message"]


def test_well_formed_base64_passes_the_event_check() -> None:
    from gpuaudit.agent.http import malformed_event

    body = base64.b64encode(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}').decode()
    assert malformed_event(url_event(isBase64Encoded=True, body=body)) is None


def test_a_nul_in_a_fleet_label_is_a_tool_error_not_a_traceback(tmp_path: Path) -> None:
    backend = LocalBackend(results_dir=tmp_path / "results")
    with pytest.raises(ToolProblem, match="not a name a result is stored under"):
        backend.result("fleet\x00label", "a1b2c3")


@pytest.mark.parametrize(("event", "field"), [
    ({"metadata": {"name": "e1"}, "lastTimestamp": "not a time"}, "lastTimestamp"),
    ({"metadata": {"name": "e2"}, "lastTimestamp": 1790000000}, "lastTimestamp"),
    ({"metadata": {"name": "e3"}, "lastTimestamp": "2026-09-27T10:00:00Z", "involvedObject": "ip-10-0-0-1"},
     "involvedObject"),
    (["an", "event"], "the Event"),
])
def test_a_kubernetes_event_of_the_wrong_shape_is_malformed_naming_the_field(event: Any, field: str) -> None:
    with pytest.raises(kubernetes.Malformed, match=field):
        kubernetes.kube_event(event)
    well_formed = kubernetes.kube_event({"lastTimestamp": "2026-09-27T10:00:00Z", "reason": "NodeNotReady",
                                         "involvedObject": {"kind": "Node", "name": "ip-10-0-0-1"}})
    assert well_formed is not None and well_formed.node == "ip-10-0-0-1" and well_formed.reason == "NodeNotReady"
