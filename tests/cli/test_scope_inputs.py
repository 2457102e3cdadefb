"""Every scope flag and input (#15 item 5): a bad value is bad input naming it — the CLI exits 2 naming the flag,
cdk.json and the state machine input are refused naming the field — and each flag has a shipped demo world the
demo runs, and a README example that runs against a shipped world.

Scope flags: `--instances` (terminated instances included), `--filesystem`, `--log-group`, `--eks-cluster`; in
cdk.json per cluster `instances`, `file_systems`, `log_groups` (and `eks_access_entries`); in the state machine
input `instance_ids`, `file_system_ids`, `log_groups`, `eks_cluster`.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.devtools.demo import demo_request, demo_worlds
from gpuaudit.embedded.world import load_world
from infra.config import DeployConfig
from tests.helpers.worlds import aws_for

ROOT = Path(__file__).resolve().parents[2]
WORLDS = ROOT / "functions" / "gpuaudit" / "worlds"
WORLD = str(WORLDS / "pcluster-capacity-block-expiry.world.json")
# demo.json key → the CLI flag it stands for
DEMO_KEYS = {"instances": "--instances", "filesystems": "--filesystem", "log_groups": "--log-group",
             "eks_cluster": "--eks-cluster"}


def cli(*args: str) -> tuple[int, str]:
    run = CliRunner().invoke(app, ["audit", "--world", WORLD, *args])
    assert "Traceback" not in run.output
    return run.exit_code, " ".join(run.output.split())


@pytest.mark.parametrize(("args", "named"), [
    (["--instances", "i-0abc"], "--instances[0]"),
    (["--instances", "i-0e58b081006f7e3df,not-an-id"], "--instances[1]"),
    (["--filesystem", "fs-XYZ"], "--filesystem[0]"),
    (["--cluster", "llm-pretrain-b200", "--filesystem", "fs-0f1f836f99eee3692", "--filesystem", "fs-0"],
     "--filesystem[1]"),
    (["--cluster", "llm-pretrain-b200", "--log-group", "bad name!"], "--log-group[0]"),
    (["--cluster", "llm-pretrain-b200", "--log-group", ""], "--log-group[0]"),
    (["--eks-cluster", "bad name!"], "--eks-cluster"),
    (["--eks-cluster", "-starts-with-a-dash"], "--eks-cluster"),
    (["--cluster", "x" * 300], "--cluster"),
])
def test_a_bad_scope_value_exits_2_naming_its_flag(args: list[str], named: str) -> None:
    code, out = cli(*args)
    assert code == 2 and named in out, out


def test_no_scope_at_all_exits_2_naming_the_flags() -> None:
    code, out = cli("--mode", "coverage")
    assert code == 2 and all(f in out for f in ("--cluster", "--instances", "--filesystem", "--eks-cluster"))


def test_an_eks_cluster_the_account_does_not_have_is_bad_input_naming_it() -> None:
    code, out = cli("--eks-cluster", "no-such-eks")
    assert code == 2 and "no-such-eks" in out


@pytest.mark.parametrize(("config", "field"), [
    ({"clusters": ["a"], "instances": {"a": ["i-0abc"]}}, "instances"),
    ({"clusters": ["a"], "file_systems": {"a": ["fs-XYZ"]}}, "file_systems"),
    ({"clusters": ["a"], "log_groups": {"a": ["bad name!"]}}, "log_groups"),
    ({"clusters": ["a"], "log_groups": {"b": ["/aws/batch/job"]}}, "log_groups"),  # names an unconfigured cluster
    ({"clusters": ["a"], "instances": {"b": ["i-0123456789abcdef0"]}}, "instances"),
    ({"clusters": ["a"], "eks_access_entries": ["bad name!"]}, "eks_access_entries"),
])
def test_a_bad_cdk_json_scope_entry_is_refused_naming_it(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        DeployConfig.model_validate(config)


def test_the_demo_runs_a_shipped_world_for_every_scope_flag() -> None:
    entries = demo_worlds()
    used = {key for e in entries for key in DEMO_KEYS if e.get(key)}
    assert used == set(DEMO_KEYS)
    for entry in entries:
        assert Path(entry["path"]).is_relative_to(WORLDS)
    # --instances with an instance EC2 no longer returns (terminated): audited from its streams and CloudTrail
    scoped = next(e for e in entries if e.get("instances"))
    world = json.loads(Path(scoped["path"]).read_text(encoding="utf-8"))
    described = {i["InstanceId"] for i in world.get("ec2", {}).get("instances", [])}
    gone = [i for i in scoped["instances"] if i not in described]
    assert gone
    result = __import__("gpuaudit.pipeline", fromlist=["run_audit"]).run_audit(
        aws_for(load_world(scoped["path"])), demo_request(scoped))
    assert {n.instance_id for n in result.nodes} >= set(gone)
    assert all(n.discovered_by != "api" for n in result.nodes if n.instance_id in gone)


def _readme_world_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Using it", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line)[1:] for line in joined.splitlines()
            if line.startswith(".venv/bin/gpuaudit audit") and "--world" in line]


def test_the_readme_shows_each_scope_flag_against_a_shipped_world_and_each_example_runs(tmp_path: Path) -> None:
    commands = _readme_world_commands()
    flags = {f for c in commands for f in DEMO_KEYS.values() if f in c}
    assert flags == set(DEMO_KEYS.values())
    for args in commands:
        args = [str(ROOT / a) if a.startswith("functions/gpuaudit/worlds/") else a for a in args]
        run = CliRunner().invoke(app, [*args, "--format", "json", "--out", str(tmp_path / "r.json")])
        assert run.exit_code == 0, (args, run.output)
        assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["nodes"] is not None


def test_instances_that_cannot_be_described_are_an_unreadable_account_not_bad_input(tmp_path: Path) -> None:
    """Exit 2 is for input the operator can fix; a denied DescribeInstances is the account not read (exit 3)."""
    world = json.loads(Path(WORLD).read_text(encoding="utf-8"))
    world["faults"] = [{"service": "ec2", "operation": "DescribeInstances", "error": "UnauthorizedOperation"}]
    path = tmp_path / "denied.world.json"
    path.write_text(json.dumps(world), encoding="utf-8")
    run = CliRunner().invoke(app, ["audit", "--world", str(path), "--instances", "i-0e58b081006f7e3df"])
    assert run.exit_code == 3 and "UnauthorizedOperation" in run.output and "Traceback" not in run.output
