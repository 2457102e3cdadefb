"""The kernel lookback of a full read (#14 item 6): bounded at 14 days for every node, so a full read's cost does
not grow with node age; a node launched earlier whose streams held no `kernel:` line in those 14 days gets one more,
targeted look back to its launch (at most 90 days), because RULES §4 (b) asks "since launch"."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from pathlib import Path

from gpuaudit.collectors.cache import CacheState, FileCache
from gpuaudit.domain.timing import KERNEL_DEEP_LOOKBACK, KERNEL_LOOKBACK
from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import collect, run_audit
from tests.helpers.worlds import NOW, PClusterWorld, at, node_of

SINCE, UNTIL = at(6), at(10)
PADDED_START = parse_time(at(5))


def kernel_queries(ev: Evidence, by_day: bool = False) -> list[tuple[str, str]]:
    """The ranges the kernel look-back read, its queries joined where they meet: one query per range (#50 item 1),
    or (`by_day`, a group stopped at the deadline before) no query over more than a day of a group, every day cut at
    UTC midnight (#34 item 4)."""
    days = sorted((q.start, q.end) for q in ev.queries if q.purpose == "kernel-streams")
    assert days
    if by_day:
        assert all(b - a <= timedelta(days=1) for a, b in days)
        assert all(b.time() == time(0) for _, b in days[:-1] if b not in (PADDED_START - KERNEL_LOOKBACK,))
    else:
        assert len(days) <= 2  # the bounded look-back, and the deep one of a node older than it
    joined: list[tuple[datetime, datetime]] = []
    for a, b in days:
        if joined and joined[-1][1] == a:
            joined[-1] = (joined[-1][0], b)
        else:
            joined.append((a, b))
    return [(a.isoformat(), b.isoformat()) for a, b in joined]


def cut_at(ev: Evidence, when: datetime) -> bool:
    """Does one kernel-streams query end where another begins at `when` (two reads meeting there)?"""
    days = [(q.start, q.end) for q in ev.queries if q.purpose == "kernel-streams"]
    return any(b == when for _, b in days) and any(a == when for a, _ in days)


def world(launch_hours_ago: int, kernel_recent: bool = False) -> PClusterWorld:
    w = PClusterWorld(n_compute=1, launch=at(-launch_hours_ago))
    (node,) = w.compute
    w.healthy(node, at(-launch_hours_ago), at(12, 25))  # a boot kernel line at launch, then non-kernel lines
    if kernel_recent:
        w.stream(w.group, w.stream_name(node), events=[(at(-24), f"{node.hostname} kernel: EXT4-fs remounted")])
    return w


def test_a_young_node_is_read_since_launch_with_no_second_look() -> None:
    w = world(48)
    ev = collect(w.aws(), AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL))  # type: ignore[arg-type]
    assert [s for s, _ in kernel_queries(ev)] == [parse_time(at(-48)).isoformat()]


def test_an_old_node_with_recent_kernel_lines_costs_14_days_only() -> None:
    w = world(60 * 24, kernel_recent=True)
    ev = collect(w.aws(), AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL))  # type: ignore[arg-type]
    assert [s for s, _ in kernel_queries(ev)] == [(PADDED_START - KERNEL_LOOKBACK).isoformat()]
    result = run_audit(w.aws(), AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL))  # type: ignore[arg-type]
    assert node_of(result, w.compute[0].instance_id).xid_status == "Measured"


def test_an_old_quiet_kernel_stream_is_proven_by_its_boot_lines() -> None:
    # launched 30 days ago; its only kernel line is the boot banner; the stream is live every hour since
    w = world(30 * 24)
    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL)  # type: ignore[arg-type]
    ev = collect(w.aws(), request)
    bounded = (PADDED_START - KERNEL_LOOKBACK).isoformat()
    # the bounded read, then the second look from the launch to where the bounded read began, to the query time (§4 b)
    assert kernel_queries(ev) == [(parse_time(at(-30 * 24)).isoformat(), parse_time(NOW).isoformat())]
    assert cut_at(ev, parse_time(bounded))
    assert node_of(run_audit(w.aws(), request), w.compute[0].instance_id).xid_status == "Measured"


def test_past_90_days_the_node_is_unproven_and_the_note_says_why() -> None:
    w = world(120 * 24)
    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL)  # type: ignore[arg-type]
    ev = collect(w.aws(), request)
    bounded = PADDED_START - KERNEL_LOOKBACK
    assert min(s for s, _ in kernel_queries(ev)) == (bounded - KERNEL_DEEP_LOOKBACK).isoformat()
    n = node_of(run_audit(w.aws(), request), w.compute[0].instance_id)
    assert n.xid_status == "Not observable"
    note = " ".join(c.note or "" for c in n.coverage)
    assert "older lines were not searched" in note and "not kernel messages" not in note
    assert str((bounded - KERNEL_DEEP_LOOKBACK - timedelta(0)).date()) in note


def test_the_look_back_is_one_query_unless_the_group_was_stopped_at_the_deadline_then_a_day_at_a_time(
        tmp_path: Path) -> None:
    # Given a node launched 5 days ago, audited with a coverage cache in which its groups' last read was stopped at
    # the collection's deadline (CacheState.stopped), and the same world audited with no such record
    w = world(5 * 24)
    request = AuditRequest(cluster=w.cluster, since=SINCE, until=UNTIL)  # type: ignore[arg-type]
    plain = collect(w.aws(), request)
    groups = sorted({g for q in plain.queries for g in q.log_groups})
    stopped = FileCache(tmp_path / "cache.json")
    stopped.save(CacheState(cluster=w.cluster, region=plain.cluster.region, stopped=dict.fromkeys(groups, 1)))
    by_day = collect(w.aws(), request, stopped)
    # Then the look-back with no stop recorded is one query over the whole range (#50 item 1) ...
    launch = parse_time(at(-5 * 24)).isoformat()
    assert kernel_queries(plain) == [(launch, parse_time(NOW).isoformat())]
    assert len([q for q in plain.queries if q.purpose == "kernel-streams"]) == 1
    # ... and the stopped groups' look-back is read again a day at a time, each group alone, the same range covered
    assert all(len(q.log_groups) == 1 for q in by_day.queries if q.purpose == "kernel-streams")
    for group in groups:
        days = [q for q in by_day.queries if q.purpose == "kernel-streams" and q.log_groups == [group]]
        assert len(days) == 6 and all(q.end - q.start <= timedelta(days=1) for q in days)
    assert kernel_queries(by_day, by_day=True) == kernel_queries(plain)
    # and both reads find the same kernel streams, with the same counts (the days summed per stream)
    def streams(ev: Evidence) -> list[tuple[str, str, int]]:
        return sorted((k.log_group, k.log_stream, k.kernel_lines) for k in ev.kernel_streams)
    assert streams(by_day) == streams(plain) and streams(plain)
    # and a read that completes forgets the stop: the next full read is one range again
    assert FileCache(tmp_path / "cache.json").load(w.cluster, plain.cluster.region).stopped == {}
