"""The audit in order: collect evidence (AWS calls) → judge (pure rules, the consistency rules last) → render.

The CLI and the deployed state machine call these same functions in this same order; the verdict sequence (history
read, judge, history recorded, finalize) is one function both call, `judge_with_history`.
"""

from __future__ import annotations

import errno
from datetime import datetime
from typing import NamedTuple

from gpuaudit.collectors import cache, controlplane
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.cache import CacheState, CoverageCache
from gpuaudit.collectors.control_logs import collect_control_streams
from gpuaudit.collectors.insights import InsightsRunner, QueryJournal
from gpuaudit.collectors.inventory import (
    UnknownCluster,
    collect_inventory,
    collect_profiles,
    launched_by_cluster,
)
from gpuaudit.collectors.kernel_lookback import deep_kernel_start, lifetime_start
from gpuaudit.collectors.kubernetes import list_nodes
from gpuaudit.collectors.lagging import read_lagging
from gpuaudit.collectors.log_queries import JOB_LINE
from gpuaudit.collectors.log_sources import discover_log_groups
from gpuaudit.collectors.logs import BatchEvidence, LogWindow, collect_batch, log_batches, merge_batches
from gpuaudit.collectors.query_budget import QuerySlots
from gpuaudit.collectors.stream_parts import Rows, holds_instance_id
from gpuaudit.domain.timing import KERNEL_DEEP_LOOKBACK, KERNEL_LOOKBACK, TIMELINE_MARGIN
from gpuaudit.domain.window import padded, resolve_window
from gpuaudit.history import HistoryUnreadable, close_gone_cluster, read_into, record
from gpuaudit.model.evidence import NAMED_BY_OPERATOR, AuditRequest, ClusterInfo, Evidence, Gap, NodeInfo
from gpuaudit.model.gcpause import collection_paused
from gpuaudit.model.history import CLUSTER_GONE, DEFAULT_LOOKBACK_DAYS, HistoryStore
from gpuaudit.model.planned_reads import KubeNode
from gpuaudit.model.result import Result
from gpuaudit.progress import ProgressHook, Silent
from gpuaudit.report.markdown import finalize
from gpuaudit.rules.judge import JudgeConfig, judge
from gpuaudit.sinks import RETENTION_DAYS


def start_audit(aws: Aws, request: AuditRequest, progress: ProgressHook | None = None) -> Evidence:
    """Step 1 (Plan/Inventory): window, cluster, nodes and candidate log groups.

    Raises UnknownCluster / BadWindow for bad input; every later failure becomes a named gap."""
    progress = progress or Silent()
    progress.phase("inventory")
    now = aws.clock()
    window = resolve_window(request.mode, now, request.since, request.until, request.last, request.onset)
    gaps: list[Gap] = []
    kube = None
    if request.eks_cluster:  # self-managed EKS: the Kubernetes nodes name the instances
        cluster, nodes, kube = eks_inventory(aws, request, gaps, window.start)
        progress.phase("log groups", nodes=len(nodes))
        groups = discover_log_groups(aws, cluster, gaps, request.log_groups)
    elif request.fleet and not request.instance_ids:  # file systems only: no node, so no node log to find
        cluster, nodes = ClusterInfo(name=request.cluster, kind="ec2", region=aws.region), list[NodeInfo]()
        progress.phase("log groups", nodes=0)
        groups = discover_log_groups(aws, cluster, gaps, request.log_groups, search=False)
    else:
        cluster, nodes = collect_inventory(aws, request.cluster, request.instance_ids or None, gaps, window.start)
        progress.phase("log groups", nodes=len(nodes))
        groups = discover_log_groups(aws, cluster, gaps, request.log_groups)
    cluster = cluster.model_copy(update={"labelled_fleet": request.fleet})
    return Evidence(mode=request.mode, cluster=cluster, window=window, now=now, nodes=nodes, log_groups=groups,
                    gaps=gaps, named_file_systems=list(dict.fromkeys(request.file_system_ids)), kube_nodes=kube)


