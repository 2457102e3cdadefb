"""`gpuaudit bench`: what a coverage audit costs at scale, against what a per-node investigation costs.

One generated world (gpuaudit.devtools.worldgen), three fresh processes, so each peak RSS belongs to one step:

* **ours**: `pipeline.run_audit` on the embedded backend, coverage mode, window = the last D days:
  three Logs Insights queries per batch of <= 50 log groups, plus detail queries only for streams
  with empty hours (collectors/logs.py).
* **naive**: what a manual investigation does (this strategy lives here, never in the product):
  for every GPU node and every log source, two Logs Insights queries on that node's stream,
  `filter @logStream = "<s>" and @message like /kernel:/ | stats count(*)` and
  `filter @logStream = "<s>" | stats count(*) by bin(1h)`, each polled to completion.
* **judge**: rules + report alone (`rules.judge.judge` then `report.markdown.finalize`, as
  `pipeline.judge_with_history` runs them without a history) on the Evidence that `collect()` returned in the ours
  step, reloaded from its JSON.

Two honest simplifications, both in the naive strategy's favour:

* Logs Insights scans every record of the named groups in the time range, whatever the
  `@logStream` filter (without field indexes), so a per-stream query costs as much as a whole-group
  query. The embedded backend does the same, which makes the naive run quadratic in nodes; to keep
  it measurable, the naive step evaluates each per-stream query on that stream's records only
  (a stream pushdown AWS does not give). Its wall time is therefore a lower bound, and its
  `records_scanned` is computed as AWS would bill it (all records of the group in the range).
* The naive investigator knows each node's stream names by convention (no DescribeLogStreams).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpuaudit.devtools import worldgen

DEFAULT_SILENT_FRACTION = 0.01
DEFAULT_XID_RATE = 0.05
NAIVE_SECONDS_NOTE = ("the embedded Logs Insights evaluator walks every stream "
                      "of a group for each per-stream query and the sample's time is scaled to the fleet, so "
                      "its seconds measure the stand-in, not AWS")
NAIVE_KERNEL_QUERY = 'filter @logStream = {stream} and @message like /kernel:/ | stats count(*)'
NAIVE_HOURS_QUERY = "filter @logStream = {stream} | stats count(*) by bin(1h)"
_STREAM_FILTER = re.compile(r'^filter @logStream = ("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True)
class BenchConfig:
    nodes: int
    days: float = 7.0
    kind: str = "parallelcluster"
    seed: int = 0
    silent_fraction: float = DEFAULT_SILENT_FRACTION
    xid_rate: float = DEFAULT_XID_RATE
    instance_type: str = "p5.48xlarge"
    naive_sample: int | None = None  # run the naive strategy on this many nodes and extrapolate (said so)
    host_named: bool = False  # the customer kernel group's streams named by host alone (worldgen.WorldSpec)

    def spec(self) -> worldgen.WorldSpec:
        if self.naive_sample is not None and not 1 <= self.naive_sample <= self.nodes:
            raise ValueError(f"--naive-sample must be between 1 and --nodes ({self.nodes}); got {self.naive_sample}")
        return worldgen.WorldSpec(kind=self.kind, nodes=self.nodes, days=self.days,
                                  silent_fraction=self.silent_fraction, xid_rate=self.xid_rate, seed=self.seed,
                                  instance_type=self.instance_type, host_named=self.host_named)


# --------------------------------------------------------------------------- parent


def run_bench(config: BenchConfig, keep_dir: Path | None = None, progress: Any = None) -> dict[str, Any]:
    """Generate the world, run the three steps in fresh processes, return the figures."""
    spec = config.spec()  # validates the arguments before any work
    say = progress or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="gpuaudit-bench-") as tmp:
        work = keep_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        world_path, evidence_path = work / "world.json", work / "evidence.json"
        started = time.perf_counter()
        world = worldgen.generate(spec)
        shape = worldgen.describe(world)
        world_bytes = worldgen.write(world, str(world_path))
        del world
        generate_s = time.perf_counter() - started
        common = {"world": str(world_path), "cluster": spec.cluster_name, "days": config.days, "kind": config.kind,
                  "host_named": config.host_named}
        say(f"world: {shape['nodes']} nodes, {shape['streams']} streams, "
            f"{shape['periodic_lines'] + shape['events']:,} lines, {world_bytes / 1e6:.1f} MB")
        say("ours: coverage audit (run_audit)…")
        ours = _spawn({**common, "step": "ours", "evidence_out": str(evidence_path)})
        say("naive: two queries per node per source…")
        naive = _spawn({**common, "step": "naive", "sample": config.naive_sample})
        say("judge: rules + report on the collected evidence…")
        judged = _spawn({"step": "judge", "evidence": str(evidence_path)})
        say("hourly: a full 7-day audit an hour earlier, then the next hourly audit from the cache…")
        hourly = _spawn({**common, "step": "hourly", "cache": str(work / "cache.json")})
    return {
        "nodes": config.nodes,
        "days": config.days,
        "kind": config.kind,
        "seed": config.seed,
        "silent_fraction": config.silent_fraction,
        "host_named": config.host_named,
        "xid_rate": config.xid_rate,
        "audited_nodes": ours["audited_nodes"],
        "log_groups": shape["log_groups"],
        "streams": shape["streams"],
        "world_lines": shape["periodic_lines"] + shape["events"],
        "world_mb": round(world_bytes / 1e6, 2),
        "generate_s": round(generate_s, 3),
        "sources": naive["sources"],
        "ours": ours,
        "naive": naive,
        "ratio_calls": _ratio(naive["calls"], ours["calls"]),
        "ratio_start_query": _ratio(naive["start_query"], ours["start_query"]),
        "ratio_wall": None,  # the naive seconds are the stand-in's (naive["seconds_note"]): no honest ratio
        "ratio_records_scanned": _ratio(naive["records_scanned"], ours["records_scanned"]),
        "judge": {**judged, "same_result": judged["result_sha256"] == ours["result_sha256"]},
        "hourly": hourly,
        "machine": machine(),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def _spawn(args: dict[str, Any]) -> dict[str, Any]:
    """One step in a fresh interpreter (so its peak RSS is its own); it prints one JSON line."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, "-m", "gpuaudit.devtools.bench", json.dumps(args)], capture_output=True,
                          text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"bench step {args['step']!r} failed (exit {proc.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    with contextlib.suppress(ValueError, OSError):
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {"nproc": os.cpu_count(), "memory_gb": mem_gb, "cpu": cpu, "python": platform.python_version(),
            "load_avg_1m": round(os.getloadavg()[0], 2), "calibration_s": calibration()}


