"""CollectLogs (step 2, one item of the log-batch Map): pipeline.collect_logs — the Logs Insights
queries over one batch of at most 50 log groups, within the collection's deadline (GPUAUDIT_QUERY_DEADLINE_S from
the audit's start) and the account-wide query budget (GPUAUDIT_QUERY_SLOTS leases in the findings table)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

import boto3
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuaudit import pipeline
from gpuaudit.collectors.insights import QueriesPending, QueryJournal
from gpuaudit.model.evidence import CallCount, Evidence
from handlers import payload, runtime
from handlers.coverage_cache import S3GroupCache
from handlers.models import CollectedBatch, CollectLogsInput
from handlers.observability import logger, metrics, step_handler
from handlers.query_leases import TableBudget

session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = runtime.begin(event, CollectLogsInput, "CollectLogs expects evidence and a batch", session_factory)
    item, session, s3, settings = step.event, step.session, step.s3, step.settings
    with runtime.reported_failures():
        evidence = Evidence.model_validate(payload.load(item.evidence, s3))
        aws = runtime.audit_port(session, clock, context, evidence.cluster.name)
        groups = item.batch.groups_of(evidence.log_groups)
        bins = S3GroupCache(s3, settings.bucket, groups)
        cached = bins.load(evidence.cluster.name, evidence.cluster.region)
        journal = QueryJournal.model_validate(payload.load(item.journal, s3)) if item.journal else \
            QueryJournal(begun=evidence.now, deadline_s=settings.query_deadline_s)
        if not item.journal and item.execution:  # every attempt of this batch names its leases alike
            journal.holder = holder_of(item.execution, evidence.cluster.name, item.batch.index)
        budget = TableBudget(session.client("dynamodb"), settings.table, settings.query_slots) \
            if settings.query_slots else None
        journal.use_budget(budget)
        if budget is not None:  # short leases: this pass keeps its running queries' slots for another LEASE_S
            budget.renew(journal.running_leases())
        try:
            batch = pipeline.collect_logs(aws, evidence, groups, cached, journal=journal)
        except QueriesPending:
            # A query is still running: hand it to the state machine's Wait instead of holding this Lambda.
            if budget is not None:  # renewed again on the way out: this pass may have taken longer than a Wait
                budget.renew(journal.running_leases())
            journal.calls = _tally(journal.calls, aws.call_counts())
            stored_journal = payload.store(journal.model_dump(mode="json"), s3, settings.bucket,
                                           "journal", limit=payload.BATCHES_SHARE // item.batch.of)
            metrics.add_metric(name="QueriesPending", unit=MetricUnit.Count, value=1)
            _budget_metrics(budget)
            return CollectLogsInput(evidence=item.evidence, batch=item.batch, pending=True, journal=stored_journal,
                                    execution=item.execution).model_dump(mode="json", exclude_none=True)
        bins.save(cached)
        stored = payload.store(batch.model_dump(mode="json"), s3, settings.bucket, "batch",
                               limit=payload.BATCHES_SHARE // item.batch.of)
    calls = _tally(journal.calls, aws.call_counts())
    _budget_metrics(budget)
    metrics.add_metric(name="LogsInsightsQueries", unit=MetricUnit.Count, value=len(batch.queries))
    metrics.add_metric(name="CollectorGaps", unit=MetricUnit.Count, value=len(batch.gaps))
    metrics.add_metric(name="ThrottledQueries", unit=MetricUnit.Count,
                       value=sum(1 for g in batch.gaps if g.kind == "throttled" and g.service == "logs"))
    logger.info("collected", extra={"cluster": evidence.cluster.name, "batch": item.batch.index,
                                    "of": item.batch.of, "queries": len(batch.queries), "gaps": len(batch.gaps)})
    return CollectedBatch(batch=stored, calls=[CallCount(service=k.split(":", 1)[0], operation=k.split(":", 1)[1],
                                                         count=n) for k, n in sorted(calls.items())]
                          ).model_dump(mode="json")


def holder_of(execution: str, cluster: str, batch: int) -> str:
    """The name of one batch's leases: one per (execution, cluster, log batch), the same for every attempt of its
    CollectLogs, so a retry after a kill is granted the leases its first attempt took instead of a second set."""
    return hashlib.sha256(f"{execution}\n{cluster}\n{batch}".encode()).hexdigest()[:32]


def _budget_metrics(budget: TableBudget | None) -> None:
    """Queries started without a lease because the budget item could not be read or written: alarmable."""
    if budget is not None and budget.unavailable:
        metrics.add_metric(name="QueryBudgetUnavailable", unit=MetricUnit.Count, value=len(budget.unavailable))


def _tally(earlier: dict[str, int], now: list[CallCount]) -> dict[str, int]:
    """Calls of every invocation of this batch, so the result's call counts are the batch's, not the last one's."""
    out = dict(earlier)
    for c in now:
        out[f"{c.service}:{c.operation}"] = out.get(f"{c.service}:{c.operation}", 0) + c.count
    return out
