"""MCP for agents (issue #49 items 8 and 6): tool titles and closed-world hints, `list_audits` and an optional
`audit_id` (the cluster's latest stored audit), the `coverage` filter of `audit_nodes` (the CLI's --coverage
reading: report/order.py coverage_status), schema errors as one sentence, and each audit's result and report as
resources, all through a real MCP client session.

The world (pcluster-silent-node) was built so that one GPU node's kernel stream goes silent for 16 hours of the
window: RULES §4 makes its coverage Not observable and §7 its verdict NOT OBSERVABLE; the others read every hour
(Measured).
"""

from __future__ import annotations

import io
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import boto3
import pytest
from botocore.stub import Stubber
from mcp import Client
from mcp.shared.exceptions import MCPError

from gpuaudit.agent.deployed import DeployedBackend
from gpuaudit.agent.local_backend import LocalBackend
from gpuaudit.agent.server import build_server
from gpuaudit.model.timeutil import parse_time
from gpuaudit.settings import DeploymentDocument

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "functions" / "gpuaudit" / "worlds" / "pcluster-silent-node.world.json"
CLUSTER = "bench-pcluster"
SILENT_NODE = "i-0a6a3a4506513270e"
EARLY = {"cluster": CLUSTER, "since": "2026-10-01T06:00:00Z", "until": "2026-10-01T12:00:00Z"}
LATE = {"cluster": CLUSTER, "last": "24h"}


async def session(backend: Any, work: Any) -> Any:
    async with Client(build_server(backend)) as client:
        return await work(client)


def run(backend: Any, work: Any) -> Any:
    return anyio.run(session, backend, work)


