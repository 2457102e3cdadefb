"""The embedded evaluator refuses what CloudWatch Logs Insights refuses, with the service's exception names.

Each rule's source is cited where it is enforced (embedded/insights/syntax.py); docs/decisions.md lists
which service behaviours are enforced and which are assumed. Queries here are written from the rules,
not taken from the product's templates.
"""

from __future__ import annotations

import pytest

from gpuaudit.embedded.insights import (
    INVALID_PARAMETER,
    MALFORMED,
    MAX_QUERY_CHARS,
    QueryError,
    parse_query,
)

BINNED = "stats count(*) as lines, max(@timestamp) as last by @logStream, bin(1h) as hour"


def refusal(query: str) -> QueryError:
    with pytest.raises(QueryError) as raised:
        parse_query(query)
    return raised.value


def padded_to(length: int) -> str:
    """A valid query of exactly `length` characters (a filter on a long literal)."""
    head, tail = 'filter @message like "', '" | stats count(*)'
    return head + "x" * (length - len(head) - len(tail)) + tail


# -- query length (StartQuery queryString: at most 10,000 characters) ------------------------------
def test_a_query_of_ten_thousand_characters_is_accepted_and_one_more_is_an_invalid_parameter():
    assert len(padded_to(MAX_QUERY_CHARS)) == 10_000
    parse_query(padded_to(MAX_QUERY_CHARS))

    error = refusal(padded_to(MAX_QUERY_CHARS + 1))

    assert error.exception == INVALID_PARAMETER == "InvalidParameterException"
    assert "10001 characters" in str(error)


def test_the_length_check_can_be_left_to_a_caller_that_appended_its_own_limit():
    parse_query(padded_to(MAX_QUERY_CHARS) + " | limit 5", max_chars=None)


# -- stats commands (stats page: "Use multiple stats commands in a single query") -----------------
def test_two_stats_are_accepted_when_the_second_reads_what_the_first_produced():
    parse_query(f"{BINNED} | stats count(*) as live, sum(lines) as total, max(last) by @logStream "
                "| sort total desc | limit 10")


def test_a_third_stats_is_malformed():
    error = refusal(f"{BINNED} | stats sum(lines) as total by @logStream | stats count(*)")
    assert error.exception == MALFORMED == "MalformedQueryException"
    assert "3 stats commands" in str(error)


@pytest.mark.parametrize("between", ["sort lines desc", "limit 5"])
def test_sort_or_limit_between_the_two_stats_is_malformed(between: str):
    error = refusal(f"{BINNED} | {between} | stats sum(lines) by @logStream")
    assert error.exception == MALFORMED
    assert "before the second stats" in str(error)


def test_sort_and_limit_before_a_single_stats_are_accepted():
    parse_query("sort @timestamp asc | limit 50 | stats count(*) by @logStream")


@pytest.mark.parametrize(("second", "named"), [
    ("stats count(*) by @message", "@message"),
    ("stats max(@timestamp) by @logStream", "@timestamp"),
    ("stats sum(bytes) by @logStream", "bytes"),
])
def test_the_second_stats_may_read_only_fields_the_first_produced(second: str, named: str):
    error = refusal(f"{BINNED} | {second}")
    assert error.exception == MALFORMED
    assert f"reads {named}" in str(error)


def test_an_alias_given_between_the_stats_counts_as_produced():
    parse_query(f"{BINNED} | fields lines as n | stats sum(n) by @logStream")


def test_bin_in_the_second_stats_is_malformed():
    error = refusal(f"{BINNED} | stats sum(lines) by bin(1d)")
    assert error.exception == MALFORMED
    assert "bin() in the second stats" in str(error)


# -- unknown commands and functions -----------------------------------------------------------------
@pytest.mark.parametrize(("query", "detail"), [
    ("grep kernel", "unknown command 'grep'"),
    ("stats median(@timestamp)", "unsupported function 'median'"),
    ("filter frobnicate(@message) = 1", "unsupported function 'frobnicate'"),
])
def test_unknown_commands_and_functions_are_malformed(query: str, detail: str):
    error = refusal(query)
    assert error.exception == MALFORMED
    assert detail in str(error)
