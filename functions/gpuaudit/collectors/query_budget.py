"""How much Logs Insights an audit asks for at once: query text within the service's length limit, and
queries in flight within a concurrency budget shared by the whole audit (a query over budget waits for
an earlier one to finish; it is queued, never failed).

Service limits this follows (StartQuery API reference,
https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_StartQuery.html):
`queryString` at most 10,000 characters; "up to 30 concurrent CloudWatch Logs insights queries,
including queries that have been added to dashboards" per account and Region (a quota that can be
raised). Self-contained so the deployed path (a Step Functions Map over log batches) sizes itself
with the same numbers: `batches_in_flight`.

Across executions (hourly, node-event and Capacity-Block audits overlap), the deployed path also asks an
`AccountBudget` before each StartQuery: a share of the account's quota leased from the product's own table
(handlers/query_leases.py), so overlapping executions together stay inside it and leave the rest to people.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

MAX_QUERY_CHARS = 10_000
# Text budget per query: the limit less a margin, so a template that grows a little (a marker added to the
# GPU query, a longer field name) cannot push a packed query over the limit.
QUERY_CHAR_BUDGET = MAX_QUERY_CHARS - 1_000
DEFAULT_CONCURRENT_QUERIES = 30  # the account quota unless raised
DEFAULT_BUDGET_SHARE = 0.7  # of the quota, for the deployed audits together; the rest is left to people
# A lease of the account-wide budget lasts this long from its grant or its last renewal: every CollectLogs pass renews
# the leases of its queries still running (passes are one Wait apart), so a lease abandoned by an execution stopped,
# killed or caught frees its slot within this time, never later than the collection's deadline plus this.
LEASE_S = 300
QUERIES_PER_BATCH = 3  # a log batch starts three queries at once (kernel streams, stream summary, GPU lines)

_T = TypeVar("_T")


def batches_in_flight(concurrent_queries: int = DEFAULT_CONCURRENT_QUERIES) -> int:
    """Log batches that may run at once when each holds at most QUERIES_PER_BATCH queries."""
    return max(1, concurrent_queries // QUERIES_PER_BATCH)


def budget_slots(concurrent_queries: int = DEFAULT_CONCURRENT_QUERIES, share: float = DEFAULT_BUDGET_SHARE) -> int:
    """Queries all deployed audits of the account may run at once: `share` of the quota, at least one."""
    return max(1, int(concurrent_queries * share))


class AccountBudget(Protocol):
    """The account-wide query budget shared by overlapping executions. `acquire` before StartQuery (False: every
    slot is leased, wait and ask again); `release` once the query's final status is read or it was stopped; `renew` the
    leases of queries still running, on every pass. A lease is named by the caller, so asking again for a lease already
    held is granted without a second slot."""

    def acquire(self, lease: str) -> bool: ...

    def release(self, lease: str) -> None: ...

    def renew(self, leases: list[str]) -> None: ...


def pack(items: Iterable[_T], size: Callable[[_T], int], budget: int, max_items: int,
         weight: Callable[[_T], int] | None = None, max_weight: int = 0) -> list[list[_T]]:
    """`items` in order, cut into consecutive chunks of at most `max_items` whose sizes sum to at most `budget`
    (and, with `weight`, whose weights sum to at most `max_weight`). An item over a limit alone gets a chunk of
    its own (the call that carries it names it if it fails)."""
    chunks: list[list[_T]] = []
    current: list[_T] = []
    used = load = 0
    for item in items:
        cost, heft = size(item), weight(item) if weight else 0
        if current and (used + cost > budget or len(current) >= max_items or load + heft > max_weight):
            chunks.append(current)
            current, used, load = [], 0, 0
        current.append(item)
        used += cost
        load += heft
    if current:
        chunks.append(current)
    return chunks


class InFlight(Protocol):
    def settle(self) -> None:
        """Wait for the query to reach a final status and keep its result; releases its slot."""


class QuerySlots:
    """The queries one audit may have running at once. `take` before StartQuery: when every slot is held,
    the oldest query in flight is settled first (its results are kept for whoever asks for them)."""

    def __init__(self, limit: int = QUERIES_PER_BATCH) -> None:
        if limit < 1:
            raise ValueError(f"a query budget needs at least one slot, got {limit}")
        self.limit = limit
        self._in_flight: deque[InFlight] = deque()
        self.most_in_flight = 0  # the high-water mark, for tests and benchmarks

    def take(self, query: InFlight) -> None:
        while len(self._in_flight) >= self.limit:
            oldest = self._in_flight[0]
            oldest.settle()
            self.release(oldest)  # settle() releases; this guards a settle that did not
        self._in_flight.append(query)
        self.most_in_flight = max(self.most_in_flight, len(self._in_flight))

    def release(self, query: InFlight) -> None:
        if query in self._in_flight:
            self._in_flight.remove(query)