def calibration() -> float:
    """CPU seconds of a fixed pure-Python loop (5 million additions), best of three: on a shared or
    virtualised machine the same code runs at different speeds, and this says how fast this one ran."""
    best = float("inf")
    for _ in range(3):
        started, total = time.process_time(), 0
        for i in range(5_000_000):
            total += i
        best = min(best, time.process_time() - started)
    return round(best, 3)


# --------------------------------------------------------------------------- child steps


def _status_mb(field: str) -> float | None:
    """A memory figure of this process from /proc/self/status (Linux), in MB; None elsewhere."""
    with contextlib.suppress(OSError, AttributeError):
        found = re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text())
        return round(int(found.group(1)) / 1024, 1) if found else None
    return None


def _peak_rss_mb() -> float:
    """This process's own high-water mark: VmHWM. Not ru_maxrss, which Linux carries over fork and exec, so a step
    started by a large parent reported the parent's peak (a judge of 245 MB shown as 1,228: issue #50)."""
    own = _status_mb("VmHWM")
    return own if own is not None else round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _rss_mb() -> float | None:
    """This process's resident memory now (VmRSS): after a world loads, what the stand-in account holds."""
    return _status_mb("VmRSS")


def _calls(aws: Any) -> tuple[dict[str, int], int, int]:
    by_op = {f"{c.service}:{c.operation}": c.count for c in aws.call_counts()}
    return by_op, sum(by_op.values()), by_op.get("logs:StartQuery", 0)


def _result_digest(result: Any) -> str:
    return hashlib.sha256(result.to_json().encode()).hexdigest()


# What varies with how the evidence was read (call counts, the report's cost lines, the self-check of them) or
# when (audit ID, time): without them, two collection strategies that read the same evidence give the same digest.
HOW_READ = ("calls", "report_markdown", "self_check", "generated_at", "audit_id")


