"""Runs of identical lines (`LogRun`, a world's periodic entries) give the outcome of their lines.

The evaluator decides and aggregates a run arithmetically where the query cannot tell its lines
apart, and expands it elsewhere. The property below compares, for many query forms that take each
path, the outcome of runs with the outcome of the same lines as LogRecords (whose evaluation
`test_insights_eval.py` pins against hand-computed answers); the first tests are worked by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit.collectors.log_queries import GPU_QUERY, KERNEL_QUERY, STREAM_COUNTS, SUMMARY_QUERY, hours_query
from gpuaudit.embedded.insights import LogRecord, LogRun, QueryOutcome, ScanItem, run_query

ACCOUNT = "111122223333"
T0_MS = int(datetime(2026, 9, 27, 10, tzinfo=UTC).timestamp()) * 1000
MINUTE, HOUR = 60_000, 3_600_000


def cells(outcome: QueryOutcome) -> list[list[tuple[str, str]]]:
    return [[(cell["field"], cell["value"]) for cell in row] for row in outcome.rows]


def expanded(items: list[ScanItem]) -> list[LogRecord]:
    return [line for item in items for line in (item.records() if isinstance(item, LogRun) else [item])]


# A heartbeat every 5 minutes from 10:00:00 to 11:00:00 inclusive: 13 lines, 12 in hour 10 and 1 in hour 11.
HEARTBEAT = LogRun("/g/a", "i-a", range(T0_MS, T0_MS + HOUR + 1, 5 * MINUTE), "heartbeat")


def test_a_run_is_counted_per_hour_with_its_first_and_last_line() -> None:
    outcome = run_query(
        "stats count(*) as n, min(@timestamp) as first, max(@timestamp) as last by @logStream, bin(1h) as hour",
        [HEARTBEAT], T0_MS // 1000 - 3600, T0_MS // 1000 + 7200, ACCOUNT)
    assert cells(outcome) == [
        [("@logStream", "i-a"), ("hour", "2026-09-27 10:00:00.000"), ("n", "12"),
         ("first", "2026-09-27 10:00:00.000"), ("last", "2026-09-27 10:55:00.000")],
        [("@logStream", "i-a"), ("hour", "2026-09-27 11:00:00.000"), ("n", "1"),
         ("first", "2026-09-27 11:00:00.000"), ("last", "2026-09-27 11:00:00.000")],
    ]
    assert (outcome.records_scanned, outcome.records_matched, outcome.bytes_scanned) == (13, 13, 13 * 9)


def test_a_run_is_cut_to_the_time_range_and_filtered_as_a_whole() -> None:
    # 10:30:00 to 10:59:59.999 holds 10:30, 10:35, ..., 10:55: six lines.
    start_s, end_s = T0_MS // 1000 + 1800, T0_MS // 1000 + 3599
    kept = run_query("filter @message like /beat/ | stats count(*) as n by @log", [HEARTBEAT], start_s, end_s, ACCOUNT)
    assert cells(kept) == [[("@log", f"{ACCOUNT}:/g/a"), ("n", "6")]]
    dropped = run_query("filter @message like /Xid/ | stats count(*) as n", [HEARTBEAT], start_s, end_s, ACCOUNT)
    assert (dropped.rows, dropped.records_scanned, dropped.records_matched) == ([], 6, 0)


def test_a_time_filter_splits_a_run() -> None:
    # @timestamp >= 10:50 keeps 10:50, 10:55 and 11:00 of the 13 lines.
    query = f"filter @timestamp >= {T0_MS + 50 * MINUTE} | stats count(*) as n by bin(1h)"
    outcome = run_query(query, [HEARTBEAT], T0_MS // 1000 - 3600, T0_MS // 1000 + 7200, ACCOUNT)
    assert [dict(row)["n"] for row in cells(outcome)] == ["2", "1"]
    assert (outcome.records_scanned, outcome.records_matched) == (13, 3)


QUERIES = [
    KERNEL_QUERY,
    SUMMARY_QUERY,
    GPU_QUERY,
    STREAM_COUNTS,
    # a value computed from the line's text is the same on every line of a run: aggregated whole
    "fields strcontains(@message, 'kernel:') as k | stats max(k) as m, min(k), count(*) by @logStream, bin(1h)",
    "fields least(strcontains(@message, 'beat'), 1) as b | filter @message like /e/ | stats max(b) by @log",
    # a sum of such a value over a run's bin is the value times the bin's lines
    "fields strcontains(@message, 'e') as e | stats sum(e) as s, count(*) by "
    "@logStream, bin(1h) | stats sum(s) by @logStream",
    "fields greatest(strcontains(@message, 'Xid'), strcontains(@logStream, 's3')) "
    "as x | stats sum(x), min(x) by bin(30m)",
    hours_query(["s1", "s3"]),
    "stats count(*) by bin(1h)",
    "stats count(*) as n, min(@timestamp), max(@timestamp) by @logStream, bin(30m)",
    "stats count(@message) as c, max(@ingestionTime) as i, min(@ingestionTime) by @log, @message",
    "filter @message like /beat/ | stats count(*) by @log, @logStream",
    "filter @logStream = 's1' or @message like /kernel:/ | stats count(*), max(@timestamp) by bin(5m)",
    f"filter @timestamp > {T0_MS + 90 * MINUTE} | stats count(*) by bin(1h)",
    f"filter @message like /e/ and @ingestionTime < {T0_MS + 2 * HOUR} | stats count(*) by @logStream",
    "stats count(*) by bin(1h), bin(1d)",
    "stats count(*) as n by @timestamp | sort n desc | limit 20",
    "stats earliest(@message), latest(@message), count_distinct(@logStream) by bin(1h)",
    "stats count(*) as lines by @log, @logStream, bin(1h) as hour | stats count(*) as live, sum(lines) by @log",
    # a second stats by exactly the first one's fields runs one stream at a time
    "stats count(*) as n, max(@timestamp) as last by @logStream, bin(30m) | stats count(*), sum(n), max(last) "
    "by @logStream | sort count(*) asc",
    "stats count(*) as n, min(@timestamp) as f by @log, @logStream, bin(1h) | stats sum(n) as t, min(f), "
    "avg(n), count(*) as h by @logStream, @log",
    "filter @message like /e/ | stats count(*) as n by @message, bin(2h) | stats count(*) as bins by @message",
    "stats count(*) as @logStream by @logStream, bin(1h) | stats count(*) by @logStream",
    "fields @timestamp, @logStream, @message | sort @timestamp asc | limit 7",
    "filter @message like /kernel:/",
    "filter @message not like /heart/ | fields @ptr, @message",
    "limit 5",
]

MESSAGES = ["heartbeat", "kernel: eth0 up", "NVRM: Xid (PCI:0000:53:00): 79, pid=1", "é kernel: beat"]
STREAMS = ["s1", "s2", "s3"]
GROUPS = ["/g/a", "/g/b"]
STEPS = [1, 1_000, 7 * MINUTE, 5 * MINUTE, HOUR, 90 * MINUTE]

record_items = st.builds(
    LogRecord,
    st.sampled_from(GROUPS),
    st.sampled_from(STREAMS),
    st.integers(T0_MS - 3 * HOUR, T0_MS + 6 * HOUR),
    st.sampled_from(MESSAGES),
    st.one_of(st.none(), st.integers(T0_MS - 3 * HOUR, T0_MS + 6 * HOUR)),
)


@st.composite
def run_items(draw: st.DrawFn) -> LogRun:
    # Whole minutes too, so runs meet bin edges exactly (where an off-by-one would hide).
    first = draw(st.one_of(st.integers(T0_MS - 3 * HOUR, T0_MS + 6 * HOUR),
                           st.integers(-180, 360).map(lambda minutes: T0_MS + minutes * MINUTE)))
    step = draw(st.sampled_from(STEPS))
    count = draw(st.integers(1, 150))
    return LogRun(draw(st.sampled_from(GROUPS)), draw(st.sampled_from(STREAMS)),
                  range(first, first + count * step, step), draw(st.sampled_from(MESSAGES)))


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.one_of(record_items, run_items()), max_size=12),
    query=st.sampled_from(QUERIES),
    start_s=st.integers(T0_MS // 1000 - 4 * 3600, T0_MS // 1000 + 3 * 3600),
    length_s=st.integers(0, 10 * 3600),
)
def test_runs_give_the_outcome_of_their_lines(items: list[ScanItem], query: str, start_s: int, length_s: int) -> None:
    end_s = start_s + length_s
    as_runs = run_query(query, items, start_s, end_s, ACCOUNT)
    as_lines = run_query(query, expanded(items), start_s, end_s, ACCOUNT)
    assert as_runs == as_lines


def test_every_query_form_sees_some_lines() -> None:
    """Guards the property above against vacuity: each form yields rows on a fixed mixed input."""
    items: list[ScanItem] = [
        HEARTBEAT,
        LogRun("/g/b", "s1", range(T0_MS, T0_MS + 4 * HOUR, 7 * MINUTE), "kernel: eth0 up"),
        LogRecord("/g/a", "s3", T0_MS + 100 * MINUTE, MESSAGES[2], T0_MS + 101 * MINUTE),
        LogRun("/g/a", "s3", range(T0_MS + 95 * MINUTE, T0_MS + 3 * HOUR, HOUR), MESSAGES[3]),
    ]
    for query in QUERIES:
        as_runs = run_query(query, items, T0_MS // 1000 - 3600, T0_MS // 1000 + 5 * 3600, ACCOUNT)
        assert as_runs.rows, query
        assert as_runs == run_query(query, expanded(items), T0_MS // 1000 - 3600, T0_MS // 1000 + 5 * 3600, ACCOUNT)
