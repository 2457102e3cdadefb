"""Dead streams show when they died (#21 item 6): a kernel-carrying stream with no line in the window still shows
its first and last event times (DescribeLogStreams) and how long before the window it went silent (RULES §4:
the reader must see "last event 3 days before the window", not a blank)."""

from __future__ import annotations

from tests.helpers.worlds import PClusterWorld, at, calls, node_of

SINCE, UNTIL = at(6), at(10)


def test_a_stream_silent_for_days_shows_its_last_event_and_how_long_before_the_window() -> None:
    w = PClusterWorld(n_compute=2, launch=at(-96))
    dead, alive = w.compute
    w.healthy(dead, at(-96), at(-67, 30))  # boot kernel line, then lines until 3 days before the window
    w.other_log(dead, "slurmd", at(-96), at(12, 25))  # the node itself is up: only the kernel stream died
    w.healthy(alive, at(-96), at(12, 25))
    for log in ("clustermgtd", "slurm_resume", "slurmctld"):  # a live head node: no control-plane lookup either
        w.other_log(w.head, log, at(-96), at(12, 25))
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    n = node_of(result, dead.instance_id)
    assert n.xid_status == "Not observable"  # unchanged: a dead stream proves nothing
    (row,) = [c for c in n.coverage if c.log_stream == w.stream_name(dead)]
    assert row.first_event is not None and row.last_event is not None
    assert row.first_event.isoformat().startswith("2026-09-27T00:00")  # at(-96): the boot line
    assert row.last_event.isoformat().startswith("2026-09-28T05:20")  # the last line before at(-67, 30)
    # the padded window starts at 05:00 on the 1st: 2 days 23 h 40 min after that last line
    assert "its last event was 2026-09-28T05:20:00Z, 2 day(s) 23 h before the padded window" in (row.note or "")
    assert "DescribeLogStreams" in (row.note or "")
    # the live node's row comes from the window's own bins, with no extra call for it
    assert node_of(result, alive.instance_id).xid_status == "Measured"
    assert calls(result, "logs", "DescribeLogStreams") == 1


def test_a_failed_lookup_is_a_named_gap_and_changes_no_status() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-96))
    (dead,) = w.compute
    w.healthy(dead, at(-96), at(-67, 30))
    w.fault("logs", "DescribeLogStreams", "AccessDeniedException")
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    n = node_of(result, dead.instance_id)
    assert n.xid_status == "Not observable"
    assert any("silent stream" in g and "DescribeLogStreams" in g for g in result.visibility_gaps)
