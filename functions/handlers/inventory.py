"""Inventory (step 1): pipeline.read_inventory — window, cluster, nodes, candidate log groups — and the
log batches the next Map fans out over."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import boto3
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuaudit import pipeline
from handlers import payload, runtime
from handlers.models import AuditTarget, InventoryOutput, LogBatch
from handlers.observability import logger, metrics, step_handler
from handlers.targets import PlanSettings

session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = runtime.begin(event, AuditTarget, "Inventory expects an audit target", session_factory)
    target, session = step.event, step.session
    with runtime.reported_failures():
        request = PlanSettings.of(step.settings).scoped(target.request) if target.scope == "deployment" \
            else target.request
        aws = runtime.audit_port(session, clock, context, request.cluster)
        evidence = pipeline.read_inventory(aws, request)
        if target.trigger == "xid-watch" and request.until is not None:  # only the nodes whose lines tripped it
            overrides = [f"{code}={klass}" for code, klass in step.settings.xid_overrides.items()]
            evidence = pipeline.narrow_to_watch(aws, evidence, request.until, overrides)
        batches = pipeline.log_batches(evidence.log_groups)
        if target.window_source:  # the trigger decided the window: say so in the result (RULES §1)
            evidence.window = evidence.window.model_copy(update={"source": target.window_source})
        evidence.calls = aws.call_counts()
        stored = payload.store(evidence.model_dump(mode="json"), step.s3, step.settings.bucket, "inventory",
                               limit=payload.INVENTORY_SHARE)
    metrics.add_metric(name="NodesInventoried", unit=MetricUnit.Count, value=len(evidence.nodes))
    metrics.add_metric(name="LogBatches", unit=MetricUnit.Count, value=len(batches))
    logger.info("inventoried", extra={"cluster": evidence.cluster.name, "nodes": len(evidence.nodes),
                                      "log_groups": len(evidence.log_groups), "gaps": len(evidence.gaps)})
    # The batches by reference (index and count): CollectLogs cuts each one's groups from the evidence.
    return InventoryOutput(evidence=stored, request=request, batches=[LogBatch(index=i, of=len(batches))
                                                                       for i in range(len(batches))]
                           ).model_dump(mode="json", exclude_defaults=False)
