"""RecordFailure for a deleted cluster of N nodes (issue #47 item 6): what closing its standing verdicts costs.

    .venv/bin/python tests/benchmarks/record_failure.py --nodes 10000

The findings table (moto, through tests/handlers/lambda_harness.py) is given one history span per node of a cluster
audited an hour before (a LEAVE ALONE node, Measured, as the hourly audit writes it), then the RecordFailure handler
runs on Inventory's `UnknownCluster` (the cluster deleted): it writes the failure item and closes every node's span
(pipeline.close_gone_cluster). It prints, as JSON: `nodes`, `history_closed` (the handler's own count), the handler's
`process_cpu_s`, of it `moto_s` (DynamoDB's side of the calls, here in process) and `client_cpu_s` (the rest: the
Lambda's own), `wall_s`, `peak_heap_mb` (tracemalloc, on a second run with a fresh table: the items allocated before
are not counted), the `dynamodb_calls` by operation, and `memory_mb` / `timeout_s` of the deployed function
(infra/functions.py SPECS, unless `--memory-mb` and `--timeout-s` are given) with `cpu_share` (Lambda's vCPU at that
memory: 1 at 1,769 MB, in proportion below) and `cpu_s_at_memory` (the client CPU over that share: about the seconds
the Lambda would need), which a third of the timeout bounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# ROOT first: infra/ (the deployment document) before tests/infra, a namespace package of the same name
sys.path[:0] = [str(ROOT), str(ROOT / "functions"), str(ROOT / "tests" / "handlers"), str(ROOT / "tests")]
FIGURES = sys.stdout
if __name__ == "__main__":  # imported by a test, the process's streams are left alone
    sys.stdout = sys.stderr  # the step's log lines and metrics go to stderr; the figures to stdout

import pytest  # noqa: E402
from botocore.client import BaseClient  # noqa: E402
from handlers import record_failure  # noqa: E402
from lambda_harness import TABLE, LambdaContext, world_account  # noqa: E402
from moto.core.botocore_stubber import BotocoreStubber  # noqa: E402

from gpuaudit.collectors.inventory import UnknownCluster  # noqa: E402
from gpuaudit.model.history import HistorySpan  # noqa: E402
from gpuaudit.writes.history import DynamoHistory  # noqa: E402

CLUSTER = "research-hp-slurm"  # the harness world's cluster
ONE_VCPU_MB = 1769  # Lambda: "at 1,769 MB, a function has the equivalent of one vCPU"


def _counting(calls: Counter[str], real: Callable[..., Any]) -> Callable[..., Any]:
    def call(client: Any, operation: str, params: Any) -> Any:
        calls[f"{client.meta.service_model.service_name}:{operation}"] += 1
        return real(client, operation, params)
    return call


def _timing(moto_s: list[float], real: Callable[..., Any]) -> Callable[..., Any]:
    def answer(self: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return real(self, event_name, request, **kwargs)
        finally:
            moto_s[0] += time.thread_time() - started
    return answer


def _once(nodes: int, traced: bool) -> dict[str, Any]:
    """One RecordFailure on a fresh table of `nodes` spans; `traced`: under tracemalloc (its peak; CPU not read)."""
    calls: Counter[str] = Counter()
    moto_s = [0.0]
    with pytest.MonkeyPatch.context() as mp, world_account(mp, clusters=(CLUSTER,)) as account:
        now = account.world.now
        audited = now - timedelta(hours=1)
        spans = [HistorySpan(cluster=CLUSTER, instance_id=f"i-{i:017x}", audit_id="a1", audit_time=audited,
                             last_audit_id="a1", through=audited, mode="coverage", verdict="LEAVE ALONE",
                             xid_status="Measured") for i in range(nodes)]
        DynamoHistory(account.session.client("dynamodb"), TABLE).write(spans, 30, audited)
        event = {"cluster": CLUSTER, "mode": "coverage",
                 "failure": {"step": "Inventory", "error": UnknownCluster.__name__,
                             "cause": json.dumps({"errorMessage": f"no cluster named {CLUSTER}"})}}
        mp.setattr(BaseClient, "_make_api_call", _counting(calls, BaseClient._make_api_call))
        mp.setattr(BotocoreStubber, "__call__", _timing(moto_s, BotocoreStubber.__call__))
        if traced:
            tracemalloc.start()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            out = record_failure.handler(event, LambdaContext())
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            peak = tracemalloc.get_traced_memory()[1] if traced else 0
        finally:
            tracemalloc.stop()
    return {"out": out, "calls": calls, "cpu": cpu, "moto": moto_s[0], "wall": wall, "peak": peak}


def deployed_size() -> tuple[int, int]:
    """RecordFailure's memory (MB) and timeout (s) as the stack deploys it. Imported here only: infra/functions.py
    loads the CDK (a Node.js runtime), which the small run in the suite passes its own figures to avoid."""
    from infra.functions import SPECS

    spec = SPECS["RecordFailure"]
    return spec.memory_mb, int(spec.timeout.to_seconds())


def run(nodes: int, memory_mb: int, timeout_s: int) -> dict[str, Any]:
    timed, traced = _once(nodes, traced=False), _once(nodes, traced=True)
    out, client_cpu = timed["out"], max(0.0, timed["cpu"] - timed["moto"])
    share = min(1.0, memory_mb / ONE_VCPU_MB)
    return {"nodes": nodes, "history_closed": out.get("history_closed"), "recorded": out["recorded"],
            "process_cpu_s": round(timed["cpu"], 2), "moto_s": round(timed["moto"], 2),
            "client_cpu_s": round(client_cpu, 2), "wall_s": round(timed["wall"], 2),
            "peak_heap_mb": round(traced["peak"] / 2**20, 1),
            "dynamodb_calls": {k.removeprefix("dynamodb:"): v for k, v in sorted(timed["calls"].items())
                               if k.startswith("dynamodb:")},
            "memory_mb": memory_mb, "timeout_s": timeout_s, "cpu_share": round(share, 3),
            "cpu_s_at_memory": round(client_cpu / share, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--memory-mb", type=int, help="the function's memory (default: the stack's)")
    parser.add_argument("--timeout-s", type=int, help="the function's timeout (default: the stack's)")
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 20000:
        parser.error(f"--nodes must be 1..20000; got {args.nodes}")
    memory_mb, timeout_s = (args.memory_mb, args.timeout_s) if args.memory_mb and args.timeout_s else deployed_size()
    FIGURES.write(json.dumps(run(args.nodes, memory_mb, timeout_s), indent=2) + "\n")


if __name__ == "__main__":
    main()