def eks_inventory(aws: Aws, request: AuditRequest, gaps: list[Gap],
                  since: datetime) -> tuple[ClusterInfo, list[NodeInfo], list[KubeNode] | None]:
    """Self-managed EKS: the nodes GET /api/v1/nodes lists (by providerID) plus any --instances; when the API
    cannot be read, the node list is incomplete and the result says so (a node-list gap)."""
    name = request.eks_cluster or ""
    kube = list_nodes(aws, name, gaps, scope="node-list")
    if any(g.service == "eks" and g.operation == "DescribeCluster" and g.error_code == "ResourceNotFoundException"
           for g in gaps):  # the account answered: there is no such cluster (a typo is bad input, not a gap)
        raise UnknownCluster(f"--eks-cluster {name!r}: no EKS cluster of that name in region {aws.region} "
                             "(eks DescribeCluster: ResourceNotFoundException)")
    ids = list(dict.fromkeys([*request.instance_ids, *(k.instance_id for k in kube or [] if k.instance_id)]))
    if ids:
        cluster, nodes = collect_inventory(aws, request.cluster, ids, gaps, since)
    else:
        cluster, nodes = ClusterInfo(name=request.cluster, kind="eks", region=aws.region), []
    return cluster.model_copy(update={"kind": "eks", "eks_cluster": name}), nodes, kube


def log_window(evidence: Evidence) -> LogWindow:
    pad = padded(evidence.window, evidence.now)
    lifetime = lifetime_start(evidence.nodes, pad.start, KERNEL_LOOKBACK)
    gpu_start = min(pad.start, evidence.window.start - TIMELINE_MARGIN)
    return LogWindow(padded_start=pad.start, padded_end=pad.end, lifetime_start=lifetime, gpu_start=gpu_start,
                     gpu_end=pad.end,
                     deep_kernel_start=deep_kernel_start(evidence.nodes, lifetime, KERNEL_DEEP_LOOKBACK),
                     boot_lines=evidence.mode != "coverage", kernel_end=evidence.now,
                     job_range=(gpu_start, pad.end) if evidence.mode == "incident" else None)


def collect_logs(aws: Aws, evidence: Evidence, batch: list[str], cached: CacheState | None = None,
                 slots: QuerySlots | None = None, journal: QueryJournal | None = None) -> BatchEvidence:
    """Step 2 (one item of the log-source Map): the Logs Insights queries of one batch of ≤ 50 groups,
    within `slots` (the audit's concurrency budget; a batch alone has QUERIES_PER_BATCH).

    With a cache, only the hours that can still change are queried and the rest is taken from the
    cache (collectors/cache.py states the rule); the cache is then updated, group by group, from the merged read.
    The batch is read in parts when its groups' entries differ (cache.read_plan): cached groups first."""
    win = log_window(evidence)
    named = {g.name for g in evidence.log_groups if NAMED_BY_OPERATOR in g.matched_patterns}
    plan = cache.read_plan(cached, batch, win) if cached is not None else [cache.ReadPart(batch, None)]
    # Every part is read before the cache changes: a journaled collection replays them all on each invocation, and
    # the plan must not change under it.
    reads = [_read_part(aws, evidence, part.groups, part.caches, win, named, slots, journal, part.by_day)
             for part in plan]
    if cached is not None:
        for merged in reads:
            cache.update(cached, merged, win, evidence.now)
            cache.note_stops(cached, merged)
    return cache.joined(reads)


