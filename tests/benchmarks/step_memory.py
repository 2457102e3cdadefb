"""Deployed path, per step (issue #20 item 3): what each Lambda of the state machine holds at N nodes.

    .venv/bin/python tests/benchmarks/step_memory.py --nodes 10000 [--days 7] [--kind parallelcluster] [--before-call]

Through the wire-faithful backend by default (issue #34): every read is answered with the HTTP response AWS would
send and parsed by botocore, as in a Lambda (`--before-call` answers parsed dicts, as before). Plan is measured on
a Capacity Block warning for the fleet's reservation. Per step `backend_s` is the time the embedded backend spent
answering and serializing (AWS's side of the calls), included in `wall_s`.

A generated world is served by the embedded backend; the handlers run as the state machine chains them
(Plan → Inventory → CollectLogs per batch → Finish → Verdict) with the environment the stack sets, the evidence
bucket, findings table and alert topic in moto (tests/handlers/lambda_harness.py). Per step it prints the wall
seconds, the step's own CPU seconds (the process's, less the backend's answering: `own_cpu_s`) and what they come to
at the Lambda's CPU share (one vCPU at 1,769 MB, proportional below: `lambda_own_s`, against a third of the step's
timeout, infra/functions.py; `--no-trace` measures the seconds without tracemalloc, which slows allocation 2-4x), the
Python heap the step allocated at its peak (tracemalloc, reset per step: the world and moto, which a Lambda does not
hold, were allocated before and are not counted; the AWS calls it made, by operation; CollectLogs is measured on its
second run, with the embedded Logs Insights answers memoised, so the evaluator's work, done by AWS for a Lambda, is not
counted), and the sizes of the documents the step read
and wrote through the bucket. A Lambda needs about its runtime's baseline (a fresh interpreter with the handler
imported, printed first) plus the step's peak. `insights_memo` says whether the memo held: the answers evaluated to
fill it, those it served while CollectLogs was measured, and those evaluated while measured (0 when it held; any
other count means CollectLogs' figures include the evaluator's work).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# ROOT first: infra/ (the deployment document) before tests/infra, a namespace package of the same name
sys.path[:0] = [str(ROOT), str(ROOT / "functions"), str(ROOT / "tests" / "handlers"), str(ROOT / "tests")]
FIGURES = sys.stdout
if __name__ == "__main__":  # imported by a test, the process's streams are left alone
    sys.stdout = sys.stderr  # the steps' log lines and metrics (bound at import) go to stderr; the figures to stdout

import pytest  # noqa: E402
from botocore.client import BaseClient  # noqa: E402
from handlers import collect_logs, finish, inventory, plan, verdict  # noqa: E402
from lambda_harness import LambdaContext, capacity_block_warning, console_target, world_account  # noqa: E402
from test_xid_watch_plan import alarm_event  # noqa: E402

from gpuaudit import pipeline  # noqa: E402
from gpuaudit.devtools.worldgen import WorldSpec, generate, write  # noqa: E402
from gpuaudit.model.timeutil import iso, parse_time  # noqa: E402


def _baseline_mb() -> float:
    """RSS of a fresh interpreter that imported every handler: what a Lambda holds before its first event."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child of a large parent reports its size
    code = ("import re, sys; sys.path[:0] = [sys.argv[1]]; "
            "import handlers.verdict, handlers.collect_logs, handlers.finish, handlers.inventory; "
            "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) / 1024)")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "functions")], capture_output=True, text=True,
                         check=True)
    return round(float(out.stdout.strip()), 1)


def _stored_mb(account: Any) -> dict[str, float]:
    s3 = account.session.client("s3")
    sizes: dict[str, float] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="gpuaudit-evidence-test"):
        for item in page.get("Contents", []):
            kind = item["Key"].split("/")[1] if item["Key"].startswith("payloads/") else item["Key"].split("/")[0]
            sizes[kind] = round(sizes.get(kind, 0.0) + item["Size"] / 2**20, 2)
    return sizes


