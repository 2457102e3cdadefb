"""Real driver lines from public sources (tests/fixtures/xid_corpus/lines.json) through the production
path: `parse_lines` (Xid lines and the Xid-less "fallen off the bus" messages), then `route_node`.

Each entry's expectation (code, PCI bus, verdict for that event alone on a Running node) was written
by hand from RULES §6/§7 and NVIDIA's catalog, NVLink5 decodes included, not from what the code prints.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.model.evidence import GpuLine
from gpuaudit.model.timeutil import UTC
from gpuaudit.rules.node_lines import node_xids, parse_lines
from gpuaudit.rules.xid_lines import bus_key
from gpuaudit.rules.xid_routing import route_node

CORPUS = json.loads((Path(__file__).parents[1] / "fixtures" / "xid_corpus" / "lines.json").read_text("utf-8"))
ENTRIES: list[dict[str, Any]] = CORPUS["entries"]
T0 = datetime(2026, 9, 25, 17, 0, tzinfo=UTC)
ACCOUNT_LIKE = re.compile(r"(?<![\w-])\d{12}(?!\w)")


def test_corpus_is_big_and_varied_enough_and_names_every_source() -> None:
    assert len(ENTRIES) >= 80
    assert sum(len(entry["lines"]) for entry in ENTRIES) >= 80
    assert len({entry["format"] for entry in ENTRIES}) >= 10
    assert len({entry["id"] for entry in ENTRIES}) == len(ENTRIES)
    for entry in ENTRIES:
        assert entry["kind"] in ("capture", "test-data")
        assert entry["source"].startswith("https://") or " " in entry["source"]  # an address, or repo + path
        assert not any(ACCOUNT_LIKE.search(line) for line in entry["lines"]), entry["id"]


def test_corpus_covers_the_parsing_cases_the_issue_names() -> None:
    lines = [line for entry in ENTRIES for line in entry["lines"]]
    assert any(re.search(r"NVRM: Xid \(0000:", line) for line in lines)  # old form without `PCI:`
    assert any("(PCI:..." in line for line in lines)  # redacted bus
    assert any(re.search(r"\(PCI:00(?!00)[0-9a-f]{2}:", line) for line in lines)  # non-zero domain
    assert any("NVRM: The NVIDIA GPU" in line for line in lines)  # multi-line fallen off the bus
    assert any(re.search(r"NVRM: GPU [0-9a-f:.]+: GPU has fallen", line) for line in lines)
    assert any("\n" in line for line in lines)  # one journald message holding several lines
    assert any(re.search(r"\(PCI:[0-9a-f:]+ GPU-I:\d+\)", line) for line in lines)  # MIG GPU-instance form
    assert {entry["expect"]["code"] for entry in ENTRIES} >= {13, 31, 43, 45, 79, 94, 109, 119, 144, 145, 149, 154}


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["id"] for entry in ENTRIES])
def test_real_driver_line_gives_its_code_bus_and_verdict(entry: dict[str, Any]) -> None:
    # Given the entry's lines shipped as consecutive events of one stream
    lines = [
        GpuLine(time=T0 + timedelta(microseconds=i), log_group="/corpus", log_stream="i-0corpus", message=message)
        for i, message in enumerate(entry["lines"])
    ]
    # When the node's lines are parsed and its Xids routed
    xids = node_xids(parse_lines(lines), T0 + timedelta(hours=1))
    # Then exactly one event comes out (an Xid 79 and its Xid-less line are one loss), with the expected
    # code, bus and verdict
    assert [xid.code for xid in xids] == [entry["expect"]["code"]]
    assert bus_key(xids[0].pci) == entry["expect"]["pci"]
    assert xids[0].gpu_instance == entry["expect"].get("gpu_instance")  # MIG lines keep bus and GPU instance
    routing = route_node(xids, node_running=True)
    assert routing.verdict == entry["expect"]["verdict"], routing.verdict_evidence
