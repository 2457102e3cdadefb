"""Issue #49 item 1 (RULES §11): a grouped command reads every node's ID from an IDs file beside the report, so the
file is written wherever the command is printed (`--out`, `--out-dir`, stdout only, the MCP server's results, the
deployed report in S3) and every output names its real path or S3 URI, never `<report>`."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers.worlds import PClusterWorld, at
from typer.testing import CliRunner

from gpuaudit.agent.local_backend import LocalBackend
from gpuaudit.cli import app
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import IDS_AT
from gpuaudit.progress import Silent
from gpuaudit.report.ids import placed

NODES = 12  # more than the report lists by name (markdown.LISTED_IDS): the file is the only place with them all


def reboot_world(nodes: int = NODES) -> PClusterWorld:
    """`nodes` GPU nodes, each logging Xid 79 (fallen off the bus: REBOOT) at 09:00 on a live kernel stream."""
    w = PClusterWorld(n_compute=nodes)
    for node in w.compute:
        stream = w.healthy(node, at(-2), at(13))
        w.stream(w.group, stream, events=[(at(9), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, "
                                                  "pid=2211, name=python3")])
    return w


@pytest.fixture(scope="module")
def world_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    w = reboot_world()
    path = tmp_path_factory.mktemp("world") / "reboot.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    return path, sorted(n.instance_id for n in w.compute)


def audit(world: Path, *extra: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["audit", "--world", str(world), "--cluster", "llm-pretrain", "--since", at(6),
                                       "--until", at(10), *extra])
    return outcome.exit_code, outcome.stdout, " ".join(outcome.stderr.split())


def reboot_group(result: dict) -> dict:
    (group,) = [g for g in result["action_groups"] if g["verdict"] == "REBOOT"]
    return group


def run_as_printed(command: str, tmp_path: Path) -> list[str]:
    """The command as the report prints it, run by a shell with `aws` standing in as a program that prints the IDs
    each call got: what an operator pasting it would send."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "aws").write_text("#!/bin/sh\nshift 2\nshift\necho \"$@\"\n", encoding="utf-8")
    (fake / "aws").chmod(0o755)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True,
                          env={"PATH": f"{fake}:/usr/bin:/bin"})
    return done.stdout.split()


def test_out_writes_the_ids_file_beside_the_report_and_the_printed_command_reads_it(
        world_file: tuple[Path, list[str]], tmp_path: Path) -> None:
    world, nodes = world_file
    code, _, stderr = audit(world, "--out", str(tmp_path / "night.md"), "--quiet")
    assert code == 0, stderr
    ids = tmp_path / "night.reboot-ids.txt"
    assert sorted(ids.read_text(encoding="utf-8").split()) == nodes
    # the Markdown as it renders (its escapes read as the characters they escape)
    report = re.sub(r"\\(.)", r"\1", (tmp_path / "night.md").read_text(encoding="utf-8"))
    assert f"{IDS_AT}." not in report and str(ids) in report
    # the command the report prints, run as printed, reboots every node
    (command,) = re.findall(r"`(xargs [^`]*)`", report)
    assert sorted(run_as_printed(command, tmp_path)) == nodes


def test_out_dir_names_the_real_path_in_the_result_and_says_it_wrote_it(world_file: tuple[Path, list[str]],
                                                                        tmp_path: Path) -> None:
    world, nodes = world_file
    code, _, stderr = audit(world, "--out-dir", str(tmp_path / "out"))
    assert code == 0, stderr
    ids = tmp_path / "out" / "report.reboot-ids.txt"
    result = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf-8"))
    group = reboot_group(result)
    assert group["ids_at"] == str(ids) and sorted(ids.read_text(encoding="utf-8").split()) == nodes
    assert f"< {ids}`" in group["action"] and group["action"] in result["actions"]
    assert f"{IDS_AT}." not in json.dumps(result)
    assert f"wrote {ids} ({NODES} node IDs a grouped command reads)" in stderr
    assert str(ids) in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")