CALLS: Counter[str] = Counter()


def _counting(real: Callable[..., Any]) -> Callable[..., Any]:
    def call(client: Any, operation: str, params: Any) -> Any:
        CALLS[f"{client.meta.service_model.service_name}:{operation}"] += 1
        return real(client, operation, params)
    return call


BACKEND: list[Any] = []  # the world's backend, for its serving seconds


ONE_VCPU_MB = 1769  # "At 1,769 MB, a function has the equivalent of one vCPU" (Lambda: memory and computing power)


def _lambda_share(name: str, own_cpu_s: float) -> dict[str, Any]:
    """The step's own CPU seconds at its Lambda's CPU share (proportional to memory below one vCPU: a single-threaded
    step gains nothing above), against a third of its timeout (the stack's settings, infra/functions.py)."""
    from infra.functions import SPECS
    spec = SPECS.get(name.split(" ")[0])
    if spec is None:
        return {}
    share = min(1.0, spec.memory_mb / ONE_VCPU_MB)
    return {"lambda_mb": spec.memory_mb, "lambda_own_s": round(own_cpu_s / share, 1),
            "third_of_timeout_s": round(spec.timeout.to_seconds() / 3)}


def _measured(name: str, step: Callable[[], Any], rows: list[dict[str, Any]]) -> Any:
    gc.collect()  # garbage of the earlier steps, freed during this one, would hide part of its peak
    CALLS.clear()
    served = BACKEND[0].serve_s if BACKEND else 0.0
    served_cpu = BACKEND[0].serve_cpu_s if BACKEND else 0.0
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    started, cpu = time.perf_counter(), time.process_time()
    out = step()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    _, peak = tracemalloc.get_traced_memory()
    own_cpu = cpu - ((BACKEND[0].serve_cpu_s if BACKEND else 0.0) - served_cpu)
    rows.append({"step": name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "own_cpu_s": round(own_cpu, 1),
                 **_lambda_share(name, own_cpu),
                 "peak_heap_mb": round((peak - before) / 2**20, 1) if tracing else None,
                 "backend_s": round((BACKEND[0].serve_s if BACKEND else 0.0) - served, 1),
                 "aws_calls": sum(CALLS.values()), "most_called": dict(CALLS.most_common(4))})
    return out


def _memoise_insights(mp: pytest.MonkeyPatch) -> dict[str, int]:
    """The embedded backend's query answers kept by the StartQuery request (query, groups, time range, limit): a
    second StartQuery of the same request allocates nothing in the evaluator, as a Lambda allocates nothing for the
    work Logs Insights does. Keyed on the request as sent, not on how the responder builds the evaluator's input
    (which changed once and broke this memo): the responder's records are a lazy iterable, never read on a hit."""
    from gpuaudit.embedded.insights import execution
    from gpuaudit.embedded.responders import logs
    from gpuaudit.embedded.responders.registry import RESPONDERS

    real_start, real_run = RESPONDERS[("logs", "StartQuery")], logs.insights.run_query
    answers: dict[tuple[Any, ...], execution.QueryOutcome] = {}
    asked: list[tuple[Any, ...]] = []
    counts = {"filled": 0, "served": 0}  # evaluated and kept / answered from the memo

    def start_query(backend: Any, params: dict[str, Any]) -> dict[str, Any]:
        names = params.get("logGroupNames") or params.get("logGroupIdentifiers") or [params.get("logGroupName")]
        asked[:] = [(params["queryString"], tuple(names), params["startTime"], params["endTime"],
                     params.get("limit"))]
        try:
            return real_start(backend, params)
        finally:
            asked.clear()

    def answer(query: str, records: Any, *args: Any, **kwargs: Any) -> execution.QueryOutcome:
        if not asked:  # a query not started by StartQuery: not memoised
            return real_run(query, records, *args, **kwargs)
        key = asked[0]
        if key in answers:
            counts["served"] += 1
        else:
            answers[key] = real_run(query, records, *args, **kwargs)
            counts["filled"] += 1
        return answers[key]

    mp.setitem(RESPONDERS, ("logs", "StartQuery"), start_query)
    mp.setattr(logs.insights, "run_query", answer)
    return counts


