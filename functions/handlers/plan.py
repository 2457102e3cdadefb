"""Plan: the trigger (schedule, HyperPod event, Capacity Block warning, console input) → the audits."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from typing import Any

import boto3
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuaudit.model.evidence import AuditRequest
from gpuaudit.report.redact import redact
from handlers import runtime
from handlers.coalesce import coalesce
from handlers.models import EventBridgeTrigger, Trigger
from handlers.observability import logger, metrics, step_handler
from handlers.rotation import least_recently_audited
from handlers.targets import PlanSettings, plan_for

session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now

EXPECTED = ("an EventBridge event (Scheduled Event, SageMaker HyperPod cluster/node event, Capacity Block "
            "expiration warning) or an on-demand audit request {cluster, mode, since|until|last, run_hours, …}")


def parse_trigger(event: Any) -> Trigger:
    if isinstance(event, dict) and "detail-type" in event:
        trigger: Trigger = runtime.parse_event(event, EventBridgeTrigger, f"not {EXPECTED}")
        return trigger
    return runtime.parse_event(event, AuditRequest, "on-demand input is not a valid audit request")


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    trigger = parse_trigger(event)
    settings = PlanSettings.from_env(dict(os.environ))
    session = session_factory()
    with runtime.reported_failures():
        plan = plan_for(trigger, settings, runtime.audit_port(session, clock))
    if not isinstance(trigger, AuditRequest) and plan.trigger != "schedule" and plan.targets:
        kept, coalesced, failed = coalesce(session.client("dynamodb"), runtime.env("FINDINGS_TABLE"), plan.targets,
                                           trigger.time, int(clock().timestamp()))
        plan = plan.model_copy(update={"targets": kept, "skipped": plan.skipped + coalesced,
                                       "gaps": plan.gaps + failed})
        metrics.add_metric(name="AuditsCoalesced", unit=MetricUnit.Count, value=len(coalesced))
    if len(plan.targets) > 1:  # least recently audited first: a timed-out execution cuts a different tail next time
        ordered, unread = least_recently_audited(session.client("dynamodb"), runtime.env("FINDINGS_TABLE"),
                                                 plan.targets)
        plan = plan.model_copy(update={"targets": ordered, "gaps": plan.gaps + unread})
    metrics.add_metric(name="AuditsPlanned", unit=MetricUnit.Count, value=len(plan.targets))
    logger.info("planned", extra={"trigger": plan.trigger, "clusters": [t.request.cluster for t in plan.targets],
                                  "skipped": [redact(s) for s in plan.skipped], "gaps": [redact(g) for g in plan.gaps]})
    return plan.model_dump(mode="json")