def _read_part(aws: Aws, evidence: Evidence, batch: list[str], usable: list[cache.GroupCache] | None,
               win: LogWindow, named: set[str], slots: QuerySlots | None,
               journal: QueryJournal | None, by_day: bool = False) -> BatchEvidence:
    """One part of a batch (all of it unless its groups' cache entries differ): read in full, or incrementally.
    `by_day`: the kernel look-back a day at a time (a group stopped at the deadline before)."""
    if usable is None:
        return collect_batch(aws, evidence.cluster.name, evidence.nodes, batch, win, slots=slots, journal=journal,
                             job_groups=named, kernel_by_day=by_day)
    part = cache.fresh_window(win, usable)
    known = {(g, s) for g, c in zip(batch, usable, strict=True) for s in c.kernel}
    # The last read's streams size this one's summary: expected past the 10,000-row cap, it starts in parts
    # (those named without an instance ID apart when they would crowd the first part). Kernel streams are not
    # counted first: this read counts only the kernel lines since the last, usually few (read whole, and again
    # in parts if it reaches the cap).
    expected = {"summary": {g: Rows(len(c.hours), sum(not holds_instance_id(name) for name in c.hours))
                            for g, c in zip(batch, usable, strict=True)},
                "kernel": {g: Rows(0) for g in batch}}
    # A job group known by NCCL lines in the cached hours only is still a job group (the job figures are
    # read over the whole window: cache.fresh_window keeps their range).
    jobs = named | {g for g,
                    c in zip(batch, usable, strict=True) if any(JOB_LINE.search(x.message) for x in c.gpu_lines)}
    fresh = collect_batch(aws, evidence.cluster.name, evidence.nodes, batch, part, known_kernel=known,
                          slots=slots, journal=journal, expected_streams=expected, job_groups=jobs, by_hint=True,
                          kernel_by_day=by_day)
    # The streams that had fallen silent shortly before the last read: their silence is read again by name.
    opened = {(g, s): hour for g, c in zip(batch, usable, strict=True) for s, hour in c.lagging.items()}
    seen = {(g, s): last for g, c in zip(batch, usable, strict=True) for s in c.lagging
            if s in c.hours and (last := c.hours[s].last_event) is not None}
    lag = read_lagging(InsightsRunner(aws, [], slots=slots, journal=journal), opened, part.padded_start, seen,
                       usable[0].kernel_as_of)
    return cache.merge(fresh, dict(zip(batch, usable, strict=True)), win, part, lag)


def finish_collection(aws: Aws, evidence: Evidence, batches: list[BatchEvidence], request: AuditRequest) -> Evidence:
    """Step 3: join the batches, profile the instance types, read the control plane."""
    gaps = list(evidence.gaps)
    launched = launched_by_cluster(aws, evidence.cluster, {n.instance_id for n in evidence.nodes},
                                   evidence.window.start, evidence.now, gaps) \
        if evidence.cluster.kind == "parallelcluster" else []
    known = [*evidence.nodes, *launched]
    logs = merge_batches(aws, evidence.cluster, known, evidence.log_groups, batches, gaps)
    nodes = [*known, *logs.discovered_nodes]
    profiles = collect_profiles(aws, {n.instance_type for n in nodes if n.instance_type}, gaps)
    control = collect_control_streams(aws, evidence.cluster, nodes, evidence.log_groups, logs.stream_activity,
                                      logs.hma_log_group, gaps)
    evidence = evidence.model_copy(update={
        "nodes": nodes, "profiles": profiles, "hma_log_group": logs.hma_log_group, "hma_streams": logs.hma_streams,
        "kernel_streams": logs.kernel_streams, "stream_activity": logs.stream_activity,
        "listed_streams": logs.listed_streams, "silent_streams": logs.silent_streams, "gpu_lines": logs.gpu_lines,
        "control_streams": control,
        "boot_lines": logs.boot_lines, "kernel_unread_groups": logs.kernel_unread_groups,
        "summary_unread_groups": logs.summary_unread_groups, "gpu_unread_groups": logs.gpu_unread_groups,
        "job_figures": logs.job_figures,
        "job_figure_groups": logs.job_figure_groups, "job_figure_unread_groups": logs.job_figure_unread_groups,
        "queries": logs.queries, "gaps": gaps})
    controlplane.collect(aws, evidence, request)
    return evidence


def collect(aws: Aws, request: AuditRequest, coverage_cache: CoverageCache | None = None,
            progress: ProgressHook | None = None) -> Evidence:
    """Every AWS read of one audit, in the order the state machine runs them."""
    progress = progress or Silent()
    evidence = start_audit(aws, request, progress)
    progress.phase("queries", nodes=len(evidence.nodes), log_groups=len(evidence.log_groups))
    cached = coverage_cache.load(evidence.cluster.name, evidence.cluster.region) if coverage_cache else None
    slots = QuerySlots()  # one budget for the whole audit: its batches run in turn and queue behind it
    batches = [collect_logs(aws, evidence, batch, cached, slots) for batch in log_batches(evidence.log_groups)]
    if coverage_cache is not None and cached is not None:
        try:
            coverage_cache.save(cached)
        except OSError as exc:  # this audit's reads stand: only the next one loses the hours it would have reused
            evidence.gaps.append(cache_write_gap(coverage_cache, exc))
    progress.phase("control plane")
    evidence = finish_collection(aws, evidence, batches, request)
    evidence.calls = aws.call_counts()
    return evidence


