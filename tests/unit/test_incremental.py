"""Incremental hourly audits equal full audits, and scan a small fraction of the records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from helpers.worlds import PClusterWorld, at, aws_for

from gpuaudit.collectors.cache import FileCache
from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit


def world_at(now: str, days: int = 3) -> PClusterWorld:
    """Four GPU nodes logging every 5 min for some days; one kernel stream dies at 09:00, one node logs an Xid."""
    start = at(-24 * days)
    w = PClusterWorld("inc", n_compute=4, launch=start, now=now)
    for n in w.compute[:3]:
        w.healthy(n, start, at(14), every_s=300)
        w.other_log(n, "slurmd", start, at(14), every_s=900)
    silent = w.compute[3]
    w.healthy(silent, start, at(9), every_s=300)
    w.other_log(silent, "slurmd", start, at(14), every_s=900)
    host = w.compute[0].hostname
    w.stream(w.group, w.stream_name(w.compute[0]),
             events=[(at(10, 20), f"{host} kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=python3")])
    return w


def audit(now: str, cache: FileCache | None) -> Result:
    return run_audit(aws_for(world_at(now).world()), AuditRequest(cluster="inc"), coverage_cache=cache)


def comparable(result: Result) -> list[tuple]:
    rows = []
    for n in result.nodes:
        rows.append((n.instance_id, n.xid_status, n.verdict,
                     [(c.log_group, c.log_stream, c.status, c.live_hours, tuple(c.empty_hours), c.kernel_lines_ever,
                       c.last_event) for c in n.coverage],
                     [(e.code, e.pci, e.time, e.count) for e in n.gpu_errors]))
    return rows




@pytest.mark.parametrize("hours_later", [1, 3])
def test_hourly_runs_with_a_cache_equal_a_full_run(tmp_path: Path, hours_later: int) -> None:
    cache = FileCache(tmp_path / "cache.json")
    # Given an audit one or three hours earlier that filled the cache
    audit(at(12 - hours_later, 30), cache)
    # When the next hourly audit runs from the cache
    incremental = audit(at(12, 30), cache)
    # Then it says exactly what a full audit of the same moment says
    full = audit(at(12, 30), None)
    assert comparable(incremental) == comparable(full)
    assert {n.xid_status for n in full.nodes if n.role == "compute"} == {"Measured", "Not observable"}


def test_incremental_run_scans_a_fiftieth_of_a_full_seven_day_run(tmp_path: Path) -> None:
    from gpuaudit.pipeline import collect

    cache = FileCache(tmp_path / "cache.json")
    request = AuditRequest(cluster="inc", last="7d")
    full = collect(aws_for(world_at(at(11, 30), days=8).world()), request, cache)
    nxt = collect(aws_for(world_at(at(12, 30), days=8).world()), request, cache)
    full_scanned = sum(q.records_scanned for q in full.queries)
    next_scanned = sum(q.records_scanned for q in nxt.queries)
    assert full_scanned > 0 and next_scanned * 50 <= full_scanned, (full_scanned, next_scanned)


def test_a_read_with_a_gap_is_not_cached(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache.json")
    w = world_at(at(11, 30))
    w.fault("logs", "GetQueryResults", "ThrottlingException")  # every query result unreadable
    run_audit(aws_for(w.world()), AuditRequest(cluster="inc"), coverage_cache=cache)
    assert not cache.load("inc", "us-west-2").groups  # nothing proven, nothing kept
    assert comparable(audit(at(12, 30), cache)) == comparable(audit(at(12, 30), None))


def test_merged_hours_read_like_a_full_read(tmp_path: Path) -> None:
    """Per stream, the incremental evidence holds the full read's live hours, in the full read's form:
    no per-hour counts for a stream live in every hour, the live hours of a stream with gaps."""
    from gpuaudit.pipeline import collect

    def hours(evidence: Evidence) -> dict[tuple[str, str], tuple[int, frozenset | None]]:
        return {(a.log_group, a.log_stream): (a.live_hours, None if a.hour_counts is None else
                                              frozenset(h for h, n in a.hour_counts.items() if n > 0))
                for a in evidence.stream_activity}

    cache = FileCache(tmp_path / "cache.json")
    request = AuditRequest(cluster="inc")
    collect(aws_for(world_at(at(10, 30)).world()), request, cache)
    incremental = hours(collect(aws_for(world_at(at(12, 30)).world()), request, cache))
    full = hours(collect(aws_for(world_at(at(12, 30)).world()), request, None))
    assert incremental == full
    assert sum(counts is None for _, counts in full.values()) >= 6  # the healthy kernel and slurmd streams
    assert any(counts is not None for _, counts in full.values())  # the stream that died at 09:00


def test_line_counts_stay_those_of_the_window_over_many_hourly_runs(tmp_path: Path) -> None:
    """Cached hours carry their lines; an hour leaving the window takes its share with it, so a week of
    hourly runs does not pile up counts (the per-hour split is exact for steady streams, as here, and
    within one Xid line where a node logged one)."""
    from gpuaudit.pipeline import collect

    cache = FileCache(tmp_path / "cache.json")
    request = AuditRequest(cluster="inc")
    for hour in range(6, 13):
        incremental = collect(aws_for(world_at(at(hour, 30)).world()), request, cache)
    full = collect(aws_for(world_at(at(12, 30)).world()), request, None)
    merged = {(a.log_group, a.log_stream): a.lines for a in incremental.stream_activity}
    for a in full.stream_activity:
        assert abs(merged[(a.log_group, a.log_stream)] - a.lines) <= 2, a.log_stream
    assert sum(merged.values()) == pytest.approx(sum(a.lines for a in full.stream_activity), abs=2)


def _refuse_named_gpu_reads(aws: Any) -> list[str]:
    """Make StartQuery refuse the GPU-lines queries over named streams (as a throttled account would); returns the
    refused query texts."""
    refused: list[str] = []

    def refuse(params: dict[str, Any], **_: Any) -> None:
        text = params.get("queryString", "")
        if text.startswith("filter @logStream in") and "NVRM" in text:
            refused.append(text)
            raise ClientError({"Error": {"Code": "LimitExceededException", "Message": "refused by the test"}},
                              "StartQuery")

    aws.client("logs").meta.events.register("provide-client-params.logs.StartQuery", refuse)
    return refused


def test_an_hourly_audit_reads_gpu_and_kernel_lines_only_from_streams_whose_summary_counts_a_hint(
        tmp_path: Path) -> None:
    """The new hours are scanned once for liveness and hints together; the GPU and kernel lines are then read from
    the one stream with a hint (the Xid at 10:20), by name, so those queries scan that stream's lines only."""
    from gpuaudit.pipeline import collect

    cache = FileCache(tmp_path / "cache.json")
    request = AuditRequest(cluster="inc")
    collect(aws_for(world_at(at(10, 30)).world()), request, cache)
    hourly = collect(aws_for(world_at(at(11, 30)).world()), request, cache)

    (summary,) = [q for q in hourly.queries if q.purpose == "stream-summary"]
    # (the stream silent since 09:00 is read again by name over its own hours: test_lagging_streams below)
    (gpu,) = [q for q in hourly.queries if q.purpose == "gpu-lines" and q.start == summary.start]
    assert gpu.end == summary.end  # the same fresh hours
    # by its index, only that stream's lines: one every 5 min over 10:00-11:30, and the Xid
    assert gpu.records_scanned == 18 + 1 < summary.records_scanned / 4
    xid_stream = world_at(at(11, 30)).stream_name(world_at(at(11, 30)).compute[0])
    assert [(g.log_stream, g.time) for g in hourly.gpu_lines if "Xid" in g.message] == [
        (xid_stream, parse_time(at(10, 20)))]
    assert hourly.gpu_lines_read(summary.log_groups[0])
    (kernel,) = [q for q in hourly.queries if q.purpose == "kernel-streams" and q.end == summary.end]
    assert (kernel.start, kernel.end) == (parse_time(at(10, 30)), parse_time(at(11, 30)))  # since the last audit
    assert kernel.records_scanned == 12  # that stream's lines since the last audit only


