"""One account-wide Logs Insights budget across overlapping executions (#34 item 4).

Hourly, node-event and Capacity-Block executions overlap; each sized its own concurrency to the whole quota. The
CollectLogs handler leases every query from the findings table (handlers/query_leases.py), `logs_insights_budget_share`
of the quota for all executions together, and waits in the state machine when none is free. The handlers run here as
the state machine runs them (CollectLogs invoked again with its own pending output after each Wait), against one
embedded account (its queries keep running between invocations) and one moto table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from handlers import collect_logs, inventory, payload
from handlers.query_leases import KEY, TableBudget
from lambda_harness import (
    TABLE,
    Account,
    LambdaContext,
    hyperpod_node_health_event,
    scheduled_event,
    world_account,
)

from gpuaudit.collectors.query_budget import LEASE_S, budget_slots
from gpuaudit.embedded import backend as embedded

SLOW_QUERIES = [{"service": "logs", "operation": "GetQueryResults", "status": "Running", "times": 2}]
QUOTA = 6  # the account's concurrent-query quota in this world
SHARE = 0.7  # the default share: 4 of 6 for all executions of the deployment together


@contextmanager
def in_flight_watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The account's running queries (started, final status not yet read) after every StartQuery."""
    seen: list[int] = []
    start = embedded.RESPONDERS[("logs", "StartQuery")]

    def watched(b: embedded.WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
        out = start(b, p)
        seen.append(sum(1 for q in b.queries.values() if q.holds_slot))
        return out

    monkeypatch.setitem(embedded.RESPONDERS, ("logs", "StartQuery"), watched)
    try:
        yield seen
    finally:
        embedded.RESPONDERS[("logs", "StartQuery")] = start


def first_batch(trigger: dict[str, Any], acct: Account) -> dict[str, Any]:
    """Plan's target for the trigger, inventoried: the first log batch's CollectLogs input."""
    from handlers import plan

    (target,) = plan.handler(trigger, LambdaContext())["targets"]
    found = inventory.handler(target, LambdaContext())
    return {"evidence": found["evidence"], "batch": found["batches"][0]}


def overlapping(acct: Account, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two executions' CollectLogs loops, interleaved invocation by invocation, until both are done."""
    done: list[dict[str, Any] | None] = [None] * len(items)
    for _ in range(60):
        for i, item in enumerate(items):
            if done[i] is None:
                out = collect_logs.handler(item, LambdaContext())
                if out["pending"]:
                    items[i] = out
                else:
                    done[i] = out
        if all(d is not None for d in done):
            return [payload.load(d["batch"], acct.session.client("s3")) for d in done if d is not None]
    raise AssertionError("the executions never finished")


def run_two_executions(monkeypatch: pytest.MonkeyPatch, slots: int | None) -> tuple[list[int], list[dict[str, Any]],
                                                                                      dict[str, Any]]:
    with world_account(monkeypatch, faults=SLOW_QUERIES) as acct, in_flight_watched(monkeypatch) as seen:
        acct.world.logs_concurrent_queries = QUOTA
        if slots is not None:
            monkeypatch.setenv("GPUAUDIT_QUERY_SLOTS", str(slots))
        hourly = first_batch(scheduled_event("2026-10-01T18:17:04Z"), acct)
        incident = first_batch(hyperpod_node_health_event("research-hp-slurm", "2026-10-01T16:42:31Z"), acct)
        batches = overlapping(acct, [hourly, incident])
        item = acct.session.client("dynamodb").get_item(TableName=TABLE, Key=KEY, ConsistentRead=True).get("Item", {})
        return seen, batches, item


def test_two_overlapping_executions_never_exceed_the_share_together(monkeypatch: pytest.MonkeyPatch) -> None:
    share = budget_slots(QUOTA, SHARE)
    assert share == 4
    # Without the budget the two executions (3 queries at once each) hold more than the share between them.
    unleased, _, _ = run_two_executions(monkeypatch, slots=None)
    assert max(unleased) > share
    seen, batches, item = run_two_executions(monkeypatch, slots=share)
    assert max(seen) <= share and len(seen) == len(unleased)  # every query ran, never more than the share at once
    for batch in batches:  # waiting for a lease is waiting, never a gap
        assert batch["gaps"] == [] and {q["status"] for q in batch["queries"]} == {"Complete"}
    assert item["leases"]["M"] == {}  # every lease released once its query's final status was read


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 10, 1, 18).timestamp()

    def __call__(self) -> float:
        return self.now


def test_an_expired_lease_is_reclaimed(account: Account) -> None:
    """A crashed execution's leases free their slots once its last pass's lease ran out (LEASE_S, 5 minutes: no
    pass renews them any more), not before — and not an hour later."""
    ddb, clock = account.session.client("dynamodb"), Clock()
    crashed, fresh = TableBudget(ddb, TABLE, 2, now=clock), TableBudget(ddb, TABLE, 2, now=clock)
    assert crashed.acquire("crashed:a") and crashed.acquire("crashed:b")  # then its execution dies, never releasing
    clock.now += LEASE_S - 60
    assert not fresh.acquire("fresh:a")  # its queries may still run at AWS: the slots stay held
    clock.now += 61
    assert fresh.acquire("fresh:a") and fresh.acquire("fresh:b")
    leases = ddb.get_item(TableName=TABLE, Key=KEY, ConsistentRead=True)["Item"]["leases"]["M"]
    assert set(leases) == {"fresh:a", "fresh:b"}  # the expired ones were removed in the granting write
    assert not fresh.acquire("fresh:c")


def test_a_held_lease_is_granted_again_and_released_once(account: Account) -> None:
    ddb = account.session.client("dynamodb")
    budget = TableBudget(ddb, TABLE, 1)
    assert budget.acquire("q1") and budget.acquire("q1")  # a replayed invocation asks again: one slot
    assert not budget.acquire("q2")
    budget.release("q1")
    budget.release("q1")  # released twice (a retried invocation): harmless
    assert budget.acquire("q2") and budget.unavailable == []


class Racing:
    """A DynamoDB client whose first read is followed, before this caller writes, by another caller's grant."""

    def __init__(self, ddb: Any, meanwhile: Callable[[], None]) -> None:
        self.ddb, self.meanwhile = ddb, meanwhile

    def get_item(self, **kwargs: Any) -> Any:
        out = self.ddb.get_item(**kwargs)
        meanwhile, self.meanwhile = self.meanwhile, lambda: None
        meanwhile()
        return out

    def update_item(self, **kwargs: Any) -> Any:
        return self.ddb.update_item(**kwargs)


def test_two_grants_from_the_same_read_cannot_both_take_the_last_slot(account: Account) -> None:
    ddb = account.session.client("dynamodb")
    other = TableBudget(ddb, TABLE, 2)
    assert other.acquire("other:a")
    racing = TableBudget(Racing(ddb, lambda: other.acquire("other:b")), TABLE, 2)
    # It read one live lease, then the other caller took the last slot: its write is refused, it reads again,
    # finds the budget full and waits instead of holding a third query.
    assert not racing.acquire("racing:a")
    leases = ddb.get_item(TableName=TABLE, Key=KEY, ConsistentRead=True)["Item"]["leases"]["M"]
    assert set(leases) == {"other:a", "other:b"}


def test_a_budget_that_cannot_be_read_does_not_hold_the_audit_back(account: Account) -> None:
    budget = TableBudget(account.session.client("dynamodb"), "no-such-table", 2)
    assert budget.acquire("q1") and budget.unavailable == ["ResourceNotFoundException"]


def test_the_collection_waits_as_long_as_the_configured_deadline_then_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query still running past the old fixed 300 s is waited for, up to the deadline the stack configures
    (GPUAUDIT_QUERY_DEADLINE_S), counted from the audit's start; then it is stopped and named."""
    stuck = [{"service": "logs", "operation": "GetQueryResults", "status": "Running"}]
    with world_account(monkeypatch, faults=stuck) as acct:
        monkeypatch.setenv("GPUAUDIT_QUERY_DEADLINE_S", "1800")
        item = first_batch(scheduled_event("2026-10-01T18:17:04Z"), acct)
        start = acct.world.now
        waited: list[timedelta] = []
        for minutes in range(0, 60, 10):  # the state machine's Wait between invocations, ten minutes at a time
            monkeypatch.setattr(collect_logs, "clock", lambda m=minutes: start + timedelta(minutes=m))
            out = collect_logs.handler(item, LambdaContext())
            if not out["pending"]:
                break
            waited.append(timedelta(minutes=minutes))
            item = out
        batch = payload.load(out["batch"], acct.session.client("s3"))
    assert max(waited) == timedelta(minutes=20)  # still waited for at 20 minutes, stopped at the 30-minute deadline
    stopped = [g for g in batch["gaps"] if g["kind"] == "timed-out"]
    assert stopped and all("deadline of 1800 s" in g["unseen"] for g in stopped)
    assert {q["status"] for q in batch["queries"]} == {"Running (abandoned)"}


def test_a_renewed_lease_outlives_its_first_term_and_an_abandoned_one_does_not(account: Account) -> None:
    """Short leases renewed while the query runs: the running query's pass renews it and keeps its slot past
    LEASE_S; the abandoned one (its execution stopped) frees its slot LEASE_S after its last renewal."""
    ddb, clock = account.session.client("dynamodb"), Clock()
    running, stopped = TableBudget(ddb, TABLE, 2, now=clock), TableBudget(ddb, TABLE, 2, now=clock)
    assert running.acquire("running:a") and stopped.acquire("stopped:a")
    for _ in range(3):  # three passes, one every four minutes: 12 minutes, well past one lease's term
        clock.now += 240
        running.renew(["running:a"])
    leases = ddb.get_item(TableName=TABLE, Key=KEY, ConsistentRead=True)["Item"]["leases"]["M"]
    assert int(leases["running:a"]["N"]) == int(clock.now) + LEASE_S
    other = TableBudget(ddb, TABLE, 2, now=clock)
    assert other.acquire("other:a")  # the stopped execution's slot came free
    assert not other.acquire("other:b")  # the renewed one did not


def collect_pass(item: dict[str, Any]) -> dict[str, Any]:
    return collect_logs.handler(item, LambdaContext())  # type: ignore[no-any-return]


def test_a_collect_logs_retried_after_a_kill_keeps_its_first_attempts_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    """One holder per (execution, cluster, batch): a CollectLogs killed after its StartQuery calls (its output never
    returned) is retried with the same input, and the retry is granted the leases its first attempt took rather
    than a second set that would sit out their term."""
    with world_account(monkeypatch, faults=SLOW_QUERIES) as acct:
        monkeypatch.setenv("GPUAUDIT_QUERY_SLOTS", "20")
        item = {**first_batch(scheduled_event("2026-10-01T18:17:04Z"), acct),
                "execution": "arn:aws:states:us-east-1:111122223333:execution:sm/AuditClusters:child-1"}
        killed = collect_pass(item)  # the first attempt: its queries started and leased, its output lost
        retried = collect_pass(item)
        assert killed["pending"] and retried["pending"]
        leases = acct.session.client("dynamodb").get_item(TableName=TABLE, Key=KEY,
                                                          ConsistentRead=True)["Item"]["leases"]["M"]
        journal = payload.load(retried["journal"], acct.session.client("s3"))
    assert len(leases) == len(journal["entries"]) and leases  # one lease per started query, not two
    assert retried["execution"] == item["execution"]  # carried through the Wait loop to the next pass
