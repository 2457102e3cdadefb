"""Late delivery and the hourly cache (RULES §4: "late delivery can fill a gap later, so a gap that ends just before
the query is said to be possibly late, not lost"; collectors/cache.py, collectors/lagging.py).

A world here is the account as seen at one moment: lines delivered late are absent from the worlds before their
arrival and present after it, with their own (earlier) timestamps. An hourly audit that kept the earlier reads in its
cache must then say what a full audit of the same moment says: a late line fills the hour it belongs to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from helpers.worlds import PClusterWorld, at, aws_for

from gpuaudit import pipeline
from gpuaudit.collectors import cache as coverage_cache
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.cache import CacheState, FileCache
from gpuaudit.collectors.insights import QueriesPending, QueryJournal
from gpuaudit.collectors.logs import BatchEvidence
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import collect, run_audit

XID = "kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def fleet(now: str, late: Callable[[PClusterWorld], None]) -> PClusterWorld:
    """Three GPU nodes logging every 5 min since a day before; `late` adds the fourth node's lines as delivered by
    `now`."""
    w = PClusterWorld("late", n_compute=4, launch=at(-24), now=now)
    for n in w.compute[:3]:
        w.healthy(n, at(-24), at(14), every_s=300)
    late(w)
    return w


def stalled_agent(now: str) -> PClusterWorld:
    """The fourth node's agent stalls after its 09:50 line and ships the backlog at 12:15: the lines of 09:55–12:10,
    an Xid at 10:30 among them, arrive then with their own timestamps (in order: nothing after 09:50 before)."""
    def late(w: PClusterWorld) -> None:
        node = w.compute[3]
        stream = w.healthy(node, at(-24), at(9, 55), every_s=300)
        if parse_time(now) >= parse_time(at(12, 15)):
            w.lines(w.group, stream, at(9, 55), at(14), 300, f"{node.hostname} systemd[1]: Started sysstat.")
            w.stream(w.group, stream, events=[(at(10, 30), f"{node.hostname} {XID}")])
    return fleet(now, late)


def retried_batch(now: str) -> PClusterWorld:
    """The fourth node writes on time, but one batch of its lines (10:55, and an Xid at 10:57) is retried and lands
    at 11:20, after later batches: out of order by minutes, across the hour."""
    def late(w: PClusterWorld) -> None:
        node = w.compute[3]
        stream = w.healthy(node, at(-24), at(10, 55), every_s=300)
        w.lines(w.group, stream, at(11), at(14), 300, f"{node.hostname} systemd[1]: Started sysstat.")
        if parse_time(now) >= parse_time(at(11, 20)):
            w.lines(w.group, stream, at(10, 55), at(11), 300, f"{node.hostname} systemd[1]: Started sysstat.")
            w.stream(w.group, stream, events=[(at(10, 57), f"{node.hostname} {XID}")])
    return fleet(now, late)


def result(world: PClusterWorld, cache: FileCache | None) -> Result:
    return run_audit(aws_for(world.world()), AuditRequest(cluster="late"), coverage_cache=cache)


def evidence(world: PClusterWorld, cache: FileCache | None) -> Evidence:
    return collect(aws_for(world.world()), AuditRequest(cluster="late"), cache)


def comparable(r: Result, kernel_count: bool = True) -> list[tuple]:
    """What a node's verdict rests on. `kernel_count=False`: of query (b), whether a stream carries kernel lines, not
    how many (a kernel line retried out of order into the minutes before the last audit, in a stream still writing,
    is counted at the next full read: collectors/lagging.py counts only a silent stream's late lines)."""
    return [(n.instance_id, n.xid_status, n.verdict,
             [(c.log_stream, c.status, c.live_hours, tuple(c.empty_hours),
               c.kernel_lines_ever if kernel_count else bool(c.kernel_lines_ever), c.last_event)
              for c in n.coverage], [(e.code, e.time, e.count) for e in n.gpu_errors]) for n in r.nodes]


def late_node(r: Result, w: PClusterWorld):
    return next(n for n in r.nodes if n.instance_id == w.compute[3].instance_id)


def test_a_backlog_shipped_late_fills_the_hours_of_its_silence_in_the_next_hourly_audit(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache.json")
    # Given an hourly audit at 11:30, when the node had been silent since 09:50 (the current hour, 11, holds no line)
    before = result(stalled_agent(at(11, 30)), cache)
    row = late_node(before, stalled_agent(at(11, 30))).coverage[0]
    assert [h.hour for h in map(parse_time, map(str, row.empty_hours))] == [10, 11]
    assert "possibly late" in (row.note or "")
    # When the backlog arrives at 12:15 and the next hourly audit runs at 12:30 from the cache
    w = stalled_agent(at(12, 30))
    hourly = result(w, cache)
    # Then it says what a full audit says: hour 10 live, the Xid of 10:30 read
    assert comparable(hourly) == comparable(result(w, None))
    node = late_node(hourly, w)
    assert node.coverage[0].empty_hours == [] and [(e.code, e.time) for e in node.gpu_errors] == [
        (79, parse_time(at(10, 30)))]


def test_the_silent_stream_is_read_again_by_name_and_the_others_only_from_the_hour_before_the_last_audit(
        tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache.json")
    evidence(stalled_agent(at(11, 30)), cache)
    w = stalled_agent(at(12, 30))
    stream = w.stream_name(w.compute[3])
    assert cache.load("late", "us-west-2").groups[w.group].lagging == {stream: parse_time(at(9))}
    hourly = evidence(w, cache)

    (summary,) = [q for q in hourly.queries if q.purpose == "stream-summary"]
    assert summary.start == parse_time(at(11))  # the hour of 11:15 (the last audit, less the out-of-order margin)
    again = [q for q in hourly.queries if q.start == parse_time(at(9)) and q.end == parse_time(at(11))]
    assert {q.purpose for q in again} == {"stream-hours", "gpu-lines"}  # its silence, from the hour of 09:35
    one_stream = next(q for q in again if q.purpose == "stream-hours").records_scanned
    assert one_stream == len(range(9 * 60 + 0, 11 * 60, 5)) + 1  # that stream's lines only: 09:00-10:55, the Xid
    assert cache.load("late", "us-west-2").groups[w.group].lagging == {}  # it wrote again: no longer lagging


def test_a_batch_retried_out_of_order_within_the_margin_is_read(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache.json")
    result(retried_batch(at(11, 5)), cache)  # the node's last line 11:05: live, not lagging; 10:55 not yet there
    w = retried_batch(at(12, 5))
    hourly = result(w, cache)
    assert comparable(hourly, kernel_count=False) == comparable(result(w, None), kernel_count=False)
    assert [(e.code, e.time) for e in late_node(hourly, w).gpu_errors] == [(79, parse_time(at(10, 57)))]


def test_past_the_lagging_limit_every_stream_is_read_again_from_the_late_delivery_horizon(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coverage_cache, "MAX_LAGGING_STREAMS", 0)
    cache = FileCache(tmp_path / "cache.json")
    evidence(stalled_agent(at(11, 30)), cache)
    w = stalled_agent(at(12, 30))
    hourly = evidence(w, cache)
    (summary,) = [q for q in hourly.queries if q.purpose == "stream-summary"]
    assert summary.start == parse_time(at(9))  # the hour of 09:30: two hours before the last audit
    assert not [q for q in hourly.queries if q.purpose == "stream-hours" and q.end == summary.start]
    assert comparable(result(w, FileCache(tmp_path / "other.json"))) == comparable(result(w, None))


def test_a_refused_re_read_of_a_silent_stream_leaves_its_liveness_unproven_and_the_cache_as_it_was(
        tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache.json")
    evidence(stalled_agent(at(11, 30)), cache)
    before = cache.load("late", "us-west-2")
    w = stalled_agent(at(12, 30))
    aws = aws_for(w.world())
    refused: list[str] = []

    def refuse(params: dict[str, Any], **_: Any) -> None:  # the account's query quota, say, refuses the re-reads
        if params.get("queryString", "").startswith("filter @logStream in"):
            refused.append(params["queryString"])
            raise ClientError({"Error": {"Code": "LimitExceededException", "Message": "refused by the test"}},
                              "StartQuery")

    aws.client("logs").meta.events.register("provide-client-params.logs.StartQuery", refuse)
    hourly = run_audit(aws, AuditRequest(cluster="late"), coverage_cache=cache)

    assert refused
    row = late_node(hourly, w).coverage[0]
    assert row.status == "Not observable" and "liveness not proven" in (row.note or "")  # never "empty", never live
    assert any("LimitExceededException" in g for g in hourly.visibility_gaps)
    assert cache.load("late", "us-west-2").groups[w.group] == before.groups[w.group]
    # and the next hour, read again, says what a full audit says
    w = stalled_agent(at(13, 30))
    assert comparable(result(w, cache)) == comparable(result(w, None))


def _deployed_read(world: PClusterWorld, state: CacheState) -> BatchEvidence:
    """One CollectLogs of the deployed state machine: every query still running at its first poll, so each round
    ends in QueriesPending and is invoked again (the journal carried between invocations as the state machine does)."""
    w = world.world()
    w.faults.append({"service": "logs", "operation": "GetQueryResults", "status": "Running", "times": 1})
    backend = WorldBackend(w)
    aws = Aws(session=backend.session(), region=w.region, clock=lambda: w.now, sleep=backend.sleep,
              monotonic=backend.monotonic)
    evidence_ = pipeline.read_inventory(aws, AuditRequest(cluster="late"))
    (batch,) = pipeline.log_batches(evidence_.log_groups)
    journal = QueryJournal(begun=evidence_.now, deadline_s=1800)
    for _ in range(20):
        try:
            return pipeline.collect_logs(aws, evidence_, batch, state, journal=journal)
        except QueriesPending:
            journal = QueryJournal.model_validate_json(journal.model_dump_json())
    raise AssertionError("the collection never ended")


def test_the_deployed_collection_reads_the_silence_again_across_its_waits_as_the_cli_does(tmp_path: Path) -> None:
    state = CacheState(cluster="late", region="us-west-2")
    _deployed_read(stalled_agent(at(11, 30)), state)
    assert list(state.groups.values())[0].lagging  # the silent stream is lagging after the first read
    deployed = _deployed_read(stalled_agent(at(12, 30)), state)
    cache = FileCache(tmp_path / "cache.json")
    evidence(stalled_agent(at(11, 30)), cache)
    cli = evidence(stalled_agent(at(12, 30)), cache)
    assert sorted((a.log_stream, a.live_hours, a.last_event) for a in deployed.activity) == sorted(
        (a.log_stream, a.live_hours, a.last_event) for a in cli.stream_activity)
    assert [(g.log_stream, g.time) for g in deployed.gpu_lines] == [(g.log_stream, g.time) for g in cli.gpu_lines]
    assert sorted((k.log_stream, k.kernel_lines) for k in deployed.kernel) == sorted(
        (k.log_stream, k.kernel_lines) for k in cli.kernel_streams)
    assert any(q.purpose == "stream-hours" and q.end == parse_time(at(11)) for q in deployed.queries)