def test_an_hourly_audit_without_a_hint_runs_no_gpu_or_kernel_query_and_says_the_gpu_lines_were_read(
        tmp_path: Path) -> None:
    from gpuaudit.pipeline import collect

    cache = FileCache(tmp_path / "cache.json")
    request = AuditRequest(cluster="inc")
    collect(aws_for(world_at(at(13, 30)).world()), request, cache)  # the Xid at 10:20 is settled by then
    hourly = collect(aws_for(world_at(at(14, 30)).world()), request, cache)

    assert not [q for q in hourly.queries if q.purpose in ("gpu-lines", "kernel-streams")]
    (summary,) = [q for q in hourly.queries if q.purpose == "stream-summary"]
    assert hourly.gpu_lines_read(summary.log_groups[0])  # the summary read them: no stream holds a hint
    assert summary.records_scanned > 0  # the streams wrote until 14:00
    full = collect(aws_for(world_at(at(14, 30)).world()), request, None)
    assert {(k.log_stream, k.kernel_lines) for k in hourly.kernel_streams} == {
        (k.log_stream, k.kernel_lines) for k in full.kernel_streams}


def test_a_refused_gpu_read_by_name_is_a_named_gap_the_cache_does_not_keep(tmp_path: Path) -> None:
    from gpuaudit.pipeline import collect

    cache = FileCache(tmp_path / "cache.json")
    request = AuditRequest(cluster="inc")
    collect(aws_for(world_at(at(10, 30)).world()), request, cache)
    before = cache.load("inc", "us-west-2")
    aws = aws_for(world_at(at(11, 30)).world())
    refused = _refuse_named_gpu_reads(aws)

    hourly = collect(aws, request, cache)

    assert refused
    group = next(q.log_groups[0] for q in hourly.queries if q.purpose == "stream-summary")
    assert not hourly.gpu_lines_read(group)
    assert any(g.operation == "StartQuery" and "LimitExceededException" in (g.error_code or "") for g in hourly.gaps)
    assert cache.load("inc", "us-west-2").groups[group] == before.groups[group]  # nothing new kept
    assert comparable(audit(at(11, 30), cache)) == comparable(audit(at(11, 30), None))


