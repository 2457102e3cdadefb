"""Bursts coalesced: one audit per cluster, mode and quarter hour of event-triggered audits.

A HyperPod node failure sends many events (one per node, per detection) within minutes; each starts an
execution. Plan claims `<cluster>#<mode>#<quarter hour of the event>` with a conditional put in the findings
table: the first event of the quarter hour audits, the others end at Plan, named as coalesced. A claim that
cannot be made for another reason (throttled, denied) does not block the audit: two audits of one window
cost queries, a missed one costs the answer. Claims expire after a day (the table's TTL)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpuaudit.model.timeutil import iso
from handlers.models import AuditTarget

BUCKET = timedelta(minutes=15)
CLAIM_TTL_S = 86_400


def bucket_of(time: datetime) -> datetime:
    return time - timedelta(minutes=time.minute % 15, seconds=time.second, microseconds=time.microsecond)


def claim_key(target: AuditTarget, event_time: datetime) -> dict[str, dict[str, str]]:
    return {"pk": {"S": f"CLAIM#{target.request.cluster}#{target.request.mode}"},
            "sk": {"S": iso(bucket_of(event_time))}}


def coalesce(ddb: Any, table: str, targets: list[AuditTarget], event_time: datetime,
             now_epoch: int) -> tuple[list[AuditTarget], list[str], list[str]]:
    """(targets to audit, skipped as coalesced, claims that could not be made)."""
    kept, skipped, failed = [], [], []
    for target in targets:
        key = claim_key(target, event_time)
        try:
            ddb.put_item(TableName=table, Item={**key, "expires_at": {"N": str(now_epoch + CLAIM_TTL_S)}},
                         ConditionExpression="attribute_not_exists(pk)")
        except ClientError as err:
            if err.response["Error"]["Code"] == "ConditionalCheckFailedException":
                skipped.append(f"{target.request.cluster}: coalesced — a {target.request.mode} audit for an event in "
                               f"the quarter hour from {key['sk']['S']} is already running or done")
                continue
            failed.append(f"{target.request.cluster}: burst claim not made ({err.response['Error']['Code']}); audited")
        except BotoCoreError as err:
            failed.append(f"{target.request.cluster}: burst claim not made ({type(err).__name__}); audited")
        kept.append(target)
    return kept, skipped, failed
