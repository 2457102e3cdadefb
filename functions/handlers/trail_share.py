"""The deployed path's account-wide CloudTrail reads (collectors/trail.py): one S3 object per account and Region in
the evidence bucket, under cache/, read and rewritten by each Finish, so the clusters of an execution and the next
hourly execution look up only what the account's last read did not cover (CloudTrail LookupEvents allows two
requests per second per account and Region).

Two Finish steps of one account may rewrite it at once: the later write wins, and both are complete reads, so a lost
write costs calls, never events. An unreadable or unwritable share only costs calls as well: the lookup reads
CloudTrail for the whole range."""

from __future__ import annotations

import hashlib
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from gpuaudit.collectors.trail import FORMAT, TrailShare

PREFIX = "cache/cloudtrail"
logger = Logger(child=True)


def key(reader: str, region: str) -> str:
    """`reader`: whose account is read (the member role's ARN, or the auditor's own); hashed with the format, so
    an entry of an older format is never read as this one, and no account ID is spelled in the key."""
    digest = hashlib.sha256(f"{FORMAT}|{region}|{reader}".encode()).hexdigest()
    return f"{PREFIX}/{digest}.json"


def load(s3: Any, bucket: str, where: str) -> TrailShare:
    try:
        body = s3.get_object(Bucket=bucket, Key=where)["Body"].read()
    except ClientError as err:
        if err.response["Error"]["Code"] not in ("NoSuchKey", "404"):
            logger.warning("CloudTrail share not readable; looking up in full",
                           extra={"error": err.response["Error"]["Code"]})
        return TrailShare()
    try:
        return TrailShare.model_validate_json(body)
    except ValueError:
        return TrailShare()  # unreadable: rebuilt by the next lookup, never trusted


def save(s3: Any, bucket: str, where: str, share: TrailShare | None) -> None:
    if share is None or not share.changed:
        return
    try:
        s3.put_object(Bucket=bucket, Key=where, Body=share.model_dump_json().encode(), ContentType="application/json")
    except ClientError as err:  # the audit stands; the next lookup reads CloudTrail again
        logger.warning("CloudTrail share not written", extra={"error": err.response["Error"]["Code"]})