def answer_digest(result: Any) -> str:
    doc = json.loads(result.to_json())
    return hashlib.sha256(json.dumps({k: v for k, v in doc.items() if k not in HOW_READ},
                                     sort_keys=True).encode()).hexdigest()


def _load(args: dict[str, Any]) -> tuple[Any, Any, Any, float]:
    from gpuaudit.collectors.aws import Aws
    from gpuaudit.embedded.backend import WorldBackend
    from gpuaudit.embedded.world import load_world

    started = time.perf_counter()
    world = load_world(args["world"])
    backend = WorldBackend(world)
    aws = Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
              monotonic=backend.monotonic)
    return world, backend, aws, time.perf_counter() - started


def step_ours(args: dict[str, Any]) -> dict[str, Any]:
    from gpuaudit import pipeline

    world, _backend, aws, load_s = _load(args)
    world_rss = _rss_mb()  # the stand-in account, loaded: not the audit's memory
    request = pipeline.AuditRequest(cluster=args["cluster"], mode="coverage",
                                    since=world.now - timedelta(days=args["days"]))
    captured: dict[str, Any] = {}
    collect = pipeline.collect

    def timed_collect(*args_: Any, **kwargs: Any) -> Any:  # run_audit unchanged; the evidence is kept
        started = time.perf_counter()
        captured["evidence"] = collect(*args_, **kwargs)
        captured["collect_s"] = time.perf_counter() - started
        return captured["evidence"]

    pipeline.collect = timed_collect  # type: ignore[assignment]
    try:
        started, cpu = time.perf_counter(), time.process_time()
        result = pipeline.run_audit(aws, request)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        pipeline.collect = collect  # type: ignore[assignment]
    peak = _peak_rss_mb()
    evidence = captured["evidence"]
    Path(args["evidence_out"]).write_text(evidence.model_dump_json(), encoding="utf-8")
    by_op, total, start_query = _calls(aws)
    statuses: dict[str, int] = {}
    for n in result.nodes:
        statuses[n.xid_status] = statuses.get(n.xid_status, 0) + 1
    return {
        "calls": total, "start_query": start_query, "calls_by_operation": by_op,
        "queries_by_purpose": _by_purpose(evidence.queries),
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "collect_s": round(captured["collect_s"], 3),
        "judge_report_s": round(wall - captured["collect_s"], 3), "load_s": round(load_s, 3),
        "peak_rss_mb": peak, "world_rss_mb": world_rss,
        "audit_peak_over_world_mb": None if world_rss is None else round(peak - world_rss, 1),
        "records_scanned": int(sum(q.records_scanned for q in evidence.queries)),
        "audited_nodes": len(result.nodes), "log_groups_found": len(evidence.log_groups),
        "xid_status": statuses, "gaps": len(result.visibility_gaps), "result_sha256": _result_digest(result),
        "answer_sha256": answer_digest(result),
        **_answer_sizes(result),
    }


def _by_purpose(queries: Any) -> dict[str, int]:
    return dict(Counter(q.purpose for q in queries))


def _answer_sizes(result: Any) -> dict[str, int]:
    """What a reader and on-call receive, in characters: headline, first alert, reports, JSON result."""
    from gpuaudit.report.html import render_html
    from gpuaudit.rules.what_changed import compare
    from gpuaudit.writes.sinks import alert_message

    return {"headline_chars": len(result.headline),
            "alert_chars": len(alert_message(result, compare(result, {}).records, "s3://bucket/report.html")),
            "markdown_chars": len(result.report_markdown), "html_chars": len(render_html(result)),
            "json_chars": len(result.to_json())}


def _group_volume(world: Any, group: str, start_ms: int, end_ms: int) -> tuple[int, int]:
    """Records and bytes of a whole log group in [start_ms, end_ms]: what one Logs Insights query over it scans."""
    from gpuaudit.embedded.insights import LogRun
    from gpuaudit.embedded.responders.logs import query_input

    records = size = 0
    for item in query_input(world, [group], start_ms, end_ms):
        count = len(item.timestamps) if isinstance(item, LogRun) else 1
        records += count
        size += count * len(item.message.encode())
    return records, size


