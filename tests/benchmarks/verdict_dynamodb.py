"""The Verdict step's DynamoDB calls at N nodes (issue #34 item 3): by operation, with the client's CPU and wall.

    .venv/bin/python tests/benchmarks/verdict_dynamodb.py --nodes 10000 [--kind parallelcluster] [--days 1]

A generated world is collected in process (pipeline.collect, as the CLI does), its evidence stored in the bucket as
Finish stores it, then the Verdict handler runs on it twice against the findings table in moto, held to DynamoDB's
limits (gpuaudit/embedded/dynamodb_limits.py): the first audit of the cluster (empty table: every node's history
and latest state written) and the next hourly audit (the same evidence an hour later: nothing changed). Per run it
prints the DynamoDB calls by operation, the wall seconds, the process CPU seconds, moto's CPU seconds (DynamoDB's
side of the calls, here in process) and the client CPU (process CPU less moto's), and the items the table holds after.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "tests" / "handlers"), str(ROOT / "tests"), str(ROOT)]
FIGURES = sys.stdout
sys.stdout = sys.stderr  # the step's log lines and metrics go to stderr; the figures to stdout

import pytest  # noqa: E402
from botocore.client import BaseClient  # noqa: E402
from handlers import payload, verdict  # noqa: E402
from lambda_harness import BUCKET, TABLE, LambdaContext, world_account  # noqa: E402
from moto.core.botocore_stubber import BotocoreStubber  # noqa: E402

from gpuaudit import pipeline  # noqa: E402
from gpuaudit.collectors.aws import Aws  # noqa: E402
from gpuaudit.devtools.worldgen import WorldSpec, generate, write  # noqa: E402
from gpuaudit.model.evidence import AuditRequest, Evidence  # noqa: E402

CALLS: Counter[str] = Counter()
MOTO_S = [0.0]


def _counting(real: Callable[..., Any]) -> Callable[..., Any]:
    def call(client: Any, operation: str, params: Any) -> Any:
        CALLS[f"{client.meta.service_model.service_name}:{operation}"] += 1
        return real(client, operation, params)
    return call


def _timing(real: Callable[..., Any]) -> Callable[..., Any]:
    def answer(self: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        started = time.thread_time()  # CPU of this thread only: the reads run side by side in threads
        try:
            return real(self, event_name, request, **kwargs)
        finally:
            MOTO_S[0] += time.thread_time() - started
    return answer


def _run(given: dict[str, Any], label: str) -> dict[str, Any]:
    CALLS.clear()
    MOTO_S[0] = 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    out = verdict.handler(given, LambdaContext())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    dynamodb = {k.removeprefix("dynamodb:"): v for k, v in sorted(CALLS.items()) if k.startswith("dynamodb:")}
    return {"audit": label, "dynamodb_calls": sum(dynamodb.values()), "by_operation": dynamodb,
            "wall_s": round(wall, 1), "process_cpu_s": round(cpu, 1), "moto_s": round(MOTO_S[0], 1),
            "client_cpu_s": round(max(0.0, cpu - MOTO_S[0]), 1), "items_written": out["findings"]["written"],
            "alert_published": out["alert_published"]}


def run(nodes: int, days: float, kind: str) -> dict[str, Any]:
    spec = WorldSpec(kind=kind, nodes=nodes, days=days, silent_fraction=0.01, xid_rate=0.05, seed=0)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as mp:
        path = Path(folder) / "world.json"
        write(generate(spec), str(path))
        with world_account(mp, path, clusters=(spec.cluster_name,)) as account:
            world = account.world
            aws = Aws(session=account.backend.session(), region=world.region, clock=lambda: world.now,
                      sleep=lambda _s: None)
            request = AuditRequest(cluster=spec.cluster_name, mode="coverage", since=world.now - timedelta(days=days))
            started = time.perf_counter()
            evidence = pipeline.collect(aws, request)
            collect_s = time.perf_counter() - started
            s3 = account.session.client("s3")
            later = evidence.model_copy(update={
                "now": evidence.now + timedelta(hours=1),
                "window": evidence.window.model_copy(update={"start": evidence.window.start + timedelta(hours=1),
                                                             "end": evidence.window.end + timedelta(hours=1)})})
            inputs = [{"request": request.model_dump(mode="json", exclude_none=True),
                       "evidence": payload.store(e.model_dump(mode="json"), s3, BUCKET, "evidence")}
                      for e in (evidence, Evidence.model_validate(later.model_dump()))]
            mp.setattr(BaseClient, "_make_api_call", _counting(BaseClient._make_api_call))
            mp.setattr(BotocoreStubber, "__call__", _timing(BotocoreStubber.__call__))
            clock = [world.now]
            mp.setattr(verdict, "clock", lambda: clock[0])
            runs = [_run(inputs[0], "first (empty table)")]
            clock[0] = world.now + timedelta(hours=1)
            runs.append(_run(inputs[1], "next hour (nothing changed)"))
            pages = account.session.client("dynamodb").get_paginator("scan").paginate(TableName=TABLE, Select="COUNT")
            items = sum(page["Count"] for page in pages)
    return {"nodes": nodes, "days": days, "kind": kind, "collect_s": round(collect_s, 1), "runs": runs,
            "table_items_after": items}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--days", type=float, default=1.0, help="days of logs in the world and the audit window")
    parser.add_argument("--kind", default="parallelcluster", choices=["parallelcluster", "hyperpod"])
    args = parser.parse_args()
    if not 1 <= args.nodes <= 20000:
        parser.error(f"--nodes must be 1..20000; got {args.nodes}")
    FIGURES.write(json.dumps(run(args.nodes, args.days, args.kind), indent=2) + "\n")


if __name__ == "__main__":
    main()