def _drop_coverage_cache(account: Any) -> None:
    s3 = account.session.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="gpuaudit-evidence-test", Prefix="cache/"):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket="gpuaudit-evidence-test", Key=item["Key"])


# An Xid watch audit (`watch`): the Xid 79 lines are written this long before the world's now, the alarm's state change
# this long after them (in the minute after theirs: rules/xid_watch.py's window holds them).
WATCH_LINE_BEFORE_NOW_S = 240
WATCH_ALARM_AFTER_LINE_S = 110


def _watched(world: dict[str, Any], nodes: int) -> str:
    """An Xid 79 line on the kernel stream of each of the first `nodes` GPU nodes (a stream named by its instance ID;
    not the head node or controller), WATCH_LINE_BEFORE_NOW_S before the world's now; the time of the alarm they
    trip."""
    written = parse_time(world["now"]).timestamp() - WATCH_LINE_BEFORE_NOW_S
    heads = {i["InstanceId"] for i in world.get("ec2", {}).get("instances", [])
             if {"Key": "parallelcluster:node-type", "Value": "HeadNode"} in i.get("Tags", [])}
    heads |= {n["InstanceId"] for c in world.get("sagemaker", {}).get("clusters", []) for n in c.get("Nodes", [])
              if n.get("InstanceGroupName") == "controller"}
    kernel = [s for g in world["logs"]["groups"] for s in g["streams"]
              if any("kernel:" in e[1] for e in s.get("events", [])[:5]) and "i-" in s["logStreamName"]
              and not any(h in s["logStreamName"] for h in heads)]
    for stream in kernel[:nodes]:
        stream.setdefault("events", []).append([int(written * 1000), "gpu kernel: NVRM: Xid (PCI:0000:53:00): 79, "
                                                                     "pid=0, GPU has fallen off the bus."])
    return iso(datetime.fromtimestamp(written + WATCH_ALARM_AFTER_LINE_S, UTC))


def _timed_locate(mp: pytest.MonkeyPatch, rows: list[dict[str, Any]]) -> None:
    """Inventory's locate of an Xid watch audit timed on its own: a row of its own (no heap), inside Inventory's,
    whose figures it leaves whole."""
    real = pipeline.narrow_to_watch

    def narrow(*args: Any, **kwargs: Any) -> Any:
        calls, served = sum(CALLS.values()), BACKEND[0].serve_s if BACKEND else 0.0
        served_cpu = BACKEND[0].serve_cpu_s if BACKEND else 0.0
        started, cpu = time.perf_counter(), time.process_time()
        out = real(*args, **kwargs)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        backend_cpu = (BACKEND[0].serve_cpu_s if BACKEND else 0.0) - served_cpu
        backend_s = (BACKEND[0].serve_s if BACKEND else 0.0) - served
        rows.append({"step": "Locate (in Inventory)", "wall_s": round(wall, 3),
                     "own_cpu_s": round(cpu - backend_cpu, 3), "peak_heap_mb": None, "backend_s": round(backend_s, 3),
                     "aws_calls": sum(CALLS.values()) - calls, "most_called": {}})
        return out

    mp.setattr(pipeline, "narrow_to_watch", narrow)


