"""Every fault kind of the reliability issue, injected into a shipped world: exit 0, a valid result, the gap
named, no traceback (RULES §0.3 'Always answer')."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.model.result import Result

WORLDS = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "worlds"
HYPERPOD = ["--cluster", "research-hp-slurm", "--since", "2026-09-25T17:00:00Z"]


def run_with_faults(tmp_path: Path, faults: list[dict[str, Any]], mode: str = "coverage") -> tuple[int, str, Result]:
    world = json.loads((WORLDS / "hyperpod-xid31-app-error.world.json").read_text())
    world["faults"] = faults
    path = tmp_path / "faulty.world.json"
    path.write_text(json.dumps(world))
    out = CliRunner().invoke(app, ["audit", "--world", str(path), "--mode", mode, "--format", "json", *HYPERPOD])
    assert "Traceback" not in out.output, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    return out.exit_code, out.output, Result.model_validate_json(out.stdout)


def gaps_text(result: Result) -> str:
    return "\n".join(result.visibility_gaps)


def test_throttled_start_query_is_retried_and_the_audit_completes(tmp_path: Path) -> None:
    code, _, result = run_with_faults(tmp_path, [{"service": "logs", "operation": "StartQuery",
                                                  "error": "ThrottlingException", "times": 2}])
    assert code == 0
    start_query = next(c.count for c in result.calls if c.operation == "StartQuery")
    (tmp_path / "plain").mkdir()
    _, _, plain = run_with_faults(tmp_path / "plain", [])
    assert start_query == next(c.count for c in plain.calls if c.operation == "StartQuery") + 2  # 2 throttled, retried
    assert {n.instance_id: n.xid_status for n in result.nodes}["i-0cc3fc1626e53a130"] == "Measured"


def test_start_query_limit_exceeded_every_time_makes_coverage_not_observable(tmp_path: Path) -> None:
    code, _, result = run_with_faults(tmp_path, [{"service": "logs", "operation": "StartQuery",
                                                  "error": "LimitExceededException", "message": "Rate exceeded"}])
    assert code == 0
    assert "logs StartQuery failed (LimitExceededException" in gaps_text(result)
    gpu_nodes = [n for n in result.nodes if n.gpu_count]
    assert gpu_nodes and all(n.xid_status == "Not observable" for n in gpu_nodes)
    assert all(n.verdict in ("NOT OBSERVABLE", "LEAVE ALONE", None) for n in gpu_nodes)
    assert "No GPU errors" not in result.headline


def test_access_denied_on_one_service_is_a_named_gap(tmp_path: Path) -> None:
    code, _, result = run_with_faults(tmp_path, [{"service": "cloudtrail", "operation": "LookupEvents",
                                                  "error": "AccessDeniedException",
                                                  "message": "not authorized to perform: cloudtrail:LookupEvents"}],
                                      mode="incident")
    assert code == 0
    assert "cloudtrail LookupEvents failed (AccessDeniedException" in gaps_text(result)
    assert {b.branch: b.status for b in result.branches}["E"] == "Not assessed"


@pytest.mark.parametrize("status", ["Running", "Failed", "Timeout", "Cancelled"])
def test_query_that_never_completes_is_stopped_and_named(tmp_path: Path, status: str) -> None:
    code, _, result = run_with_faults(tmp_path, [{"service": "logs", "operation": "GetQueryResults",
                                                  "status": status}])
    assert code == 0
    text = gaps_text(result)
    if status == "Running":
        assert "still Running after" in text and "stopped" in text
        assert any(c.operation == "StopQuery" for c in result.calls)
    else:
        assert f"query ended {status}" in text
    assert all(n.xid_status == "Not observable" for n in result.nodes if n.gpu_count)


def test_expired_pagination_token_keeps_what_was_read(tmp_path: Path) -> None:
    code, _, result = run_with_faults(tmp_path, [{"service": "logs", "operation": "DescribeLogGroups",
                                                  "error": "InvalidParameterException", "after": 1,
                                                  "message": "The specified nextToken has expired"}])
    assert code == 0
    assert "The specified nextToken has expired" in gaps_text(result)
    # the first listing (by cluster name) was read, so the cluster log group is still audited
    assert any(r.log_group.startswith("/aws/sagemaker/Clusters/research-hp-slurm/")
               for n in result.nodes for r in n.coverage)


def test_unreachable_endpoint_is_a_named_gap(tmp_path: Path) -> None:
    code, _, result = run_with_faults(tmp_path, [{"service": "ec2", "operation": "DescribeInstanceTypes",
                                                  "error": "EndpointConnectionError"}])
    assert code == 0
    assert "ec2 DescribeInstanceTypes failed (EndpointConnectionError" in gaps_text(result)


def test_node_list_failing_part_way_is_a_gap_not_a_lost_audit(tmp_path: Path) -> None:
    code, _, result = run_with_faults(tmp_path, [{"service": "sagemaker", "operation": "ListClusterNodes",
                                                  "error": "ValidationException",
                                                  "message": "The pagination token expired"}])
    assert code == 0
    assert "node list incomplete of research-hp-slurm" in gaps_text(result)
    assert "No GPU errors" not in result.headline and result.confidence == "Low"
