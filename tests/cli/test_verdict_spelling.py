"""Issue #49 item 4: one verdict, two spellings. Every input (the CLI's --verdict and --fail-on, MCP `audit_nodes`)
takes the display word (`NOT OBSERVABLE`) and the machine form (`NOT_OBSERVABLE`), in any case; the finding records
and the EventBridge events carry the machine form as `verdict_code` beside the display word, so a rule written with
`NOT_OBSERVABLE` matches instead of silently matching nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers.event_patterns import matches
from helpers.worlds import PClusterWorld, at, blind_and_signalled
from mcp import Client
from typer.testing import CliRunner

from gpuaudit.agent.local_backend import LocalBackend
from gpuaudit.agent.server import build_server
from gpuaudit.cli import app
from gpuaudit.model.result import parse_verdict, verdict_code


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PClusterWorld]:
    w = blind_and_signalled()
    path = tmp_path_factory.mktemp("world") / "w.world.json"
    path.write_text(json.dumps(w.raw), encoding="utf-8")
    return path, w


def cli(world: Path, *extra: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, ["audit", "--world", str(world), "--cluster", "llm-pretrain", "--since", at(6),
                                    "--until", at(10), "--quiet", *extra])
    return done.exit_code, done.stdout, " ".join(done.stderr.split())


@pytest.mark.parametrize("word", ["NOT_OBSERVABLE", "NOT OBSERVABLE", "not_observable", "Not-Observable",
                                  " not  observable "])
def test_every_spelling_names_the_one_verdict(word: str) -> None:
    assert parse_verdict(word) == "NOT OBSERVABLE"


def test_a_word_that_is_no_verdict_is_none_and_the_codes_are_identifiers() -> None:
    assert parse_verdict("NOT") is None and parse_verdict("observable") is None and parse_verdict("") is None
    assert [verdict_code(v) for v in ("NOT OBSERVABLE", "LEAVE ALONE", "REPLACE", None)] == [
        "NOT_OBSERVABLE", "LEAVE_ALONE", "REPLACE", None]


@pytest.mark.parametrize("word", ["NOT_OBSERVABLE", "not observable", "not-observable"])
def test_the_cli_filter_and_gate_take_any_spelling_and_records_carry_the_code(
        world: tuple[Path, PClusterWorld], word: str) -> None:
    path, w = world
    code, stdout, stderr = cli(path, "--format", "ndjson", "--verdict", word)
    assert code == 0, stderr
    nodes = [r for r in map(json.loads, stdout.splitlines()) if r["record"] == "node"]
    assert [(r["id"], r["verdict"], r["verdict_code"]) for r in nodes] == [
        (w.compute[0].instance_id, "NOT OBSERVABLE", "NOT_OBSERVABLE")]
    gate, _, said = cli(path, "--format", "json", "--fail-on", word.lower())
    assert gate == 4 and "1 node(s) NOT OBSERVABLE" in said


def test_every_node_record_carries_its_verdict_code(world: tuple[Path, PClusterWorld]) -> None:
    path, _ = world
    code, stdout, stderr = cli(path, "--format", "ndjson")
    assert code == 0, stderr
    nodes = [r for r in map(json.loads, stdout.splitlines()) if r["record"] == "node"]
    assert {r["verdict"]: r["verdict_code"] for r in nodes} == {
        "NOT OBSERVABLE": "NOT_OBSERVABLE", "REBOOT": "REBOOT", "LEAVE ALONE": "LEAVE_ALONE", None: None}


def test_an_event_pattern_written_with_the_code_matches_the_blind_node(world: tuple[Path, PClusterWorld]) -> None:
    path, w = world
    code, stdout, stderr = cli(path, "--format", "events")
    assert code == 0, stderr
    sent = [{"source": e["Source"], "detail-type": e["DetailType"], "detail": json.loads(e["Detail"])}
            for e in map(json.loads, stdout.splitlines())]
    by_code = {"detail": {"verdict_code": ["NOT_OBSERVABLE"]}}
    by_word = {"detail": {"verdict": ["NOT OBSERVABLE"]}}
    hit = [e["detail"]["node"] for e in sent if matches(by_code, e)]
    assert hit == [w.compute[0].instance_id]
    assert hit == [e["detail"]["node"] for e in sent if matches(by_word, e)]


def test_mcp_audit_nodes_takes_any_spelling(world: tuple[Path, PClusterWorld], tmp_path: Path) -> None:
    path, w = world
    server = build_server(LocalBackend(results_dir=tmp_path, world=path))

    async def main() -> list[Any]:
        async with Client(server) as client:
            ran = await client.call_tool("run_audit", {"cluster": "llm-pretrain", "since": at(6), "until": at(10)})
            assert not ran.is_error, ran.content
            audit_id = ran.structured_content["audit_id"]
            pages = []
            for spelling in (["NOT_OBSERVABLE"], ["not observable"], ["NOT OBSERVABLE"], ["leave_alone", "reboot"]):
                page = await client.call_tool("audit_nodes", {"cluster": "llm-pretrain", "audit_id": audit_id,
                                                              "verdicts": spelling})
                assert not page.is_error, page.content
                pages.append([(n["instance_id"], n["verdict"]) for n in page.structured_content["nodes"]])
            return pages

    blind, rebooted, quiet = (n.instance_id for n in w.compute)
    assert anyio.run(main) == [[(blind, "NOT OBSERVABLE")]] * 3 + [[(rebooted, "REBOOT"), (quiet, "LEAVE ALONE")]]
