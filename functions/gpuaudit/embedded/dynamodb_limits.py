"""DynamoDB as strict as DynamoDB (issue #34 item 3): moto stores what it is given, so every world session checks
the product's own table calls against the limits AWS enforces before moto sees them, and can make DynamoDB
misbehave the way it does under load.

Refused with DynamoDB's ValidationException, as AWS words it:
* BatchWriteItem with more than 25 requests, or a request past 16 MB;
* two requests for the same key in one BatchWriteItem;
* an item (PutItem, or a BatchWriteItem put) past 400 KB.

Injected from the world's `faults` (WORLD-FORMAT), counted with `after`/`times` like every fault:
* `{"service": "dynamodb", "operation": "BatchWriteItem", "error": "ProvisionedThroughputExceededException"}`
  (or `ThrottlingException`, `RequestLimitExceeded`, on any operation): the call refused whole. Answered here,
  before botocore's own retries, so the product's retries are what is tested;
* `{"service": "dynamodb", "operation": "BatchWriteItem", "unprocessed": N}`: the call succeeds, but its last N
  requests are not written and come back in `UnprocessedItems`, as DynamoDB returns what it could not write.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from botocore.awsrequest import AWSResponse

from gpuaudit.writes.dynamo_batch import MAX_BATCH_BYTES, MAX_BATCH_ITEMS, MAX_ITEM_BYTES, item_bytes

HELD_BACK = "gpuaudit_unprocessed"  # the requests this call leaves unprocessed, kept in the call's context

FaultRaiser = Callable[[str, str], None]  # raises an error with .code, .message, .status (backend.ApiError)


def _refusal(code: str, message: str, status: int = 400) -> tuple[AWSResponse, dict[str, Any]]:
    return (AWSResponse(url="https://dynamodb.embedded/", status_code=status, headers={}, raw=None),
            {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}})


def _request_body(request: dict[str, Any]) -> dict[str, Any]:
    return request.get("PutRequest", {}).get("Item") or request.get("DeleteRequest", {}).get("Key") or {}


def _key(request: dict[str, Any], key_names: tuple[str, ...]) -> str:
    body = _request_body(request)
    return json.dumps({k: body.get(k) for k in key_names}, sort_keys=True, default=str)


class DynamoLimits:
    """Hooks on a world session's DynamoDB calls: DynamoDB's limits, throttling and unprocessed items."""

    def __init__(self, faults: list[dict[str, Any]], raise_fault: FaultRaiser, params_key: str,
                 key_names: tuple[str, ...] = ("pk", "sk")) -> None:
        """`params_key`: where the backend keeps each call's API parameters in its context (as given, before
        serialization)."""
        self.faults, self.raise_fault, self.key_names = faults, raise_fault, key_names
        self.params_key = params_key
        self.seen: dict[int, int] = {}
        self.hits: dict[int, int] = {}
        self.unprocessed_returned = 0  # requests handed back as UnprocessedItems, for the tests

    def attach(self, session: Any) -> None:
        session.events.register("before-call.dynamodb", self._before)
        session.events.register("after-call.dynamodb.BatchWriteItem", self._after)

    # -- the limits --------------------------------------------------------------------------------
    def refusal(self, operation: str, params: dict[str, Any]) -> tuple[str, str] | None:
        """DynamoDB's ValidationException for a call past its limits, or None."""
        if operation == "PutItem":
            size = item_bytes(params.get("Item", {}))
            if size > MAX_ITEM_BYTES:
                return "ValidationException", "Item size has exceeded the maximum allowed size"
        if operation != "BatchWriteItem":
            return None
        requests = [r for table in params.get("RequestItems", {}).values() for r in table]
        sizes = [item_bytes(_request_body(r)) for r in requests]
        if sum(sizes) > MAX_BATCH_BYTES:
            return "ValidationException", "Request size exceeded: a BatchWriteItem request is limited to 16 MB"
        if len(requests) > MAX_BATCH_ITEMS:
            return ("ValidationException", "1 validation error detected: Value at 'requestItems' failed to satisfy "
                                           "constraint: Map value must satisfy constraint: [Member must have length "
                                           f"less than or equal to {MAX_BATCH_ITEMS}]")
        if any(size > MAX_ITEM_BYTES for size in sizes):
            return "ValidationException", "Item size has exceeded the maximum allowed size"
        for table_requests in params.get("RequestItems", {}).values():
            keys = [_key(r, self.key_names) for r in table_requests]
            if len(set(keys)) != len(keys):
                return "ValidationException", "Provided list of item keys contains duplicates"
        return None

    # -- the botocore hooks ------------------------------------------------------------------------
    def _before(self, model: Any, params: dict[str, Any], context: dict[str, Any],
                **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        operation = model.name
        api_params = context.get(self.params_key, {})
        refused = self.refusal(operation, api_params)
        if refused is not None:
            return _refusal(*refused)
        try:
            self.raise_fault("dynamodb", operation)
        except Exception as err:  # noqa: BLE001 — the backend's ApiError, answered as DynamoDB answers it
            if not hasattr(err, "code"):
                raise
            return _refusal(err.code, getattr(err, "message", err.code), getattr(err, "status", 400))
        if operation == "BatchWriteItem":
            self._hold_back(params, context)
        return None

    def _hold_back(self, request_dict: dict[str, Any], context: dict[str, Any]) -> None:
        """An `unprocessed` fault: the call's last N requests are taken out of the request sent to moto and
        handed back as UnprocessedItems after it (the serialized body is what moto reads, so it is rewritten)."""
        count = self._unprocessed()
        if not count:
            return
        body = json.loads(request_dict["body"])
        held: dict[str, list[Any]] = {}
        for table, requests in body["RequestItems"].items():
            keep = max(0, len(requests) - count)
            if requests[keep:]:
                held[table] = requests[keep:]
                count -= len(requests[keep:])
            body["RequestItems"][table] = requests[:keep]
        body["RequestItems"] = {t: r for t, r in body["RequestItems"].items() if r}
        request_dict["body"] = json.dumps(body).encode()
        given = context.get(self.params_key, {}).get("RequestItems", {})
        # as the caller gave them (bytes as bytes): how botocore would parse UnprocessedItems for it
        context[HELD_BACK] = {t: given[t][len(given[t]) - len(r):] for t, r in held.items()}

    def _unprocessed(self) -> int:
        for i, fault in enumerate(self.faults):
            if fault.get("service") != "dynamodb" or "unprocessed" not in fault \
                    or fault.get("operation") not in ("BatchWriteItem", "*"):
                continue
            seen = self.seen.get(i, 0)
            self.seen[i] = seen + 1
            if seen < int(fault.get("after", 0)):
                continue
            if fault.get("times") is not None and self.hits.get(i, 0) >= int(fault["times"]):
                continue
            self.hits[i] = self.hits.get(i, 0) + 1
            return int(fault["unprocessed"])
        return 0

    def _after(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        held = context.pop(HELD_BACK, None)
        if not held or "Error" in parsed:
            return
        unprocessed = parsed.setdefault("UnprocessedItems", {})
        for table, requests in held.items():
            unprocessed.setdefault(table, []).extend(requests)
            self.unprocessed_returned += len(requests)

