"""Step Functions payloads stop at 256 KB: a document larger than the inline limit travels
through the evidence bucket, and the state carries `{"s3": {"bucket": …, "key": …}}` instead.

Keys are content-addressed (SHA-256 of the body), so a retried step rewrites the same object.
The bucket's lifecycle rule expires `payloads/` after a few days.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

INLINE_LIMIT = 200_000  # bytes of JSON kept inline in a state (Step Functions' limit is 262,144)
# Finish's input holds the inventory evidence and every batch result at once; each gets a share.
INVENTORY_SHARE = 64_000
BATCHES_SHARE = 128_000  # split evenly across the cluster's log batches
PREFIX = "payloads"


class S3Location(BaseModel):
    bucket: str
    key: str


def is_reference(document: Any) -> bool:
    return isinstance(document, dict) and set(document) == {"s3"}


def store(document: dict[str, Any], s3: Any, bucket: str, kind: str, limit: int | None = None) -> dict[str, Any]:
    """The document itself when its JSON fits in `limit` bytes (default INLINE_LIMIT), else a reference to it."""
    body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(body) <= (INLINE_LIMIT if limit is None else limit):
        return document
    key = f"{PREFIX}/{kind}/{hashlib.sha256(body).hexdigest()}.json"
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")
    return {"s3": S3Location(bucket=bucket, key=key).model_dump()}


def load(document: dict[str, Any], s3: Any) -> dict[str, Any]:
    """Either form back to the document."""
    if not is_reference(document):
        return document
    where = S3Location.model_validate(document["s3"])
    body = s3.get_object(Bucket=where.bucket, Key=where.key)["Body"].read()
    loaded = json.loads(body)
    if not isinstance(loaded, dict):
        raise ValueError(f"s3://{where.bucket}/{where.key} does not hold a JSON object")
    return loaded
