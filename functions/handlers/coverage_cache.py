"""The deployed path's store of proven hourly bins (collectors/cache.py): one S3 object per cluster and
log group in the evidence bucket, under cache/. A CollectLogs invocation reads and writes only the
groups of its own batch, so batches running in parallel never overwrite each other. S3 rather than
the findings table: one group of a 2,000-node cluster can pass DynamoDB's 400 KB item limit."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from gpuaudit.collectors.cache import FORMAT, CacheState, GroupCache

PREFIX = "cache"
logger = Logger(child=True)


def key(cluster: str, region: str, group: str) -> str:
    # The cache format is part of the key: entries of an older format are never read as this one.
    digest = hashlib.sha256(f"{FORMAT}|{region}|{cluster}|{group}".encode()).hexdigest()
    return f"{PREFIX}/{cluster}/{digest}.json"


def stops_key(cluster: str, region: str, group: str) -> str:
    """How many collections in a row stopped the group's read at the deadline (CacheState.stopped)."""
    return key(cluster, region, group).removesuffix(".json") + ".stopped.json"


class S3GroupCache:
    def __init__(self, s3: Any, bucket: str, groups: list[str]) -> None:
        self.s3, self.bucket, self.groups = s3, bucket, groups
        self.loaded_stops: dict[str, int] = {}

    def load(self, cluster: str, region: str) -> CacheState:
        state = CacheState(cluster=cluster, region=region)
        for group in self.groups:
            try:
                body = self.s3.get_object(Bucket=self.bucket, Key=key(cluster, region, group))["Body"].read()
            except ClientError as err:
                if err.response["Error"]["Code"] not in ("NoSuchKey", "404"):
                    # Denied or unavailable: the group is read in full, which is always correct (only slower).
                    logger.warning("coverage cache not readable; reading the group in full",
                                   extra={"error": err.response["Error"]["Code"]})
                continue  # first audit of this group (or an unreadable cache): it is read in full
            try:
                state.groups[group] = GroupCache.model_validate_json(body)
            except ValueError:
                continue  # an unreadable entry is rebuilt by a full read, never trusted
        for group in self.groups:  # a group never cached: was its read stopped at the deadline before?
            if group not in state.groups and (stops := self._stops(cluster, region, group)):
                state.stopped[group] = self.loaded_stops[group] = stops
        return state

    def _stops(self, cluster: str, region: str, group: str) -> int:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=stops_key(cluster, region, group))["Body"].read()
            return max(0, int(json.loads(body)["stopped"]))
        except (ClientError, ValueError, KeyError, TypeError):
            return 0  # none recorded, or unreadable: read with the other fresh groups

    def save(self, state: CacheState) -> None:
        for group in self.groups:
            entry = state.groups.get(group)
            if entry is None:
                continue
            try:
                self.s3.put_object(Bucket=self.bucket, Key=key(state.cluster, state.region, group),
                                   Body=entry.model_dump_json().encode(), ContentType="application/json")
            except ClientError as err:  # the audit stands; the next one reads this group in full
                logger.warning("coverage cache not written", extra={"error": err.response["Error"]["Code"]})
        for group in self.groups:
            stops = state.stopped.get(group, 0)
            if stops != self.loaded_stops.get(group, 0):
                try:
                    self.s3.put_object(Bucket=self.bucket, Key=stops_key(state.cluster, state.region, group),
                                       Body=json.dumps({"stopped": stops}).encode(), ContentType="application/json")
                except ClientError as err:  # the next collection reads the group with the other fresh ones
                    logger.warning("read stops not written", extra={"error": err.response["Error"]["Code"]})
