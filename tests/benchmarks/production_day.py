"""A day in production, simulated (issue #47 item 1): the deployed auditor at the shape operators run it.

    .venv/bin/python tests/benchmarks/production_day.py [--periods 24] [--clusters 200] [--fleets 10] [--json]

What is real and what is modelled:

- **Real, from the synthesized template** (`tests/infra/cdk_synth.py`, `production_config()`: discover on, 200
  clusters, 50 member roles, private EKS, MCP): the state machine definition (its timeout, the cluster Map's
  MaxConcurrency, each task's Retry and Catch, the Wait between CollectLogs passes), every Lambda's memory, timeout
  and environment (the execution budget, the in-flight claim, the query slots and deadline) and every alarm (name,
  metric, dimensions, threshold). The simulation follows that definition; nothing of it is restated here.
- **Real handler code on a fake clock**, against the findings table in moto: Plan's rotation, period fitting and
  in-flight claims with takeover of ended executions (`handlers/rotation.py`, `handlers/execution_share.py`, the
  `Holders` reading this simulation's execution statuses), the event coalescing of the node-health burst
  (`handlers/coalesce.py`), the query-budget leases (`handlers/query_leases.TableBudget`, its clock the fake one,
  holders named by `collect_logs.holder_of`), and Plan's output (`targets.slim`, `models.Plan`), whose size is
  `max_state_bytes`.
- **Measured, once**: the per-cluster steps (Inventory, CollectLogs per batch, Finish, Verdict) are run for real
  through `step_memory.py` at a small size (`--measure-nodes`; the heap traced, the seconds untraced); at 2,000 and
  10,000 nodes the figures measured by the same benchmark and kept in docs/BENCHMARKS.md are used (DOCUMENTED: wire
  mode; each step's own CPU and the backend's answering without tracemalloc, the heap with it). A step's duration
  and heap at any other size are **modelled** by linear interpolation between those points; the step's own CPU is
  scaled by 1,769 MB / the function's memory (Lambda's CPU share), the AWS part (the backend's wall seconds on a
  loaded machine, an upper bound) kept. `model_check` compares the model built from the documented points alone with
  the real run at the small size.
- **The Xid watch** (issue #51 item 3): one Xid 79 line a period on a ParallelCluster or self-managed node (drawn in
  proportion to the clusters' nodes), its alarm's execution started when `xid_watch_latency.py`'s documented and
  assumed hops say, then planned, coalesced and audited here like any event; `time_to_alert_s` runs to the SNS
  publish of the first completed audit of the cluster started after it. The watch's audit lists the cluster and
  reads its log groups (Inventory and CollectLogs at the cluster's size), its locate query (measured per node of the
  cluster at the small size, `measured_watch`) inside Inventory, then reads and judges the located node (Finish and
  Verdict at WATCH_NODES); `model_check.watch` compares that model with the real narrowed run at the small size.
- **Modelled**: log batches per cluster (one: every simulated cluster has fewer than 50 log groups; before 2026-12-07
  one per 2,000 nodes, which read a 10,000-node cluster as 5 batches of 7 queries), queries per batch, records
  scanned per node per hourly audit (docs/BENCHMARKS.md's incremental figures), the cost prices (us-east-1 list
  prices).

Injected faults (each with the alarms it must raise, EXPECTED_ALARMS): a CollectLogs killed mid-query, the hour's
execution stopped mid-query, a Lambda timeout (a Verdict, on its attempt and on the definition's Sandbox.Timedout retry,
then its Catch), Logs Insights throttling for an hour; the kill, the stop and the timeout hit the first such step of
a scheduled audit in their hour (the stop halfway through its first CollectLogs, its leases held). `alarms_fired`
names each alarm and the fault that explains it (null: none does).

The JSON is written to FIGURES (stdout); log lines go to stderr.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import itertools
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "functions"), str(ROOT / "tests" / "handlers"), str(ROOT / "tests"),
                str(ROOT / "tests" / "infra")]
FIGURES = sys.stdout
if __name__ == "__main__":
    sys.stdout = sys.stderr

import boto3  # noqa: E402
from handlers.coalesce import coalesce  # noqa: E402
from handlers.collect_logs import holder_of  # noqa: E402
from handlers.execution_share import ExecutionShape, Holders, claim, fit_period  # noqa: E402
from handlers.models import AuditTarget, Plan  # noqa: E402
from handlers.query_leases import KEY as LEASES_KEY  # noqa: E402
from handlers.query_leases import TableBudget  # noqa: E402
from handlers.rotation import audited_key, ordered_by_marks, read_marks  # noqa: E402
from handlers.targets import slim  # noqa: E402
from moto import mock_aws  # noqa: E402

from benchmarks import xid_watch_latency as watch  # noqa: E402
from gpuaudit.collectors.query_budget import LEASE_S  # noqa: E402
from gpuaudit.collectors.stream_parts import in_parts  # noqa: E402
from gpuaudit.model.evidence import AuditRequest  # noqa: E402

TABLE = "gpuaudit-findings-sim"
REGION = "us-west-2"
DAY_START = datetime(2026, 10, 1, tzinfo=UTC)
LAMBDA_FULL_VCPU_MB = 1769
INTERPRETER_MB = 53.3  # a fresh interpreter with the handlers imported (docs/BENCHMARKS.md, VmHWM)
STEPS = ("Inventory", "CollectLogs", "Finish", "Verdict")
# Per step (peak heap MB, seconds, backend s), "seconds" being the step's own CPU plus the backend's answering (AWS's
# side of the calls, kept as it is: the backend's wall seconds on a loaded machine, an upper bound of AWS's latency):
# own CPU and backend from `step_memory.py --no-trace` (10,000 nodes: 7424856, docs/BENCHMARKS.md "10,000 nodes in 10
# queries"; 2,000 nodes: 9e75209, "A production day, simulated"), the heap from
# the traced runs ("The deployed steps through wire parsing", f3c669b, and "At 10,000 nodes", 2c4d794). CollectLogs is
# one batch. Traced seconds are not used: tracemalloc slows allocation 2-4x.
DOCUMENTED: dict[int, dict[str, tuple[float, float, float]]] = {
    2000: {"Inventory": (69.2, 2.9 + 13.6, 13.6), "CollectLogs": (61.3, 0.6 + 1.9, 1.9), "Finish": (53.3, 0.3, 0.0),
           "Verdict": (77.9, 5.1 + 0.1, 0.1)},
    10000: {"Inventory": (82.9, 15.4 + 18.1, 18.1), "CollectLogs": (305.3, 3.8 + 1.3, 1.3),
            "Finish": (242.3, 1.3, 0.0), "Verdict": (312.5, 12.1, 0.0)},
}
# A cluster's log groups are read in batches of up to 50 groups (collectors/insights.MAX_GROUPS_PER_QUERY), each one
# CollectLogs: every simulated cluster has fewer (a ParallelCluster's own group and its kernel group, a HyperPod
# cluster's one), so one batch of all its nodes, as the documented points were measured.
LOG_BATCHES_PER_CLUSTER = 1
SMALL_CLUSTER_NODES = 2000  # time to alert is reported for clusters up to it and past it


def queries_per_batch(nodes: int) -> int:
    """An hourly (incremental) audit's StartQuery, each holding one lease of the query budget while it runs: 3 while
    a stream per node stays within 83 % of the 10,000-row cap (8,333 nodes), 10 at 10,000 nodes (the stream summary
    in 5 parts, the count, kernel streams and GPU lines; `gpuaudit bench --nodes 10000`, docs/BENCHMARKS.md)."""
    return 3 if not in_parts(nodes) else 10


# records scanned per node by one hourly (incremental) audit: 137,358 at 2,000 nodes, 2,399,848 at 10,000
RECORDS_PER_NODE = {2000: 137_358 / 2000, 10000: 2_399_848 / 10000}
BYTES_PER_RECORD = 200  # modelled, for Logs Insights' per-GB price
PRICE = {"lambda_gb_s": 0.0000166667, "sfn_transition": 0.000025, "insights_gb": 0.005}
# the alarms each injected fault must raise (by the alarm's name after the stack's prefix)
EXPECTED_ALARMS = {"collectlogs_killed": {"CollectLogsErrors"},
                   "execution_stopped": {"ExecutionsAborted"},
                   # Lambda counts a timeout among the function's Errors; NearTimeout is the p99 of the hour's
                   # durations, which one timeout among a fleet's hundreds of Verdicts does not move
                   "lambda_timeout": {"VerdictErrors", "AuditsFailed"},
                   "insights_throttling": {"ThrottledQueries"}}
# alarms a fault may also explain (not required): a stopped or failed audit's cluster ages
MAY_ALSO_RAISE = {"execution_stopped": {"AuditAge"}, "lambda_timeout": {"AuditAge", "VerdictNearTimeout"},
                  "collectlogs_killed": {"StepErrors"}}


# -- the synthesized stack ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Alarm:
    name: str  # after the stack's prefix, e.g. VerdictErrors, AuditAgeGpuTrainingCluster000
    metric: str
    dimensions: dict[str, str]
    threshold: float
    below: bool  # LessThanThreshold (a missing audit), else GreaterThanThreshold
    period_s: int
    statistic: str
    function: str | None  # the Lambda function's step name for AWS/Lambda metrics


@dataclass(frozen=True)
class Stack:
    timeout_s: int
    lanes: int
    batch_lanes: int
    wait_s: int
    retry: dict[str, list[tuple[set[str], int]]]  # task -> [(errors, max attempts)]
    memory_mb: dict[str, int]
    function_timeout_s: dict[str, int]
    shape: ExecutionShape
    query_slots: int
    query_deadline_s: int
    alarms: list[Alarm]
    distributed: bool
    marks: dict[str, dict[str, Any]]  # MarkAudited / MarkFailedAudit: the UpdateItem parameters as synthesized


def _physical(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def read_stack(template: dict[str, Any], definition: dict[str, Any]) -> Stack:
    resources = template["Resources"]
    functions = {k: v["Properties"] for k, v in resources.items() if v["Type"] == "AWS::Lambda::Function"}
    step_of = {k: p["Handler"].split(".")[1] for k, p in functions.items()}  # logical ID -> handler module
    by_step = {"plan": "Plan", "inventory": "Inventory", "collect_logs": "CollectLogs", "finish": "Finish",
               "verdict": "Verdict", "record_failure": "RecordFailure"}
    memory, timeout, env = {}, {}, {}
    for logical, props in functions.items():
        step = by_step.get(step_of[logical])
        if step is None:
            continue
        memory[step], timeout[step] = int(props["MemorySize"]), int(props["Timeout"])
        env[step] = {k: v for k, v in props.get("Environment", {}).get("Variables", {}).items() if isinstance(v, str)}
    cluster_map = next(s for s in definition["States"].values() if s["Type"] == "Map")
    inner = (cluster_map.get("ItemProcessor") or cluster_map["Iterator"])["States"]
    batch_map = next(s for s in inner.values() if s["Type"] == "Map")
    batch_states = (batch_map.get("ItemProcessor") or batch_map["Iterator"])["States"]
    tasks = {**{n: s for n, s in definition["States"].items() if s["Type"] == "Task"},
             **{n: s for n, s in inner.items() if s["Type"] == "Task"},
             **{n: s for n, s in batch_states.items() if s["Type"] == "Task"}}
    retry = {n: [(set(r["ErrorEquals"]), int(r.get("MaxAttempts", 3))) for r in s.get("Retry", [])]
             for n, s in tasks.items()}
    wait_s = next(int(s["Seconds"]) for s in batch_states.values() if s["Type"] == "Wait")
    marks = {name: inner[name]["Parameters"] for name in ("MarkAudited", "MarkFailedAudit")}
    alarms = []
    for props in (v["Properties"] for v in resources.values() if v["Type"] == "AWS::CloudWatch::Alarm"):
        name = _physical(props.get("AlarmName", "")).split("-")[-1] if isinstance(props.get("AlarmName"), str) \
            else ""
        dims = {d["Name"]: _physical(d["Value"]) for d in props.get("Dimensions", [])}
        fn = None
        if props.get("Namespace") == "AWS/Lambda":
            ref: Any = next((d["Value"] for d in props.get("Dimensions", []) if d["Name"] == "FunctionName"), {})
            fn = by_step.get(step_of.get(ref.get("Ref", "") if isinstance(ref, dict) else "", ""), "other")
        alarms.append(Alarm(name=name or _alarm_name(props), metric=props["MetricName"], dimensions=dims,
                            threshold=float(props["Threshold"]), below=props["ComparisonOperator"].startswith("Less"),
                            period_s=int(props["Period"]), statistic=props.get("Statistic")
                            or props.get("ExtendedStatistic", ""), function=fn))
    plan_env, collect_env = env["Plan"], env["CollectLogs"]
    return Stack(timeout_s=int(definition["TimeoutSeconds"]), lanes=int(cluster_map.get("MaxConcurrency", 40)),
                 batch_lanes=int(batch_map.get("MaxConcurrency", 40)), wait_s=wait_s, retry=retry, memory_mb=memory,
                 function_timeout_s=timeout, shape=ExecutionShape.from_env(plan_env),
                 query_slots=int(collect_env.get("GPUAUDIT_QUERY_SLOTS", "20")),
                 query_deadline_s=int(collect_env.get("GPUAUDIT_QUERY_DEADLINE_S", "1800")), alarms=alarms,
                 distributed=bool(cluster_map.get("ItemReader") or cluster_map.get("ItemProcessor", {}).get(
                     "ProcessorConfig", {}).get("Mode") == "DISTRIBUTED"), marks=marks)


def _alarm_name(props: dict[str, Any]) -> str:
    """AlarmName given as an Fn::Join (the stack's prefix then the name): its last literal part."""
    parts = props.get("AlarmName", {}).get("Fn::Join", ["", []])[1]
    return str(parts[-1]).lstrip("-") if parts else props["MetricName"]


def synthesized(shape: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(template, state machine definition, cdk.json configuration) of the `shape` synth."""
    from cdk_synth import TEST_CONFIG, production_config, state_machine_definition, synthesize

    # small: the suite's own configuration (its synth is shared with the suite's other tests in one process)
    config = production_config() if shape == "production" else TEST_CONFIG
    synth = synthesize(config=config)
    return synth.template, state_machine_definition(synth), config


# -- the step model ----------------------------------------------------------------------------------------------
@dataclass
class StepModel:
    points: dict[int, dict[str, tuple[float, float, float]]]  # nodes -> step -> (heap MB, own + backend s, backend s)
    # An Xid watch audit's locate query (issue #51), per node of the cluster it searches: (own CPU s, backend s),
    # measured at the small size (`measured_watch`); it scans the cluster's lines of a few minutes.
    locate_per_node: tuple[float, float] = (0.0, 0.0)

    def at(self, step: str, nodes: int) -> tuple[float, float, float]:
        sizes = sorted(self.points)
        lo = max([s for s in sizes if s <= nodes] or [sizes[0]])
        hi = min([s for s in sizes if s >= nodes] or [sizes[-1]])
        if lo == hi:  # outside the points: the nearest two, extended
            lo, hi = (sizes[0], sizes[1]) if nodes < sizes[0] else (sizes[-2], sizes[-1])
            if lo == hi:
                return self.points[lo][step]
        f = (nodes - lo) / (hi - lo)
        return tuple(max(0.0, a + (b - a) * f)  # type: ignore[return-value]
                     for a, b in zip(self.points[lo][step], self.points[hi][step], strict=True))


def measured_small(nodes: int) -> dict[str, tuple[float, float, float]]:
    """Real runs of the steps (step_memory.py) at `nodes`: per step (peak heap MB under tracemalloc, own CPU + backend
    seconds without it, backend s), the same quantities as DOCUMENTED."""
    from benchmarks import step_memory

    out: dict[str, list[float]] = {}
    for trace in (True, False):
        for row in step_memory.run(nodes, 1.0, "parallelcluster", trace=trace)["steps"]:
            step = row["step"].split(" ")[0]
            if step not in STEPS:
                continue
            old = out.setdefault(step, [0.0, 0.0, 0.0])
            if trace:
                old[0] = max(old[0], row["peak_heap_mb"])
            else:
                old[1], old[2] = max(old[1], row["own_cpu_s"] + row["backend_s"]), max(old[2], row["backend_s"])
    return {s: (v[0], v[1], v[2]) for s, v in out.items()}


WATCH_NODES = 1  # nodes an Xid watch audit is narrowed to: the one node whose line tripped the alarm (WatchLine)
# The steps of an Xid watch audit measured at the cluster's size: Inventory lists the cluster (its streams map to nodes
# through it) and CollectLogs reads the cluster's log groups; Finish and Verdict read and judge the located nodes.
WATCH_CLUSTER_SIZED = ("Inventory", "CollectLogs")


def measured_watch(nodes: int) -> tuple[dict[str, tuple[float, float, float]], tuple[float, float]]:
    """A real Xid watch audit (step_memory.py `watch`) of a cluster of `nodes`, narrowed to WATCH_NODES: per step (0,
    own CPU + backend seconds, backend s), no heap; and its locate query's (own CPU s, backend s) per cluster node."""
    from benchmarks import step_memory

    located = min(WATCH_NODES, nodes)
    rows = step_memory.run(nodes, 1.0, "parallelcluster", trace=False, watch=located)["steps"]
    steps: dict[str, tuple[float, float, float]] = {}
    for row in rows:
        step = row["step"].split(" ")[0]
        if step in STEPS:
            old = steps.get(step, (0.0, 0.0, 0.0))
            steps[step] = (0.0, max(old[1], row["own_cpu_s"] + row["backend_s"]), max(old[2], row["backend_s"]))
    locate = next(r for r in rows if r["step"].startswith("Locate"))
    return steps, (locate["own_cpu_s"] / nodes, locate["backend_s"] / nodes)


# -- the fleet ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: int
    kind: str  # hyperpod | parallelcluster | fleet


def fleet(configured: list[str], clusters: int, fleets: int, fleet_ids: int, large: int,
          medium: int) -> list[Cluster]:
    """The configured names first (their AuditAge alarms are in the stack), then discovered ones up to `clusters`:
    one of `large` nodes, `medium` of 2,000, the rest 16-80 nodes, HyperPod and ParallelCluster alternately; then
    `fleets` self-managed fleets of `fleet_ids` instance IDs."""
    names = list(dict.fromkeys(configured))[:clusters]
    names += [f"discovered-cluster-{i:03d}" for i in range(clusters - len(names))]
    out = [Cluster(names[0], large, "parallelcluster")]
    out += [Cluster(names[i], 2000, "parallelcluster") for i in range(1, 1 + medium)]
    out += [Cluster(names[i], 16 + (i % 5) * 16, "hyperpod" if i % 2 else "parallelcluster")
            for i in range(1 + medium, clusters)]
    out += [Cluster(f"self-managed-fleet-{i:02d}", fleet_ids, "fleet") for i in range(fleets)]
    return out


# -- the simulation ----------------------------------------------------------------------------------------------
@dataclass
class Execution:
    arn: str
    start: float
    trigger: str
    status: str = "RUNNING"
    end: float | None = None
    running: set[str] = field(default_factory=set)  # clusters whose audit is under way
    leases: set[str] = field(default_factory=set)


@dataclass
class Fault:
    kind: str
    hour: int
    target: str = ""
    execution: str = ""


@dataclass
class WatchLine:
    """An Xid 79 line written on a node of a watched cluster, and when the watch's alarm starts an execution for it
    (xid_watch_latency: the agent's flush and the filter's datapoint drawn, the alarm's minute evaluation at its own
    offset, the alarm-to-execution hop drawn)."""

    cluster: str
    written: float
    started: float
    publish_s: float  # the SNS publish after the Verdict


class FakeStepFunctions:
    """What Holders asks: DescribeExecution of this simulation's executions."""

    def __init__(self, executions: dict[str, Execution]) -> None:
        self.executions = executions

    def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        return {"status": self.executions[executionArn].status}


class Day:
    def __init__(self, stack: Stack, model: StepModel, clusters: list[Cluster], periods: int, warmup: int,
                 ddb: Any) -> None:
        self.stack, self.model, self.clusters, self.ddb = stack, model, {c.name: c for c in clusters}, ddb
        self.periods, self.warmup = periods, warmup
        self.now = 0.0  # seconds since DAY_START (the warm-up periods are negative)
        self.queue: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.executions: dict[str, Execution] = {}
        self.budget = TableBudget(ddb, TABLE, stack.query_slots, now=lambda: DAY_START.timestamp() + self.now)
        self.metrics: dict[int, list[tuple[str, dict[str, str], float]]] = defaultdict(list)
        self.audits: list[tuple[str, str, str, float, float]] = []  # (cluster, mode, execution, start, end)
        self.completed: dict[str, list[float]] = defaultdict(list)
        self.lease_granted: dict[str, float] = {}
        self.lease_ages: list[float] = []
        self.state_bytes: list[int] = []
        self.durations: dict[str, list[float]] = defaultdict(list)
        self.peaks: dict[str, float] = defaultdict(float)
        self.records = 0
        self.gb_s = 0.0
        self.transitions = 0
        self.faults: list[Fault] = []
        self.fault_hours: dict[str, int] = {}
        self.watch_lines: list[WatchLine] = []

    # -- the clock and the queue --
    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (when, next(self.seq), action))

    def run_until(self, end: float) -> None:
        while self.queue and self.queue[0][0] <= end:
            when, _, action = heapq.heappop(self.queue)
            self.now = when
            action()
        self.now = end

    def emit(self, metric: str, value: float = 1.0, **dims: str) -> None:
        self.metrics[math.floor(self.now / 3600)].append((metric, dims, value))

    def invoke(self, step: str, seconds: float, injected: bool = False) -> None:
        """One Lambda invocation: its Duration metric, its cost; `injected` (a fault's timeout or kill) is left out
        of the step's own figures (`steps`), which say what the step takes when nothing is injected."""
        if not injected:
            self.durations[step].append(seconds)
        self.emit("Duration", seconds * 1000, function=step)
        self.gb_s += seconds * self.stack.memory_mb[step] / 1024
        self.transitions += 2

    # -- Plan --
    def plan(self, trigger: str, targets: list[AuditTarget], event_time: datetime | None = None) -> None:
        arn = f"arn:aws:states:{REGION}:123456789012:execution:gpuaudit:{trigger}-{len(self.executions):05d}"
        execution = Execution(arn=arn, start=self.now, trigger=trigger)
        self.executions[arn] = execution
        clock = DAY_START + timedelta(seconds=self.now)
        plan_s = self.model_seconds("Plan", len(targets))
        self.invoke("Plan", plan_s)
        skipped: list[str] = []
        if trigger != "schedule" and event_time is not None:
            targets, coalesced, _ = coalesce(self.ddb, TABLE, targets, event_time, int(clock.timestamp()))
            skipped += coalesced
        marks, _gaps = read_marks(self.ddb, TABLE, targets)
        ordered = ordered_by_marks(targets, marks or {})
        shape = self.stack.shape if trigger == "schedule" else ExecutionShape(self.stack.shape.lanes, None,
                                                                             self.stack.shape.claim_s)
        kept, deferred = fit_period(ordered, marks or {}, shape)
        claimed, others, _unclaimed = claim(self.ddb, TABLE, kept, arn, clock, self.stack.shape.claim_s or 0,
                                            Holders(FakeStepFunctions(self.executions)))
        out = Plan(trigger=trigger, targets=[slim(t) for t in claimed], skipped=skipped + others
                   + [t.request.cluster for t in deferred])
        self.state_bytes.append(len(out.model_dump_json().encode()))
        if not claimed:
            self.at(self.now + plan_s, lambda: self.finish(execution, "SUCCEEDED"))
            return
        lanes = [self.now + plan_s] * min(self.stack.lanes, len(claimed))
        pending = list(claimed)

        def next_on_lane(lane_free: float) -> None:
            if execution.status != "RUNNING" or not pending:
                if execution.status == "RUNNING" and not execution.running and not pending:
                    self.finish(execution, "SUCCEEDED")
                return
            target = pending.pop(0)
            self.audit(execution, target.request.cluster, target.request.mode, next_on_lane)

        for free in lanes:
            self.at(free, functools.partial(next_on_lane, free))
        self.at(execution.start + self.stack.timeout_s, lambda: self.finish(execution, "TIMED_OUT"))

    def model_seconds(self, step: str, nodes: int) -> float:
        if step == "Plan":
            return 3.0  # measured: Plan 1.4-3.8 s at 2,000 and 10,000 nodes (docs/BENCHMARKS.md)
        _heap, wall, backend = self.model.at(step, nodes)
        share = max(1.0, LAMBDA_FULL_VCPU_MB / self.stack.memory_mb[step])
        return backend + (wall - backend) * share

    def locate_seconds(self, nodes: int) -> float:
        """An Xid watch audit's locate query over a cluster of `nodes`, inside Inventory (its own CPU at Inventory's
        share, the backend's answering kept, as `model_seconds` does)."""
        own, backend = self.model.locate_per_node
        return nodes * (backend + own * max(1.0, LAMBDA_FULL_VCPU_MB / self.stack.memory_mb["Inventory"]))

    def finish(self, execution: Execution, status: str) -> None:
        if execution.status != "RUNNING":
            return
        execution.status, execution.end = status, self.now
        if status != "SUCCEEDED":
            self.emit({"TIMED_OUT": "ExecutionsTimedOut", "ABORTED": "ExecutionsAborted",
                       "FAILED": "ExecutionsFailed"}[status], 1.0)
        for lease in list(execution.leases):  # left in the table: they lapse LEASE_S after their last renewal
            self.lease_ages.append(self.now + LEASE_S - self.lease_granted.pop(lease, self.now))
        execution.leases.clear()

    # -- one cluster's child: Inventory -> CollectLogs per batch -> Finish -> Verdict -> MarkAudited --
    def audit(self, execution: Execution, cluster: str, mode: str, done: Callable[[float], None]) -> None:
        c = self.clusters[cluster]
        # an event's incident audit reads the nodes the event names; the Xid watch's lists the cluster and reads its
        # groups (`nodes`), then judges the nodes its locate query finds (`judged`, issue #51)
        watch = execution.trigger == "xid-watch"
        nodes = c.nodes if mode != "incident" or watch else min(c.nodes, 64)
        judged = min(nodes, WATCH_NODES) if watch else nodes
        started = self.now
        execution.running.add(cluster)
        inventory_s = self.model_seconds("Inventory", nodes) + (self.locate_seconds(nodes) if watch else 0.0)
        self.invoke("Inventory", inventory_s)
        self.peaks["Inventory"] = max(self.peaks["Inventory"], self.model.at("Inventory", nodes)[0])
        batches = LOG_BATCHES_PER_CLUSTER
        left = {"batches": batches}

        def after_batches() -> None:
            if execution.status != "RUNNING":
                return
            finish_s = self.model_seconds("Finish", judged)
            self.invoke("Finish", finish_s)
            verdict_s = self.model_seconds("Verdict", judged)
            self.peaks["Finish"] = max(self.peaks["Finish"], self.model.at("Finish", judged)[0])
            self.peaks["Verdict"] = max(self.peaks["Verdict"], self.model.at("Verdict", judged)[0])
            failed = self.fault_now("lambda_timeout", cluster, execution)
            if failed:  # Sandbox.Timedout: the definition's Retry, then its Catch -> RecordFailure
                timeout = float(self.stack.function_timeout_s["Verdict"])
                attempts = 1 + next((n for errors, n in self.stack.retry["Verdict"] if "Sandbox.Timedout" in errors), 0)
                for _ in range(attempts):
                    self.invoke("Verdict", timeout, injected=True)
                    self.emit("Errors", 1.0, function="Verdict")
                self.invoke("RecordFailure", 2.0)
                self.emit("AuditsFailed", 1.0)
                verdict_s = timeout * attempts + 2.0
            else:
                self.invoke("Verdict", verdict_s)
            self.at(self.now + finish_s + verdict_s, lambda: marked(not failed))

        def marked(completed: bool) -> None:
            if execution.status != "RUNNING":
                return
            # MarkAudited after a Verdict (its audit_s measured), MarkFailedAudit after RecordFailure, their
            # UpdateItem as synthesized (infra/workflow.py): both end the claim
            state = self.stack.marks["MarkAudited" if completed else "MarkFailedAudit"]
            given = {":at": (DAY_START + timedelta(seconds=self.now)).isoformat(),
                     ":took": str(max(1, int(self.now - started)))}
            values = {name: {kind.removesuffix(".$"): given[name]} if kind.endswith(".$") else {kind: literal}
                      for name, value in state["ExpressionAttributeValues"].items()
                      for kind, literal in value.items()}
            self.ddb.update_item(TableName=TABLE, Key=audited_key(cluster, mode),
                                 UpdateExpression=state["UpdateExpression"], ExpressionAttributeValues=values)
            self.audits.append((cluster, mode, execution.arn, started, self.now))
            if completed:
                self.emit("AuditsCompleted", 1.0, cluster=cluster)
                self.completed[cluster].append(self.now)
            execution.running.discard(cluster)
            done(self.now)

        def batch(index: int, attempt: int = 0) -> None:
            if execution.status != "RUNNING":
                return
            holder = holder_of(execution.arn, cluster, index)
            queries = queries_per_batch(nodes)
            leases = [f"{holder}:{q}" for q in range(queries)]
            if not all(self.lease(execution, name) for name in leases):
                self.at(self.now + self.stack.wait_s, lambda: batch(index, attempt))  # the state machine's Wait
                return
            heap, _wall, _backend = self.model.at("CollectLogs", nodes)
            self.peaks["CollectLogs"] = max(self.peaks["CollectLogs"], heap)
            seconds = self.model_seconds("CollectLogs", nodes or 1)
            self.records += int(nodes / batches * self._records_per_node(nodes))
            if self.fault_now("insights_throttling", "", execution):  # past every retry: its queries given up
                self.emit("ThrottledQueries", float(queries))
                seconds += 120.0
            if attempt == 0 and self.fault_now("collectlogs_killed", cluster, execution):
                self.invoke(
                    "CollectLogs", seconds / 2, injected=True
                )  # killed mid-query: its leases stay, renewed by no one
                self.emit("Errors", 1.0, function="CollectLogs")
                retried = any("Runtime.ExitError" in errors or "States.ALL" in errors
                              for errors, _ in self.stack.retry["CollectLogs"])
                if retried:
                    self.at(self.now + seconds / 2 + 2, lambda: batch(index, attempt + 1))
                else:  # the Catch: the batch Not checked, its leases lapse
                    self.emit("StepErrors", 1.0)
                    self.at(self.now + seconds / 2, lambda: batch_done(leases, release=False))
                return
            if attempt == 0 and self.fault_now("execution_stopped", cluster, execution):  # mid-query, leases held
                self.at(self.now + seconds / 2, functools.partial(self.finish, execution, "ABORTED"))
            self.invoke("CollectLogs", seconds)
            self.at(self.now + seconds, lambda: batch_done(leases, release=True))

        def batch_done(leases: list[str], release: bool) -> None:
            if execution.status != "RUNNING":
                return
            for name in leases:  # released, or left to lapse LEASE_S after the last pass that renewed it
                if release:
                    self.budget.release(name)
                self.lease_ages.append(self.now + (0 if release else LEASE_S) - self.lease_granted.pop(name, self.now))
                execution.leases.discard(name)
            left["batches"] -= 1
            if left["batches"] == 0:
                after_batches()
            elif queued:
                batch(queued.pop(0))

        queued = list(range(min(batches, self.stack.batch_lanes), batches))
        for index in range(min(batches, self.stack.batch_lanes)):
            self.at(self.now + inventory_s, functools.partial(batch, index))

    def lease(self, execution: Execution, name: str) -> bool:
        if not self.budget.acquire(name):
            return False
        self.lease_granted.setdefault(name, self.now)  # a retry's same name keeps its first grant
        execution.leases.add(name)
        return True

    def _records_per_node(self, nodes: int) -> float:
        lo, hi = RECORDS_PER_NODE[2000], RECORDS_PER_NODE[10000]
        return lo + (hi - lo) * min(1.0, max(0.0, (nodes - 2000) / 8000))

    # -- faults --
    def fault_now(self, kind: str, cluster: str, execution: Execution) -> bool:
        for fault in self.faults:
            if fault.kind == kind and not fault.execution and math.floor(self.now / 3600) == fault.hour and \
                    execution.trigger == "schedule" and (not fault.target or fault.target == cluster):
                if kind != "insights_throttling":  # once: the first step of its kind that hour, its cluster named
                    fault.execution, fault.target = execution.arn, cluster
                return True
        return False

def simulate(stack: Stack, model: StepModel, clusters: list[Cluster], periods: int, seed: int = 7) -> dict[str, Any]:
    warmup = 1  # one period before the measured day, on the marks of a deployment that ran yesterday
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                               {"AttributeName": "sk", "AttributeType": "S"}],
                         KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                    {"AttributeName": "sk", "KeyType": "RANGE"}])
        day = Day(stack, model, clusters, periods, warmup, ddb)
        seed_marks(day, clusters)
        hyperpod = next(c.name for c in clusters if c.kind == "hyperpod")
        pcluster = [c.name for c in clusters if c.kind == "parallelcluster"]
        at = [periods * k // 24 for k in (3, 7, 11, 15)]  # hours 3, 7, 11, 15 of a 24-period day
        # the kill, the stop and the timeout hit the first CollectLogs / Verdict of a scheduled audit in their hour:
        # with more targets than one execution plans, a given cluster is not audited every hour
        day.faults = [Fault("collectlogs_killed", at[0]), Fault("execution_stopped", at[1]),
                      Fault("lambda_timeout", at[2]), Fault("insights_throttling", at[3])]
        burst_hour, warnings = periods * 5 // 24, (periods * 9 // 24, periods * 18 // 24)

        def schedule(hour: int) -> None:
            targets = [AuditTarget(request=AuditRequest(cluster=c.name, mode="coverage", last="24h"),
                                   trigger="schedule", window_source="schedule") for c in clusters]
            day.plan("schedule", targets)

        def event(trigger: str, cluster: str, mode: str) -> None:
            when = DAY_START + timedelta(seconds=day.now)
            target = AuditTarget(request=AuditRequest(cluster=cluster, mode=mode, last="2h"), trigger=trigger,
                                 window_source="event")
            day.plan(trigger, [target], event_time=when)

        for hour in range(-warmup, periods):
            day.at(hour * 3600.0 + 60, functools.partial(schedule, hour))
        for k in range(50):  # node-health burst: 50 events in 2 minutes, hour 5
            day.at(burst_hour * 3600.0 + 600 + k * 2.4, lambda: event("hyperpod-event", hyperpod, "incident"))
        for hour, cluster in zip(warnings, (pcluster[-1], pcluster[-2]), strict=True):  # two Capacity Block warnings
            day.at(hour * 3600.0 + 1200, functools.partial(event, "capacity-block-warning", cluster, "preflight"))
        for line in watch_lines(clusters, periods, random.Random(seed)):
            day.watch_lines.append(line)
            day.at(line.started, functools.partial(event, "xid-watch", line.cluster, "incident"))
        day.run_until(periods * 3600.0)
        outstanding = _outstanding_leases(ddb, DAY_START.timestamp() + day.now)
        return figures(day, stack, model, outstanding)


XID_LINES_PER_PERIOD = 1  # fatal Xid lines written a period, each on a node drawn across the fleet


def watch_lines(clusters: list[Cluster], periods: int, rng: random.Random) -> list[WatchLine]:
    """Xid 79 lines at random moments of each period, on ParallelCluster and self-managed nodes (HyperPod's own
    node-health events already start an audit), a cluster drawn in proportion to its nodes (a GPU fails per GPU)."""
    watched = [c for c in clusters if c.kind != "hyperpod"]
    lines = []
    for hour in range(periods - 1):  # the last period's line could be alerted after the day ends
        for _ in range(XID_LINES_PER_PERIOD):
            cluster = rng.choices(watched, weights=[c.nodes for c in watched])[0]
            written = hour * 3600.0 + rng.uniform(0, 3600)
            delays = watch.draw(watch.STAGES, rng)
            fired = watch.alarm_fires_at(written, written + delays["agent_flush"] + delays["filter_to_metric"],
                                         rng.uniform(0, watch.ALARM_PERIOD_S))
            lines.append(WatchLine(cluster.name, written, fired + delays["alarm_to_execution"], delays["sns_publish"]))
    return lines


def time_to_alert(day: Day) -> dict[str, Any]:
    """Per watched line, from its writing to the SNS publish of the first audit of its cluster that started after the
    alarm's execution did (the watch's own, or the one a coalesced trigger was folded into): p50, p95, max."""
    seconds: dict[str, list[float]] = defaultdict(list)  # by the size of the line's cluster
    unalerted = 0
    for line in day.watch_lines:
        ends = [end for cluster, _mode, _arn, start, end in day.audits if cluster == line.cluster
                and start >= line.started and end in day.completed[cluster]]
        if not ends:
            unalerted += 1
            continue
        size = "up_to_2000_nodes" if day.clusters[line.cluster].nodes <= SMALL_CLUSTER_NODES else "over_2000_nodes"
        seconds[size].append(min(ends) + line.publish_s - line.written)

    def spread(values: list[float]) -> dict[str, float]:
        return {"p50": round(watch.percentile(values, 0.5), 1), "p95": round(watch.percentile(values, 0.95), 1),
                "max": round(max(values), 1), "lines": len(values)}

    every = [v for values in seconds.values() for v in values]
    if not every:
        return {"lines": len(day.watch_lines), "not_alerted_by_end": unalerted}
    # the watch's audit lists the cluster and reads its groups before judging the located node: a large cluster's
    # Inventory sets its time
    return {**spread(every), "lines": len(day.watch_lines), "not_alerted_by_end": unalerted,
            "by_cluster_size": {size: spread(values) for size, values in sorted(seconds.items())}}


def seed_marks(day: Day, clusters: list[Cluster]) -> None:
    """Yesterday's marks: each cluster audited in the hour before the warm-up, its audit_s as the model gives it (a
    fresh deployment instead lays out never-measured clusters at NEW_CLUSTER_ESTIMATE_S each: see `cold_start`)."""
    when = (DAY_START - timedelta(hours=day.warmup + 1)).isoformat()
    for c in clusters:
        took = day.model_seconds("Inventory", c.nodes) + day.model_seconds("Finish", c.nodes) + \
            day.model_seconds("Verdict", c.nodes) + day.model_seconds("CollectLogs", c.nodes)
        day.ddb.put_item(TableName=TABLE, Item={**audited_key(c.name, "coverage"), "audited_at": {"S": when},
                                                "audit_s": {"N": str(max(1, int(took)))}})


def cold_start(stack: Stack, model: StepModel, clusters: list[Cluster]) -> int:
    """Periods a fresh deployment takes to audit every cluster once: Plan's own rotation and period fitting
    (fit_period) with the marks the audits leave, never-measured clusters laid out at NEW_CLUSTER_ESTIMATE_S."""
    from handlers.rotation import AuditMark

    day = Day(stack, model, clusters, 0, 0, ddb=None)
    targets = [AuditTarget(request=AuditRequest(cluster=c.name, mode="coverage", last="24h"), trigger="schedule",
                           window_source="schedule") for c in clusters]
    marks: dict[tuple[str, str], AuditMark] = {}
    for period in range(1, 10 * len(clusters) + 1):
        kept, _ = fit_period(ordered_by_marks(targets, marks), marks, stack.shape)
        for t in kept:
            n = day.clusters[t.request.cluster].nodes
            took = sum(day.model_seconds(step, n) for step in STEPS)
            marks[(t.request.cluster, "coverage")] = AuditMark(audited_at=f"{period:06d}", audit_s=max(1, int(took)))
        if len(marks) == len(clusters):
            return period
    return -1


def _outstanding_leases(ddb: Any, now: float) -> int:
    item = ddb.get_item(TableName=TABLE, Key=LEASES_KEY, ConsistentRead=True).get("Item", {})
    return sum(1 for v in item.get("leases", {}).get("M", {}).values() if int(v["N"]) > now)


# -- the alarms --------------------------------------------------------------------------------------------------
def alarms_fired(day: Day, stack: Stack, periods: int) -> list[dict[str, Any]]:
    fired = []
    for hour in range(periods):
        for alarm in stack.alarms:
            span = max(1, alarm.period_s // 3600)
            data = [(m, d, v) for h in range(hour - span + 1, hour + 1) for m, d, v in day.metrics.get(h, [])]
            values = [v for m, d, v in data if _matches(alarm, m, d)]
            if alarm.below:  # AuditsCompleted: missing data breaches
                breached = sum(values) < alarm.threshold
            elif alarm.statistic == "p99":
                breached = bool(values) and sorted(values)[max(0, math.ceil(0.99 * len(values)) - 1)] > alarm.threshold
            else:
                breached = sum(values) > alarm.threshold
            if breached:
                fired.append({"name": alarm.name, "hour": hour, "fault": explaining(day, alarm, hour)})
    return fired


def _matches(alarm: Alarm, metric: str, dims: dict[str, str]) -> bool:
    if alarm.function is not None:
        return metric == alarm.metric and dims.get("function") == alarm.function
    if alarm.metric in {"ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"}:
        # the parent's metric; a cluster Map's child executions exist only when the Map is distributed
        return metric == alarm.metric and not alarm.name.startswith("Cluster")
    if "cluster" in alarm.dimensions:
        return metric == alarm.metric and dims.get("cluster") == alarm.dimensions["cluster"]
    return metric == alarm.metric and "function" not in dims


def explaining(day: Day, alarm: Alarm, hour: int) -> str | None:
    for fault in day.faults:
        kinds = EXPECTED_ALARMS[fault.kind] | MAY_ALSO_RAISE.get(fault.kind, set())
        if fault.hour <= hour <= fault.hour + 2 and any(alarm.name.startswith(k) for k in kinds):
            if alarm.name.startswith("AuditAge") and alarm.dimensions.get("cluster") not in _touched(day, fault):
                continue
            return f"{fault.kind} (hour {fault.hour})"
    return None


def _faults_in_gap(day: Day, cluster: str, age: float) -> list[str]:
    times = sorted(day.completed[cluster]) + [day.periods * 3600.0]
    gap = next(((a, b) for a, b in itertools.pairwise(times) if abs((b - a) / 3600 - age) < 1e-6), (0.0, 0.0))
    return [f"{f.kind} (hour {f.hour})" for f in day.faults if gap[0] <= f.hour * 3600.0 + 3600 and
            f.hour * 3600.0 <= gap[1]]


def _touched(day: Day, fault: Fault) -> set[str]:
    execution = day.executions.get(fault.execution)
    if execution is None:
        return set()
    done = {c for c, _m, arn, _s, _e in day.audits if arn == execution.arn}
    return {c for c in day.clusters if c not in done} if fault.kind == "execution_stopped" else {fault.target}


# -- the figures -------------------------------------------------------------------------------------------------
def figures(day: Day, stack: Stack, model: StepModel, outstanding: int) -> dict[str, Any]:
    periods = day.periods
    in_day = [e for e in day.executions.values() if e.start >= 0]
    ages = {}
    never = []
    for name in day.clusters:
        times = sorted(t for t in day.completed[name] if t >= 0)
        before = [t for t in day.completed[name] if t < 0]
        if not times and not before:
            never.append(name)
            continue
        edges = ([max(before)] if before else [0.0]) + times + [periods * 3600.0]
        ages[name] = max(b - a for a, b in itertools.pairwise(edges)) / 3600
    duplicates = 0
    by_key: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
    for cluster, mode, arn, start, end in day.audits:
        by_key[(cluster, mode)].append((start, end, arn))
    for spans in by_key.values():
        spans.sort()
        duplicates += sum(1 for (_s1, e1, a1), (s2, _e2, a2) in itertools.pairwise(spans) if s2 < e1 and a1 != a2)
    fired = alarms_fired(day, stack, periods)
    injected = [{"kind": f.kind, "hour": f.hour, "target": f.target or None, "execution": f.execution or None,
                 "expects": sorted(EXPECTED_ALARMS[f.kind])} for f in day.faults]
    def label(fault: Fault) -> str:
        return f"{fault.kind} (hour {fault.hour})"

    raised_by = {label(f): {a["name"] for a in fired if a["fault"] == label(f)} for f in day.faults}
    # a fault without its alarm: one of the alarms it must raise never fired in its hours
    without = [label(f) for f in day.faults
               if not all(any(name.startswith(k) for name in raised_by[label(f)]) for k in EXPECTED_ALARMS[f.kind])]
    steps = {}
    for step in ("Plan", *STEPS, "RecordFailure"):
        peak = INTERPRETER_MB + (day.peaks.get(step) or (29.4 if step == "Plan" else 0.0))
        steps[step] = {
            "peak_memory_mb": round(peak, 1),
            "memory_mb": stack.memory_mb[step],
            "max_duration_s": round(max(day.durations.get(step, [0.0])), 1),
            "timeout_s": stack.function_timeout_s[step],
            "within_half_memory": peak <= stack.memory_mb[step] / 2,
            "within_third_timeout": max(day.durations.get(step, [0.0])) <= stack.function_timeout_s[step] / 3,
            "source": "measured" if step == "Plan" else "modelled from measured points",
        }
    gb_scanned = day.records * BYTES_PER_RECORD / 1e9
    cost = (
        day.gb_s * PRICE["lambda_gb_s"] + day.transitions * PRICE["sfn_transition"] + gb_scanned * PRICE["insights_gb"]
    )
    status = Counter(e.status for e in in_day)
    injected_ended = {f.execution for f in day.faults if f.kind == "execution_stopped"}
    return {
        "periods": periods,
        "warmup_periods": day.warmup,
        "clusters": len(day.clusters),
        "nodes": sum(c.nodes for c in day.clusters.values()),
        "executions": len(in_day),
        "executions_by_status": dict(status),
        "max_audit_age_periods": round(max(ages.values(), default=0.0), 2),
        "max_audit_age_cluster": max(ages, key=lambda name: ages[name]) if ages else None,
        # every cluster whose audits were more than 2 periods apart, and the injected faults in that gap
        "audit_ages_over_2_periods": [
            {"cluster": name, "periods": round(age, 2), "faults_in_gap": _faults_in_gap(day, name, age)}
            for name, age in sorted(ages.items())
            if age > 2.0 + 1e-9
        ],
        "clusters_never_audited": len(never),
        "executions_failed": sum(1 for e in in_day if e.status == "FAILED"),
        "executions_timed_out": sum(1 for e in in_day if e.status == "TIMED_OUT"),
        "executions_aborted_not_injected": sum(
            1 for e in in_day if e.status == "ABORTED" and e.arn not in injected_ended
        ),
        "injected_faults": injected,
        "alarms_fired": fired,
        "unexplained_alarms": sum(1 for f in fired if f["fault"] is None),
        "faults_without_alarm": without,
        "max_state_bytes": max(day.state_bytes, default=0),
        "leases_max_age_s": round(max(day.lease_ages, default=0.0), 1),
        "lease_age_limit_s": stack.query_deadline_s + LEASE_S,
        "leases_outstanding_at_end": outstanding,
        "duplicate_cluster_audits": duplicates,
        # the Xid watch (issue #51 item 3): lines written mid-period to the SNS publish of their audit
        "time_to_alert_s": time_to_alert(day),
        "steps": steps,
        "logs_insights_records": day.records,
        "cost_usd_per_day": round(cost, 2),
        "stack": {
            "timeout_s": stack.timeout_s,
            "cluster_lanes": stack.lanes,
            "batch_lanes": stack.batch_lanes,
            "execution_budget_s": stack.shape.budget_s,
            "claim_s": stack.shape.claim_s,
            "query_slots": stack.query_slots,
            "alarms": len(stack.alarms),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--periods", type=int, default=24)
    parser.add_argument("--clusters", type=int, default=200)
    parser.add_argument("--fleets", type=int, default=10)
    parser.add_argument("--fleet-ids", type=int, default=1000)
    parser.add_argument("--large-nodes", type=int, default=10000)
    parser.add_argument("--medium", type=int, default=3, help="clusters of 2,000 nodes")
    parser.add_argument("--measure-nodes", type=int, default=50, help="the real step run the model is checked on")
    parser.add_argument("--shape", choices=["production", "small"], default="production",
                        help="production: production_config()'s synth; small: the suite's test configuration")
    parser.add_argument("--seed", type=int, default=7, help="the Xid watch lines' moments, clusters and delays")
    parser.add_argument("--json", action="store_true", help="one JSON object (the default prints it indented)")
    args = parser.parse_args(argv)
    if args.periods < 8:
        parser.error(
            f"--periods must be at least 8 (faults are injected at 3/24 to 15/24 of the day); got {args.periods}"
        )
    if not 4 <= args.clusters <= 1000 or not 1 <= args.measure_nodes <= 2000:
        parser.error("--clusters must be 4..1000 and --measure-nodes 1..2000")
    started = time.perf_counter()
    template, definition, config = synthesized(args.shape)
    stack = read_stack(template, definition)
    print(f"synthesized in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    small = measured_small(args.measure_nodes)
    print(f"steps measured at {args.measure_nodes} nodes by {time.perf_counter() - started:.0f} s", file=sys.stderr)
    documented = StepModel(dict(DOCUMENTED))
    check = {
        step: {
            "measured_s": round(small[step][1], 2),
            "modelled_s": round(documented.at(step, args.measure_nodes)[1], 2),
            "measured_heap_mb": small[step][0],
            "modelled_heap_mb": round(documented.at(step, args.measure_nodes)[0], 1),
        }
        for step in STEPS
    }
    watch_steps, locate = measured_watch(args.measure_nodes)
    print(f"an Xid watch audit measured at {args.measure_nodes} nodes by {time.perf_counter() - started:.0f} s",
          file=sys.stderr)
    model = StepModel({args.measure_nodes: small, **DOCUMENTED}, locate_per_node=locate)
    located = min(WATCH_NODES, args.measure_nodes)
    check_watch = {
        step: {"measured_s": round(watch_steps[step][1], 3),
               "modelled_s": round(model.at(step, args.measure_nodes if step in WATCH_CLUSTER_SIZED else located)[1]
                                   + (sum(locate) * args.measure_nodes if step == "Inventory" else 0.0), 3)}
        for step in STEPS
    }
    clusters = fleet(config["clusters"], args.clusters, args.fleets, args.fleet_ids, args.large_nodes, args.medium)
    result = simulate(stack, model, clusters, args.periods, args.seed)
    print(f"simulated by {time.perf_counter() - started:.0f} s", file=sys.stderr)
    result["cold_start_periods_to_audit_all"] = cold_start(stack, model, clusters)
    result["model_check"] = {"nodes": args.measure_nodes, "steps": check,
                             "watch": {"located_nodes": located, "steps": check_watch,
                                       "locate_s_per_node": {"own_cpu": locate[0], "backend": locate[1]}}}
    result["shape"] = args.shape
    FIGURES.write((json.dumps(result) if args.json else json.dumps(result, indent=2)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