def calls(backend: Any, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    async def work(client: Client) -> list[Any]:
        return [await client.call_tool(tool, arguments) for tool, arguments in requests]

    return run(backend, work)  # type: ignore[no-any-return]


def ok(answer: Any) -> dict[str, Any]:
    assert not answer.is_error, answer.content
    return answer.structured_content  # type: ignore[no-any-return]


def error(answer: Any) -> str:
    assert answer.is_error
    return " ".join(c.text for c in answer.content)


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two audits of the world stored (the early window first, made older on disk), shared by the tests."""
    results = tmp_path_factory.mktemp("mcp-agents") / "results"
    backend = LocalBackend(results_dir=results, world=WORLD)
    early, late = (ok(a) for a in calls(backend, ("run_audit", EARLY), ("run_audit", LATE)))
    assert early["audit_id"] != late["audit_id"]
    os.utime(early["result_location"], (1_700_000_000, 1_700_000_000))  # written first, whatever the clock did
    return {"results": results, "early": early, "late": late}


def backend_of(audited: dict[str, Any], tmp_path: Path) -> LocalBackend:
    """A copy of the shared results (a test may not disturb another's)."""
    shutil.copytree(audited["results"], tmp_path / "results", copy_function=shutil.copy2)
    return LocalBackend(results_dir=tmp_path / "results", world=WORLD)


def test_every_tool_has_a_title_and_those_reading_only_stored_state_are_closed_world(tmp_path: Path) -> None:
    async def work(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {t.name: t for t in run(LocalBackend(results_dir=tmp_path, world=WORLD), work)}
    assert "list_audits" in tools
    assert all(t.title and t.title != t.name for t in tools.values()), {n: t.title for n, t in tools.items()}
    closed = {n for n, t in tools.items() if t.annotations and t.annotations.open_world_hint is False}
    # the account is read only by run_audit and list_clusters; the rest read gpuaudit's own results and history
    assert closed == {"audit_summary", "audit_nodes", "list_audits", "latest_findings", "node_history", "explain"}
    assert all(t.annotations.read_only_hint for t in tools.values() if t.annotations)


def test_list_audits_is_latest_first_and_audit_id_defaults_to_the_latest(audited: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    backend = backend_of(audited, tmp_path)
    listed, summary, page, named = calls(
        backend, ("list_audits", {"cluster": CLUSTER}), ("audit_summary", {"cluster": CLUSTER}),
        ("audit_nodes", {"cluster": CLUSTER, "limit": 1}),
        ("audit_summary", {"cluster": CLUSTER, "audit_id": audited["early"]["audit_id"]}))
    rows = ok(listed)["audits"]
    assert [r["audit_id"] for r in rows] == [audited["late"]["audit_id"], audited["early"]["audit_id"]]
    assert ok(listed)["total"] == 2 and rows[0]["stored_at"] > rows[1]["stored_at"]
    assert ok(summary)["audit_id"] == audited["late"]["audit_id"]
    assert ok(summary)["window_end"] == audited["late"]["window_end"]
    assert ok(page)["audit_id"] == audited["late"]["audit_id"] and ok(page)["next_offset"] == 1
    assert ok(named)["audit_id"] == audited["early"]["audit_id"]  # a named audit is still that one


def test_list_audits_pages_and_says_when_a_cluster_has_none(audited: dict[str, Any], tmp_path: Path) -> None:
    backend = backend_of(audited, tmp_path)
    first, second, none, latest_of_none = calls(
        backend, ("list_audits", {"cluster": CLUSTER, "limit": 1}),
        ("list_audits", {"cluster": CLUSTER, "offset": 1, "limit": 1}), ("list_audits", {"cluster": "other"}),
        ("audit_nodes", {"cluster": "other"}))
    assert ok(first)["next_offset"] == 1 and ok(second)["next_offset"] is None
    assert [r["audit_id"] for r in ok(first)["audits"] + ok(second)["audits"]] == [
        audited["late"]["audit_id"], audited["early"]["audit_id"]]
    for answer in (none, latest_of_none):
        assert "no result of an audit of 'other'" in error(answer) and "run_audit first" in error(answer)


@pytest.mark.parametrize(("coverage", "expected"), [
    (["NOT_OBSERVABLE"], {SILENT_NODE}),
    (["not observable"], {SILENT_NODE}),
    (["Not-Observable"], {SILENT_NODE}),
    (["gap"], {SILENT_NODE}),  # its silent hours are a coverage gap; the others read every hour
    (["no_hma_detections"], set()),  # a ParallelCluster has no health agent
])
def test_audit_nodes_filters_on_the_gpu_evidence_status(audited: dict[str, Any], tmp_path: Path,
                                                        coverage: list[str], expected: set[str]) -> None:
    page = ok(calls(backend_of(audited, tmp_path), ("audit_nodes", {"cluster": CLUSTER, "coverage": coverage}))[0])
    assert {n["instance_id"] for n in page["nodes"]} == expected and page["total"] == len(expected)


def test_audit_nodes_coverage_measured_and_verdicts_together(audited: dict[str, Any], tmp_path: Path) -> None:
    backend = backend_of(audited, tmp_path)
    measured, both, none, bad = calls(
        backend, ("audit_nodes", {"cluster": CLUSTER, "coverage": ["measured"]}),
        ("audit_nodes", {"cluster": CLUSTER, "coverage": ["measured"], "verdicts": ["REBOOT"]}),
        ("audit_nodes", {"cluster": CLUSTER, "coverage": ["measured"], "verdicts": ["NOT_OBSERVABLE"]}),
        ("audit_nodes", {"cluster": CLUSTER, "coverage": ["sometimes"]}))
    assert SILENT_NODE not in {n["instance_id"] for n in ok(measured)["nodes"]}
    # every node but the silent one read every hour
    assert all(n["coverage"] == "Measured" for n in ok(measured)["nodes"])
    assert ok(measured)["total"] == audited["late"]["nodes_total"] - 1
    assert ok(both)["total"] == 2 and {n["verdict"] for n in ok(both)["nodes"]} == {"REBOOT"}
    assert ok(none)["total"] == 0  # the NOT OBSERVABLE node is not Measured: each filter holds
    said = error(bad)
    assert "coverage[0]" in said and "'sometimes' is not a coverage status" in said
    assert "MEASURED, NOT_OBSERVABLE, NO_HMA_DETECTIONS, GAP" in said


def test_a_schema_error_is_one_sentence_naming_each_argument_once(tmp_path: Path) -> None:
    said = error(calls(LocalBackend(results_dir=tmp_path, world=WORLD), ("audit_nodes", {
        "cluster": CLUSTER, "limit": 500, "verdicts": ["nope"], "audit_id": "xyz"}))[0])
    assert "\n" not in said and "literal[" not in said and "Value error" not in said
    assert said.count("verdicts[0]") == 1 and said.count("limit:") == 1 and said.count("audit_id:") == 1
    # what each would take, so the agent can correct the call
    assert "'NOT OBSERVABLE' or 'none'" in said and "less than or equal to 200" in said


def test_an_audits_result_and_report_are_resources(audited: dict[str, Any], tmp_path: Path) -> None:
    backend = backend_of(audited, tmp_path)
    audit_id = audited["late"]["audit_id"]

    async def work(client: Client) -> Any:
        templates = (await client.list_resource_templates()).resource_templates
        result = await client.read_resource(f"gpuaudit://results/{CLUSTER}/{audit_id}")
        report = await client.read_resource(f"gpuaudit://reports/{CLUSTER}/{audit_id}")
        failures = []
        for uri in (f"gpuaudit://results/{CLUSTER}/{'0' * 24}", f"gpuaudit://reports/{CLUSTER}/not-an-id"):
            with pytest.raises(MCPError) as raised:
                await client.read_resource(uri)
            failures.append(str(raised.value))
        return templates, result, report, failures

    templates, result, report, failures = run(backend, work)
    by_uri = {t.uri_template: t for t in templates}
    assert set(by_uri) == {"gpuaudit://results/{cluster}/{audit_id}", "gpuaudit://reports/{cluster}/{audit_id}"}
    assert all(t.title for t in templates)
    document = json.loads(result.contents[0].text)
    stored = json.loads(Path(audited["late"]["result_location"]).read_text(encoding="utf-8"))
    assert document["audit_id"] == audit_id and len(document["nodes"]) == len(stored["nodes"])
    assert result.contents[0].mime_type == "application/json"
    assert report.contents[0].mime_type == "text/html" and "<html" in report.contents[0].text.lower()
    assert f"no result of audit {'0' * 24}" in failures[0]
    assert "not an audit ID" in failures[1]


def test_the_deployed_backend_lists_the_buckets_audits_and_reads_the_latest(audited: dict[str, Any]) -> None:
    """The deployed endpoint's tools are the local ones: list_audits from the results bucket's keys (the latest
    written first), audit_nodes without audit_id reading the latest's result."""
    session_ = boto3.Session(region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")
    backend = DeployedBackend(session=session_, region="us-west-2", table="t", bucket="b",
                              state_machine_arn="arn:aws:states:us-west-2:444455556666:stateMachine:g",
                              deployment=DeploymentDocument(), clock=lambda: parse_time("2026-10-02T00:00:00Z"))
    early, late = audited["early"]["audit_id"], audited["late"]["audit_id"]
    listing = {"Contents": [
        {"Key": f"results/{CLUSTER}/{early}.json", "LastModified": datetime(2026, 10, 1, 12, tzinfo=UTC)},
        {"Key": f"results/{CLUSTER}/{early}.html", "LastModified": datetime(2026, 10, 1, 12, tzinfo=UTC)},
        {"Key": f"results/{CLUSTER}/{late}.json", "LastModified": datetime(2026, 10, 1, 23, tzinfo=UTC)},
        {"Key": f"results/{CLUSTER}/nested/{'f' * 24}.json", "LastModified": datetime(2026, 10, 2, tzinfo=UTC)},
    ]}
    body = Path(audited["late"]["result_location"]).read_bytes()
    with Stubber(backend.s3) as s3:
        for _ in range(2):
            s3.add_response("list_objects_v2", listing, {"Bucket": "b", "Prefix": f"results/{CLUSTER}/"})
        s3.add_response("get_object", {"Body": io.BytesIO(body)},
                        {"Bucket": "b", "Key": f"results/{CLUSTER}/{late}.json"})
        listed, page = calls(backend, ("list_audits", {"cluster": CLUSTER}),
                             ("audit_nodes", {"cluster": CLUSTER, "coverage": ["not_observable"]}))
    assert [r["audit_id"] for r in ok(listed)["audits"]] == [late, early]
    assert ok(listed)["audits"][0]["result_location"] == f"s3://b/results/{CLUSTER}/{late}.json"
    assert ok(page)["audit_id"] == late and [n["instance_id"] for n in ok(page)["nodes"]] == [SILENT_NODE]
