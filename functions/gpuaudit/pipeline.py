"""The audit in order: collect evidence (AWS calls) → judge (pure rules, the consistency rules last) → render.

The CLI and the deployed state machine call these same functions in this same order; the verdict sequence (history
read, judge, history recorded, finalize) is one function both call, `judge_with_history`.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

from gpuaudit.collectors import cache, source_reads
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
from gpuaudit.collectors.log_sources import discover_log_groups
from gpuaudit.collectors.logs import BatchEvidence, BatchRead, LogWindow, collect_batch, log_batches, merge_batches
from gpuaudit.collectors.query_budget import QuerySlots
from gpuaudit.collectors.xid_locate import locate_streams
from gpuaudit.domain.timing import KERNEL_DEEP_LOOKBACK, KERNEL_LOOKBACK, TIMELINE_MARGIN
from gpuaudit.domain.window import padded, resolve_window
from gpuaudit.model.evidence import NAMED_BY_OPERATOR, AuditRequest, ClusterInfo, Evidence, Gap, NodeInfo
from gpuaudit.model.evidence_parts import Part, merged
from gpuaudit.model.gcpause import collection_paused
from gpuaudit.model.history import (
    CLUSTER_GONE,
    DEFAULT_LOOKBACK_DAYS,
    HistoryRead,
    HistoryStore,
    closed_out,
    latest_spans,
)
from gpuaudit.model.history import merged as merged_spans
from gpuaudit.model.planned_reads import KubeNode
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import iso
from gpuaudit.progress import ProgressHook, Silent
from gpuaudit.report.markdown import finalize
from gpuaudit.rules.history import actions_by_node, entries_for
from gpuaudit.rules.judge import JudgeConfig, judge
from gpuaudit.rules.reboots import reboots_by_node
from gpuaudit.rules.xid_watch import LOCATE_AHEAD, LOCATE_LOOKBACK, node_scope, watch_terms
from gpuaudit.writes.history import HistoryUnreadable
from gpuaudit.writes.sinks import RETENTION_DAYS


def read_inventory(aws: Aws, request: AuditRequest, progress: ProgressHook | None = None) -> Evidence:
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


def narrow_to_watch(aws: Aws, evidence: Evidence, alarm_at: datetime, overrides: Iterable[str] = ()) -> Evidence:
    """An Xid watch audit (issue #51 item 1), after the inventory: locate the nodes whose lines tripped the watch
    (one Logs Insights query over the audit's log groups, `LOCATE_LOOKBACK` before the alarm's minute to
    `LOCATE_AHEAD` after it, with the watch's own terms and the deployment's class overrides) and judge only those;
    when they cannot be located, every node, and the result says why (rules/xid_watch.py::node_scope)."""
    located = locate_streams(aws, [g.name for g in evidence.log_groups], watch_terms(overrides),
                             alarm_at - LOCATE_LOOKBACK, alarm_at + LOCATE_AHEAD)
    unread = "; ".join(g.prose() for g in located.gaps) or "the query did not answer"
    scope = node_scope(located.streams, unread, evidence.nodes)
    return in_scope(evidence.model_copy(update={"node_scope": scope}))


def in_scope(evidence: Evidence) -> Evidence:
    """The evidence's nodes within its scope: an audit narrowed to some nodes keeps only those, also when a later
    read (streams of vanished nodes, launches in CloudTrail) finds more of the cluster's."""
    narrowed = evidence.node_scope.narrowed_to if evidence.node_scope else None
    if narrowed is None:
        return evidence
    keep = set(narrowed)
    return evidence.model_copy(update={"nodes": [n for n in evidence.nodes if n.instance_id in keep]})


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
    reads = [_read_part(aws, BatchRead(evidence.cluster.name, evidence.nodes, part.groups, win, job_groups=named,
                                       kernel_by_day=part.by_day), part.caches, slots, journal) for part in plan]
    if cached is not None:
        for merged_read in reads:
            cache.update(cached, merged_read, win, evidence.now)
            cache.note_stops(cached, merged_read)
    return cache.joined(reads)


def _read_part(aws: Aws, whole: BatchRead, usable: list[cache.GroupCache] | None, slots: QuerySlots | None,
               journal: QueryJournal | None) -> BatchEvidence:
    """One part of a batch (all of it unless its groups' cache entries differ): read in full (`whole`), or
    incrementally from its groups' cache entries (collectors/cache.py states which hours, and what the last read
    tells this one)."""
    if usable is None:
        return collect_batch(aws, whole, slots=slots, journal=journal)
    read = cache.incremental_read(whole, usable)
    fresh = collect_batch(aws, read, slots=slots, journal=journal)
    opened, seen = cache.lagging_streams(whole.groups, usable)
    lag = read_lagging(InsightsRunner(aws, [], slots=slots, journal=journal), opened, read.window.padded_start, seen,
                       usable[0].kernel_as_of)
    return cache.merge(fresh, dict(zip(whole.groups, usable, strict=True)), whole.window, read.window, lag)


def finish_collection(aws: Aws, evidence: Evidence, batches: list[BatchEvidence], request: AuditRequest) -> Evidence:
    """Step 3: join the batches, profile the instance types, read the control plane. Each collector returns the
    part it read, merged in order (model/evidence_parts.py::merged), so a later read sees what an earlier found."""
    evidence = merged(evidence, launched_by_cluster(aws, evidence))
    evidence = in_scope(merged(evidence, merge_batches(aws, evidence, batches)))
    evidence = merged(evidence, collect_profiles(aws, evidence))
    evidence = merged(evidence, collect_control_streams(aws, evidence))
    return source_reads.collect(aws, evidence, request)


def collect(aws: Aws, request: AuditRequest, coverage_cache: CoverageCache | None = None,
            progress: ProgressHook | None = None) -> Evidence:
    """Every AWS read of one audit, in the order the state machine runs them."""
    progress = progress or Silent()
    evidence = read_inventory(aws, request, progress)
    progress.phase("queries", nodes=len(evidence.nodes), log_groups=len(evidence.log_groups))
    cached = coverage_cache.load(evidence.cluster.name, evidence.cluster.region) if coverage_cache else None
    slots = QuerySlots()  # one budget for the whole audit: its batches run in turn and queue behind it
    batches = [collect_logs(aws, evidence, batch, cached, slots) for batch in log_batches(evidence.log_groups)]
    if coverage_cache is not None and cached is not None:
        try:
            coverage_cache.save(cached)
        except OSError as exc:  # this audit's reads stand: only the next one loses the hours it would have reused
            evidence = merged(evidence, Part(gaps=[cache_write_gap(coverage_cache, exc)]))
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
    """Before judging: the earlier audits of this audit's nodes (fleet memory), `lookback_days` back from the audit's
    own time; a store that cannot be read leaves `history` None and a named gap (recurrence across audits then Not
    checked)."""
    if store is None:
        return evidence
    since = evidence.now - timedelta(days=lookback_days)
    try:
        read = store.read(evidence.cluster.name, [n.instance_id for n in evidence.nodes], since, evidence.now)
    except HistoryUnreadable as exc:
        return evidence.model_copy(update={"gaps": [*evidence.gaps, exc.gap], "history": None})
    return evidence.model_copy(update={"history": read})


def record_history(store: HistoryStore | None, result: Result, evidence: Evidence,
                   retention_days: int = RETENTION_DAYS) -> Result:
    """After judging, before rendering: this audit's entry per node, folded into each node's latest span when nothing
    changed; a failed write is a visibility gap (the next audit will not see this one)."""
    if store is None:
        return result
    entries = entries_for(result, evidence, reboots_by_node(evidence))
    try:
        store.write(merged_spans(entries, latest_spans(evidence.history)), retention_days, evidence.now)
    except HistoryUnreadable as exc:
        said = exc.gap.model_copy(update={"unseen": "this audit is not in the history: the next audit cannot see "
                                                    "its Xids, reboots or verdicts"}).prose()
        return result.model_copy(update={"visibility_gaps": [*result.visibility_gaps, said]})
    return result


def close_gone_cluster(store: HistoryStore, cluster: str, now: datetime, lookback_days: int,
                       retention_days: int) -> int:
    """The cluster no longer exists: every node it had in the look-back gets a closing span (CLUSTER_GONE) instead
    of its last verdict standing frozen. Returns how many nodes were closed; 0 when the history knew the cluster
    not (a name never audited is only an unknown cluster). The CLI's path and the deployed RecordFailure's."""
    read = store.read(cluster, None, now - timedelta(days=lookback_days), now)
    closing = closed_out(read, f"gone-{iso(now)}", now, CLUSTER_GONE)
    if closing:
        store.write(closing, retention_days, now)
    return len(closing)


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


def render_history(everything: HistoryRead, cluster: str, fmt: str, days: int, *,
                   verdicts: frozenset[str] = frozenset(), open_only: bool = False, changed: bool = False,
                   show_all: bool = False) -> str:
    """What `gpuaudit history` prints (md, json, html, table) from every span read of a cluster: the look-back is
    `days` before its latest audit; the actions are judged on every span read (rules.history.actions_by_node), so one
    given before the look-back and never done is still open. Composed here: the rule (rules/) and the view (report/)
    meet nowhere below the pipeline."""
    from gpuaudit.report import history as report

    until = max((s.through for s in everything.spans), default=everything.until)
    view = report.HistoryView(since=until - timedelta(days=days), until=until, days=days, verdicts=verdicts,
                              open_only=open_only, changed_only=changed, show_all=show_all,
                              actions=actions_by_node(everything.spans))
    render = {"md": report.render_markdown, "json": report.render_json, "html": report.render_html,
              "table": report.render_table}[fmt]
    return render(everything, cluster, view)
