"""Finish (step 3): pipeline.finish_collection — join the batches, profile the instance types, read
the control plane. A batch whose step failed is a `Not checked` gap, never a missing error."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import boto3
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuaudit import pipeline
from gpuaudit.collectors.logs import BatchEvidence, log_batches
from gpuaudit.model.evidence import CallCount, Evidence
from handlers import payload, runtime, trail_share
from handlers.models import FailedBatch, FinishInput, VerdictInput
from handlers.observability import logger, metrics, step_handler

session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = runtime.begin(event, FinishInput, "Finish expects the request, evidence and batches", session_factory)
    joined, s3, bucket = step.event, step.s3, step.settings.bucket
    with runtime.reported_failures():
        evidence = Evidence.model_validate(payload.load(joined.evidence, s3))
        aws = runtime.audit_port(step.session, clock, context, evidence.cluster.name)
        batches: list[BatchEvidence] = []
        tallies: list[list[CallCount]] = [evidence.calls]
        for item in joined.batches:
            if isinstance(item, FailedBatch):
                failed_batch = item.failed
                if not failed_batch.groups and failed_batch.batch is not None:  # by reference: name its groups
                    cut = log_batches(evidence.log_groups)
                    if failed_batch.batch < len(cut):
                        failed_batch = failed_batch.model_copy(update={"groups": cut[failed_batch.batch]})
                evidence.gaps.append(failed_batch.gap())
                continue
            batches.append(BatchEvidence.model_validate(payload.load(item.batch, s3)))
            tallies.append(item.calls)
        # The account's CloudTrail reads, shared with its other clusters' Finish steps (handlers/trail_share.py).
        shared_at = trail_share.key(runtime.account_reader(evidence.cluster.name), aws.region)
        aws.trail_share = trail_share.load(s3, bucket, shared_at)
        evidence = pipeline.finish_collection(aws, evidence, batches, joined.request)
        trail_share.save(s3, bucket, shared_at, aws.trail_share)
        evidence.calls = runtime.sum_calls([*tallies, aws.call_counts()])
        stored = payload.store(evidence.model_dump(mode="json"), s3, bucket, "evidence")
    failed = sum(isinstance(item, FailedBatch) for item in joined.batches)
    metrics.add_metric(name="FailedLogBatches", unit=MetricUnit.Count, value=failed)
    logger.info("joined", extra={"cluster": evidence.cluster.name, "batches": len(batches), "failed_batches": failed,
                                 "gaps": len(evidence.gaps)})
    return VerdictInput(request=joined.request, evidence=stored).model_dump(mode="json", exclude_none=True)
