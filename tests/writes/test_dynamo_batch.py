"""Verdict without per-node calls (issue #34 item 3): the product's DynamoDB writes go in batches DynamoDB accepts,
against a stand-in as strict as DynamoDB (gpuaudit/embedded/dynamodb_limits.py: 25 requests and 16 MB a batch,
400 KB an item, no key twice in a batch, throttling and UnprocessedItems injected from the world's faults); what
DynamoDB leaves unwritten is retried with backoff and jitter, and what still fails is reported, never lost."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from helpers.worlds import PClusterWorld, at
from moto import mock_aws

from gpuaudit.devtools.demo import TABLE, ensure_findings_table
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import World
from gpuaudit.model.history import HistorySpan, HistoryXid
from gpuaudit.model.timeutil import parse_time
from gpuaudit.writes.dynamo_batch import (
    MAX_BATCH_ITEMS,
    Backoff,
    ItemTooLarge,
    WritesNotDone,
    batch_write,
    batches,
    put_requests,
    retried,
)
from gpuaudit.writes.history import HISTORY_SHARDS, DynamoHistory, HistoryUnreadable, snapshot_pk

NOW = parse_time(at(30))


@dataclass
class Table:
    ddb: Any
    world: World
    backend: WorldBackend

    def fault(self, **fault: Any) -> None:
        self.world.faults.append({"service": "dynamodb", **fault})

    def items(self) -> list[dict[str, Any]]:
        found, params = [], {"TableName": TABLE}
        while True:
            out = self.ddb.scan(**params)
            found += out["Items"]
            if "LastEvaluatedKey" not in out:
                return found
            params["ExclusiveStartKey"] = out["LastEvaluatedKey"]


@pytest.fixture
def table() -> Iterator[Table]:
    with mock_aws():
        world = PClusterWorld().world()
        backend = WorldBackend(world)
        ddb = backend.session().client("dynamodb")
        ensure_findings_table(ddb)
        yield Table(ddb, world, backend)


def quick() -> Backoff:
    """The real backoff's delays, recorded and not slept."""
    return Backoff(sleep=lambda _s: None)


def item(n: int, pk: str = "T", size: int = 10) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": f"{n:06d}"}, "body": {"S": "x" * size}}


# -- the stand-in refuses what DynamoDB refuses ------------------------------------------------------------------

def test_the_stand_in_refuses_a_batch_past_25_requests_or_16_mb_an_item_past_400_kb_and_a_key_twice(
        table: Table) -> None:
    def refused(requests: list[dict[str, Any]]) -> str:
        with pytest.raises(ClientError) as raised:
            table.ddb.batch_write_item(RequestItems={TABLE: requests})
        assert raised.value.response["Error"]["Code"] == "ValidationException"
        return raised.value.response["Error"]["Message"]

    assert "less than or equal to 25" in refused(put_requests([item(n) for n in range(26)]))
    assert "maximum allowed size" in refused(put_requests([item(0, size=400 * 1024)]))
    # 25 items of at most 400 KB stay under 16 MB: a request past it is also past 25 items, and said as too big
    assert "16 MB" in refused(put_requests([item(n, size=390 * 1024) for n in range(45)]))
    assert "duplicates" in refused(put_requests([item(1), item(1)]))
    with pytest.raises(ClientError, match="maximum allowed size"):
        table.ddb.put_item(TableName=TABLE, Item=item(0, size=401 * 1024))
    assert table.items() == []  # nothing refused was stored


def test_batches_keep_every_request_in_order_within_dynamodbs_limits() -> None:
    requests = put_requests([item(n) for n in range(60)] + [item(3)] + [item(n, size=390 * 1024) for n in range(60,
        110)])
    cut = list(batches(requests))
    assert [r for b in cut for r in b] == requests  # nothing lost, nothing reordered
    for batch in cut:
        keys = [(r["PutRequest"]["Item"]["pk"]["S"], r["PutRequest"]["Item"]["sk"]["S"]) for r in batch]
        assert len(batch) <= MAX_BATCH_ITEMS and len(set(keys)) == len(keys)
        assert sum(len(r["PutRequest"]["Item"]["body"]["S"]) for r in batch) <= 16 * 2**20
    with pytest.raises(ItemTooLarge, match="T / 000001 is"):
        list(batches(put_requests([item(1, size=401 * 1024)])))


# -- retried until written; reported when not --------------------------------------------------------------------

