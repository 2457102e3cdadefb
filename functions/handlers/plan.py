"""Plan: the trigger (schedule, HyperPod event, Capacity Block warning, console input) → the audits."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

import boto3
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuaudit.domain.window import BadWindow, resolve_window
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.redaction import redact
from handlers import runtime
from handlers.coalesce import coalesce
from handlers.discovery_cache import keep_discovery, kept_discovery, period_start
from handlers.execution_share import (
    SKIPPED_NOTES,
    ExecutionShape,
    Holders,
    claim,
    deferred_note,
    fit_period,
    summarised,
)
from handlers.models import EventBridgeTrigger, HyperPodEvent, Plan, Trigger, XidWatchAlarm
from handlers.observability import logger, metrics, step_handler
from handlers.rotation import ordered_by_marks, read_marks
from handlers.runtime import InvalidEvent
from handlers.targets import PlanSettings, discover_clusters, plan_for, slim

session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now

EXPECTED = ("an EventBridge event (Scheduled Event, SageMaker HyperPod cluster/node event, Capacity Block "
            "expiration warning) or an on-demand audit request {cluster, mode, since|until|last, run_hours, …}")


def parse_trigger(event: Any) -> Trigger:
    if isinstance(event, dict) and "detail-type" in event:
        trigger: Trigger = runtime.parse_event(event, EventBridgeTrigger, f"not {EXPECTED}")
        return trigger
    return runtime.parse_event(event, AuditRequest, "on-demand input is not a valid audit request")


def unwrapped(event: Any) -> tuple[Any, str | None]:
    """The state machine hands Plan `{"trigger": <execution input>, "execution": <its ID>}` (infra/workflow.py);
    a direct invocation hands the trigger alone."""
    if isinstance(event, dict) and set(event) == {"trigger", "execution"} and isinstance(event["execution"], str):
        return event["trigger"], event["execution"]
    return event, None


_FLAG = re.compile(r"--(since|until|last|onset)\b")


def refuse_bad_window(request: AuditRequest, now: datetime) -> None:
    """A console request's window is resolved here, as Inventory would: one the audit cannot honour fails the
    execution now (InvalidEvent, no Catch), in one sentence naming the input field, not a CLI flag."""
    try:
        resolve_window(request.mode, now, request.since, request.until, request.last, request.onset)
    except BadWindow as bad:
        message = str(bad)
        fields = list(dict.fromkeys(_FLAG.findall(message))) or ["since", "until"]
        metrics.add_metric(name="InvalidEvents", unit=MetricUnit.Count, value=1)
        raise InvalidEvent(f"on-demand input field `{fields[0]}` cannot be honoured: "
                           f"{_FLAG.sub(lambda m: f'`{m.group(1)}`', message)}") from None


def discovered_this_period(trigger: Trigger, settings: PlanSettings, session: boto3.Session,
                           gaps: list[str]) -> list[str] | None:
    """The period's kept discovery, or a fresh one kept for the rest of the period; None: the trigger needs none
    (discovery off, a console request, a HyperPod event, which lists only HyperPod clusters, or the Xid watch, which
    watches configured clusters only)."""
    if not settings.discover or isinstance(trigger, AuditRequest | HyperPodEvent | XidWatchAlarm):
        return None
    ddb, table = session.client("dynamodb"), runtime.settings().table
    period = period_start(trigger.time, runtime.settings().schedule_period_s)
    kept = kept_discovery(ddb, table, settings.discovery_tag, period)
    if kept is not None:
        return kept
    found_gaps: list[str] = []
    found = discover_clusters(runtime.audit_port(session, clock), settings.discovery_tag, found_gaps)
    if not found_gaps:
        keep_discovery(ddb, table, settings.discovery_tag, period, found)
    gaps.extend(found_gaps)
    return found


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    raw, execution = unwrapped(event)
    trigger = parse_trigger(raw)
    if isinstance(trigger, AuditRequest):
        refuse_bad_window(trigger, clock())
    settings = PlanSettings.of(runtime.settings("FINDINGS_TABLE"))
    session = session_factory()
    with runtime.reported_failures():
        discovery_gaps: list[str] = []
        discovered = discovered_this_period(trigger, settings, session, discovery_gaps)
        plan = plan_for(trigger, settings, runtime.audit_port(session, clock), discovered)
        plan = plan.model_copy(update={"gaps": discovery_gaps + plan.gaps})
    if not isinstance(trigger, AuditRequest) and plan.trigger != "schedule" and plan.targets:
        kept, coalesced, failed = coalesce(session.client("dynamodb"), runtime.settings().table, plan.targets,
                                           trigger.time, int(clock().timestamp()))
        plan = plan.model_copy(update={"targets": kept, "skipped": plan.skipped + coalesced,
                                       "gaps": plan.gaps + failed})
        metrics.add_metric(name="AuditsCoalesced", unit=MetricUnit.Count, value=len(coalesced))
    if plan.trigger != "console" and plan.targets:
        plan = shared_fairly(plan, session, execution)
    plan = plan.model_copy(update={"targets": [slim(t) for t in plan.targets]})
    metrics.add_metric(name="AuditsPlanned", unit=MetricUnit.Count, value=len(plan.targets))
    logger.info("planned", extra={"trigger": plan.trigger, "clusters": [t.request.cluster for t in plan.targets],
                                  "skipped": [redact(s) for s in plan.skipped], "gaps": [redact(g) for g in plan.gaps]})
    return plan.model_dump(mode="json")


def shared_fairly(plan: Plan, session: boto3.Session, execution: str | None) -> Plan:
    """Least recently audited first (a timed-out execution cuts a different tail next time), only what fits the
    period, and never a cluster another execution is auditing (handlers/execution_share.py)."""
    deployed = runtime.settings()
    ddb, table, shape = session.client("dynamodb"), deployed.table, ExecutionShape.of(deployed)
    marks, unread = read_marks(ddb, table, plan.targets)
    targets = ordered_by_marks(plan.targets, marks or {})
    # Only the schedule's audits recur, so only they are fitted to the period (what is deferred leads the next one);
    # an event's audits are bounded by the target cap alone.
    fitted = shape if plan.trigger == "schedule" else replace(shape, budget_s=None)
    targets, deferred = fit_period(targets, marks or {}, fitted)
    skipped, gaps = plan.skipped + deferred_note(deferred, fitted, recurring=plan.trigger == "schedule"), \
        plan.gaps + unread
    if execution is not None and shape.claim_s is not None:
        targets, others, unclaimed = claim(ddb, table, targets, execution, clock(), shape.claim_s,
                                           Holders(session.client("stepfunctions")))
        if len(others) + len(unclaimed) > SKIPPED_NOTES:
            logger.info("claims", extra={"held_by_others": [redact(o) for o in others],
                                         "not_claimed": [redact(u) for u in unclaimed]})
        skipped = skipped + summarised(others, "held by another execution")
        gaps = gaps + summarised(unclaimed, "claims not made")
    metrics.add_metric(name="AuditsDeferred", unit=MetricUnit.Count, value=len(deferred))
    return plan.model_copy(update={"targets": targets, "skipped": skipped, "gaps": gaps})