def run(nodes: int, days: float, kind: str, wire: bool = True, trace: bool = True, watch: int = 0) -> dict[str, Any]:
    """`watch` > 0: the audit is the Xid watch's (issue #51), its alarm tripped by an Xid 79 on `watch` nodes, so it
    judges those nodes only; else the hourly coverage audit of every node."""
    spec = WorldSpec(kind=kind, nodes=nodes, days=days, silent_fraction=0.01, xid_rate=0.05, seed=0)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as mp:
        path = Path(folder) / "world.json"
        world = generate(spec)
        alarm = _watched(world, watch) if watch else None
        write(world, str(path))
        with world_account(mp, path, clusters=(spec.cluster_name,), wire=wire) as account:
            BACKEND[:] = [account.backend]
            target = console_target({"cluster": spec.cluster_name, "mode": "coverage", "last": "7d"})
            if alarm is not None:
                (target,) = plan.handler(alarm_event(spec.cluster_name, alarm), LambdaContext())["targets"]
                _timed_locate(mp, rows)
            mp.setattr(BaseClient, "_make_api_call", _counting(BaseClient._make_api_call))
            reservations = account.world.section("ec2", "capacity_reservations")
            if trace:
                tracemalloc.start()
            try:
                if reservations:
                    warning = capacity_block_warning(reservations[0]["CapacityReservationId"],
                                                     iso(account.world.now))
                    _measured("Plan (Capacity Block warning)", lambda: plan.handler(warning, LambdaContext()), rows)
                found = _measured("Inventory", lambda: inventory.handler(target, LambdaContext()), rows)
                # Logs Insights runs in AWS, not in the Lambda: each batch is collected once to fill a memo of the
                # embedded evaluator's answers, its coverage cache dropped, then collected again and measured.
                memo = _memoise_insights(mp)
                for b in found["batches"]:
                    collect_logs.handler({"evidence": found["evidence"], "batch": b}, LambdaContext())
                _drop_coverage_cache(account)
                filled, served = memo["filled"], memo["served"]
                batches = [_measured(f"CollectLogs batch {b['index']}",
                                     lambda b=b: collect_logs.handler({"evidence": found["evidence"], "batch": b},
                                                                      LambdaContext()), rows)
                           for b in found["batches"]]
                # every query of the measured runs answered from the memo: the evaluator's work is not in their
                # figures (`evaluated_while_measured` 0)
                insights_memo = {"filled": filled, "served_while_measured": memo["served"] - served,
                                 "evaluated_while_measured": memo["filled"] - filled}
                joined = _measured("Finish", lambda: finish.handler(
                    {"request": found["request"], "evidence": found["evidence"], "batches": batches},
                    LambdaContext()), rows)
                _measured("Verdict", lambda: verdict.handler(
                    {"request": found["request"], "evidence": joined["evidence"]}, LambdaContext()), rows)
            finally:  # a step that raised leaves no tracing behind (tests run this inside the suite's process)
                if trace:
                    tracemalloc.stop()
                BACKEND.clear()
            stored = _stored_mb(account)
    return {"nodes": nodes, "days": days, "kind": kind, "wire": wire, "baseline_mb": _baseline_mb(), "steps": rows,
            "bucket_mb": stored, "insights_memo": insights_memo, "watch": watch}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--days", type=float, default=7.0, help="days of logs in the world (the audit reads 7 d)")
    parser.add_argument("--kind", default="parallelcluster", choices=["parallelcluster", "hyperpod"])
    parser.add_argument("--before-call", action="store_true",
                        help="answer at before-call with parsed dicts (no wire parsing), as before issue #34")
    parser.add_argument("--no-trace", action="store_true",
                        help="seconds without tracemalloc (it slows allocation 2-4x); no heap figures then")
    parser.add_argument("--watch", type=int, default=0,
                        help="an Xid watch audit narrowed to this many nodes (their Xid 79 tripped it); 0: hourly")
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 20000:
        parser.error(f"--nodes must be 1..20000; got {args.nodes}")
    if not 0 <= args.watch <= args.nodes:
        parser.error(f"--watch must be 0..--nodes; got {args.watch}")
    figures = run(args.nodes, args.days, args.kind, wire=not args.before_call, trace=not args.no_trace,
                  watch=args.watch)
    FIGURES.write(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
