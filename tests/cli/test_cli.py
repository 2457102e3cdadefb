"""The command line (cli/): exit codes, messages that name the problem, clean output.

Exit codes: 0 audited (whatever the findings); 2 bad input, naming what; 3 the account or world
could not be reached. A missing --world file is bad input (2): the user named a path that does not
exist, like any other bad flag value; 3 is for an account (or world) that exists but cannot be read.
A user error never prints a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.worlds import HyperPodWorld, PClusterWorld, WorldBuilder, at
from typer.testing import CliRunner

from gpuaudit.cli import app

EXIT_OK, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 0, 2, 3


def write_world(tmp_path: Path, w: WorldBuilder | dict[str, Any], name: str = "t.world.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(w.raw if isinstance(w, WorldBuilder) else w), encoding="utf-8")
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, list(args))
    # Rich wraps long messages to the terminal width: compare words, not line breaks
    return outcome.exit_code, outcome.stdout, " ".join(outcome.stderr.split())


def healthy_pcluster() -> PClusterWorld:
    w = PClusterWorld(n_compute=1)
    w.healthy(w.compute[0], at(-10), at(12, 25))
    return w


@pytest.fixture
def world(tmp_path: Path) -> Path:
    return write_world(tmp_path, healthy_pcluster())


def audit(world: Path, *extra: str) -> tuple[int, str, str]:
    return invoke("audit", "--world", str(world), "--cluster", "llm-pretrain", "--since", at(6), *extra)


# -- success -----------------------------------------------------------------------------------------
def test_audit_exits_0_and_json_stdout_is_the_result_and_nothing_else(world: Path):
    # When a healthy cluster is audited with --format json
    code, stdout, stderr = audit(world, "--format", "json")

    # Then exit 0, and stdout parses whole as one JSON document: the result
    assert code == EXIT_OK, stderr
    assert stdout.lstrip().startswith("{") and stdout.rstrip().endswith("}")
    result = json.loads(stdout)
    assert result["schema"] == "gpu-audit-result/1"
    assert result["cluster"]["name"] == "llm-pretrain"
    assert "Traceback" not in stdout + stderr


def test_audit_with_findings_still_exits_0(tmp_path: Path):
    # Given a node with no kernel stream at all (Not observable is a finding, not a failure)
    w = PClusterWorld(n_compute=1)
    code, stdout, _ = invoke("audit", "--world", str(write_world(tmp_path, w)), "--cluster", "llm-pretrain",
                             "--format", "json")
    assert code == EXIT_OK
    assert {n["xid_status"] for n in json.loads(stdout)["nodes"] if n["role"] == "compute"} == {"Not observable"}


def test_markdown_is_the_default_format(world: Path):
    code, stdout, _ = audit(world)
    assert code == EXIT_OK
    assert stdout.startswith("# gpuaudit coverage audit: llm-pretrain (us-west-2)")


def test_out_writes_the_file_and_leaves_stdout_empty(world: Path, tmp_path: Path):
    # When --out names a file
    out = tmp_path / "result.json"
    code, stdout, stderr = audit(world, "--format", "json", "--out", str(out))

    # Then the result is in the file, stdout is empty, and stderr says where it went
    assert code == EXIT_OK
    assert stdout == ""
    assert json.loads(out.read_text(encoding="utf-8"))["cluster"]["name"] == "llm-pretrain"
    assert f"wrote {out}" in stderr


def test_out_to_a_missing_folder_fails_without_traceback(world: Path, tmp_path: Path):
    code, _, stderr = audit(world, "--out", str(tmp_path / "no" / "such" / "dir.md"))
    assert code == EXIT_BAD_INPUT  # a user mistake (issue #17), not an unreachable account
    assert "--out" in stderr and "cannot write there" in stderr and "Traceback" not in stderr


# -- bad input: exit 2, naming the problem -------------------------------------------------------------
@pytest.mark.parametrize(("extra", "named"), [
    (("--mode", "bogus"), "--mode must be one of coverage, incident, preflight; got 'bogus'"),
    (("--format", "yaml"), "--format must be one of"),
    (("--until", "not-a-time"), "--until: not an ISO-8601 time: 'not-a-time'"),
    (("--last", "5 hours"), "--last must be a length like 30m, 2h, 6h or 2d"),
    (("--last", "91d"), "--last 91d: longer than the maximum window of 90 days"),
    (("--until", at(3)), "is not before its end"),
    (("--region", "eu-west-1"), "--region eu-west-1 does not match the world's region us-west-2"),
    (("--run-hours", "-1"), "--run-hours"),
])
def test_bad_flags_exit_2_naming_the_flag(world: Path, extra: tuple[str, ...], named: str):
    code, stdout, stderr = audit(world, *extra)
    assert code == EXIT_BAD_INPUT
    assert named in stderr
    assert stdout == ""
    assert "Traceback" not in stderr


def test_bad_since_exits_2_naming_it(world: Path):
    code, _, stderr = invoke("audit", "--world", str(world), "--cluster", "llm-pretrain", "--since", "yesterday")
    assert code == EXIT_BAD_INPUT
    assert "--since: not an ISO-8601 time or a length: 'yesterday'" in stderr


def test_unknown_cluster_exits_2_naming_what_was_searched(world: Path):
    code, stdout, stderr = invoke("audit", "--world", str(world), "--cluster", "no-such-cluster")
    assert code == EXIT_BAD_INPUT
    assert "cluster 'no-such-cluster' not found in region us-west-2" in stderr
    assert "DescribeCluster" in stderr and "DescribeInstances" in stderr
    assert stdout == "" and "Traceback" not in stderr


def test_world_with_unknown_key_exits_2_naming_the_key(tmp_path: Path):
    raw = healthy_pcluster().raw
    raw["ec2"]["instance"] = []
    code, _, stderr = invoke("audit", "--world", str(write_world(tmp_path, raw)), "--cluster", "llm-pretrain")
    assert code == EXIT_BAD_INPUT
    assert "world: ec2.instance: unknown key" in stderr


def test_missing_world_file_exits_2(tmp_path: Path):
    code, _, stderr = invoke("audit", "--world", str(tmp_path / "absent.world.json"), "--cluster", "x")
    assert code == EXIT_BAD_INPUT
    assert "cannot read world file" in stderr and "absent.world.json" in stderr
    assert "Traceback" not in stderr


def test_invalid_json_world_exits_2(tmp_path: Path):
    path = tmp_path / "cut.world.json"
    path.write_text('{"format": "gpu-audit-world/1", "now": ', encoding="utf-8")
    code, _, stderr = invoke("audit", "--world", str(path), "--cluster", "x")
    assert code == EXIT_BAD_INPUT
    assert "not valid JSON" in stderr
    assert "Traceback" not in stderr


# -- the account cannot be reached ------------------------------------------------------------------------
def test_unreachable_account_exits_3_without_traceback(tmp_path: Path):
    # Given a world whose SageMaker and EC2 endpoints cannot be reached
    w = HyperPodWorld()
    w.fault("sagemaker", "DescribeCluster", "EndpointConnectionError")
    w.fault("ec2", "DescribeInstances", "EndpointConnectionError")

    # When audited
    code, stdout, stderr = invoke("audit", "--world", str(write_world(tmp_path, w)), "--cluster", w.cluster)

    # Then exit 3, saying the account could not be read and which call failed
    assert code == EXIT_UNREACHABLE
    assert "the account could not be read" in stderr
    assert "EndpointConnectionError" in stderr and "DescribeInstances" in stderr
    assert stdout == ""
    assert "Traceback" not in stderr


def test_unreachable_logs_still_answer_with_every_gpu_node_not_observable(tmp_path: Path):
    # Given a healthy world whose CloudWatch Logs endpoint cannot be reached (RULES §0.3: always answer)
    w = healthy_pcluster()
    w.fault("logs", "*", "EndpointConnectionError")

    # When audited
    code, stdout, _ = invoke("audit", "--world", str(write_world(tmp_path, w)), "--cluster", "llm-pretrain",
                             "--format", "json")

    # Then a result, in which nothing unseen reads as healthy, and the failing call is named
    assert code == EXIT_OK
    result = json.loads(stdout)
    compute = [n for n in result["nodes"] if n["role"] == "compute"]
    assert [n["xid_status"] for n in compute] == ["Not observable"]
    assert any("DescribeLogGroups" in g and "EndpointConnectionError" in g for g in result["visibility_gaps"])
    assert "No GPU errors" not in result["headline"]


def test_unreachable_sagemaker_is_not_reported_as_an_unknown_cluster(tmp_path: Path):
    # Given a HyperPod cluster whose SageMaker endpoint cannot be reached, while EC2 answers
    w = HyperPodWorld()
    w.fault("sagemaker", "DescribeCluster", "EndpointConnectionError")

    # When audited
    code, _, stderr = invoke("audit", "--world", str(write_world(tmp_path, w)), "--cluster", w.cluster)

    # Then it is an unreachable account (3), not "cluster not found" (2)
    assert code == EXIT_UNREACHABLE
    assert "not found" not in stderr


def test_failed_node_listing_of_a_found_cluster_is_a_gap_not_unknown_cluster(tmp_path: Path):
    # Given a HyperPod cluster that DescribeCluster finds, but whose ListClusterNodes cannot be reached
    w = HyperPodWorld()
    w.fault("sagemaker", "ListClusterNodes", "EndpointConnectionError")

    # When audited
    code, stdout, stderr = invoke("audit", "--world", str(write_world(tmp_path, w)), "--cluster", w.cluster,
                                  "--format", "json")

    # Then the audit still answers, names the failed call, and makes no claim about nodes it never saw
    assert code == EXIT_OK, stderr
    result = json.loads(stdout)
    assert "not found" not in stderr
    assert any("ListClusterNodes" in g for g in result["visibility_gaps"])
    assert "No GPU errors" not in result["headline"]
    assert result["confidence"] == "Low"
