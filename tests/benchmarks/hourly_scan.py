"""What one hourly audit scans, query by query (issue #34 item 7): node-hours per node, and the bound if the default
`@logStream` field index served none of the queries that name their streams.

    .venv/bin/python tests/benchmarks/hourly_scan.py --nodes 2000 [--days 1] [--kind parallelcluster]

A world is generated (`gpuaudit bench`'s: seed 0, silent fraction 0.01, Xid rate 0.05), a full 7-day audit runs an
hour before its `now` and fills a coverage cache, then the next hourly audit runs from the cache, as `gpuaudit bench`'s
`hourly` step does. Per query of that audit it prints the purpose, range, groups, the records it scanned (as the
embedded backend bills them: a first `filter @logStream in [...]` reads those streams only) and the records of its
groups over its range (what it would scan unindexed); then the totals as node-hours per node (records ÷ 48 ÷ nodes:
the generated nodes write 4 streams of 12 lines an hour). docs/BENCHMARKS.md "One scan of the new hours" holds the
figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions")]

from gpuaudit import pipeline  # noqa: E402
from gpuaudit.collectors.aws import Aws  # noqa: E402
from gpuaudit.collectors.cache import FileCache  # noqa: E402
from gpuaudit.devtools import worldgen  # noqa: E402
from gpuaudit.devtools.bench import DEFAULT_SILENT_FRACTION, DEFAULT_XID_RATE  # noqa: E402
from gpuaudit.embedded.backend import WorldBackend  # noqa: E402
from gpuaudit.embedded.world import World, parse_world  # noqa: E402

RECORDS_PER_NODE_HOUR = 48


def records_of(world: World, groups: list[str], start: datetime, end: datetime) -> int:
    """Every record of `groups` a query over [start, end) reads (StartQuery's end is its last whole second)."""
    low, high = int(start.timestamp()) * 1000, (int(end.timestamp()) - 1) * 1000 + 999
    total = 0
    for name in groups:
        for stream in world.log_groups[name].streams.values():
            events, runs = stream.pieces(low, high)
            total += len(events) + sum(len(stamps) for stamps, _ in runs)
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--kind", default="parallelcluster")
    args = parser.parse_args(argv)
    spec = worldgen.WorldSpec(kind=args.kind, nodes=args.nodes, days=args.days, seed=0,
                              silent_fraction=DEFAULT_SILENT_FRACTION, xid_rate=DEFAULT_XID_RATE)
    world = parse_world(worldgen.generate(spec))
    backend = WorldBackend(world)
    aws = Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
              monotonic=backend.monotonic)
    request = pipeline.AuditRequest(cluster=spec.cluster_name, mode="coverage", last="7d")
    with tempfile.TemporaryDirectory() as tmp:
        cache = FileCache(Path(tmp) / "cache.json")
        now = world.now
        world.now = now - timedelta(hours=1)
        pipeline.collect(aws, request, cache)
        world.now = now
        hourly = pipeline.collect(aws, request, cache)
    per_node_hour = RECORDS_PER_NODE_HOUR * args.nodes
    scanned = unindexed = 0.0
    print(f"{'purpose':15s} {'range':11s} {'groups':>6s} {'scanned':>12s} {'unindexed':>12s}")
    for q in hourly.queries:
        whole = records_of(world, q.log_groups, q.start, q.end)
        scanned, unindexed = scanned + q.records_scanned, unindexed + whole
        print(f"{q.purpose:15s} {q.start:%H:%M}-{q.end:%H:%M} {len(q.log_groups):6d} {q.records_scanned:12,.0f} "
              f"{whole:12,}")
    print(f"{args.nodes:,} nodes: {len(hourly.queries)} StartQuery, {scanned:,.0f} records = "
          f"{scanned / per_node_hour:.2f} node-hours per node; unindexed {unindexed:,.0f} = "
          f"{unindexed / per_node_hour:.2f}")


if __name__ == "__main__":
    main()
