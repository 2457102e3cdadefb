"""Logs Insights limits end to end: the embedded backend refuses what StartQuery refuses (query length, the
account's concurrent-query quota), and the audit stays inside them — detail queries packed by characters
and started within one concurrency budget for the whole audit (queued, never failed)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from helpers.worlds import PClusterWorld, WorldBuilder, at
from test_collectors import evidence_of, purposes

from gpuaudit import pipeline
from gpuaudit.collectors.log_queries import hours_query
from gpuaudit.collectors.logs import DETAIL_ROWS, detail_chunks
from gpuaudit.collectors.query_budget import (
    MAX_QUERY_CHARS,
    QUERIES_PER_BATCH,
    QUERY_CHAR_BUDGET,
    QuerySlots,
    batches_in_flight,
    pack,
)
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import WorldError
from gpuaudit.model.timeutil import parse_time

STREAM_NAME_MAX = 512  # CloudWatch Logs log stream names: 1-512 characters


def logs_client(w: WorldBuilder):
    return WorldBackend(w.world()).session().client("logs")


def start(logs, query: str = "stats count(*)") -> str:
    return logs.start_query(logGroupNames=["/g"], startTime=0, endTime=10, queryString=query)["queryId"]


def error_code(raised: pytest.ExceptionInfo[ClientError]) -> str:
    return raised.value.response["Error"]["Code"]


# -- the backend: query length ---------------------------------------------------------------------
def test_start_query_refuses_a_query_string_over_ten_thousand_characters():
    w = WorldBuilder()
    w.log_group("/g")
    logs = logs_client(w)
    names = ", ".join(f'"{i:05d}"' for i in range(1_200))  # 9,598 characters of names
    query = f"filter @logStream in [{names}] | stats count(*) by @logStream"
    assert len(query) > MAX_QUERY_CHARS

    with pytest.raises(ClientError) as raised:
        start(logs, query)

    assert error_code(raised) == "InvalidParameterException"


def test_the_limit_parameter_does_not_count_towards_the_query_length():
    w = WorldBuilder()
    w.log_group("/g")
    logs = logs_client(w)
    head, tail = 'filter @message like "', '" | stats count(*)'
    query = head + "x" * (MAX_QUERY_CHARS - len(head) - len(tail)) + tail
    logs.start_query(logGroupNames=["/g"], startTime=0, endTime=10, queryString=query, limit=5)


def test_a_third_stats_is_refused_as_malformed_by_start_query():
    w = WorldBuilder()
    w.log_group("/g")
    with pytest.raises(ClientError) as raised:
        start(logs_client(w), "stats count(*) as n by @logStream | stats sum(n) as t | stats count(*)")
    assert error_code(raised) == "MalformedQueryException"


# -- the backend: concurrent queries ---------------------------------------------------------------
def test_queries_beyond_the_world_quota_are_refused_until_one_is_collected_or_stopped():
    # Given an account that allows two concurrent queries
    w = WorldBuilder()
    w.log_group("/g")
    w.raw["logs_concurrent_queries"] = 2
    logs = logs_client(w)
    first, second = start(logs), start(logs)

    # Then a third is refused with the service's exception
    with pytest.raises(ClientError) as raised:
        start(logs)
    assert error_code(raised) == "LimitExceededException"

    # and once the first's results are collected, and the second stopped, two more run
    assert logs.get_query_results(queryId=first)["status"] == "Complete"
    start(logs)
    with pytest.raises(ClientError):
        start(logs)
    logs.stop_query(queryId=second)
    start(logs)


def test_the_quota_defaults_to_thirty():
    w = WorldBuilder()
    w.log_group("/g")
    logs = logs_client(w)
    for _ in range(30):
        start(logs)
    with pytest.raises(ClientError) as raised:
        start(logs)
    assert error_code(raised) == "LimitExceededException"


@pytest.mark.parametrize("bad", [0, -1, "30", True, 2.5])
def test_a_bad_concurrent_query_quota_in_a_world_is_named(bad: object):
    w = WorldBuilder()
    w.raw["logs_concurrent_queries"] = bad
    with pytest.raises(WorldError, match="world: logs_concurrent_queries: must be (>= 1|an integer)"):
        w.world()


# -- the budget's parts ----------------------------------------------------------------------------
def test_pack_cuts_by_size_and_by_count_in_order():
    assert pack([4, 4, 4, 1, 9, 2], size=int, budget=8, max_items=10) == [[4, 4], [4, 1], [9], [2]]
    assert pack(range(5), size=lambda _: 1, budget=100, max_items=2) == [[0, 1], [2, 3], [4]]
    assert pack([], size=len, budget=1, max_items=1) == []
    # and by weight: 5 + 4 > 8, so the second item starts a chunk
    assert pack([5, 4, 4, 1], size=lambda _: 1, budget=100, max_items=10, weight=int, max_weight=8) == [[5], [4, 4],
                                                                                                    [1]]


def test_detail_chunks_stay_within_the_character_budget_and_the_row_cap():
    long_names = [("/g", f"{i:03d}" + "n" * (STREAM_NAME_MAX - 3)) for i in range(300)]
    chunks = detail_chunks(long_names, 30, {})
    assert [key for chunk in chunks for key in chunk] == long_names
    assert all(len(hours_query([name for _, name in chunk])) <= QUERY_CHAR_BUDGET for chunk in chunks)
    assert len(chunks) == 18  # 17 names of 516 characters fit in the 9,000-character budget with the template
    short = [("/g", f"s{i:04d}") for i in range(1_000)]
    assert {len(c) for c in detail_chunks(short, 100, {})[:-1]} == {DETAIL_ROWS // 100}  # each stream fills 100 h


class Probe:
    def __init__(self, slots: QuerySlots, log: list[str], name: str) -> None:
        self.slots, self.log, self.name = slots, log, name

    def settle(self) -> None:
        self.log.append(self.name)
        self.slots.release(self)


def test_query_slots_settle_the_oldest_query_before_starting_one_over_budget():
    slots, settled = QuerySlots(limit=2), []
    probes = [Probe(slots, settled, f"q{i}") for i in range(5)]
    for probe in probes:
        slots.take(probe)
    assert settled == ["q0", "q1", "q2"]
    assert slots.most_in_flight == 2


def test_batches_in_flight_is_the_quota_over_a_batch_s_queries():
    assert QUERIES_PER_BATCH == 3
    assert batches_in_flight() == 10
    assert batches_in_flight(100) == 33
    assert batches_in_flight(2) == 1


# -- the audit: a mass loss in one log group -------------------------------------------------------
def silent_fleet(n: int, quota: int | None = None) -> PClusterWorld:
    """n nodes whose kernel streams (names of 512 characters) fall silent from 07:00 to 09:00."""
    w = PClusterWorld(n_compute=n)
    if quota is not None:
        w.raw["logs_concurrent_queries"] = quota
    for node in w.compute:
        base = w.stream_name(node)
        name = base + "-" + "x" * (STREAM_NAME_MAX - len(base) - 1)
        w.kernel_stream(w.group, name, at(-10), at(7), host=node.hostname)
        w.lines(w.group, name, at(9), at(12, 25))
    return w


def test_three_hundred_silent_streams_of_long_names_get_every_hour_of_detail():
    # Given 300 nodes in one log group, silent 07:00-09:00, stream names of 512 characters
    w = silent_fleet(300)

    # When audited over 06:00-10:00
    ev = evidence_of(w, w.cluster)

    # Then every stream has its hours: six lines (one per 10 min) at 06:00 and at 09:00, none in between
    activity = [a for a in ev.stream_activity if a.log_group == w.group]
    assert len(activity) == 300
    assert all(len(a.log_stream) == STREAM_NAME_MAX for a in activity)
    six, seven, eight, nine = (parse_time(at(h)) for h in (6, 7, 8, 9))
    for a in activity:
        assert a.hour_counts is not None, a.log_stream
        assert (a.hour_counts.get(six), a.hour_counts.get(seven, 0), a.hour_counts.get(eight, 0),
                a.hour_counts.get(nine)) == (6, 0, 0, 6)
    # through several detail queries, all complete, and nothing left unread
    details = purposes(ev, "stream-hours")
    assert len(details) >= 300 * (STREAM_NAME_MAX + 4) // MAX_QUERY_CHARS + 1
    assert {q.status for q in details} == {"Complete"}
    assert ev.gaps == []


def test_an_account_quota_of_three_queues_the_audit_instead_of_failing_it():
    # Given the same loss in an account that allows only three concurrent queries
    w = silent_fleet(60, quota=QUERIES_PER_BATCH)

    # When audited
    ev = evidence_of(w, w.cluster)

    # Then every stream still has its hours and no query failed
    assert ev.gaps == []
    assert all(a.hour_counts is not None for a in ev.stream_activity if a.log_group == w.group)
    assert len(purposes(ev, "stream-hours")) > QUERIES_PER_BATCH


def test_without_the_budget_the_quota_fails_detail_queries_and_the_gap_names_them(monkeypatch):
    # Given an audit whose budget exceeds the account's quota of three
    w = silent_fleet(60, quota=QUERIES_PER_BATCH)
    monkeypatch.setattr(pipeline, "QuerySlots", lambda: QuerySlots(limit=50))

    # When audited
    ev = evidence_of(w, w.cluster)

    # Then queries past the quota fail — with the kernel look-back a query a day (#34 item 4), some of the batch's
    # own queries as well as detail queries — each gap naming the query and its group, a detail query's its streams
    failed = [g for g in ev.gaps if g.error_code == "LimitExceededException"]
    assert any(g.unseen and g.unseen.startswith("stream-hours") for g in failed)
    assert all(g.operation == "StartQuery" and g.unseen is not None and g.unseen.endswith("not run")
               and (f"stream-hours query over {w.group} for " in g.unseen and "stream(s) from 'ip-" in g.unseen
                    or g.unseen in {f"{purpose} query over {w.group} not run"
                                    for purpose in ("kernel-streams", "stream-summary", "gpu-lines")}) for g in failed)
    # and those streams are left without hours (Not checked), never counted as silent
    assert any(a.hour_counts is None for a in ev.stream_activity if a.log_group == w.group)
