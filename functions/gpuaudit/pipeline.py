"""The audit in order: collect evidence (AWS calls) → judge (pure rules) → render and self-check.

The CLI and the deployed state machine call these same functions in this same order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuaudit.collectors import controlplane
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.inventory import collect_inventory, collect_profiles
from gpuaudit.collectors.logs import LogWindow, collect_log_evidence, discover_log_groups, lifetime_start
from gpuaudit.model.evidence import Evidence, Mode
from gpuaudit.model.result import Result
from gpuaudit.report.markdown import finalize
from gpuaudit.rules.judge import JudgeConfig, judge
from gpuaudit.rules.window import padded, resolve_window

KERNEL_LOOKBACK = timedelta(days=14)
TIMELINE_MARGIN = timedelta(minutes=30)


@dataclass(frozen=True)
class AuditRequest:
    cluster: str
    mode: Mode = "coverage"
    since: datetime | None = None
    until: datetime | None = None
    last: str | None = None
    instance_ids: list[str] = field(default_factory=list)
    run_hours: float | None = None
    run_start: datetime | None = None
    checkpoint_minutes: float | None = None


def collect(aws: Aws, request: AuditRequest) -> Evidence:
    """Every AWS read of one audit. Raises UnknownCluster / BadWindow for bad input; anything
    that fails after the cluster is known becomes a named gap in the evidence."""
    now = aws.clock()
    window = resolve_window(request.mode, now, request.since, request.until, request.last)
    pad = padded(window, now)
    gaps: list[str] = []
    cluster, nodes = collect_inventory(aws, request.cluster, request.instance_ids or None, gaps)
    groups = discover_log_groups(aws, cluster, gaps)
    win = LogWindow(padded_start=pad.start, padded_end=pad.end,
                    lifetime_start=lifetime_start(nodes, pad.start, KERNEL_LOOKBACK),
                    gpu_start=min(pad.start, window.start - TIMELINE_MARGIN), gpu_end=pad.end)
    logs = collect_log_evidence(aws, cluster, nodes, groups, win, gaps)
    nodes = [*nodes, *logs.discovered_nodes]
    profiles = collect_profiles(aws, {n.instance_type for n in nodes if n.instance_type}, gaps)
    evidence = Evidence(
        mode=request.mode, cluster=cluster, window=window, now=now, nodes=nodes, profiles=profiles,
        log_groups=groups, hma_log_group=logs.hma_log_group, hma_streams=logs.hma_streams,
        kernel_streams=logs.kernel_streams, stream_activity=logs.stream_activity, gpu_lines=logs.gpu_lines,
        queries=logs.queries, gaps=gaps)
    controlplane.collect(aws, evidence, request)
    evidence.calls = aws.call_counts()
    return evidence


def run_audit(aws: Aws, request: AuditRequest, config: JudgeConfig | None = None) -> Result:
    evidence = collect(aws, request)
    result = judge(evidence, config or JudgeConfig.from_request(request), generated_at=aws.clock())
    return finalize(result, evidence)
