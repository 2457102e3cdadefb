"""`gpuaudit mcp` driven by the MCP SDK's own client (issue #38): the server a subprocess over stdio, each tool called
on a shipped world, progress notifications, bounded pages, and bad input answered with the CLI's own message.

The world (pcluster-silent-node) was built so that one GPU node's kernel stream goes silent for 16 hours of the
window: RULES §4 makes its coverage Not observable and §7 its verdict NOT OBSERVABLE, the worst of the audit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import pytest
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from gpuaudit.agent.http import PATH, http_app
from gpuaudit.agent.local_backend import LocalBackend
from gpuaudit.agent.schema import AuditInput, ToolProblem
from gpuaudit.agent.server import build_server

ROOT = Path(__file__).resolve().parent.parent
WORLD = ROOT / "functions" / "gpuaudit" / "worlds" / "pcluster-silent-node.world.json"
CLUSTER = "bench-pcluster"
SILENT_NODE = "i-0a6a3a4506513270e"
TOOLS = {"run_audit", "audit_summary", "audit_nodes", "list_clusters", "latest_findings", "node_history", "explain"}
PREFIX = "gpuaudit_"  # how a client that merges several servers names our tools (64 characters at most, with it)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "functions"), "NO_COLOR": "1"}


def server(tmp: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, env=env(), args=[
        "-m", "gpuaudit", "mcp", "--world", str(WORLD), "--results-dir", str(tmp / "results"),
        "--history", str(tmp / "history"), *extra])


def check_tool_listing(tools: list[Any]) -> None:
    """Every tool: a name a prefixed client can use, valid JSON schemas for its input and its (structured) output."""
    for tool in tools:
        assert len(PREFIX + tool.name) <= 64, tool.name
        assert all(c.isalnum() or c in "_-" for c in tool.name), tool.name
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None, f"{tool.name} has no output schema"
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.annotations is not None
        if tool.name != "start_audit":
            assert tool.annotations.read_only_hint is True, tool.name


def structured(result: Any, tool: Any) -> dict[str, Any]:
    """The tool's structured result, checked against the output schema it published."""
    assert not result.is_error, result.content
    data = result.structured_content
    jsonschema.validate(data, tool.output_schema)
    return data  # type: ignore[no-any-return]


def error_text(result: Any) -> str:
    assert result.is_error
    text = " ".join(c.text for c in result.content)
    assert "Traceback" not in text and "File \"" not in text
    return text