def test_stdout_alone_still_gets_a_file_the_command_can_read(world_file: tuple[Path, list[str]], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    world, nodes = world_file
    code, stdout, stderr = audit(world, "--format", "json", "--quiet")
    assert code == 0, stderr
    result = json.loads(stdout)
    where = Path(reboot_group(result)["ids_at"])
    assert where == tmp_path.resolve() / "gpuaudit" / f"{result['audit_id']}.reboot-ids.txt"
    assert sorted(where.read_text(encoding="utf-8").split()) == nodes
    assert f"{IDS_AT}." not in stdout


def test_a_path_with_a_space_is_quoted_so_the_command_runs_as_printed(world_file: tuple[Path, list[str]],
                                                                      tmp_path: Path) -> None:
    world, nodes = world_file
    folder = tmp_path / "on call"
    folder.mkdir()
    code, _, stderr = audit(world, "--out", str(folder / "r.json"), "--quiet")
    assert code == 0, stderr
    (command,) = re.findall(r"`(xargs [^`]*)`", reboot_group(json.loads((folder / "r.json").read_text()))["action"])
    assert sorted(run_as_printed(command, tmp_path)) == nodes


def test_in_s3_the_command_pipes_the_ids_in_from_the_uri() -> None:
    w = reboot_world(3)
    result = placed(w.audit(w.cluster, since=at(6), until=at(10)), "s3://evidence/results/llm-pretrain/abc")
    group = next(g for g in result.action_groups if g.verdict == "REBOOT")
    uri = "s3://evidence/results/llm-pretrain/abc.reboot-ids.txt"
    assert group.ids_at == uri
    assert f"`aws s3 cp {uri} - | xargs -n 100 aws ec2 reboot-instances --instance-ids`" in group.action
    assert f"{IDS_AT}." not in result.report_markdown and uri in result.report_markdown.replace("\\", "")


def test_the_mcp_server_writes_the_ids_file_beside_the_result_it_stores(world_file: tuple[Path, list[str]],
                                                                        tmp_path: Path) -> None:
    world, nodes = world_file
    backend = LocalBackend(results_dir=tmp_path, world=world)
    request = AuditRequest.model_validate({"cluster": "llm-pretrain", "since": at(6), "until": at(10)})
    result, stored, _ = backend.run_audit(request, Silent())
    ids = Path(stored).with_suffix(".reboot-ids.txt")
    assert sorted(ids.read_text(encoding="utf-8").split()) == nodes
    group = next(g for g in result.action_groups if g.verdict == "REBOOT")
    assert group.ids_at == str(ids)
    assert f"{IDS_AT}." not in Path(stored).read_text(encoding="utf-8")


def test_the_tables_next_steps_name_the_first_ids_and_the_file_with_them_all(world_file: tuple[Path, list[str]],
                                                                             tmp_path: Path) -> None:
    world, nodes = world_file
    code, _, stderr = audit(world, "--out", str(tmp_path / "night.txt"), "--quiet")
    assert code == 0, stderr
    table = (tmp_path / "night.txt").read_text(encoding="utf-8")
    (step,) = [line for line in table.splitlines() if "reboot-instances" in line]
    assert step.endswith(f"… and {NODES - 10} more (all in {tmp_path / 'night.reboot-ids.txt'} and the JSON result)")
    assert sum(iid in step for iid in nodes) == 10


def test_a_saved_result_keeps_pointing_at_the_ids_file_it_was_written_with(world_file: tuple[Path, list[str]],
                                                                            tmp_path: Path) -> None:
    # `report` of a saved result: its commands already name a file that exists; nothing is written again elsewhere
    world, _ = world_file
    code, _, stderr = audit(world, "--out", str(tmp_path / "saved.json"), "--quiet")
    assert code == 0, stderr
    first = reboot_group(json.loads((tmp_path / "saved.json").read_text(encoding="utf-8")))
    done = CliRunner().invoke(app, ["report", str(tmp_path / "saved.json"), "--out", str(tmp_path / "again.json")])
    assert done.exit_code == 0, done.output
    again = reboot_group(json.loads((tmp_path / "again.json").read_text(encoding="utf-8")))
    assert again["ids_at"] == first["ids_at"] == str(tmp_path / "saved.reboot-ids.txt")
    assert again["action"] == first["action"] and not (tmp_path / "again.reboot-ids.txt").exists()
