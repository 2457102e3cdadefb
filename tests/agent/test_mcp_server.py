"""`gpuaudit mcp` driven by the MCP SDK's own client (issue #38): the server a subprocess over stdio, each tool called
on a shipped world, progress notifications, bounded pages, and bad input answered with the CLI's own message.

The world (pcluster-silent-node) was built so that one GPU node's kernel stream goes silent for 16 hours of the
window: RULES §4 makes its coverage Not observable and §7 its verdict NOT OBSERVABLE, the worst of the audit.
"""

from __future__ import annotations

import json
import os
import re
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
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from gpuaudit.agent.http import PATH, http_app
from gpuaudit.agent.local_backend import LocalBackend
from gpuaudit.agent.schema import AuditInput, ToolProblem
from gpuaudit.agent.server import build_server
from gpuaudit.model.text import CONTROL_CLASS
from gpuaudit.model.timeutil import parse_time
from tests.helpers.worlds import PClusterWorld, at

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "functions" / "gpuaudit" / "worlds" / "pcluster-silent-node.world.json"
CLUSTER = "bench-pcluster"
SILENT_NODE = "i-0a6a3a4506513270e"
TOOLS = {"run_audit", "audit_summary", "audit_nodes", "list_clusters", "latest_findings", "node_history", "explain",
         "list_audits"}
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


# -- hostile input on the agent surface (issue #48 items 1, 7, 9) ---------------------------------------------------
HOSTILE_TEXT = "\x1b]0;pwned\x07\x9b31m\u200b\ufeff\U000e0041\u2028 arn:aws:sts::444455556666:assumed-role/a/b"
RAW = re.compile(f"[\\n\\t{CONTROL_CLASS}]")


