"""Groups that completed seed the coverage cache even when another group of their batch timed out (#34 item 4).

One log group of the batch is too big for the collection's deadline: its queries are still running when the
deadline passes and are stopped. Before, any stopped query kept the whole batch out of the cache, so every hour read
every group of the batch in full again and paid for the scan. Now each group is cached on its own reads, and a
group stopped before is read alone, after the others: the small group is read in full once, then incrementally."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpuaudit import pipeline
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.cache import CacheState, complete, joined, read_plan
from gpuaudit.collectors.insights import QueriesPending, QueryJournal
from gpuaudit.collectors.logs import BatchEvidence
from gpuaudit.embedded import backend as embedded
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.evidence import AuditRequest, Gap, QueryRecord
from tests.helpers.worlds import PClusterWorld, at

BIG = "/aws/training/llm-pretrain/full-debug"  # the group no query over finishes within the deadline
DEADLINE_S = 1800


def world() -> PClusterWorld:
    w = PClusterWorld(n_compute=2)
    for node in w.compute:
        w.healthy(node, at(-48), at(12, 25))
    w.kernel_stream(BIG, w.stream_name(w.compute[0], "debug"), at(-48), at(12, 25), 600, w.compute[0].hostname)
    return w


def slow_over(group: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries naming `group` keep running (a scan longer than the deadline); the others answer at once."""
    start = embedded.RESPONDERS[("logs", "StartQuery")]

    def started(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
        out = start(b, p)
        if group in p["logGroupNames"]:
            b.queries[out["queryId"]].status = "Running"
        return out

    monkeypatch.setitem(embedded.RESPONDERS, ("logs", "StartQuery"), started)


def hourly(backend: WorldBackend, w: PClusterWorld, hour: int, state: CacheState) -> BatchEvidence:
    """One scheduled collection of the batch, as the state machine runs it: invocations 10 minutes apart until the
    collection ends (its deadline stops what still runs)."""
    world_ = backend.world
    now = world_.now + timedelta(hours=hour)
    clock = [now]
    aws = Aws(session=backend.session(), region=world_.region, clock=lambda: clock[0],
              sleep=lambda s: pytest.fail(f"slept {s} s"))
    evidence = pipeline.read_inventory(aws, AuditRequest(cluster=w.cluster, mode="coverage",  # type: ignore[arg-type]
                                                      since=now - timedelta(days=1), until=now))
    (batch,) = pipeline.log_batches(evidence.log_groups)
    assert sorted(batch) == sorted([w.group, BIG])
    journal = QueryJournal(begun=evidence.now, deadline_s=DEADLINE_S)
    for _ in range(20):
        try:
            return pipeline.collect_logs(aws, evidence, batch, state, journal=journal)
        except QueriesPending:
            journal = QueryJournal.model_validate_json(journal.model_dump_json())
            clock[0] += timedelta(minutes=10)
    raise AssertionError("the collection never ended")


def scanned_over(read: BatchEvidence, group: str) -> float:
    return sum(q.records_scanned for q in read.queries if group in q.log_groups)


def test_the_group_that_finishes_is_cached_while_the_other_keeps_timing_out(monkeypatch: pytest.MonkeyPatch) -> None:
    w = world()
    slow_over(BIG, monkeypatch)
    backend, state = WorldBackend(w.world()), CacheState(cluster=w.cluster, region=w.world().region)
    reads = [hourly(backend, w, 0, state)]
    # hour 0: one full read of the batch, stopped at the deadline; nothing cached
    assert {q.status for q in reads[0].queries} == {"Running (abandoned)"}
    assert state.groups == {} and state.stopped == {w.group: 1, BIG: 1}
    reads += [hourly(backend, w, hour, state) for hour in (1, 2)]
    # hours 1-2: each group read alone, the one stopped fewer times first: the small group finishes and is cached
    assert w.group in state.groups and BIG not in state.groups and state.stopped == {BIG: 3}
    reads += [hourly(backend, w, hour, state) for hour in (3, 4)]
    # hour 4: the small group is read incrementally (its cached hours not scanned again), before the big one
    full = max(scanned_over(r, w.group) for r in reads[:3])
    assert full > 0 and scanned_over(reads[4], w.group) * 5 < full
    day_start = backend.world.now + timedelta(hours=4) - timedelta(days=1)
    small = [q for q in reads[4].queries if q.log_groups == [w.group]]
    assert small and all(q.start > day_start + timedelta(hours=12) for q in small)  # only the hours still open
    assert reads[4].queries[0].log_groups == [w.group]
    # and what the read says stays honest: the big group is named unread, the small one is not
    assert BIG in reads[4].unread_in("kernel") and w.group not in reads[4].unread_in("kernel")
    assert any(g.kind == "timed-out" and BIG in (g.unseen or "") for g in reads[4].gaps)
    assert state.stopped == {BIG: 5}


def test_a_batch_alike_is_read_whole_as_before() -> None:
    w = world()
    state = CacheState(cluster=w.cluster, region=w.world().region)
    backend = WorldBackend(w.world())
    first = hourly(backend, w, 0, state)
    assert {tuple(sorted(q.log_groups)) for q in first.queries} == {tuple(sorted([w.group, BIG]))}
    assert set(state.groups) == {w.group, BIG} and state.stopped == {}


def _record(groups: list[str], status: str) -> QueryRecord:
    return QueryRecord(purpose="kernel-streams", log_groups=groups, start=at(0), end=at(1), status=status,
                       rows=0, records_scanned=0.0)


def test_a_group_is_complete_only_when_no_query_over_it_failed_and_no_gap_may_concern_it() -> None:
    read = BatchEvidence(groups=["/a", "/b"], kernel=[], activity=[], gpu_lines=[], gaps=[],
                         queries=[_record(["/a", "/b"], "Complete"), _record(["/b"], "Running (abandoned)")])
    assert complete(read, "/a") and not complete(read, "/b")
    named = read.model_copy(update={"queries": [], "gaps": [Gap(kind="throttled", service="logs",
                                                               operation="GetQueryResults", unseen="over /a")]})
    assert not complete(named, "/a") and complete(named, "/b")
    unnamed = named.model_copy(update={"gaps": [Gap(kind="throttled", service="logs", operation="GetQueryResults")]})
    assert not complete(unnamed, "/a") and not complete(unnamed, "/b")  # a gap naming no group may concern any


def test_joined_parts_keep_unread_per_group() -> None:
    a = BatchEvidence(groups=["/a"], kernel=[], activity=[], gpu_lines=[], queries=[], gaps=[], unread=["kernel"])
    b = BatchEvidence(groups=["/b"], kernel=[], activity=[], gpu_lines=[], queries=[], gaps=[])
    both = joined([a, b])
    assert both.groups == ["/a", "/b"] and both.unread_in("kernel") == ["/a"] and both.unread_in("summary") == []


def test_read_plan_orders_cached_then_fresh_then_stopped_fewest_first() -> None:
    w = world()
    state = CacheState(cluster=w.cluster, region=w.world().region, stopped={"/x": 3, "/y": 1})
    backend = WorldBackend(w.world())
    hourly(backend, w, 0, state)  # caches both groups of the world's batch
    later = backend.world.now + timedelta(hours=1)
    win = pipeline.log_window(pipeline.read_inventory(
        Aws(session=backend.session(), region=backend.world.region, clock=lambda: later),
        AuditRequest(cluster=w.cluster, mode="coverage",  # type: ignore[arg-type]
                     since=later - timedelta(days=1), until=later)))
    parts = read_plan(state, [w.group, "/x", "/new", "/y", BIG], win)
    assert [p.groups for p in parts] == [[w.group, BIG], ["/new"], ["/y"], ["/x"]]
    assert parts[0].caches is not None and all(p.caches is None for p in parts[1:])
