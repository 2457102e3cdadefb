"""DynamoDB writes as DynamoDB takes them (issue #34 item 3): BatchWriteItem in batches it accepts, what it leaves
unprocessed or throttles retried with capped exponential backoff and full jitter, and what still fails raised with
the items named — never dropped.

DynamoDB's limits, modelled here and enforced by the tests' stand-in (gpuaudit/embedded/dynamodb_limits.py):
at most 25 requests and 16 MB per BatchWriteItem, no two requests for the same key in one batch, items of at most
400 KB. A call that DynamoDB throttles (`ProvisionedThroughputExceededException`, `ThrottlingException`,
`RequestLimitExceeded`) is retried here as well as by botocore: an on-demand table throttles a partition past
1,000 writes a second, and botocore's few attempts can run out while the table scales.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from botocore.exceptions import ClientError

MAX_BATCH_ITEMS = 25
MAX_BATCH_BYTES = 16 * 2**20
MAX_ITEM_BYTES = 400 * 1024
THROTTLED = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"})
ATTEMPTS = 8  # per batch: the first call and seven retries, about 13 s of backoff at most
BASE_DELAY_S = 0.05
MAX_DELAY_S = 5.0
KEY_ATTRIBUTES = ("pk", "sk")  # the findings table's key (infra/findings.py)

T = TypeVar("T")
pause = time.sleep


class WritesNotDone(Exception):
    """DynamoDB still left these requests unwritten after every retry: the caller reports them."""

    def __init__(self, table: str, unwritten: Sequence[dict[str, Any]], reason: str) -> None:
        keys = [_key_text(_key_of(r)) for r in unwritten[:3]]
        more = f" and {len(unwritten) - 3} more" if len(unwritten) > 3 else ""
        super().__init__(f"{len(unwritten)} write(s) to {table} not done after {ATTEMPTS} attempts ({reason}): "
                         f"{', '.join(keys)}{more}")
        self.table, self.unwritten, self.reason = table, list(unwritten), reason


class ItemTooLarge(ValueError):
    """An item past DynamoDB's 400 KB: a layout bug, said before any call is made."""


@dataclass
class Backoff:
    """Capped exponential backoff with full jitter (AWS's "Exponential Backoff And Jitter"); injectable in tests."""

    attempts: int = ATTEMPTS
    base_s: float = BASE_DELAY_S
    cap_s: float = MAX_DELAY_S
    sleep: Callable[[float], None] | None = None  # None: the module's `pause` (time.sleep), looked up per wait
    jitter: Callable[[], float] = random.random
    slept: list[float] = field(default_factory=list)

    def wait(self, attempt: int) -> None:
        delay = min(self.cap_s, self.base_s * 2 ** attempt) * self.jitter()
        self.slept.append(delay)
        (self.sleep or pause)(delay)


def value_bytes(value: dict[str, Any]) -> int:
    """DynamoDB's size of one attribute value: strings and binaries by length, numbers by digits, maps and lists
    with their 3-byte overhead (an upper bound where DynamoDB's own rounding differs)."""
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return len(inner.encode())
    if kind == "B":
        return len(inner)
    if kind == "N":
        return len(str(inner)) // 2 + 2
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "BS", "NS"):
        return sum(value_bytes({kind[0]: v}) for v in inner)
    if kind == "L":
        return 3 + sum(1 + value_bytes(v) for v in inner)
    if kind == "M":
        return 3 + item_bytes(inner)
    raise ValueError(f"not a DynamoDB attribute value: {kind}")


def item_bytes(item: dict[str, dict[str, Any]]) -> int:
    """An item's size as DynamoDB counts it against 400 KB: names plus values."""
    return sum(len(name.encode()) + value_bytes(value) for name, value in item.items())


def _key_of(request: dict[str, Any]) -> tuple[str, ...]:
    body = request.get("PutRequest", {}).get("Item") or request.get("DeleteRequest", {}).get("Key") or {}
    return tuple(str(next(iter(body[k].values()))) for k in KEY_ATTRIBUTES if k in body)


def _key_text(key: tuple[str, ...]) -> str:
    return " / ".join(key)


def _request_bytes(request: dict[str, Any]) -> int:
    body = request.get("PutRequest", {}).get("Item") or request.get("DeleteRequest", {}).get("Key") or {}
    return item_bytes(body)


def batches(requests: Sequence[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The requests in order, cut into batches DynamoDB accepts: ≤ 25 requests, ≤ 16 MB, each key once (a second
    write of a key starts the next batch, so the later write still lands later)."""
    batch: list[dict[str, Any]] = []
    keys: set[tuple[str, ...]] = set()
    size = 0
    for request in requests:
        key, grows = _key_of(request), _request_bytes(request)
        if grows > MAX_ITEM_BYTES:
            raise ItemTooLarge(f"item {_key_text(key)} is {grows:,} bytes, past DynamoDB's {MAX_ITEM_BYTES:,}")
        if batch and (len(batch) == MAX_BATCH_ITEMS or size + grows > MAX_BATCH_BYTES or key in keys):
            yield batch
            batch, keys, size = [], set(), 0
        batch.append(request)
        keys.add(key)
        size += grows
    if batch:
        yield batch


def shard_of(key: str, shards: int) -> int:
    """A stable shard of a key (CRC-32, the same in every process): spreads one audit's node items over `shards`
    partitions, so no single partition takes every write of a 10,000-node audit."""
    return zlib.crc32(key.encode()) % shards


def put_requests(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"PutRequest": {"Item": item}} for item in items]


def delete_requests(keys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"DeleteRequest": {"Key": key}} for key in keys]


def batch_write(ddb: Any, table: str, requests: Sequence[dict[str, Any]], backoff: Backoff | None = None) -> int:
    """Every request written, in batches DynamoDB accepts; how many BatchWriteItem calls that took. Unprocessed
    items and throttled calls are retried; what is still unwritten raises WritesNotDone naming it."""
    backoff = backoff or Backoff()
    calls = 0
    for batch in batches(requests):
        pending, reason = batch, ""
        for attempt in range(backoff.attempts):
            if attempt:
                backoff.wait(attempt)
            calls += 1
            try:
                out = ddb.batch_write_item(RequestItems={table: pending})
            except ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                if code not in THROTTLED:
                    raise
                reason = code
                continue
            pending = out.get("UnprocessedItems", {}).get(table, [])
            if not pending:
                break
            reason = "UnprocessedItems"
        else:
            raise WritesNotDone(table, pending, reason)
    return calls


def retried(call: Callable[[], T], backoff: Backoff | None = None) -> T:
    """One DynamoDB call (GetItem, Query, a conditional PutItem) retried while DynamoDB throttles it; the last
    throttling error is raised when the attempts run out, any other error at once."""
    backoff = backoff or Backoff()
    for attempt in range(backoff.attempts):
        if attempt:
            backoff.wait(attempt)
        try:
            return call()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code", "") not in THROTTLED or attempt == backoff.attempts - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
