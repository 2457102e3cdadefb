"""Queries waited in Step Functions (#14 item 3): with a journal, CollectLogs never sleeps on a running Logs
Insights query. It ends the invocation (QueriesPending); the state machine waits and invokes it again; the replay
starts no query twice and reads no finished query twice, and gives the same batch as a Lambda that polled. A query
still running past its deadline is stopped (StopQuery) and named as a gap."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from gpuaudit import pipeline
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.insights import QueriesPending, QueryJournal
from gpuaudit.collectors.logs import BatchEvidence
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.evidence import AuditRequest, Evidence
from tests.helpers.worlds import PClusterWorld, at

SINCE, UNTIL = at(6), at(10)


def world(fault: dict[str, Any] | None) -> PClusterWorld:
    w = PClusterWorld(n_compute=2)
    w.healthy(w.compute[0], at(-48), at(12, 25))
    w.healthy(w.compute[1], at(-48), at(8))  # silent from 08:00: a detail query follows the first three
    if fault:
        w.raw.setdefault("faults", []).append(fault)
    return w


def no_sleep(seconds: float) -> None:
    raise AssertionError(f"a journaled collection slept {seconds} s: the Lambda would be held while waiting")


class Account:
    """One backend across invocations (queries keep running between them), a fresh Aws per invocation."""

    def __init__(self, w: PClusterWorld) -> None:
        self.world = w.world()
        self.backend = WorldBackend(self.world)
        self.now: datetime = self.world.now
        self.calls: dict[tuple[str, str], int] = {}

    def aws(self, sleep: Any = no_sleep) -> Aws:
        return Aws(session=self.backend.session(), region=self.world.region, clock=lambda: self.now, sleep=sleep)

    def tally(self, aws: Aws) -> None:
        for (service, op), n in aws.counts.items():
            self.calls[(service, op)] = self.calls.get((service, op), 0) + n


def journaled(w: PClusterWorld, advance: timedelta = timedelta(seconds=10)) -> tuple[BatchEvidence, int, Account]:
    account = Account(w)
    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL)  # type: ignore[arg-type]
    evidence = pipeline.read_inventory(account.aws(), request)
    (groups,) = pipeline.log_batches(evidence.log_groups)
    journal = QueryJournal()
    for invocation in range(1, 50):
        aws = account.aws()
        try:
            batch = pipeline.collect_logs(aws, evidence, groups, journal=journal)
        except QueriesPending:
            journal = QueryJournal.model_validate_json(journal.model_dump_json())  # through the payload store
            account.now += advance  # the state machine's Wait
            continue
        finally:
            account.tally(aws)
        return batch, invocation, account
    raise AssertionError("never finished")


def polled(w: PClusterWorld) -> BatchEvidence:
    account = Account(w)
    aws = account.aws(sleep=lambda _s: None)
    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL)  # type: ignore[arg-type]
    evidence = pipeline.read_inventory(aws, request)
    (groups,) = pipeline.log_batches(evidence.log_groups)
    return pipeline.collect_logs(aws, evidence, groups)


SLOW = {"service": "logs", "operation": "GetQueryResults", "status": "Running", "times": 2}


def test_slow_queries_are_waited_for_between_invocations_and_give_the_polled_batch() -> None:
    batch, invocations, account = journaled(world(SLOW))
    assert invocations > 1  # the Lambda returned while the queries ran
    reference = polled(world(SLOW))
    assert batch.model_dump(exclude={"queries"}) == reference.model_dump(exclude={"queries"})
    assert [q.purpose for q in batch.queries] == [q.purpose for q in reference.queries]
    assert {q.status for q in batch.queries} == {"Complete"}
    # every query started once, whatever the number of invocations
    assert account.calls[("logs", "StartQuery")] == len(batch.queries)
    assert ("logs", "StopQuery") not in account.calls


def test_fast_queries_finish_in_one_invocation() -> None:
    batch, invocations, account = journaled(world(None))
    assert invocations == 1 and account.calls[("logs", "StartQuery")] == len(batch.queries) >= 3


def test_a_query_running_past_its_deadline_is_stopped_and_named() -> None:
    stuck = {"service": "logs", "operation": "GetQueryResults", "status": "Running"}
    batch, invocations, account = journaled(world(stuck), advance=timedelta(seconds=200))
    assert invocations >= 2
    assert account.calls[("logs", "StopQuery")] >= 1
    timed_out = [g for g in batch.gaps if g.kind == "timed-out"]
    assert timed_out and all("stopped" in (g.unseen or "") for g in timed_out)
    assert {q.status for q in batch.queries} == {"Running (abandoned)"}


def _fill_quota(account: Account, group: str, quota: int) -> tuple[Aws, list[str]]:
    """Another audit's queries holding every concurrent slot of the account."""
    other = account.aws(sleep=lambda _s: None)
    ids = [other.call("logs", "StartQuery", logGroupNames=[group], startTime=0, endTime=1,
                      queryString="stats count(*)")["queryId"] for _ in range(quota)]
    return other, ids


