"""A small CloudWatch Logs Insights evaluator with the real query semantics.

Why it exists: moto's fake Logs Insights ignores `filter` and `stats` and returns raw events, so an
embedded backend built on moto would let a wrong query look right. The embedded backend hands the
records of the log groups named in StartQuery to `run_query`, which evaluates the query the way
Logs Insights does, including its limits:

* time range: startTime and endTime are epoch seconds, both inclusive (the whole end second counts);
* result cap: never more than 10,000 rows (`MAX_RESULT_ROWS`), extra rows silently dropped, so a
  caller detects truncation by seeing exactly 10,000 rows; `limit` accepts 1..10,000;
* StartQuery accepts at most 50 log groups (`MAX_LOG_GROUPS`, enforced by the caller, which knows them);
* output shape: GetQueryResults `results` rows, values always strings, absent fields omitted;
  timestamps print as `YYYY-MM-DD HH:MM:SS.mmm` (UTC), integral numbers without `.0`.

Fields: @timestamp, @message, @logStream, @log (`<account>:<group>`), @ingestionTime, and @ptr
(`ptr-<n>`, n = the record's position in the caller's input). There is no JSON field discovery: any
other field is absent on raw records, and absent fields make `like`/`=` false, `!=` true, and are
skipped by aggregations.

Supported commands (pipe-separated): `fields` (with `as`), `filter` (like / not like with /regex/flags
or "substring", =, !=, <, <=, >, >=, in / not in [...], and, or, not, parentheses), `stats` with
count(*), count, count_distinct (exact), sum, min, max, avg, earliest, latest `by` fields or
bin(<n>s|m|h|d), chained stats, `sort` (descending unless `asc`), `limit`. Raw records come out
newest first; stats rows in ascending group-key order; a stats over no records yields no rows.
Anything else raises `QueryError` rather than silently returning what a real account would not.

Structure (one module per concern): `syntax` (tokenizer, frozen AST, recursive-descent parser:
`parse_query`), `records` (LogRecord, LogRun, QueryOutcome), `evaluate` (values, field access, filters
compiled into closures, aggregations, sort), `runs` (the chunked scan, mergeable stats and LogRun folding)
and `execution` (`run_query`: the commands in order).
The input may mix `LogRun`s (evenly spaced identical lines, a world's periodic entries) with records:
a run is filtered and aggregated as a whole where the query cannot tell its lines apart and expanded
in place elsewhere, so the outcome is always that of its lines (tests/unit/test_insights_runs.py).
A `stats` over a `stats` by the same fields (a stream's hours, then the stream) runs one value of those
fields at a time, so only one stream's intermediate groups are held.
"""
from gpuaudit.embedded.insights.execution import run_query
from gpuaudit.embedded.insights.records import LogRecord, LogRun, QueryOutcome, ScanItem, expanded
from gpuaudit.embedded.insights.syntax import (
    INVALID_PARAMETER,
    MALFORMED,
    MAX_LOG_GROUPS,
    MAX_QUERY_CHARS,
    MAX_RESULT_ROWS,
    Compare,
    FilterCmd,
    In,
    Query,
    QueryError,
    parse_query,
)

__all__ = [
    "Compare",
    "FilterCmd",
    "In",
    "INVALID_PARAMETER",
    "MALFORMED",
    "MAX_QUERY_CHARS",
    "MAX_LOG_GROUPS",
    "MAX_RESULT_ROWS",
    "LogRecord",
    "LogRun",
    "Query",
    "QueryError",
    "QueryOutcome",
    "ScanItem",
    "expanded",
    "parse_query",
    "run_query",
]
