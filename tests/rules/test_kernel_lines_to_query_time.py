"""`kernel lines ever` counts to the query time, and a dead stream's note never prints a negative span (#35 item 12).

From RULES §4 (b): kernel lines are counted per stream "from launch to the query time (`now`), not to the
window's end". A window in the past therefore still counts the kernel lines written after it. A stream that
carries kernel lines but wrote nothing in the padded window says when it last wrote, against that window: before
it, or after it (it wrote again later) — a span is never negative.
"""

from __future__ import annotations

import re

from gpuaudit.model.result import CoverageRow, Result
from tests.helpers.worlds import PClusterWorld, at, node_of

SINCE, UNTIL = at(-30), at(-26)  # 09-29 18:00 → 22:00, a day and a half before the query time (10-01 12:30)


def _kernel(host: str, when: str, text: str = "NVRM: GPU at PCI:0000:53:00: GPU-1 link up") -> tuple[str, str]:
    return when, f"{host} kernel: {text}"


def _row(result: Result, w: PClusterWorld) -> CoverageRow:
    node = w.compute[0]
    (row,) = [c for c in node_of(result, node.instance_id).coverage if c.log_stream == w.stream_name(node)]
    return row


def test_kernel_lines_after_the_window_are_counted_to_the_query_time() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-96))
    node = w.compute[0]
    stream = w.healthy(node, at(-96), at(12, 25))  # one boot kernel line at launch, live every 10 min since
    later = [at(-6), at(-3), at(2), at(11)]  # four kernel lines after the window, before the query time
    w.stream(w.group, stream, events=[_kernel(node.hostname, t) for t in later])
    row = _row(w.audit(w.cluster, since=SINCE, until=UNTIL), w)
    assert row.kernel_lines_ever == 1 + len(later)
    assert row.status == "Measured"


def test_a_stream_silent_in_the_window_that_wrote_again_later_says_after_never_a_negative_span() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-96))
    node = w.compute[0]
    stream = w.healthy(node, at(-96), at(-40))  # kernel stream live until 40 h before the query time…
    w.stream(w.group, stream, events=[_kernel(node.hostname, at(-10, 5)), _kernel(node.hostname, at(12, 10))])
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    row = _row(result, w)
    assert row.status == "Not observable"  # nothing in the padded window: the window is not covered
    assert row.kernel_lines_ever == 3  # the boot line and the two later lines, to the query time
    note = row.note or ""
    # padded window 09-29 17:00 → 23:00; the stream's last event 10-01 12:10: 1 day 13 h 10 min after it
    assert f"its last event was {at(12, 10)}, 1 day(s) 13 h after the padded window" in note
    assert not re.search(r"-\d+ (day|h|min)", note), note
    assert "before the padded window" not in note