def install_stream_pushdown(backend: Any, session: Any) -> None:
    """Answer `filter @logStream = "<s>" …` queries over one group from that stream's records only.

    Same rows as the full evaluation (the filter drops every other stream), reached without
    scanning the whole group per query; records_scanned / bytesScanned still report the whole group,
    as AWS bills it. Anything else falls through to the embedded backend unchanged."""
    from botocore.awsrequest import AWSResponse

    from gpuaudit.embedded import insights
    from gpuaudit.embedded.backend import PARAMS_KEY
    from gpuaudit.embedded.responders.logs import query_input
    from gpuaudit.embedded.responders.registry import RunningQuery

    volumes: dict[tuple[str, int, int], tuple[int, int]] = {}

    def serve(context: dict[str, Any], **_: Any) -> Any:
        params = context.get(PARAMS_KEY) or {}
        names = params.get("logGroupNames") or []
        match = _STREAM_FILTER.match(params.get("queryString", ""))
        if match is None or len(names) != 1 or names[0] not in backend.world.log_groups or params.get("limit"):
            return None
        start_s, end_s = params["startTime"], params["endTime"]
        low, high = start_s * 1000, end_s * 1000 + 999
        records = query_input(backend.world, names, low, high, streams=[json.loads(match.group(1))])
        try:
            outcome = insights.run_query(params["queryString"], records, start_s, end_s, backend.world.account_id)
        except insights.QueryError:
            return None  # let the backend raise its own MalformedQueryException
        key = (names[0], low, high)
        if key not in volumes:
            volumes[key] = _group_volume(backend.world, names[0], low, high)
        scanned, size = volumes[key]
        outcome = insights.QueryOutcome(outcome.rows, scanned, outcome.records_matched, size)
        query_id = str(uuid.uuid4())
        backend.queries[query_id] = RunningQuery(outcome, "Complete")
        response = AWSResponse(url="https://embedded.world/", status_code=200, headers={}, raw=None)
        return response, {"queryId": query_id, "ResponseMetadata": {"HTTPStatusCode": 200, "RequestId": query_id}}

    session.events.register_first("before-call.cloudwatch-logs.StartQuery", serve)


def naive_streams(group: str, cluster: str, node: Any, host_named: bool = False) -> str | None:
    """The stream an investigator would name for `node` in `group`, by each source's convention."""
    from gpuaudit.domain.streams import is_hma_group, is_pcluster_group

    host = (node.private_dns or "").split(".", 1)[0]
    if is_pcluster_group(group, cluster):
        return f"{host}.{node.instance_id}.system-messages" if host else None
    if is_hma_group(group, cluster):
        return f"SagemakerHealthMonitoringAgent/{node.instance_group}/{node.instance_id}"
    if host_named:
        return node.private_dns or None
    return f"{node.private_dns}-{node.instance_id}" if node.private_dns else None


