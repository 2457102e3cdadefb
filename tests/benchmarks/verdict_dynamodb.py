"""The Verdict step's DynamoDB calls at N nodes (issue #34 item 3): by operation, with the client's CPU and wall.

    .venv/bin/python tests/benchmarks/verdict_dynamodb.py --nodes 10000 [--kind parallelcluster] [--days 1]

A generated world is collected in process (pipeline.collect, as the CLI does), its evidence stored in the bucket as
Finish stores it, then the Verdict handler runs on it twice against the findings table in moto, held to DynamoDB's
limits (gpuaudit/embedded/dynamodb_limits.py): the first audit of the cluster (empty table: every node's history
and latest state written) and the next hourly audit (the same evidence an hour later: nothing changed). Per run it
prints the DynamoDB calls by operation, the wall seconds, the process CPU seconds, moto's CPU seconds (DynamoDB's
side of the calls, here in process) and the client CPU (process CPU less moto's), the on-demand request units the calls
are billed (a write unit per started KB of each item written, a read unit per
started 4 KB a read returned, halved when eventually consistent: what docs/DEPLOY.md's DynamoDB row is computed
from), and the items the table holds after.
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
if __name__ == "__main__":  # imported by a test, the process's streams are left alone
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
from gpuaudit.writes.dynamo_batch import item_bytes  # noqa: E402

CALLS: Counter[str] = Counter()
UNITS: dict[str, float] = {"write": 0,
                           "read": 0}  # on-demand request units billed: "write" per 1 KB written, "read" per 4 KB read
MOTO_S = [0.0]


def _write_units(operation: str, params: dict[str, Any]) -> int:
    """A write request unit per started KB of each item written (a delete: one); DynamoDB's own size rule."""
    if operation == "PutItem":
        return -(-item_bytes(params["Item"]) // 1024)
    if operation == "UpdateItem":  # sized by the key and the values set: a lower bound of the item after
        return max(1, -(-item_bytes({**params["Key"], **params.get("ExpressionAttributeValues", {})}) // 1024))
    if operation == "DeleteItem":
        return 1
    if operation == "BatchWriteItem":
        return sum(-(-item_bytes(r["PutRequest"]["Item"]) // 1024) if "PutRequest" in r else 1
                   for requests in params["RequestItems"].values() for r in requests)
    return 0


def _read_units(operation: str, params: dict[str, Any], answer: dict[str, Any]) -> float:
    """A read request unit per started 4 KB a Query or GetItem returns (half when eventually consistent); a Query
    is sized by the items it returned as a whole, a GetItem by its item."""
    half = 1.0 if params.get("ConsistentRead") else 0.5
    if operation == "GetItem":
        return half * max(1, -(-item_bytes(answer.get("Item", {})) // 4096))
    if operation in ("Query", "Scan"):
        return half * max(1, -(-sum(item_bytes(i) for i in answer.get("Items", [])) // 4096))
    return 0.0


def _counting(real: Callable[..., Any]) -> Callable[..., Any]:
    def call(client: Any, operation: str, params: Any) -> Any:
        service = client.meta.service_model.service_name
        CALLS[f"{service}:{operation}"] += 1
        answer = real(client, operation, params)
        if service == "dynamodb":
            # what was asked, not what moto kept: UnprocessedItems come back and are billed when written again
            written = _write_units(operation, params)
            if operation == "BatchWriteItem":
                written -= _write_units(operation, {"RequestItems": answer.get("UnprocessedItems") or {}})
            UNITS["write"] += written
            UNITS["read"] += _read_units(operation, params, answer)
        return answer
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
    UNITS.update(write=0, read=0)
    MOTO_S[0] = 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    out = verdict.handler(given, LambdaContext())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    dynamodb = {k.removeprefix("dynamodb:"): v for k, v in sorted(CALLS.items()) if k.startswith("dynamodb:")}
    return {"audit": label, "dynamodb_calls": sum(dynamodb.values()), "by_operation": dynamodb,
            "wall_s": round(wall, 1), "process_cpu_s": round(cpu, 1), "moto_s": round(MOTO_S[0], 1),
            "client_cpu_s": round(max(0.0, cpu - MOTO_S[0]), 1), "items_written": out["findings"]["written"],
            "write_request_units": UNITS["write"], "read_request_units": UNITS["read"],
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
            pages = list(account.session.client("dynamodb").get_paginator("scan").paginate(TableName=TABLE))
            items = sum(page["Count"] for page in pages)
            stored = sum(item_bytes(item) for page in pages for item in page["Items"])
    return {"nodes": nodes, "days": days, "kind": kind, "collect_s": round(collect_s, 1), "runs": runs,
            "table_items_after": items, "table_bytes_after": stored}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--days", type=float, default=1.0, help="days of logs in the world and the audit window")
    parser.add_argument("--kind", default="parallelcluster", choices=["parallelcluster", "hyperpod"])
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 20000:
        parser.error(f"--nodes must be 1..20000; got {args.nodes}")
    FIGURES.write(json.dumps(run(args.nodes, args.days, args.kind), indent=2) + "\n")


if __name__ == "__main__":
    main()