def _quota_full() -> tuple[Account, Evidence, list[str], tuple[Aws, list[str]]]:
    """An account with a quota of 3 concurrent queries, all held by another audit's queries."""
    w = world(None)
    w.raw["logs_concurrent_queries"] = 3
    account = Account(w)
    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL)  # type: ignore[arg-type]
    evidence = pipeline.read_inventory(account.aws(), request)
    (groups,) = pipeline.log_batches(evidence.log_groups)
    return account, evidence, groups, _fill_quota(account, groups[0], 3)


def test_a_full_query_quota_is_waited_for_not_recorded_as_a_gap() -> None:
    """#14 item 2: other executions' queries fill the account's quota; this batch waits in the state machine
    and starts its queries once they finish, instead of giving up after the in-process retries."""
    account, evidence, groups, (other, ids) = _quota_full()
    journal = QueryJournal()
    with pytest.raises(QueriesPending):
        pipeline.collect_logs(account.aws(sleep=lambda _s: None), evidence, groups, journal=journal)
    assert all(e.query_id is None and e.failure is None for e in journal.entries.values())
    for query_id in ids:  # the other audit collects its results: its slots free up
        other.call("logs", "GetQueryResults", queryId=query_id)
    account.now += timedelta(seconds=10)
    batch = pipeline.collect_logs(account.aws(sleep=lambda _s: None), evidence, groups, journal=journal)
    assert not [g for g in batch.gaps if g.operation == "StartQuery"]
    assert {q.status for q in batch.queries} == {"Complete"}


def test_a_quota_full_past_the_deadline_becomes_a_named_gap() -> None:
    account, evidence, groups, _ = _quota_full()  # the other audit never collects: the quota stays full
    journal = QueryJournal()
    for _ in range(20):  # each query refused waits out its own deadline; the kernel look-back is a query a day
        try:
            batch = pipeline.collect_logs(account.aws(sleep=lambda _s: None), evidence, groups, journal=journal)
            break
        except QueriesPending:
            account.now += timedelta(seconds=120)
    else:
        raise AssertionError("never gave up")
    refused = [g for g in batch.gaps if g.operation == "StartQuery"]
    assert refused and all(g.error_code == "LimitExceededException" for g in refused)


@pytest.mark.parametrize("nodes, path", [(4, "re-read"), (12, "counted")])
def test_a_read_past_the_cap_in_parts_is_waited_for_and_gives_the_polled_batch(
        monkeypatch: pytest.MonkeyPatch, nodes: int, path: str) -> None:
    # Given more streams than the (lowered) row cap — with few nodes (the whole read reaches the cap and is read
    # again in parts) or nodes past it too (the rows are counted first) — and queries that stay Running for two reads
    from gpuaudit.collectors import insights
    from gpuaudit.embedded.insights import execution

    monkeypatch.setattr(execution, "MAX_RESULT_ROWS", 8)
    monkeypatch.setattr(insights, "MAX_ROWS", 8)

    def big() -> PClusterWorld:
        w = PClusterWorld(n_compute=nodes)
        for node in w.compute:
            w.healthy(node, at(-48), at(12, 25))
            w.other_log(node, "slurmd", at(-48), at(12, 25))
        w.healthy(w.compute[0], at(-48), at(8))
        w.raw.setdefault("faults", []).append(SLOW)
        return w

    batch, invocations, account = journaled(big())
    reference = polled(big())
    # Then the count and the parts are started across invocations, each once, and the batch is the polled one
    assert invocations > 1
    if path == "re-read":
        assert any(q.truncated and q.reread for q in batch.queries)
    else:
        assert [q.purpose for q in batch.queries].count("stream-count") == 1
    assert batch.model_dump(exclude={"queries"}) == reference.model_dump(exclude={"queries"})
    assert account.calls[("logs", "StartQuery")] == len(batch.queries)