def step_naive(args: dict[str, Any]) -> dict[str, Any]:
    from gpuaudit.collectors.aws import CallFailed
    from gpuaudit.collectors.inventory import collect_inventory
    from gpuaudit.domain.window import padded, resolve_window
    from gpuaudit.model.evidence import Gap

    world, backend, aws, load_s = _load(args)
    install_stream_pushdown(backend, aws.session)
    started, cpu = time.perf_counter(), time.process_time()
    gaps: list[Gap] = []
    cluster, nodes = collect_inventory(aws, args["cluster"], None, gaps)
    groups = [g["logGroupName"] for g in aws.paginate("logs", "DescribeLogGroups", "logGroups", token="nextToken",
                                                      logGroupNamePattern=args["cluster"])]
    window = resolve_window("coverage", world.now, since=world.now - timedelta(days=args["days"]))
    pad = padded(window, world.now)
    start_s, end_s = int(pad.start.timestamp()), int(pad.end.timestamp())
    gpu_nodes = [n for n in nodes if n.role == "compute"]
    sampled = gpu_nodes[:args["sample"]] if args.get("sample") else gpu_nodes
    scale = len(gpu_nodes) / len(sampled) if sampled else 1.0
    failed = answered = 0
    for node in sampled:
        for group in groups:
            stream = naive_streams(group, cluster.name, node, bool(args.get("host_named")))
            if stream is None:
                continue
            for template in (NAIVE_KERNEL_QUERY, NAIVE_HOURS_QUERY):
                query = template.format(stream=json.dumps(stream))
                try:
                    qid = aws.call("logs", "StartQuery", logGroupNames=[group], startTime=start_s, endTime=end_s,
                                   queryString=query)["queryId"]
                    while aws.call("logs", "GetQueryResults", queryId=qid).get("status") not in (
                            "Complete", "Failed", "Cancelled", "Timeout"):
                        aws.sleep(1.0)
                    answered += 1
                except CallFailed:
                    failed += 1
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    by_op, total, start_query = _calls(aws)
    scanned = sum(_group_volume(world, g, start_s * 1000, end_s * 1000 + 999)[0] for g in groups) \
        * len(gpu_nodes) * 2
    # Per-node work is the same for every node: a sample's queries and seconds scale linearly (said in the output).
    per_node = by_op.get("logs:StartQuery", 0) + by_op.get("logs:GetQueryResults", 0)
    return {
        "calls": round(total + per_node * (scale - 1)), "start_query": round(start_query * scale),
        "calls_by_operation": by_op,
        # Its seconds are the stand-in's, not AWS's: the embedded evaluator walks the stream per query and the sample
        # is scaled up, so they are left out of the comparison (issue #50); calls, StartQuery and records are exact.
        "wall_s": None, "cpu_s": None, "stand_in_wall_s": round(wall * scale, 3),
        "stand_in_cpu_s": round(cpu * scale, 3),
        "seconds_note": NAIVE_SECONDS_NOTE, "load_s": round(load_s, 3),
        "peak_rss_mb": _peak_rss_mb(), "records_scanned": scanned, "gpu_nodes": len(gpu_nodes), "sources": len(groups),
        "queries_answered": answered, "queries_failed": failed,
        "sampled_nodes": len(sampled), "extrapolated": len(sampled) < len(gpu_nodes),
    }


def step_judge(args: dict[str, Any]) -> dict[str, Any]:
    from gpuaudit.model.evidence import Evidence
    from gpuaudit.pipeline import judge_with_history
    from gpuaudit.rules.judge import JudgeConfig

    text = Path(args["evidence"]).read_text(encoding="utf-8")
    evidence = Evidence.model_validate_json(text)
    del text
    before = _peak_rss_mb()
    started, cpu = time.perf_counter(), time.process_time()
    result = judge_with_history(evidence, JudgeConfig(), None, evidence.now).result  # as the CLI and Verdict run it
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mb": _peak_rss_mb(), "rss_before_mb": before,
            "evidence_mb": round(Path(args["evidence"]).stat().st_size / 1e6, 2),
            "result_sha256": _result_digest(result)}


def step_hourly(args: dict[str, Any]) -> dict[str, Any]:
    """Incremental audits (collectors/cache.py): a full audit one hour earlier fills the cache, then the
    next hourly audit reads only the hours that can still change. Records scanned of both."""
    from gpuaudit import pipeline
    from gpuaudit.collectors.cache import FileCache

    world, _backend, aws, _load_s = _load(args)
    request = pipeline.AuditRequest(cluster=args["cluster"], mode="coverage", last="7d")
    cache = FileCache(Path(args["cache"]))
    real_now = world.now
    world.now = real_now - timedelta(hours=1)
    full = pipeline.collect(aws, request, cache)
    world.now = real_now
    started = time.perf_counter()
    nxt = pipeline.collect(aws, request, cache)
    wall = time.perf_counter() - started
    full_scanned = sum(q.records_scanned for q in full.queries)
    next_scanned = sum(q.records_scanned for q in nxt.queries)
    return {"full_records_scanned": int(full_scanned), "next_records_scanned": int(next_scanned),
            "ratio": _ratio(full_scanned, next_scanned), "next_wall_s": round(wall, 3),
            "next_start_query": sum(1 for q in nxt.queries), "next_queries_by_purpose": _by_purpose(nxt.queries),
            "cache_kb": round(Path(args["cache"]).stat().st_size / 1024, 1)}


STEPS = {"ours": step_ours, "naive": step_naive, "judge": step_judge, "hourly": step_hourly}


