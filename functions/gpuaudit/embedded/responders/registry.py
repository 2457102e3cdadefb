"""What the service responders share: the operation → responder registry, the API's error, paging, the state a
Logs Insights query keeps, and `Backend`, the part of the dispatching backend a responder reads.

Typed as a Protocol so that a responder never imports embedded/backend.py, which imports every responder to fill
the registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpuaudit.embedded import insights
from gpuaudit.embedded.eventbridge import EventBridgeStandIn
from gpuaudit.embedded.world import World


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


@dataclass
class RunningQuery:
    outcome: insights.QueryOutcome | None
    status: str
    # Counts against the account's concurrent-query quota until its final status has been read or it was
    # stopped: the embedded backend answers at once, so "still running" is modelled as "not yet collected",
    # the worst case for a caller that starts queries faster than it reads them.
    holds_slot: bool = True
    # A `status: Running` fault with `times: N`: the query reports Running for N reads, then Complete (a slow
    # query, as a state machine's Wait loop meets it); without `times` it never finishes.
    running_reads: int | None = None


class Backend(Protocol):
    """What responders read and keep on the backend that dispatches to them (embedded/backend.WorldBackend)."""

    world: World
    queries: dict[str, RunningQuery]
    eventbridge: EventBridgeStandIn | None

    def inject_fault(self, service: str, operation: str) -> None: ...

    def behaviour_fault(self, service: str, operation: str) -> dict[str, Any] | None: ...


Responder = Callable[[Backend, dict[str, Any]], dict[str, Any]]
RESPONDERS: dict[tuple[str, str], Responder] = {}


def responds(service: str, operation: str) -> Callable[[Responder], Responder]:
    def register(fn: Responder) -> Responder:
        RESPONDERS[(service, operation)] = fn
        return fn
    return register


def page(items: list[Any], params: dict[str, Any], key: str, *, token: str = "NextToken",
         limit: str = "MaxResults", default: int = 50) -> dict[str, Any]:
    start = int(params.get(token) or 0)
    size = int(params.get(limit) or default)
    body: dict[str, Any] = {key: items[start:start + size]}
    if start + size < len(items):
        body[token] = str(start + size)
    return body


def by_id(items: list[dict[str, Any]], key: str, wanted: list[str] | None, error: str, noun: str) -> list[dict]:
    if not wanted:
        return items
    found = {i.get(key): i for i in items}
    missing = [w for w in wanted if w not in found]
    if missing:
        raise ApiError(error, f"The {noun} ID '{missing[0]}' does not exist")
    return [found[w] for w in wanted]