def hostile_world_file(tmp: Path, *, denied: bool = False) -> Path:
    """A ParallelCluster whose queue name and kernel line carry escapes, invisible characters and an account ID;
    `denied`: DescribeInstances refused with a message carrying the caller's ARN and terminal escapes."""
    w = PClusterWorld("evil", n_compute=1)
    w.add_instance(queue=HOSTILE_TEXT)
    node = w.compute[0]
    w.stream(w.group, w.healthy(node, at(-2), at(13)), events=[
        (at(9), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, {HOSTILE_TEXT}")])
    if denied:
        w.fault("ec2", "DescribeInstances", "UnauthorizedOperation",
                message="User: arn:aws:sts::444455556666:assumed-role/audit/s is not authorized \x1b[2J\x07\x9b")
    path = tmp / "evil.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    return path


def strings_of(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_of(item)


def leaks(value: Any) -> list[str]:
    """Every string of an answer that carries a raw control/invisible character or an account ID."""
    return [s for s in strings_of(value) if RAW.search(s) or "444455556666" in s]


def text_leaks(result: Any) -> list[str]:
    """The same of the answer's text content (its JSON, indented: the layout's new lines are not the account's)."""
    return [c.text for c in result.content if RAW.search(c.text.replace("\n", "")) or "444455556666" in c.text]


def call(backend: LocalBackend, tool: str, arguments: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with Client(build_server(backend)) as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(main)


def test_answers_carry_no_raw_character_and_no_account_id(tmp_path: Path) -> None:
    backend = LocalBackend(results_dir=tmp_path / "results", world=hostile_world_file(tmp_path))
    window = {"cluster": "evil", "mode": "incident", "since": at(8), "until": at(11)}
    summary = call(backend, "run_audit", window)
    assert not summary.is_error, summary.content
    # the hostile queue name is in the answer, escaped; nothing raw and no account ID anywhere
    assert any("\\x9b31m" in s for s in strings_of(summary.structured_content))
    assert leaks(summary.structured_content) == [] and text_leaks(summary) == []
    page = call(backend, "audit_nodes", {"cluster": "evil", "audit_id": summary.structured_content["audit_id"]})
    assert not page.is_error and page.structured_content["nodes"]
    assert leaks(page.structured_content) == [] and text_leaks(page) == []


def test_a_tool_error_from_aws_is_redacted_and_escaped(tmp_path: Path) -> None:
    backend = LocalBackend(results_dir=tmp_path / "results", world=hostile_world_file(tmp_path, denied=True))
    answer = call(backend, "run_audit", {"cluster": "evil", "last": "2h"})
    text = error_text(answer)
    assert "UnauthorizedOperation" in text and "arn:aws:sts::<account>:assumed-role" in text
    assert leaks(text) == [] and "\\x1b[2J" in text


@pytest.mark.parametrize(("arguments", "said"), [
    ({"cluster": CLUSTER, "world": "/etc/passwd"}, "unknown argument(s) 'world'"),
    ({"cluster": CLUSTER, "last": "2h", "profile": "prod", "run_hour": 3}, "unknown argument(s) 'profile', 'run_hour'"),
])
def test_an_argument_a_tool_does_not_take_is_refused_by_name(tmp_path: Path, arguments: dict[str, Any],
                                                             said: str) -> None:
    backend = LocalBackend(results_dir=tmp_path / "results", world=WORLD)
    text = error_text(call(backend, "run_audit", arguments))
    assert said in text and "cluster" in text  # what it does take
    assert not (tmp_path / "results").exists()  # refused before anything ran
    assert said.split("(s) ")[1].split(",")[0] in error_text(call(backend, "audit_summary", {
        "cluster": CLUSTER, "audit_id": "0" * 24, **{k: v for k, v in arguments.items() if k != "cluster"}}))


@pytest.mark.parametrize("field", ["cluster", "eks_cluster", "since", "until", "onset", "run_start", "last"])
def test_every_string_input_has_the_clis_length_limit_and_is_not_echoed_whole(tmp_path: Path, field: str) -> None:
    backend = LocalBackend(results_dir=tmp_path / "results", world=WORLD)
    huge = "a" * 1_000_000
    text = error_text(call(backend, "run_audit", {"cluster": CLUSTER, field: huge}))
    assert field in text and len(text) < 2_000, len(text)


@pytest.mark.parametrize("label", ["lab\nrm -rf", "lab\x1b[2J", "lab\x00", "lab\u202egnp.exe", "lab\u200b"])
def test_a_fleet_label_with_control_or_invisible_characters_is_refused_before_any_folder(tmp_path: Path,
                                                                                         label: str) -> None:
    backend = LocalBackend(results_dir=tmp_path / "results", world=WORLD)
    text = error_text(call(backend, "run_audit", {"cluster": label, "instance_ids": [SILENT_NODE], "last": "2h"}))
    assert "cluster" in text and "control or invisible character" in text and leaks(text) == []
    assert not (tmp_path / "results").exists()


def test_sigint_stops_the_server_while_a_tool_call_is_running(tmp_path: Path) -> None:
    """Ctrl-C while an audit runs in a worker thread (here one that would take ten minutes): the server says
    `interrupted` and exits 130, not when the audit ends."""
    import signal

    started = tmp_path / "started"
    code = ("import sys, time, pathlib\n"
            "from gpuaudit.agent import local_backend\n"
            "def slow(self, request, progress):\n"
            f"    pathlib.Path({str(started)!r}).touch()\n"
            "    time.sleep(600)\n"
            "local_backend.LocalBackend.run_audit = slow\n"
            "from gpuaudit.cli import app\n"
            f"sys.argv = ['gpuaudit', 'mcp', '--world', {str(WORLD)!r}, '--results-dir', {str(tmp_path / 'r')!r}]\n"
            "app()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdin is not None
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "run_audit", "arguments": {"cluster": CLUSTER, "last": "2h"}}}):
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        waited = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < waited and proc.poll() is None, "the tool call never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130  # the client's pipe still open, the audit still running
        assert proc.stderr is not None and "interrupted" in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_line_that_is_not_json_rpc_gets_the_protocols_error_and_the_server_goes_on(tmp_path: Path) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    lines = [json.dumps(initialize), "{not json \x1b[2J", '{"jsonrpc":"2.0","id":2,"method":"tools/list"', "[1,2]",
             json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"})]
    # stdin stays open until the last answer is read: a server whose input ends stops, and may drop what it had
    # not yet answered (an MCP client keeps the pipe open while it waits)
    server = subprocess.Popen([sys.executable, "-m", "gpuaudit", "mcp", "--world", str(WORLD), "--results-dir",
                               str(tmp_path / "r")], env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("\n".join(lines) + "\n")
    server.stdin.flush()
    out: list[str] = []
    timer = threading.Timer(120, server.kill)
    timer.start()
    try:
        for line in server.stdout:
            out.append(line)
            if json.loads(line).get("id") == 3:
                break
        server.stdin.close()
        stdout = server.stdout.read()
        stderr = server.stderr.read() if server.stderr is not None else ""
        server.wait(timeout=60)
    finally:
        timer.cancel()
    answers = [json.loads(line) for line in [*out, *stdout.splitlines()] if line.strip()]
    assert [a["id"] for a in answers] == [1, None, None, None, 3], answers
    assert [a["error"]["code"] for a in answers[1:4]] == [-32700, -32700, -32600]
    assert "\x1b" not in "".join(out) + stdout and "Traceback" not in stderr


@pytest.mark.parametrize(("first", "second"), [
    ({"mode": "preflight", "run_hours": 24}, {"mode": "preflight", "run_hours": 48}),
    ({}, {"log_groups": ["/aws/training-logs/bench-pcluster/kernel"]}),
    ({"mode": "incident"}, {"mode": "incident", "onset": "2026-10-01T12:00:00Z"}),
])
def test_two_audits_of_one_window_with_different_inputs_keep_both_results(tmp_path: Path, first: dict[str, Any],
                                                                          second: dict[str, Any]) -> None:
    """Issue #48 item 9: the audit ID keys on the inputs that change the judgement, so the second audit of a window
    never overwrites the first's result; the same inputs again give the same ID (idempotent sinks)."""
    backend = LocalBackend(results_dir=tmp_path / "results", world=WORLD)
    window = {"cluster": CLUSTER, "since": "2026-10-01T06:00:00Z", "until": "2026-10-01T18:00:00Z"}
    answers = [call(backend, "run_audit", {**window, **inputs}) for inputs in (first, second, first)]
    assert not any(a.is_error for a in answers), [a.content for a in answers]
    ids = [a.structured_content["audit_id"] for a in answers]
    assert ids[0] != ids[1] and ids[0] == ids[2]
    for answer in answers[:2]:
        kept = call(backend, "audit_summary", {"cluster": CLUSTER, "audit_id": answer.structured_content["audit_id"]})
        assert kept.structured_content["headline"] == answer.structured_content["headline"]
        assert kept.structured_content["checks"] == answer.structured_content["checks"]


def test_the_deployed_backends_aws_errors_leave_redacted_and_escaped(tmp_path: Path) -> None:
    """The deployed endpoint's tools read S3 and DynamoDB with the function's role: AWS's error text (the caller's
    ARN, whatever the message carries) reaches the agent as every other message does."""
    import boto3
    from botocore.stub import Stubber

    from gpuaudit.agent.deployed import DeployedBackend
    from gpuaudit.settings import DeploymentDocument

    session = boto3.Session(region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")
    backend = DeployedBackend(session=session, region="us-west-2", table="t", bucket="b",
                              state_machine_arn="arn:aws:states:us-west-2:444455556666:stateMachine:g",
                              deployment=DeploymentDocument(), clock=lambda: parse_time("2026-10-01T00:00:00Z"))
    denied = "User: arn:aws:sts::444455556666:assumed-role/mcp/fn is not authorized \x1b]0;x\x07\x9b31m\u2028"
    with Stubber(backend.s3) as s3, Stubber(backend.ddb) as ddb:
        s3.add_client_error("get_object", service_error_code="AccessDenied", service_message=denied,
                            http_status_code=403)
        ddb.add_client_error("query", service_error_code="AccessDeniedException", service_message=denied,
                             http_status_code=400)

        async def main() -> list[Any]:
            async with Client(build_server(backend)) as client:
                return [await client.call_tool("audit_summary", {"cluster": "c", "audit_id": "0" * 24}),
                        await client.call_tool("latest_findings", {"cluster": "c"})]

        answers = anyio.run(main)
    for answer in answers:
        text = error_text(answer)
        assert "AccessDenied" in text and "arn:aws:sts::<account>:assumed-role/mcp/fn" in text, text
        assert leaks(text) == [] and "\\x1b]0;x\\x07\\x9b31m\\u2028" in text