def test_unprocessed_items_and_throttling_are_retried_with_backoff_until_every_item_is_written(table: Table) -> None:
    table.fault(operation="BatchWriteItem", unprocessed=10, times=3)
    table.fault(operation="BatchWriteItem", error="ProvisionedThroughputExceededException", times=2)
    backoff = quick()
    calls = batch_write(table.ddb, TABLE, put_requests([item(n) for n in range(60)]), backoff)
    assert len(table.items()) == 60
    assert table.backend.dynamodb.unprocessed_returned == 30  # DynamoDB really left items unwritten
    assert calls == 3 + 2 + 3  # three batches, two refused calls, three retries of what was left
    assert len(backoff.slept) == 5 and all(0 <= d <= 5.0 for d in backoff.slept)


def test_a_write_dynamodb_keeps_refusing_is_raised_naming_what_was_not_written(table: Table) -> None:
    table.fault(operation="BatchWriteItem", unprocessed=4)  # every call, for good
    with pytest.raises(WritesNotDone) as raised:
        batch_write(table.ddb, TABLE, put_requests([item(n) for n in range(10)]), quick())
    assert len(raised.value.unwritten) == 4 and "UnprocessedItems" in str(raised.value)
    assert "T / 000006" in str(raised.value)
    assert len(table.items()) == 6


def test_backoff_is_capped_exponential_with_full_jitter() -> None:
    backoff = Backoff(sleep=lambda _s: None, jitter=lambda: 1.0)
    for attempt in range(1, 9):
        backoff.wait(attempt)
    assert backoff.slept == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    jittered = Backoff(sleep=lambda _s: None, jitter=lambda: 0.25)
    jittered.wait(3)
    assert jittered.slept == [0.1]


def test_a_throttled_read_is_retried_and_a_refusal_is_not(table: Table) -> None:
    table.fault(operation="Query", error="ThrottlingException", times=2)
    out = retried(lambda: table.ddb.query(TableName=TABLE, KeyConditionExpression="pk = :p",
                                          ExpressionAttributeValues={":p": {"S": "T"}}), quick())
    assert out["Items"] == []
    table.fault(operation="GetItem", error="AccessDeniedException")
    with pytest.raises(ClientError, match="AccessDenied"):
        retried(lambda: table.ddb.get_item(TableName=TABLE, Key={"pk": {"S": "T"}, "sk": {"S": "1"}}), quick())


# -- the history: once per cluster, only what changed ------------------------------------------------------------

def span(node: int, hour: int, *, through: int | None = None, verdict: str | None = None, xid: bool = False,
         audits: int = 1) -> HistorySpan:
    when = NOW + timedelta(hours=hour)
    return HistorySpan(cluster="c1", instance_id=f"i-{node:017d}", audit_id=f"a{hour}", audit_time=when,
                       last_audit_id=f"a{through if through is not None else hour}",
                       through=NOW + timedelta(hours=through if through is not None else hour), audits=audits,
                       mode="coverage", verdict=verdict, xid_status="Measured",
                       xids=[HistoryXid(code=79, pci="0000:53:00", first=when, last=when)] if xid else [])


def count_calls(ddb: Any) -> dict[str, int]:
    counts: dict[str, int] = {}

    def count(model: Any, **_: Any) -> None:
        counts[model.name] = counts.get(model.name, 0) + 1
    ddb.meta.events.register("before-call.dynamodb", count)
    return counts


