"""Verdict (step 4): the verdict sequence the CLI runs too (pipeline.judge_with_history: the nodes' earlier audits from
the findings table, judge, this audit added to that history, finalize), then the sinks (writes/sinks.py) — the result
and reports (JSON, Markdown, HTML, the JSON holding every node's row) to the evidence bucket, the audit's summary and
the changed latest state to DynamoDB (batched: no call per node), an alert to SNS and the changes as EventBridge events
(writes/eventbus.py, when a bus is configured) only when something changed. The alert and the findings summary link to
the HTML report: its S3 URI and its S3 console page, never a presigned URL (that would carry credentials and expire).

Re-running the same audit window writes nothing new and publishes nothing (sinks key by audit_id)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

import boto3
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuaudit import pipeline
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.redaction import redact
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import iso
from gpuaudit.report.alert import Change
from gpuaudit.report.ids import ids_location, placed, unplaced
from gpuaudit.writes import eventbus
from gpuaudit.writes.eventbus import Delivery
from gpuaudit.writes.history import DynamoHistory
from gpuaudit.writes.sinks import ReportObjects, SinkOutcome, dynamodb_client, write_and_alert, write_reports
from handlers import payload, runtime
from handlers.models import VerdictInput
from handlers.observability import NAMESPACE, logger, metrics, step_handler

session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = runtime.begin(event, VerdictInput, "Verdict expects the request and evidence", session_factory,
                         needs=("EVIDENCE_BUCKET", "FINDINGS_TABLE"))
    given, session, s3, settings = step.event, step.session, step.s3, step.settings
    bucket, table = settings.bucket, settings.table
    with runtime.reported_failures():
        evidence = Evidence.model_validate(payload.load(given.evidence, s3))
        if given.failure is not None:
            evidence.gaps.append(given.failure.gap())
        now = clock()
        ddb = dynamodb_client(session)  # one client, its pool sized for the reads and writes run side by side
        # The verdict sequence the CLI runs too (pipeline.judge_with_history), fleet memory from the findings table
        config = pipeline.JudgeConfig.from_request(given.request, settings.xid_overrides)
        result, evidence = pipeline.judge_with_history(evidence, config, DynamoHistory(ddb, table), now,
                                                       settings.history_lookback_days,
                                                       settings.finding_retention_days)
        # A grouped command reads its IDs file beside the report in S3: every output names that URI.
        key = ReportObjects.of(result).base
        files = unplaced(result)
        result = placed(result, f"s3://{bucket}/{key}")
        objects = write_reports(s3, bucket, result, ddb, table,
                                {ids_location(key, name): ids for name, ids in files.items()})
        link = report_link(bucket, objects.html, s3.meta.region_name)
        delivered: list[Delivery] = []
        publish_events = None
        if settings.event_bus_arn:
            bus, events_client = settings.event_bus_arn, session.client("events")

            def publish_events(changes: Sequence[Change]) -> None:
                delivered.append(eventbus.publish(events_client, bus, result, changes, link))

        outcome = write_and_alert(ddb, table, session.client("sns"),
                                  settings.alert_topic_arn, result, int(now.timestamp()),
                                  retention_days=settings.finding_retention_days, report_link=link,
                                  publish_events=publish_events, result_key=objects.json)
    record_metrics(result, outcome)
    events_sent = record_event_metrics(delivered)
    logger.info("judged", extra={"cluster": result.cluster.name, "audit_id": result.audit_id,
                                 "headline": redact(result.headline), "duplicate": outcome.duplicate,
                                 "published": outcome.published, "items_written": outcome.items_written,
                                 **events_sent})
    # How long this audit took, from Inventory's start to now (one clock): Plan fits the next executions to their
    # period with it (handlers/execution_share.py); MarkAudited stores it (a string: its DynamoDB N value).
    took = str(max(0, int((clock() - evidence.now).total_seconds())))
    return {**summary(result, evidence, outcome, bucket, objects), "events": events_sent, "audit_s": took}


def report_link(bucket: str, key: str, region: str) -> str:
    """The S3 console page of the report (sign-in required), then its S3 URI. The bucket's name is
    CloudFormation-generated (stack, logical ID, random suffix): it holds no account ID."""
    console = f"https://console.aws.amazon.com/s3/object/{bucket}?region={region}&prefix={quote(key, safe='/')}"
    return f"{console} · s3://{bucket}/{key}"


def record_metrics(result: Result, outcome: SinkOutcome) -> None:
    """EMF: nodes by xid_status, verdict counts, gaps, alerts — per cluster."""
    metrics.add_dimension(name="cluster", value=result.cluster.name)
    for status, count in sorted(Counter(n.xid_status for n in result.nodes).items()):
        with single_metric(name="Nodes", unit=MetricUnit.Count, value=count, namespace=NAMESPACE) as metric:
            metric.add_dimension(name="cluster", value=result.cluster.name)
            metric.add_dimension(name="xid_status", value=status)
    for verdict, count in sorted(Counter(n.verdict or "none" for n in result.nodes).items()):
        with single_metric(name="Verdicts", unit=MetricUnit.Count, value=count, namespace=NAMESPACE) as metric:
            metric.add_dimension(name="cluster", value=result.cluster.name)
            metric.add_dimension(name="verdict", value=verdict)
    metrics.add_metric(name="VisibilityGaps", unit=MetricUnit.Count, value=len(result.visibility_gaps))
    metrics.add_metric(name="AlertsPublished", unit=MetricUnit.Count, value=int(outcome.published))
    metrics.add_metric(name="AuditsCompleted", unit=MetricUnit.Count, value=1)  # the audit-age alarm reads it
    # Fleet-wide, whatever clusters exist (discovered ones too): the NoAuditCompleted alarm reads it.
    with single_metric(name="AuditsCompleted", unit=MetricUnit.Count, value=1, namespace=NAMESPACE):
        pass


def record_event_metrics(delivered: Sequence[Delivery]) -> dict[str, Any]:
    """EMF: findings sent as events, and those the bus never accepted (the EventsFailed alarm), by error code in the
    log: an event bus that cannot be reached never fails the audit, so it is counted and alarmed on instead."""
    sent = sum(d.sent for d in delivered)
    failed = sum((d.failed for d in delivered), Counter[str]())
    metrics.add_metric(name="EventsPublished", unit=MetricUnit.Count, value=sent)
    metrics.add_metric(name="EventsFailed", unit=MetricUnit.Count, value=sum(failed.values()))
    if failed:
        logger.error("events not delivered", extra={"failed": dict(failed), "sent": sent,
                                                    "retried": sum(d.retried for d in delivered)})
    return {"events_sent": sent, "events_failed": sum(failed.values())}


def summary(result: Result, evidence: Evidence, outcome: SinkOutcome, bucket: str,
            objects: ReportObjects) -> dict[str, Any]:
    """The cluster's line in the execution output: small, no account ID."""
    return {
        "cluster": result.cluster.name, "mode": result.mode, "audited": True, "audit_id": result.audit_id,
        "window": {"start": iso(result.window.start), "end": iso(result.window.end), "source": result.window.source},
        "headline": redact(result.headline),
        "xid_status": dict(sorted(Counter(n.xid_status for n in result.nodes).items())),
        "verdicts": dict(sorted(Counter(n.verdict or "none" for n in result.nodes).items())),
        "visibility_gaps": len(result.visibility_gaps),
        "not_checked": [redact(g.prose()) for g in evidence.gaps if g.kind == "step-failed"],
        "findings": {"written": outcome.items_written, "duplicate": outcome.duplicate},
        "alert_published": outcome.published,
        "result": {"bucket": bucket, "json": objects.json, "report": objects.markdown, "html": objects.html,
                   # the IDs files the grouped commands read, beside the report (their S3 URIs)
                   "ids": [g.ids_at for g in result.action_groups if g.ids_at]},
    }
