"""RecordFailure: a cluster's audit that did not finish (the Verdict or the Inventory step failed, after its
retries) is recorded and counted, so it is seen: an item in the findings table (`FAILED#<cluster>` /
`<time>#<mode>`: the step, its error, its cause, account IDs redacted), kept as long as findings, and the
`AuditsFailed` metric per cluster and fleet-wide, which the `AuditsFailed` alarm watches (clusters found by
discovery included: no configured list is needed).

A failure that kills the step before its Catch (a Lambda timeout or out-of-memory kill, where no EMF is flushed)
still arrives here: the Catch runs in Step Functions, not in the failed function.

A cluster deleted between runs (issue #33, bad input): Inventory fails with `UnknownCluster` (DescribeCluster
answered ResourceNotFound or a ValidationException naming it, and no instance carries its ParallelCluster tag, as
collectors/inventory.py classifies it). Its nodes' standing verdicts are then closed in the findings table's
history with the reason `cluster no longer exists` (pipeline.close_gone_cluster, the CLI's own path), once: a
node already closed is not closed again, and a cluster created again under the name starts new spans."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import boto3
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuaudit.collectors.inventory import UnknownCluster
from gpuaudit.model.redaction import redact
from gpuaudit.model.timeutil import iso
from gpuaudit.pipeline import close_gone_cluster
from gpuaudit.writes.history import DynamoHistory
from gpuaudit.writes.sinks import dynamodb_client, write_failure
from handlers import runtime
from handlers.models import FailedAudit
from handlers.observability import NAMESPACE, logger, step_handler

session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now

FAILED_PREFIX = "FAILED#"
CAUSE_CHARS = 500


def described(failed: FailedAudit) -> str:
    """The failure as the audit's gaps say it, account IDs redacted."""
    return redact(failed.failure.gap().prose())[:CAUSE_CHARS]


def failure_item(failed: FailedAudit, now: datetime, retention_days: int) -> dict[str, dict[str, str]]:
    cause = described(failed)
    return {"pk": {"S": f"{FAILED_PREFIX}{failed.cluster}"}, "sk": {"S": f"{iso(now)}#{failed.mode}"},
            "step": {"S": failed.failure.step}, "error": {"S": redact(failed.failure.error)}, "cause": {"S": cause},
            "expires_at": {"N": str(int((now + timedelta(days=retention_days)).timestamp()))}}


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = runtime.begin(event, FailedAudit, "RecordFailure expects the cluster, mode and failure", session_factory,
                         needs=("FINDINGS_TABLE",))
    failed, settings, table = step.event, step.settings, step.settings.table
    now = clock()
    closed: int | None = None
    with runtime.reported_failures():
        ddb = dynamodb_client(step.session)
        write_failure(ddb, table, failure_item(failed, now, settings.finding_retention_days))
    # Counted before the history is closed, and flushed at once: the closing is the long part (a span per node of
    # the cluster), and a Lambda killed at its timeout flushes no EMF; the failure is then counted all the same.
    # Per cluster (which cluster) and fleet-wide (the alarm's metric: one series, whatever clusters exist).
    with single_metric(name="AuditsFailed", unit=MetricUnit.Count, value=1, namespace=NAMESPACE) as metric:
        metric.add_dimension(name="cluster", value=failed.cluster)
    with single_metric(name="AuditsFailed", unit=MetricUnit.Count, value=1, namespace=NAMESPACE):
        pass
    logger.warning("audit failed", extra={"cluster": failed.cluster, "mode": failed.mode, "step": failed.failure.step,
                                          "error": redact(failed.failure.error)})
    if cluster_gone(failed):
        with runtime.reported_failures():
            closed = close_gone_cluster(DynamoHistory(ddb, table), failed.cluster, now,
                                        settings.history_lookback_days, settings.finding_retention_days)
    if closed:
        logger.warning("cluster gone: standing verdicts closed", extra={"cluster": failed.cluster, "nodes": closed})
    return {"cluster": failed.cluster, "mode": failed.mode, "audited": False, "recorded": True,
            "failure": {"step": failed.failure.step, "error": redact(failed.failure.error),
                        "cause": described(failed)},
            **({"history_closed": closed} if closed is not None else {})}


def cluster_gone(failed: FailedAudit) -> bool:
    """Inventory found no cluster of that name (UnknownCluster, the error type Step Functions records)."""
    return failed.failure.step == "Inventory" and failed.failure.error == UnknownCluster.__name__
