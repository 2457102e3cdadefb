"""The embedded Logs Insights evaluator against hand-computed answers.

Every expected row below was worked out by hand from the records in the test; nothing is computed
by the module under test. `T0` is 2026-09-27 10:00:00 UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuaudit.embedded.insights import (
    MAX_LOG_GROUPS,
    MAX_RESULT_ROWS,
    LogRecord,
    QueryError,
    QueryOutcome,
    parse_query,
    run_query,
)

ACCOUNT = "111122223333"
T0 = int(datetime(2026, 9, 27, 10, tzinfo=UTC).timestamp())  # epoch seconds
START, END = T0 - 86_400, T0 + 86_400  # a window that holds every fixture record


def at(hours: int = 0, minutes: int = 0, seconds: int = 0, ms: int = 0) -> int:
    """Epoch ms of T0 + the offset."""
    return (T0 + hours * 3600 + minutes * 60 + seconds) * 1000 + ms


def rec(
    ts_ms: int, message: str, stream: str = "s1", group: str = "/g/a", ingestion: int | None = None
) -> LogRecord:
    return LogRecord(group, stream, ts_ms, message, ingestion)


def run(query: str, records: list[LogRecord], start: int = START, end: int = END) -> QueryOutcome:
    return run_query(query, records, start, end, ACCOUNT)


def cells(outcome: QueryOutcome) -> list[list[tuple[str, str]]]:
    """Rows as ordered (field, value) pairs: exact, including field order."""
    return [[(cell["field"], cell["value"]) for cell in row] for row in outcome.rows]


def messages(query: str, records: list[LogRecord]) -> list[str]:
    return [value for row in cells(run(query, records)) for field, value in row if field == "@message"]


# --------------------------------------------------------------------------- fixtures

# Two groups; stream name i-a exists in both (so @log must separate them).
CLUSTER = [
    rec(at(0, 5), "Xid 79 on GPU 0", "i-a", "/aws/hp/c1"),
    rec(at(0, 40), "heartbeat", "i-a", "/aws/hp/c1"),
    rec(at(1, 10, 0, 250), "Xid 31 on GPU 1", "i-a", "/aws/hp/c1"),
    rec(at(3), "heartbeat", "i-a", "/aws/hp/c1"),
    rec(at(0, 59, 59, 999), "heartbeat", "i-b", "/aws/hp/c1"),
    rec(at(2), "NVRM: xid 79", "i-b", "/aws/hp/c1"),
    rec(at(0, 30), "heartbeat", "i-a", "/aws/hp/c2"),
]

# One stream, one record a minute; default raw order is newest first: m6, m5, ..., m0.
FILTER_MESSAGES = [
    "Xid 79 on GPU 0",  # m0
    "xid 31 on GPU 1",  # m1
    "heartbeat ok",  # m2
    'path /var/log/a.b says "hi"',  # m3
    "axb",  # m4
    "ERROR disk",  # m5
    "42",  # m6
]
FILTER_RECORDS = [rec(at(0, minute), text) for minute, text in enumerate(FILTER_MESSAGES)]
M = FILTER_MESSAGES


# --------------------------------------------------------------------------- time range and raw output


def test_time_range_includes_start_second_and_whole_end_second() -> None:
    start, end = T0, T0 + 60
    records = [
        rec(start * 1000 - 1, "just before start"),
        rec(start * 1000, "first ms of start"),
        rec(end * 1000 + 999, "last ms of end second"),
        rec(end * 1000 + 1000, "first ms after end"),
    ]
    outcome = run("fields @message", records, start, end)
    assert cells(outcome) == [[("@message", "last ms of end second")], [("@message", "first ms of start")]]
    assert outcome.records_scanned == 2


def test_default_raw_output_has_five_fields_newest_first() -> None:
    records = [
        rec(at(-48), "outside the window"),  # input position 0, not scanned
        rec(at(0, 0, 1, 5), "older", "node-1", "/g/x"),
        rec(at(0, 0, 2), "newer", "node-2", "/g/y"),
    ]
    assert cells(run("filter @message like /e/", records)) == [
        [
            ("@timestamp", "2026-09-27 10:00:02.000"),
            ("@message", "newer"),
            ("@logStream", "node-2"),
            ("@log", "111122223333:/g/y"),
            ("@ptr", "ptr-2"),
        ],
        [
            ("@timestamp", "2026-09-27 10:00:01.005"),
            ("@message", "older"),
            ("@logStream", "node-1"),
            ("@log", "111122223333:/g/x"),
            ("@ptr", "ptr-1"),
        ],
    ]


def test_fields_selects_and_orders_output_and_aliases() -> None:
    records = [
        rec(at(0, 0, 0, 7), "hello", "node-9", ingestion=at(0, 0, 3)),
        rec(at(-1), "earlier", "node-8"),
    ]
    outcome = run(
        "fields @logStream as node, @message, @ingestionTime, @ptr | filter node = 'node-9'", records
    )
    assert cells(outcome) == [
        [
            ("node", "node-9"),
            ("@message", "hello"),
            ("@ingestionTime", "2026-09-27 10:00:03.000"),
            ("@ptr", "ptr-0"),
        ]
    ]
    # @ingestionTime falls back to the event time when the record has none.
    assert cells(run("fields @ingestionTime | filter @message = 'earlier'", records)) == [
        [("@ingestionTime", "2026-09-27 09:00:00.000")]
    ]


def test_strcontains_is_1_or_0_per_record_and_greatest_and_least_pick_among_them() -> None:
    records = [
        rec(at(0), "kernel: eth0 up", "n1"),
        rec(at(0, 1), '{"_TRANSPORT":"kernel","MESSAGE":"x"}', "n1"),
        rec(at(0, 2), "heartbeat", "n2"),
        rec(at(0, 3), "Kernel: upper case is another string", "n2"),
    ]
    query = ("fields strcontains(@message, 'kernel:') as k, greatest(strcontains(@message, 'kernel:'), "
             "strcontains(@message, '\"_TRANSPORT\":\"kernel\"')) as either, least(strcontains(@message, 'e'), 0) as "
             "none, @logStream | sort @timestamp asc")
    assert cells(run(query, records)) == [
        [("k", "1"), ("either", "1"), ("none", "0"), ("@logStream", "n1")],
        [("k", "0"), ("either", "1"), ("none", "0"), ("@logStream", "n1")],
        [("k", "0"), ("either", "0"), ("none", "0"), ("@logStream", "n2")],
        [("k", "0"), ("either", "0"), ("none", "0"), ("@logStream", "n2")],
    ]
    # Summed and maximised per stream, then counted over streams: the one stream-count query's form
    counted = ("fields greatest(strcontains(@message, 'kernel:'), strcontains(@message, '_TRANSPORT')) as line "
               "| stats max(line) as kernel, sum(line) as lines by @logStream "
               "| stats count(*) as streams, sum(kernel) as kernel_streams, sum(lines) as kernel_lines")
    assert cells(run(counted, records)) == [[("streams", "2"), ("kernel_streams", "1"), ("kernel_lines", "2")]]
    # A default name is the expression as written
    assert cells(run("fields strcontains(@logStream, 'n2') | filter @message = 'heartbeat'", records)) == [
        [("strcontains(@logStream,'n2')", "1")]]


def test_scanned_matched_and_bytes() -> None:
    records = [
        rec(at(0), "héllo Xid"),  # 10 bytes in UTF-8 (é is 2)
        rec(at(0, 1), "plain"),  # 5 bytes
        rec(at(0, 2), "Xid"),  # 3 bytes
        rec(at(-30), "Xid but outside the window"),
    ]
    outcome = run("filter @message like /Xid/ | stats count(*) as n", records, T0, T0 + 3600)
    assert cells(outcome) == [[("n", "2")]]
    assert (outcome.records_scanned, outcome.records_matched, outcome.bytes_scanned) == (3, 2, 18)
    # Without filters every scanned record matches; a filter after stats does not change it.
    outcome = run("stats count(*) as n | filter n > 100", records, T0, T0 + 3600)
    assert (outcome.rows, outcome.records_scanned, outcome.records_matched) == ([], 3, 3)


# --------------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("@message like /Xid/", [M[0]]),
        ("@message like /xid/i", [M[1], M[0]]),
        ("@message =~ /xid/i", [M[1], M[0]]),
        ('@message like "a.b"', [M[3]]),  # a string is a plain substring: the dot is literal
        ("@message like /a.b/", [M[4], M[3]]),  # a regex: the dot matches anything
        (r"@message like /\/var\/log/", [M[3]]),
        ("@message like 'says \"hi\"'", [M[3]]),
        (r'@message like "says \"hi\""', [M[3]]),
        ("@message not like /xid/i", [M[6], M[5], M[4], M[3], M[2]]),
        ('@message = "heartbeat ok"', [M[2]]),
        ('@message != "heartbeat ok"', [M[6], M[5], M[4], M[3], M[1], M[0]]),
        ("@message = 42", [M[6]]),
        ("@message = 42.0", [M[6]]),
        ("@message > 41.5", [M[6]]),
        ("@message < 40", []),
        ('@message in ["axb", "ERROR disk", "nope"]', [M[5], M[4]]),
        ('@message not in ["axb", "ERROR disk"]', [M[6], M[3], M[2], M[1], M[0]]),
        ("@message in [42]", [M[6]]),
        ("not @message like /GPU/", [M[6], M[5], M[4], M[3], M[2]]),
        # and binds tighter than or: Xid OR (heartbeat AND nope). With or first, nothing would match.
        ("@message like /Xid/ or @message like /heartbeat/ and @message like /nope/", [M[0]]),
        ("(@message like /Xid/ or @message like /heartbeat/) and @message like /ok/", [M[2]]),
        ("not (@message like /a/ or @message like /GPU/)", [M[6], M[5]]),
        ("@logStream = 's1' and @log = '111122223333:/g/a' and @message like /disk/", [M[5]]),
        # Fields the records do not have: like and = are false, != and not like are true.
        ("nothere like /./", []),
        ('nothere = "x"', []),
        ("nothere = 1", []),
        ('nothere != "x"', [M[6], M[5], M[4], M[3], M[2], M[1], M[0]]),
    ],
)
def test_filter_forms(expression: str, expected: list[str]) -> None:
    assert messages(f"fields @message | filter {expression}", FILTER_RECORDS) == expected


def test_multiple_filters_are_anded_in_order() -> None:
    query = "filter @message like /GPU/\n| filter @message like /31/\n| fields @message"
    assert messages(query, FILTER_RECORDS) == [M[1]]
    outcome = run(query, FILTER_RECORDS)
    assert outcome.records_matched == 1


# --------------------------------------------------------------------------- stats


def test_aggregations_over_numbers() -> None:
    records = [
        rec(at(0), "10", "A"),
        rec(at(0, 1), "9", "A"),
        rec(at(0, 2), "9", "A"),
        rec(at(0, 3), "2.5", "A"),
        rec(at(0), "1", "B"),
        rec(at(0, 1), "2", "B"),
        rec(at(0, 2), "3", "B"),
    ]
    query = (
        "stats count(*) as n, count(@message) as present, count_distinct(@message) as distinct,"
        " sum(@message) as total, avg(@message) as mean, min(@message) as lo, max(@message) as hi"
        " by @logStream"
    )
    fields = ["@logStream", "n", "present", "distinct", "total", "mean", "lo", "hi"]
    assert cells(run(query, records)) == [
        list(zip(fields, ["A", "4", "4", "3", "30.5", "7.625", "2.5", "10"], strict=True)),  # max 10 > 9
        list(zip(fields, ["B", "3", "3", "3", "6", "2", "1", "3"], strict=True)),
    ]


def test_default_names_timestamp_extremes_and_earliest_latest() -> None:
    query = (
        "stats count(*), min(@timestamp), max(@timestamp), earliest(@message), latest(@message) by @logStream"
    )
    names = ["@logStream", "count(*)", "min(@timestamp)", "max(@timestamp)"]
    names += ["earliest(@message)", "latest(@message)"]
    expected = [
        ("i-a", "5", "2026-09-27 10:05:00.000", "2026-09-27 13:00:00.000", "Xid 79 on GPU 0", "heartbeat"),
        ("i-b", "2", "2026-09-27 10:59:59.999", "2026-09-27 12:00:00.000", "heartbeat", "NVRM: xid 79"),
    ]
    assert cells(run(query, CLUSTER)) == [list(zip(names, row, strict=True)) for row in expected]


def test_missing_fields_are_skipped_by_aggregations() -> None:
    outcome = run("stats count(*) as n, count(nothere) as c, sum(nothere) as s by @logStream", CLUSTER)
    assert cells(outcome) == [
        [("@logStream", "i-a"), ("n", "5"), ("c", "0")],
        [("@logStream", "i-b"), ("n", "2"), ("c", "0")],
    ]


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        (
            "bin(1h)",
            [
                ("2026-09-27 10:00:00.000", "4"),
                ("2026-09-27 11:00:00.000", "1"),
                ("2026-09-27 12:00:00.000", "1"),
                ("2026-09-27 13:00:00.000", "1"),
            ],
        ),
        (
            "bin(30m)",
            [
                ("2026-09-27 10:00:00.000", "1"),
                ("2026-09-27 10:30:00.000", "3"),
                ("2026-09-27 11:00:00.000", "1"),
                ("2026-09-27 12:00:00.000", "1"),
                ("2026-09-27 13:00:00.000", "1"),
            ],
        ),
        ("bin(1d)", [("2026-09-27 00:00:00.000", "7")]),
        (
            "bin(3600s)",
            [
                ("2026-09-27 10:00:00.000", "4"),
                ("2026-09-27 11:00:00.000", "1"),
                ("2026-09-27 12:00:00.000", "1"),
                ("2026-09-27 13:00:00.000", "1"),
            ],
        ),
    ],
)
def test_bin_bucket_values(term: str, expected: list[tuple[str, str]]) -> None:
    assert cells(run(f"stats count(*) as n by {term}", CLUSTER)) == [
        [(term, start), ("n", n)] for start, n in expected
    ]


def test_group_by_log_prints_account_and_group() -> None:
    assert cells(run("stats count(*) as n by @log", CLUSTER)) == [
        [("@log", "111122223333:/aws/hp/c1"), ("n", "6")],
        [("@log", "111122223333:/aws/hp/c2"), ("n", "1")],
    ]


def test_first_stats_per_stream_and_hour() -> None:
    query = (
        "stats count(*) as lines, min(@timestamp) as first, max(@timestamp) as last"
        " by @log, @logStream, bin(1h) as hour"
    )
    c1, c2 = "111122223333:/aws/hp/c1", "111122223333:/aws/hp/c2"
    expected = [
        (c1, "i-a", "2026-09-27 10:00:00.000", "2", "2026-09-27 10:05:00.000", "2026-09-27 10:40:00.000"),
        (c1, "i-a", "2026-09-27 11:00:00.000", "1", "2026-09-27 11:10:00.250", "2026-09-27 11:10:00.250"),
        (c1, "i-a", "2026-09-27 13:00:00.000", "1", "2026-09-27 13:00:00.000", "2026-09-27 13:00:00.000"),
        (c1, "i-b", "2026-09-27 10:00:00.000", "1", "2026-09-27 10:59:59.999", "2026-09-27 10:59:59.999"),
        (c1, "i-b", "2026-09-27 12:00:00.000", "1", "2026-09-27 12:00:00.000", "2026-09-27 12:00:00.000"),
        (c2, "i-a", "2026-09-27 10:00:00.000", "1", "2026-09-27 10:30:00.000", "2026-09-27 10:30:00.000"),
    ]
    names = ["@log", "@logStream", "hour", "lines", "first", "last"]
    assert cells(run(query, CLUSTER)) == [list(zip(names, row, strict=True)) for row in expected]


def test_chained_stats_live_hours_per_stream() -> None:
    query = """
        stats count(*) as lines, min(@timestamp) as first, max(@timestamp) as last
            by @log, @logStream, bin(1h) as hour
        | stats count(*) as live_hours, sum(lines) as total_lines, min(first) as first_event,
            max(last) as last_event by @log, @logStream
    """
    names = ["@log", "@logStream", "live_hours", "total_lines", "first_event", "last_event"]
    expected = [
        ("111122223333:/aws/hp/c1", "i-a", "3", "4", "2026-09-27 10:05:00.000", "2026-09-27 13:00:00.000"),
        ("111122223333:/aws/hp/c1", "i-b", "2", "2", "2026-09-27 10:59:59.999", "2026-09-27 12:00:00.000"),
        ("111122223333:/aws/hp/c2", "i-a", "1", "1", "2026-09-27 10:30:00.000", "2026-09-27 10:30:00.000"),
    ]
    outcome = run(query, CLUSTER)
    assert cells(outcome) == [list(zip(names, row, strict=True)) for row in expected]
    assert (outcome.records_scanned, outcome.records_matched) == (7, 7)


def test_filter_and_fields_after_stats_use_stats_columns() -> None:
    base = "stats count(*) as lines by @logStream"
    assert cells(run(f"{base} | filter lines > 2", CLUSTER)) == [[("@logStream", "i-a"), ("lines", "5")]]
    assert cells(run(f"{base} | filter lines = 2", CLUSTER)) == [[("@logStream", "i-b"), ("lines", "2")]]
    assert cells(run(f"{base} | filter @logStream like /b/", CLUSTER)) == [
        [("@logStream", "i-b"), ("lines", "2")]
    ]
    assert cells(run(f"{base} | fields lines", CLUSTER)) == [[("lines", "5")], [("lines", "2")]]
    assert cells(run(f"{base} | filter @message like /Xid/", CLUSTER)) == []  # no such column any more


def test_stats_output_is_in_ascending_group_order_and_empty_without_records() -> None:
    records = [rec(at(0), "x", stream) for stream in ["node-c", "node-a", "node-b", "node-a"]]
    assert cells(run("stats count(*) as n by @logStream", records)) == [
        [("@logStream", "node-a"), ("n", "2")],
        [("@logStream", "node-b"), ("n", "1")],
        [("@logStream", "node-c"), ("n", "1")],
    ]
    assert run("filter @message like /nothing/ | stats count(*) as n", records).rows == []


# --------------------------------------------------------------------------- sort and limit

# Counts per stream: s-a 10, s-b 9, s-d 9, s-c 2 (string order of the counts would be 10 < 2 < 9).
SORT_RECORDS = [
    rec(at(0, i), "x", stream)
    for stream, count in [("s-a", 10), ("s-b", 9), ("s-c", 2), ("s-d", 9)]
    for i in range(count)
]


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("n desc", ["s-a", "s-b", "s-d", "s-c"]),  # numeric, ties keep group order
        ("n", ["s-a", "s-b", "s-d", "s-c"]),  # descending by default
        ("n asc", ["s-c", "s-b", "s-d", "s-a"]),
        ("@logStream desc", ["s-d", "s-c", "s-b", "s-a"]),  # text
        ("@logStream asc", ["s-a", "s-b", "s-c", "s-d"]),
        ("n desc, @logStream desc", ["s-a", "s-d", "s-b", "s-c"]),
        ("n asc, @logStream desc", ["s-c", "s-d", "s-b", "s-a"]),
    ],
)
def test_sort_numeric_and_text(sort: str, expected: list[str]) -> None:
    outcome = run(f"stats count(*) as n by @logStream | sort {sort}", SORT_RECORDS)
    assert [row[0][1] for row in cells(outcome)] == expected


def test_sort_raw_records_and_timestamps() -> None:
    records = [rec(at(0, 2), "b"), rec(at(0, 1), "c"), rec(at(0, 3), "a")]
    assert messages("fields @message | sort @timestamp asc", records) == ["c", "b", "a"]
    assert messages("fields @message | sort @timestamp desc", records) == ["a", "b", "c"]
    assert messages("fields @message | sort @message asc", records) == ["a", "b", "c"]
    assert messages("fields @message", records) == ["a", "b", "c"]  # newest first without a sort
    # Timestamps produced by a stats sort as times.
    outcome = run("stats max(@timestamp) as last by @logStream | sort last asc", CLUSTER)
    assert cells(outcome) == [
        [("@logStream", "i-b"), ("last", "2026-09-27 12:00:00.000")],
        [("@logStream", "i-a"), ("last", "2026-09-27 13:00:00.000")],
    ]


def test_limit() -> None:
    assert messages("fields @message | limit 2", FILTER_RECORDS) == [M[6], M[5]]  # the newest two
    assert messages("fields @message | sort @timestamp asc | limit 2", FILTER_RECORDS) == [M[0], M[1]]
    outcome = run("stats count(*) as n by @logStream | sort n desc | limit 1", SORT_RECORDS)
    assert cells(outcome) == [[("@logStream", "s-a"), ("n", "10")]]
    assert len(run("limit 10000", FILTER_RECORDS).rows) == 7


# --------------------------------------------------------------------------- the 10,000-row cap


def test_row_cap_on_stats_output() -> None:
    records = [rec(at(0), "x", f"node-{i:05d}") for i in range(MAX_RESULT_ROWS + 1)]
    outcome = run("stats count(*) as n by @logStream", records)
    assert len(outcome.rows) == MAX_RESULT_ROWS == 10_000
    assert outcome.rows[0] == [{"field": "@logStream", "value": "node-00000"}, {"field": "n", "value": "1"}]
    assert outcome.rows[-1] == [{"field": "@logStream", "value": "node-09999"}, {"field": "n", "value": "1"}]
    assert outcome.records_matched == 10_001
    assert len(run("stats count(*) as n by @logStream | limit 10000", records).rows) == 10_000


def test_row_cap_on_raw_records_keeps_the_newest() -> None:
    records = [rec(at(0, 0, 0, i), f"m{i}") for i in range(MAX_RESULT_ROWS + 1)]
    outcome = run("fields @message", records)
    assert len(outcome.rows) == 10_000
    assert outcome.rows[0] == [{"field": "@message", "value": "m10000"}]
    assert outcome.rows[-1] == [{"field": "@message", "value": "m1"}]  # m0, the oldest, is dropped


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("parse @message 'user=*' as user", "'parse'"),
        ("fields @message | display @message", "'display'"),
        ("dedup @logStream", "'dedup'"),
        ("unmask @message", "'unmask'"),
        ("fields @message | frobnicate x", "'frobnicate'"),
        ("stats pct(@message, 95)", "'pct'"),
        ("stats sum(*)", "sum(*)"),
        ("filter strlen(@message) > 10", "'strlen'"),
        ("filter ispresent(foo)", "'ispresent'"),
        ("fields concat(@message, 'x')", "'concat'"),
        ("fields strcontains(foo, 'x') as k", "strcontains on foo"),
        ("fields strcontains(@message, 3) as k", "a string to look for"),
        ("fields greatest(strcontains(@message, 'x'), 'y') as k", "greatest needs numbers"),
        ("fields strlen(@message) as n | stats max(n)", "'strlen'"),
        ('filter @message like "unbalanced', 'unbalanced "'),
        ("filter @message like 'unbalanced", "unbalanced '"),
        ("filter @message like /unbalanced", "unbalanced /"),
        ("filter @message like /x/g", "'g'"),
        ("filter @message contains 'x'", "'contains'"),
        ("filter @message ~ 'x'", "'~'"),
        ("filter @message > 'x'", "'>'"),
        ("stats count(*) by bin(1w)", "'1w'"),
        ("limit 10001", "10001"),
        ("limit 0", "limit 0"),
        ("fields @message |", "empty command"),
        ("fields @message extra", "'extra'"),
        ("", "empty query"),
        ("  \n  ", "empty query"),
    ],
)
def test_unsupported_queries_raise_naming_query_and_token(query: str, named: str) -> None:
    with pytest.raises(QueryError) as caught:
        parse_query(query)
    assert named in str(caught.value)
    assert query[:200] in str(caught.value)
    with pytest.raises(QueryError):  # run_query validates the same way
        run(query, FILTER_RECORDS)


def test_error_message_quotes_only_the_first_200_characters() -> None:
    query = "fields @message | " + "filter @message like /x/ | " * 20 + "parse @message 'a*' as a"
    with pytest.raises(QueryError) as caught:
        parse_query(query)
    assert query[:200] in str(caught.value)
    assert query not in str(caught.value)
    assert "'parse'" in str(caught.value)


def test_end_before_start_is_rejected() -> None:
    with pytest.raises(QueryError, match="before startTime"):
        run("fields @message", FILTER_RECORDS, T0, T0 - 1)


def test_parse_query_accepts_every_supported_form() -> None:
    parse_query(
        "fields @timestamp, @message, @logStream, @log, @ingestionTime, @ptr\n"
        "| filter (@message like /Xid \\d+/i or @message like 'NVRM') and not @logStream in ['a', \"b\"]\n"
        "| filter @message not like /heartbeat/ and @logStream != 'x' and @message != 3\n"
        "| stats count(*) as lines, count(@message), count_distinct(@message), sum(@message), avg(@message),"
        " min(@timestamp) as first, max(@timestamp) as last, earliest(@message), latest(@message)"
        " by @log, @logStream, bin(5m) as slot\n"
        "| stats count(*) as live, sum(lines) as total, min(first), max(last) by @log, @logStream\n"
        "| sort live desc, @logStream asc | limit 100"
    )
    assert MAX_LOG_GROUPS == 50


def test_the_kernel_query_counts_the_syslog_marker_in_each_shipped_form() -> None:
    # Given kernel lines as rsyslog, the journal's JSON and Container Insights' Fluent Bit syslog parser ship them,
    # and a systemd line in that parser's form
    from gpuaudit.collectors.log_queries import KERNEL_QUERY
    records = [
        rec(at(0), "Dec  7 06:01:19 ip-10-0-0-1 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module", "plain"),
        rec(at(0, 1), '{"_TRANSPORT":"kernel","MESSAGE":"NVRM: loading"}', "journal"),
        rec(at(0, 2), '{"host":"ip-10-0-0-1","ident":"kernel","message":"NVRM: loading","az":"us-west-2b"}', "ci"),
        rec(at(0, 3), '{"host":"ip-10-0-0-1","ident":"systemd","pid":"1","message":"Started kernel-install"}', "ci"),
    ]
    # Then each form counts once per kernel line, the systemd line not at all
    rows = {dict(r)["@logStream"]: dict(r)["kernel_lines"] for r in cells(run(KERNEL_QUERY, records))}
    assert rows == {"plain": "1", "journal": "1", "ci": "1"}
