"""Issue #20 item 2: a per-stream query that reaches the 10,000-row cap is read again in parts by instance-ID digit,
not stream by stream. The parts cover every stream name, and an audit whose per-stream queries were capped and
re-read gives exactly the result of an audit that never hit the cap (differential, on generated worlds)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from helpers.worlds import audit, aws_for

from gpuaudit.collectors import logs
from gpuaudit.collectors.logs import (
    NO_INSTANCE_ID,
    STREAM_PART_HEX,
    stream_part_filter,
    stream_part_ranges,
)
from gpuaudit.devtools.worldgen import WorldSpec, generate
from gpuaudit.domain.streams import NodeIndex
from gpuaudit.embedded.insights import execution
from gpuaudit.embedded.insights.syntax import FilterCmd, Like, parse_query
from gpuaudit.embedded.world import parse_world
from gpuaudit.model.evidence import AuditRequest, NodeInfo
from gpuaudit.model.result import Result
from gpuaudit.pipeline import collect


def _matches(filter_text: str, name: str) -> bool:
    """The filter as the embedded Logs Insights parses it, applied to one stream name."""
    command = parse_query(f"{filter_text} | stats count(*) by @logStream").commands[0]
    assert isinstance(command, FilterCmd) and isinstance(command.expr, Like)
    like = command.expr
    assert not isinstance(like.pattern, str)
    return bool(like.pattern.search(name)) != like.negate


NAMES = [
    "ip-10-20-1-24.i-04da4f9fc3c6da5d7.system-messages",  # ParallelCluster
    "worker-group/i-0a1b2c3d4e5f60718",  # HyperPod
    "SagemakerHealthMonitoringAgent/worker-group/i-0ffffffffffffffff",
    "i-1234abcd/syslog",  # an 8-digit ID of older accounts
    "i-0123456789abcdef0 then i-0fedcba9876543210",  # two IDs: two parts, read twice, kept once
    "ip-10-0-3-17",  # named by host only
    "I-0ABCDEF0123456789",  # upper case is not an instance ID
    "multi-0123456a.log",  # looks like one: falls in a digit part, which is enough
    "i-00000000000000001.messages", "i-0000000000000000f", "i-0123456789abcdef01",  # sequential; 18 digits: no ID
    "i-0123456789abcdef0i-0fedcba9876543210",  # IDs back to back
    "", "x" * 512,
]


@pytest.mark.parametrize("parts", [2, 4, 8, 16])
def test_the_parts_cover_every_stream_name(parts: int) -> None:
    size = len(STREAM_PART_HEX) // parts
    filters = [stream_part_filter(STREAM_PART_HEX[i:i + size]) for i in range(0, len(STREAM_PART_HEX), size)]
    filters.append(NO_INSTANCE_ID)
    rng = random.Random(parts)
    generated = [f"ip-10-1-{rng.randint(0, 255)}-{rng.randint(0, 255)}.i-0{rng.getrandbits(64):016x}.slurmd"
                 for _ in range(300)] + [f"group/i-0{n:016x}" for n in range(40)]
    for name in [*NAMES, *generated]:
        assert any(_matches(f, name) for f in filters), name
    # an ID's own last digit decides its part: exactly one part holds a name with one ID, and sequential IDs
    # spread over every part
    one_id = "ip-10-20-1-24.i-04da4f9fc3c6da5d7.system-messages"
    assert sum(_matches(f, one_id) for f in filters) == 1
    sequential = [f"group/i-0{n:016x}" for n in range(16)]
    assert all(sum(_matches(f, name) for name in sequential) == size for f in filters[:-1])
    assert not _matches(NO_INSTANCE_ID, one_id) and _matches(NO_INSTANCE_ID, "ip-10-0-3-17")


def _rows_of(nodes: int, streams_per_node: int, sample: int, seed: int = 0) -> tuple[list[dict[str, str]], NodeIndex]:
    ids = [f"i-0{n:016x}" for n in range(nodes)]
    rows = [{"@log": "0:/g", "@logStream": f"host.{iid}.s{k}"} for iid in ids for k in range(streams_per_node)]
    random.Random(seed).shuffle(rows)
    index = NodeIndex([NodeInfo(instance_id=iid, instance_type="p5.48xlarge", status="running") for iid in ids])
    return rows[:sample], index


@pytest.mark.parametrize("streams_per_node, parts", [(1, 2), (2, 3), (4, 6)])
def test_parts_are_sized_from_the_capped_sample(streams_per_node: int, parts: int) -> None:
    # 10,000 nodes, a random 10,000 of their streams came back: as few parts as hold ~80 % of the cap each
    rows, index = _rows_of(10_000, streams_per_node, 10_000)
    ranges = stream_part_ranges(rows, index, 10_000)
    assert len(ranges) == parts and "".join(ranges) == STREAM_PART_HEX
    widest = max(len(r) for r in ranges) / len(STREAM_PART_HEX) * 10_000 * streams_per_node
    assert widest <= logs.MAX_ROWS * 0.8  # the expected rows of the widest part
    one_fewer = -(-len(STREAM_PART_HEX) // (parts - 1)) / len(STREAM_PART_HEX) * 10_000 * streams_per_node
    assert parts == 2 or one_fewer > logs.MAX_ROWS * 0.8  # and no fewer parts would do


def test_a_sample_in_name_order_sizes_the_parts_too() -> None:
    # The service may return the rows grouped by stream: then the first nodes show all 12 of their streams
    rows, index = _rows_of(10_000, 12, 120_000)
    rows = sorted(rows, key=lambda r: r["@logStream"])[:10_000]
    assert len(stream_part_ranges(rows, index, 10_000)) == 16
    # with many streams per node sampled at random the estimate is low (max seen 5 of 12); a part that still
    # reaches the cap is then halved (the differential test below runs that path)
    sampled, index = _rows_of(10_000, 12, 10_000)
    assert len(stream_part_ranges(sampled, index, 10_000)) >= 8


def _strip(result: Result) -> dict[str, Any]:
    """The result without what depends on how many queries were run (calls, the report's cost lines)."""
    doc = json.loads(result.to_json())
    for key in ("calls", "report_markdown", "self_check", "generated_at", "audit_id"):
        doc.pop(key, None)
    return doc


@pytest.mark.parametrize("kind, nodes, cap", [("parallelcluster", 30, 40), ("parallelcluster", 30, 60),
                                              ("hyperpod", 40, 30)])
def test_a_capped_audit_re_read_in_parts_gives_the_uncapped_result(monkeypatch: pytest.MonkeyPatch, kind: str,
                                                                   nodes: int, cap: int) -> None:
    spec = WorldSpec(kind=kind, nodes=nodes, days=2.0, silent_fraction=0.1, xid_rate=0.1, seed=4)
    world = parse_world(generate(spec))
    uncapped = audit(aws_for(world), spec.cluster_name)
    # Given the same world with the row cap lowered in the service (embedded) and in the collector alike
    monkeypatch.setattr(execution, "MAX_RESULT_ROWS", cap)
    monkeypatch.setattr(logs, "MAX_ROWS", cap)
    capped = audit(aws_for(world), spec.cluster_name)
    records = collect(aws_for(world), AuditRequest(cluster=spec.cluster_name)).queries
    # Then some per-stream query reached the cap and every one that did was read again completely
    capped_queries = [q for q in records if q.truncated and q.purpose in ("kernel-streams", "stream-summary")]
    assert capped_queries and all(q.reread for q in capped_queries)
    assert not any("maximum of" in g for g in capped.visibility_gaps)
    # and the answer is the uncapped audit's, node for node
    assert _strip(capped) == _strip(uncapped)