def cache_write_gap(coverage_cache: CoverageCache, exc: OSError) -> Gap:
    """A coverage cache that could not be written, named: scope "cache" (nothing of this audit is unread)."""
    where = str(getattr(coverage_cache, "path", type(coverage_cache).__name__))
    return Gap(kind="not-read", service="cache", operation="write", target=where,
               error_code=errno.errorcode.get(exc.errno or 0, type(exc).__name__),
               error_message=exc.strerror or str(exc), scope="cache",
               unseen="the hours this audit proved are not kept: the next --cache audit queries them again (slower, "
                      "never less read); this audit's own reads are whole")


def read_history(store: HistoryStore | None, evidence: Evidence,
                 lookback_days: int = DEFAULT_LOOKBACK_DAYS) -> Evidence:
    """Before judging: the earlier audits of this audit's nodes (fleet memory); unreadable is a named gap."""
    return evidence if store is None else read_into(store, evidence, lookback_days)


def record_history(store: HistoryStore | None, result: Result, evidence: Evidence,
                   retention_days: int = RETENTION_DAYS) -> Result:
    """After judging, before rendering: this audit's entry per node; a failed write is a visibility gap (the next
    audit will not see this one)."""
    if store is None:
        return result
    try:
        record(store, result, evidence, retention_days)
    except HistoryUnreadable as exc:
        said = exc.gap.model_copy(update={"unseen": "this audit is not in the history: the next audit cannot see "
                                                    "its Xids, reboots or verdicts"}).prose()
        return result.model_copy(update={"visibility_gaps": [*result.visibility_gaps, said]})
    return result


def _closed_if_gone(unknown: UnknownCluster, history: HistoryStore | None, request: AuditRequest, now: datetime,
                    lookback_days: int) -> UnknownCluster:
    """A cluster the history knows but the account no longer has was deleted between runs: its nodes' standing
    verdicts are closed in the history with the reason, and the error says so. A name never audited stays only
    an unknown cluster."""
    if history is None or request.instance_ids or request.eks_cluster:
        return unknown
    try:
        closed = close_gone_cluster(history, request.cluster, now, lookback_days, RETENTION_DAYS)
    except HistoryUnreadable as exc:
        return UnknownCluster(f"{unknown}; its standing verdicts could not be closed in the history: "
                              f"{exc.gap.prose()}")
    if not closed:
        return unknown
    return UnknownCluster(f"{unknown}; the history knew it: the standing verdicts of its {closed} node(s) are "
                          f"closed there ({CLUSTER_GONE})")


class JudgedAudit(NamedTuple):
    """What the verdict sequence gives: the finished result, and the evidence it was judged on (with the history
    read into it)."""

    result: Result
    evidence: Evidence


def judge_with_history(evidence: Evidence, config: JudgeConfig, history: HistoryStore | None,
                       generated_at: datetime, lookback_days: int = DEFAULT_LOOKBACK_DAYS,
                       retention_days: int = RETENTION_DAYS, progress: ProgressHook | None = None) -> JudgedAudit:
    """The verdict sequence, written once: the nodes' earlier audits read (fleet memory) → judge → this audit
    added to the history → finalize (the self-check's outcome and the reports rendered). The CLI (`run_audit`) and
    the deployed Verdict step (handlers/verdict.py) both call it, so a change to the order changes both."""
    evidence = read_history(history, evidence, lookback_days)
    (progress or Silent()).phase("judging", nodes=len(evidence.nodes))
    with collection_paused():  # the result's objects all live until the end: a full collection frees nothing
        result = judge(evidence, config, generated_at=generated_at)
    result = record_history(history, result, evidence, retention_days)
    with collection_paused():
        return JudgedAudit(finalize(result, evidence), evidence)


def run_audit(aws: Aws, request: AuditRequest, config: JudgeConfig | None = None,
              coverage_cache: CoverageCache | None = None, history: HistoryStore | None = None,
              lookback_days: int = DEFAULT_LOOKBACK_DAYS, progress: ProgressHook | None = None) -> Result:
    try:
        collected = collect(aws, request, coverage_cache, progress)
    except UnknownCluster as unknown:
        raise _closed_if_gone(unknown, history, request, aws.clock(), lookback_days) from None
    return judge_with_history(collected, config or JudgeConfig.from_request(request), history, aws.clock(),
                              lookback_days, progress=progress).result