def cli_message(*args: str) -> str:
    """What `gpuaudit audit` prints for the same input (stderr, after `gpuaudit: `), and that it is an exit 2."""
    done = subprocess.run([sys.executable, "-m", "gpuaudit", "audit", "--world", str(WORLD), "--quiet", *args],
                          env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    return " ".join(done.stderr.split()).removeprefix("gpuaudit: ")


async def drive(session: ClientSession, streams_progress: bool = True) -> dict[str, Any]:
    """The same calls on either transport. Over HTTP the endpoint answers in JSON (no event stream): no progress."""
    await session.initialize()
    listed = (await session.list_tools()).tools
    tools = {t.name: t for t in listed}
    assert set(tools) == TOOLS
    check_tool_listing(listed)

    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    summary = structured(await session.call_tool("run_audit", {"cluster": CLUSTER, "last": "24h"},
                                                 progress_callback=on_progress), tools["run_audit"])
    # the verdicts RULES gives this world: the silent node first (worst), two REBOOT, one LEAVE ALONE
    counts = {c["verdict"]: c["nodes"] for c in summary["verdict_counts"]}
    assert counts == {"NOT OBSERVABLE": 1, "REBOOT": 2, "LEAVE ALONE": 1}
    assert summary["worst_nodes"][0]["instance_id"] == SILENT_NODE
    assert summary["worst_nodes"][0]["coverage"] == "Not observable"
    assert any(SILENT_NODE in gap for gap in summary["gaps"])
    stored = json.loads(Path(summary["result_location"]).read_text(encoding="utf-8"))
    assert stored["audit_id"] == summary["audit_id"] and len(stored["nodes"]) == summary["nodes_total"]
    # progress: each phase of the pipeline, values growing, against a stated total
    if streams_progress:
        values = [p[0] for p in progress]
        assert values == sorted(values) and len(set(values)) == len(values)
        said = " ".join(p[2] or "" for p in progress)
        for phase in ("inventory", "log groups", "queries", "control plane", "judging", "rendering"):
            assert phase in said
        assert all(p[1] == 6.0 for p in progress)
    else:
        assert progress == []

    # pages of two cover every node once, worst first, and say where the next page starts
    seen: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = structured(await session.call_tool("audit_nodes", {"cluster": CLUSTER, "audit_id": summary["audit_id"],
                                                                  "offset": offset, "limit": 2}), tools["audit_nodes"])
        assert len(page["nodes"]) <= 2 and page["total"] == summary["nodes_total"]
        seen += page["nodes"]
        offset = page["next_offset"]
    assert sorted(n["instance_id"] for n in seen) == sorted(n["instance_id"] for n in stored["nodes"])
    reboots = structured(await session.call_tool("audit_nodes", {
        "cluster": CLUSTER, "audit_id": summary["audit_id"], "verdicts": ["REBOOT"]}), tools["audit_nodes"])
    assert reboots["total"] == 2 and {n["verdict"] for n in reboots["nodes"]} == {"REBOOT"}

    again = structured(await session.call_tool("audit_summary", {"cluster": CLUSTER, "audit_id": summary["audit_id"]}),
                       tools["audit_summary"])
    assert again["headline"] == summary["headline"] and again["verdict_counts"] == summary["verdict_counts"]

    clusters = structured(await session.call_tool("list_clusters", {}), tools["list_clusters"])
    assert {"name": CLUSTER, "kind": "parallelcluster"} in clusters["clusters"]

    latest = structured(await session.call_tool("latest_findings", {"cluster": CLUSTER}), tools["latest_findings"])
    assert latest["nodes"][0]["instance_id"] == SILENT_NODE and latest["nodes"][0]["verdict"] == "NOT OBSERVABLE"
    recorded = {n["instance_id"] for n in latest["nodes"]}
    assert latest["total"] == len(recorded) and latest["nodes"][0]["audit_id"] == summary["audit_id"]
    with_verdict = {n["instance_id"] for n in stored["nodes"] if n["verdict"]}
    assert with_verdict <= recorded <= {n["instance_id"] for n in stored["nodes"]}

    history = structured(await session.call_tool("node_history", {"cluster": CLUSTER, "node": SILENT_NODE}),
                         tools["node_history"])
    assert [(s["verdict"], s["coverage"]) for s in history["spans"]] == [("NOT OBSERVABLE", "Not observable")]

    explained = structured(await session.call_tool("explain", {"term": "not_observable"}), tools["explain"])
    assert explained["entries"][0]["term"] == "NOT OBSERVABLE"
    assert "Check the node directly" in explained["entries"][0]["meaning"]
    xid = structured(await session.call_tool("explain", {"term": "Xid 79"}), tools["explain"])
    assert xid["entries"][0]["term"] == "Xid 79" and "verdict: REBOOT" in xid["entries"][0]["meaning"]

    # bad input: tool errors with the product's messages, never a traceback
    unknown = error_text(await session.call_tool("run_audit", {"cluster": "no-such-cluster", "last": "24h"}))
    assert cli_message("--cluster", "no-such-cluster", "--last", "24h") in unknown
    bad_time = error_text(await session.call_tool("run_audit", {"cluster": CLUSTER, "until": "tomorrow"}))
    assert "until: not an ISO-8601 time: 'tomorrow'" in bad_time
    not_a_node = error_text(await session.call_tool("node_history", {"cluster": CLUSTER, "node": "node-7"}))
    assert "node" in not_a_node and "pattern" in not_a_node
    missing = error_text(await session.call_tool("audit_summary", {"cluster": CLUSTER, "audit_id": "0" * 24}))
    assert f"no result of audit {'0' * 24}" in missing
    assert "not in the glossary" in error_text(await session.call_tool("explain", {"term": "frobnicate"}))
    return {"summary": summary}


def test_stdio_client_calls_every_tool_on_a_shipped_world(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_client(server(tmp_path)) as (read, write), ClientSession(read, write) as session:
            await drive(session)

    anyio.run(main)


def test_a_bad_world_stops_the_server_before_it_serves(tmp_path: Path) -> None:
    """The CLI's exit 2 and message, on stderr: nothing is written to stdout, the protocol's channel."""
    bad = tmp_path / "bad.world.json"
    bad.write_text("{", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gpuaudit", "mcp", "--world", str(bad), "--results-dir",
                           str(tmp_path / "r")], env=env(), capture_output=True, text=True, timeout=60, input="")
    assert done.returncode == 2 and done.stdout == ""
    assert str(bad) in done.stderr and "Traceback" not in done.stderr


def test_the_shipped_glossary_is_the_documented_one() -> None:
    """The Lambda and a wheel have no docs/: `explain` reads the package's copy, which must not drift."""
    shipped = ROOT / "functions" / "gpuaudit" / "data" / "VERDICTS.md"
    assert shipped.read_bytes() == (ROOT / "docs" / "VERDICTS.md").read_bytes()


@contextmanager
def loopback(app: Any) -> Iterator[str]:
    """The app served by uvicorn on 127.0.0.1 only (a free port), for the test's duration."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}{PATH}"
    finally:
        served.should_exit = True
        thread.join(timeout=10)


def test_http_client_calls_every_tool_and_protocol_errors(tmp_path: Path) -> None:
    """The Streamable HTTP app the Lambda serves (stateless, JSON responses), on loopback: the SDK's HTTP client makes
    the same calls; then raw requests the protocol refuses."""
    (tmp_path / "history").mkdir()
    backend = LocalBackend(results_dir=tmp_path / "results", world=WORLD, history_dir=tmp_path / "history")
    with loopback(http_app(build_server(backend))) as url:
        async def main() -> None:
            async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                await drive(session, streams_progress=False)

        anyio.run(main)

        post = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
        empty = httpx2.post(url, headers=post, content=b"")
        assert empty.status_code == 400 and empty.json()["error"]["code"] == -32700  # JSON-RPC parse error
        unsupported = httpx2.post(url, headers={**post, "mcp-protocol-version": "1999-01-01"}, json=listing)
        assert unsupported.status_code == 400 and unsupported.json()["error"]["code"] == -32602
        # stateless: no session header is issued or needed, and without the protocol header the transport's
        # default version applies; the request is answered on its own
        bare = httpx2.post(url, headers=post, json=listing)
        assert bare.status_code == 200 and "mcp-session-id" not in bare.headers
        assert {t["name"] for t in bare.json()["result"]["tools"]} == TOOLS
        stream = httpx2.get(url, headers=post)
        assert stream.status_code == 405 and stream.headers["allow"] == "POST"
        foreign = httpx2.post(url, headers={**post, "host": "attacker.example"}, json=listing)
        assert foreign.status_code == 421  # DNS rebinding: only the loopback host is served


def test_answers_stay_bounded_however_large_the_result(tmp_path: Path) -> None:
    """A 1,000-node result with long evidence, gaps and next steps (a 6 MB document) is answered with a
    summary and pages of bounded size; the whole result is only at result_location."""
    from gpuaudit.agent.schema import NODE_PAGE_MAX, node_page, summarise
    from gpuaudit.progress import Silent

    backend = LocalBackend(results_dir=tmp_path / "results", world=WORLD)
    result, _, _ = backend.run_audit(AuditInput(cluster=CLUSTER, last="24h").request(), Silent())
    long = "evidence " * 700
    nodes = [n.model_copy(update={"instance_id": f"i-{i:017x}", "verdict_evidence": long})
             for i in range(1_000) for n in result.nodes[:1]]
    big = result.model_copy(update={"nodes": nodes, "visibility_gaps": [long] * 50, "actions": [long] * 50})
    assert len(big.to_json()) > 5_000_000
    summary = summarise(big, "/somewhere/result.json", None).model_dump_json()
    assert len(summary) < 40_000
    page = node_page(big, 0, NODE_PAGE_MAX).model_dump_json()
    assert len(page) < NODE_PAGE_MAX * 700  # a row: its reason cut to 400 characters, and its fields
    assert len(node_page(big, 900, NODE_PAGE_MAX).nodes) == 100


@pytest.mark.parametrize(("flag", "env_profile", "code"), [("no-such-profile", None, 2), (None, "no-such-profile", 3)])
def test_account_access_problems_are_the_clis_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       flag: str | None, env_profile: str | None, code: int) -> None:
    """A bad --profile (exit 2) or AWS_PROFILE (exit 3): the tool's error is the CLI's message for the same setting."""
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = us-west-2\n", encoding="utf-8")
    settings = {"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                **({"AWS_PROFILE": env_profile} if env_profile else {})}
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    if not env_profile:
        monkeypatch.delenv("AWS_PROFILE", raising=False)
    done = subprocess.run([sys.executable, "-m", "gpuaudit", "audit", "--cluster", CLUSTER, "--quiet",
                           *(["--profile", flag] if flag else [])],
                          env={**env(), **settings}, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    backend = LocalBackend(results_dir=tmp_path / "results", profile=flag)
    with pytest.raises(ToolProblem) as raised:
        backend.clusters()
    assert " ".join(done.stderr.split()).removeprefix("gpuaudit: ") == " ".join(str(raised.value).split())