def test_the_history_of_500_nodes_is_read_and_written_in_a_few_calls_and_only_changes_are_written(
        table: Table) -> None:
    store = DynamoHistory(table.ddb, TABLE, backoff=quick())
    calls = count_calls(table.ddb)
    store.read("c1", None, NOW - timedelta(days=30), NOW)
    store.write([span(n, 0) for n in range(500)], 90, NOW)
    first = dict(calls)
    assert sum(first.values()) <= 1 + HISTORY_SHARDS + 3, first  # before: 500 Query + 500 PutItem

    # the next audit: 499 quiet nodes extend their span, one gets an Xid (its quiet span closes)
    calls.clear()
    read = store.read("c1", None, NOW - timedelta(days=30), NOW + timedelta(hours=1))
    assert len(read.spans) == 500
    extended = [s.model_copy(update={"through": NOW + timedelta(hours=1), "last_audit_id": "a1", "audits": 2})
                for s in read.spans if s.instance_id != "i-00000000000000007"]
    assert store.write([*extended, span(7, 1, verdict="REBOOT", xid=True)], 90, NOW + timedelta(hours=1)) == 500
    assert sum(calls.values()) <= 2 + HISTORY_SHARDS + 4, calls
    closed = [i for i in table.items() if i["pk"]["S"].startswith("HIST#c1#")]
    assert [(i["sk"]["S"], i["through"]["S"]) for i in closed] == [(f"{at(30)}#i-00000000000000007#a0", at(30))]

    # what is read back is every span: the closed one, and each node's latest
    again = DynamoHistory(table.ddb, TABLE).read("c1", ["i-00000000000000007", "i-00000000000000008"],
                                                 NOW - timedelta(days=30), NOW + timedelta(hours=2))
    assert sorted((s.instance_id, s.audit_id, s.audits, s.verdict) for s in again.spans) == [
        ("i-00000000000000007", "a0", 1, None), ("i-00000000000000007", "a1", 1, "REBOOT"),
        ("i-00000000000000008", "a0", 2, None)]

    # a rerun of the same audit writes nothing
    calls.clear()
    store.read("c1", None, NOW - timedelta(days=30), NOW + timedelta(hours=1))
    assert store.write([*extended, span(7, 1, verdict="REBOOT", xid=True)], 90, NOW + timedelta(hours=1)) == 0
    assert "BatchWriteItem" not in calls and "PutItem" not in calls


def test_closed_spans_spread_over_shards_and_a_large_snapshot_over_items_under_400_kb(
        table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuaudit.writes import history

    monkeypatch.setattr(history, "SNAPSHOT_PIECE_BYTES", 500)  # as if the fleet were far larger
    store = DynamoHistory(table.ddb, TABLE, backoff=quick())
    store.read("c1", None, NOW - timedelta(days=30), NOW)
    store.write([span(n, 0, xid=True) for n in range(300)], 90, NOW)
    store.read("c1", None, NOW - timedelta(days=30), NOW + timedelta(hours=1))
    store.write([span(n, 1, xid=True) for n in range(300)], 90, NOW + timedelta(hours=1))
    items = table.items()
    closed = {i["pk"]["S"] for i in items if i["pk"]["S"].startswith("HIST#c1#")}
    assert len(closed) == HISTORY_SHARDS  # no single partition takes every node's write
    pieces = [i for i in items if i["pk"]["S"] == snapshot_pk("c1") and i["sk"]["S"].startswith("GEN#")]
    assert len(pieces) > 1 and len({i["sk"]["S"].split("#")[1] for i in pieces}) == 1  # the old generation deleted
    read = DynamoHistory(table.ddb, TABLE).read("c1", None, NOW - timedelta(days=30), NOW + timedelta(hours=2))
    assert len(read.spans) == 600


def test_two_audits_writing_the_same_snapshot_keep_both_their_spans(table: Table) -> None:
    first, second = DynamoHistory(table.ddb, TABLE, backoff=quick()), DynamoHistory(table.ddb, TABLE, backoff=quick())
    for store in (first, second):
        store.read("c1", None, NOW - timedelta(days=30), NOW)  # both read the same (empty) snapshot
    first.write([span(1, 0)], 90, NOW)
    second.write([span(2, 0)], 90, NOW)  # its head switch fails: it reads the first's snapshot and folds again
    read = DynamoHistory(table.ddb, TABLE).read("c1", None, NOW - timedelta(days=30), NOW)
    assert sorted(s.instance_id for s in read.spans) == ["i-00000000000000001", "i-00000000000000002"]


def test_a_history_write_dynamodb_keeps_refusing_is_a_named_gap_not_a_silent_loss(table: Table) -> None:
    store = DynamoHistory(table.ddb, TABLE, backoff=quick())
    store.read("c1", None, NOW - timedelta(days=30), NOW)
    table.fault(operation="BatchWriteItem", error="ProvisionedThroughputExceededException")
    with pytest.raises(HistoryUnreadable) as raised:
        store.write([span(n, 0) for n in range(3)], 90, NOW)
    prose = raised.value.gap.prose()
    assert "dynamodb BatchWriteItem" in prose and "ProvisionedThroughputExceededException" in prose
    assert not any(i["sk"]["S"] == "HEAD" for i in table.items())  # no head names a snapshot that was not written