def test_a_generated_fleet_audited_hourly_from_the_cache_equals_full_audits(tmp_path: Path) -> None:
    """Three hourly audits chained through the cache over a generated fleet (nodes going silent at random hours, Xids,
    kernel lines), then a fourth: what it says equals a full audit of the same moment, kernel counts included."""
    from datetime import timedelta

    from gpuaudit.devtools import worldgen
    from gpuaudit.embedded.world import parse_world

    spec = worldgen.WorldSpec(kind="parallelcluster", nodes=60, days=1, silent_fraction=0.1, xid_rate=2.0, seed=2)
    world = parse_world(worldgen.generate(spec))
    aws = aws_for(world)
    cache = FileCache(tmp_path / "cache.json")
    request = AuditRequest(cluster=spec.cluster_name, last="1d")
    now = world.now
    lagging = []
    for hours_before in (3, 2, 1):
        world.now = now - timedelta(hours=hours_before)
        run_audit(aws, request, coverage_cache=cache)
        lagging.append(sum(len(g.lagging) for g in cache.load(spec.cluster_name, world.region).groups.values()))
    assert lagging[0] > 0  # nodes that fell silent shortly before: read again by name at the next audits
    world.now = now
    hourly = run_audit(aws, request, coverage_cache=cache)
    full = run_audit(aws, request)
    assert comparable(hourly) == comparable(full)
    assert {n.xid_status for n in full.nodes if n.role == "compute"} == {"Measured", "Not observable"}
    assert any(n.gpu_errors for n in full.nodes)
    assert cache.load(spec.cluster_name, world.region).groups  # the cache was used, not rebuilt


@pytest.mark.parametrize("log", ["système-messages", 'sys"log\\messages', "日志-messages", "sys\x01messages"])
def test_streams_named_with_any_characters_are_read_by_name_as_a_full_read_reads_them(tmp_path: Path, log: str) -> None:
    """The hourly read names streams in `@logStream in [...]` (their GPU lines, a silent stream's hours): a name
    with non-ASCII characters, quotes or backslashes must match its stream, or its Xid would go unread."""
    def fleet(now: str) -> PClusterWorld:
        w = PClusterWorld("odd", n_compute=2, launch=at(-24), now=now)
        live, silent = w.compute
        stream = w.healthy(live, at(-24), at(14), every_s=300, log=log)
        w.stream(w.group, stream, events=[(at(11, 40), f"{live.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, "
                                                       "pid=1, name=python3, GPU has fallen off the bus.")])
        w.healthy(silent, at(-24), at(10, 50), every_s=300, log=log)  # silent shortly before 11:30: lagging
        return w

    cache = FileCache(tmp_path / "cache.json")
    run_audit(aws_for(fleet(at(11, 30)).world()), AuditRequest(cluster="odd"), coverage_cache=cache)
    hourly = run_audit(aws_for(fleet(at(12, 30)).world()), AuditRequest(cluster="odd"), coverage_cache=cache)
    full = run_audit(aws_for(fleet(at(12, 30)).world()), AuditRequest(cluster="odd"))
    assert comparable(hourly) == comparable(full)
    assert [e.code for n in hourly.nodes for e in n.gpu_errors] == [79]