def _child_main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    out = STEPS[args["step"]](args)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


# --------------------------------------------------------------------------- output


def render_table(figures: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    ours, naive, judged = figures["ours"], figures["naive"], figures["judge"]
    title = (f"gpuaudit bench: {figures['kind']}, {figures['nodes']:,} GPU nodes × {figures['days']:g} days "
             f"(seed {figures['seed']}, silent {figures['silent_fraction']:g}, xid rate {figures['xid_rate']:g})")
    table = Table(title=title)
    table.add_column("")
    table.add_column("ours (coverage audit)", justify="right")
    table.add_column("naive (per node)", justify="right")
    table.add_column("naive / ours", justify="right")

    def row(label: str, a: Any, b: Any, ratio: Any = "") -> None:
        table.add_row(label, _fmt(a), _fmt(b), "" if ratio in ("", None) else f"{ratio:,.1f}×")

    row("nodes audited", ours["audited_nodes"], naive["gpu_nodes"])
    row("log groups", ours["log_groups_found"], naive["sources"])
    ops = sorted(set(ours["calls_by_operation"]) | set(naive["calls_by_operation"]))
    for op in ops:
        a, b = ours["calls_by_operation"].get(op, 0), naive["calls_by_operation"].get(op, 0)
        row(f"  {op}", a, b, _ratio(b, a))
    row("calls (total)", ours["calls"], naive["calls"], figures["ratio_calls"])
    row("records scanned", ours["records_scanned"], naive["records_scanned"], figures["ratio_records_scanned"])
    row("wall s", ours["wall_s"], "—")
    row("CPU s", ours["cpu_s"], "—")
    row("peak RSS MB (VmHWM)", ours["peak_rss_mb"], naive["peak_rss_mb"])
    console.print(table)
    console.print(f"naive seconds left out: {naive['seconds_note']}")
    if ours.get("world_rss_mb") is not None:
        console.print(f"ours: the loaded world (the stand-in account) held {ours['world_rss_mb']:,.0f} MB of the peak; "
                      f"the audit added {ours['audit_peak_over_world_mb']:,.0f} MB over it")
    console.print(f"judge step (rules + report on the collected evidence): {judged['wall_s']:.2f} s "
                  f"({judged['cpu_s']:.2f} s CPU), "
                  f"peak RSS {judged['peak_rss_mb']:.0f} MB (evidence {judged['evidence_mb']:.1f} MB); "
                  f"same result as the audit: {'yes' if judged['same_result'] else 'NO'}")
    console.print(f"ours: collect {ours['collect_s']:.2f} s, judge+report {ours['judge_report_s']:.2f} s, "
                  f"world load {ours['load_s']:.2f} s (not in wall); queries by purpose {ours['queries_by_purpose']}; "
                  f"Xid status {ours['xid_status']}")
    if naive.get("extrapolated"):
        console.print(f"naive: run on {naive['sampled_nodes']:,} of {naive['gpu_nodes']:,} nodes; its calls, "
                      "StartQuery and seconds are extrapolated linearly (records scanned are computed for all)")
    console.print(f"answer sizes (characters): headline {ours['headline_chars']:,}, first alert "
                  f"{ours['alert_chars']:,}, Markdown {ours['markdown_chars']:,}, HTML {ours['html_chars']:,}, "
                  f"JSON {ours['json_chars']:,}")
    h = figures["hourly"]
    console.print(f"incremental: full 7-day audit scanned {h['full_records_scanned']:,} records; the next hourly "
                  f"audit scanned {h['next_records_scanned']:,} (1/{h['ratio']:,.0f}) in {h['next_wall_s']:.2f} s, "
                  f"cache {h['cache_kb']:,.1f} KB")
    m = figures["machine"]
    console.print(f"machine: {m['nproc']} CPU ({m['cpu']}), {m['memory_gb']} GB, Python {m['python']}, "
                  f"load average {m['load_avg_1m']} at the end, calibration loop {m['calibration_s']} s")


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].startswith("{"):
        sys.stderr.write("internal entry point of `gpuaudit bench` (one JSON argument); run `gpuaudit bench --help`\n")
        raise SystemExit(2)
    raise SystemExit(_child_main(sys.argv[1:]))
