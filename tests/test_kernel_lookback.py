"""The kernel lookback of a full read (#14 item 6): bounded at 14 days for every node, so a full read's cost does
not grow with node age; a node launched earlier whose streams held no `kernel:` line in those 14 days gets one more,
targeted look back to its launch (at most 90 days), because RULES §4 (b) asks "since launch"."""

from __future__ import annotations

from datetime import datetime, time, timedelta

from gpuaudit.domain.timing import KERNEL_DEEP_LOOKBACK, KERNEL_LOOKBACK
from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import collect, run_audit
from tests.helpers.worlds import NOW, PClusterWorld, at, node_of

SINCE, UNTIL = at(6), at(10)
PADDED_START = parse_time(at(5))


def kernel_queries(ev: Evidence) -> list[tuple[str, str]]:
    """The ranges the kernel look-back read, its day queries joined where they meet (#34 item 4: no query over more
    than a day of a group, every day cut at UTC midnight)."""
    days = sorted((q.start, q.end) for q in ev.queries if q.purpose == "kernel-streams")
    assert days and all(b - a <= timedelta(days=1) for a, b in days)
    assert all(b.time() == time(0) for _, b in days[:-1] if b not in (PADDED_START - KERNEL_LOOKBACK,))
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
