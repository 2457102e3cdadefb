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

Structure: a tokenizer, a recursive-descent parser producing a small frozen AST (`parse_query`), and
an executor that compiles filters into closures and runs `stats` as one pass of dict accumulation.
The input may mix `LogRun`s (evenly spaced identical lines, a world's periodic entries) with records:
a run is filtered and aggregated as a whole where the query cannot tell its lines apart and expanded
in place elsewhere, so the outcome is always that of its lines (tests/unit/test_insights_runs.py).
A `stats` over a `stats` by the same fields (a stream's hours, then the stream) runs one value of those
fields at a time, so only one stream's intermediate groups are held.
"""

from __future__ import annotations

import gc
import heapq
import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from itertools import chain, filterfalse, groupby, islice, repeat
from operator import attrgetter, floordiv, itemgetter, mul, sub
from typing import Any, NamedTuple, TypeVar, cast

_T = TypeVar("_T")

MAX_RESULT_ROWS = 10_000
MAX_LOG_GROUPS = 50

_ERROR_QUERY_CHARS = 200
_DEFAULT_FIELDS = ("@timestamp", "@message", "@logStream", "@log", "@ptr")
_AGGREGATIONS = frozenset({"count", "count_distinct", "sum", "min", "max", "avg", "earliest", "latest"})
_BIN_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}
_UNSUPPORTED_COMMANDS = frozenset(
    {"parse", "display", "dedup", "unmask", "pattern", "diff", "anomaly", "unnest", "lookup", "source"}
)


class QueryError(ValueError):
    """Query form not supported / malformed; message names the query text and the unsupported part."""


class LogRecord(NamedTuple):
    """One log event. Immutable; a NamedTuple rather than a frozen dataclass because the backend builds
    one per line scanned (tens of millions for a big world) and a tuple builds about three times faster."""

    log_group: str
    log_stream: str
    timestamp_ms: int  # event time, epoch ms
    message: str
    ingestion_ms: int | None = None


class LogRun(NamedTuple):
    """Identical lines of one stream at evenly spaced times: a world's `periodic` entry (agents, heartbeats).

    Worth its own type because a big world is almost all such lines (20 M lines at 2,000 nodes × 7 days, in
    8,004 runs beside 37,444 other lines). Where a query cannot tell the lines of a run apart (filters that read no time
    field, a first stats by fields and one `bin` that counts and takes min/max of @timestamp) the
    evaluator decides and aggregates the run arithmetically; everywhere else it expands the run into
    its LogRecords in place. Either way the outcome is the one the expanded lines give."""

    log_group: str
    log_stream: str
    timestamps: range  # epoch ms, ascending, non-empty
    message: str

    def records(self) -> Iterator[LogRecord]:
        return map(LogRecord, repeat(self.log_group), repeat(self.log_stream), self.timestamps, repeat(self.message))

    def within(self, low: int, high: int) -> LogRun | None:
        stamps = self.timestamps
        if low <= stamps[0] and stamps[-1] <= high:
            return self
        kept = stamps[bisect_left(stamps, low) : bisect_right(stamps, high)]
        return self._replace(timestamps=kept) if kept else None


ScanItem = LogRecord | LogRun


@dataclass
class QueryOutcome:
    rows: list[list[dict[str, str]]]  # GetQueryResults "results" shape
    records_scanned: int  # records in the named groups inside [start, end] (what AWS bills/scans)
    records_matched: int  # records that passed all filters (before stats)
    bytes_scanned: int  # sum of len(message.encode()) over scanned records


def _error(query: str, detail: str) -> QueryError:
    return QueryError(f"{detail} in Logs Insights query: {query[:_ERROR_QUERY_CHARS]}")


# --------------------------------------------------------------------------- values

Value = str | int | float


class _Ts(int):
    """Epoch milliseconds that print as a Logs Insights timestamp.

    An int subclass, so timestamps compare, sort and min/max as times for free, and formatting is
    deferred to output (at most 10,000 rows) instead of paid per record.
    """

    __slots__ = ()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NUMBER_RX = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _format_ts(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    return f"{_EPOCH + timedelta(seconds=seconds):%Y-%m-%d %H:%M:%S}.{millis:03d}"


def _text(value: Value) -> str:
    """The string GetQueryResults shows for a value: integral numbers without `.0`."""
    if isinstance(value, str):
        return value
    if isinstance(value, _Ts):
        return _format_ts(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _num(value: object) -> int | float | None:
    """Numeric view of a value (numbers, numeric strings); None when not a number."""
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER_RX.fullmatch(text):
            return int(text) if text.lstrip("+-").isdigit() else float(text)
    return None


# --------------------------------------------------------------------------- tokenizer

_TOKEN_RX = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>\#[^\n]*)
    | (?P<pipe>\|)
    | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<regex>/(?:[^/\\\n]|\\.)*/[A-Za-z]*)
    | (?P<ident>@?[A-Za-z_][A-Za-z0-9_.]*|`[^`\n]*`)
    | (?P<num>-?\d+(?:\.\d+)?[A-Za-z]*)
    | (?P<op>!=|=~|<=|>=|=|<|>)
    | (?P<punct>[(),\[\]*])
    | (?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_STRING_ESCAPE_RX = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True)
class _Tok:
    kind: str  # ident | str | regex | num | op | punct | pipe
    text: str  # as written (used in error messages and default output names)
    value: str  # unquoted string / field name; equals text otherwise


def _unescape(body: str) -> str:
    # Only quotes and backslashes are escapes; other backslashes are kept so "a\.b" stays regex-like.
    return _STRING_ESCAPE_RX.sub(lambda m: m.group(1) if m.group(1) in "\"'\\" else m.group(0), body)


def _tokenize(query: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    for match in _TOKEN_RX.finditer(query):
        kind, text = match.lastgroup or "bad", match.group()
        if kind in ("ws", "comment"):
            continue
        if kind == "bad":
            if text in "\"'`/":
                raise _error(query, f"unbalanced {text} at offset {match.start()}")
            raise _error(query, f"unsupported character {text!r} at offset {match.start()}")
        value = text
        if kind == "str":
            value = _unescape(text[1:-1])
        elif kind == "ident" and text.startswith("`"):
            value = text[1:-1]
        tokens.append(_Tok(kind, text, value))
    return tokens


# --------------------------------------------------------------------------- AST

Scalar = str | int | float  # a literal in a filter


@dataclass(frozen=True)
class Like:
    field: str
    pattern: re.Pattern[str] | str  # compiled regex, or a plain substring
    negate: bool = False


@dataclass(frozen=True)
class Compare:
    field: str
    op: str  # = != < <= > >=
    value: Scalar


@dataclass(frozen=True)
class In:
    field: str
    values: tuple[Scalar, ...]
    negate: bool = False


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    operands: tuple[Expr, ...]


Expr = Like | Compare | In | Not | BoolOp


@dataclass(frozen=True)
class FieldsCmd:
    items: tuple[tuple[str, str], ...]  # (field, output name)


@dataclass(frozen=True)
class FilterCmd:
    expr: Expr


@dataclass(frozen=True)
class Agg:
    func: str  # lower-case aggregation name
    arg: str | None  # None for count(*)
    name: str  # alias, or the expression text without spaces


@dataclass(frozen=True)
class GroupTerm:
    field: str | None  # None for a bin
    bin_ms: int | None
    name: str


@dataclass(frozen=True)
class StatsCmd:
    aggs: tuple[Agg, ...]
    by: tuple[GroupTerm, ...]


@dataclass(frozen=True)
class SortCmd:
    keys: tuple[tuple[str, bool], ...]  # (field, descending)


@dataclass(frozen=True)
class LimitCmd:
    n: int


Command = FieldsCmd | FilterCmd | StatsCmd | SortCmd | LimitCmd


@dataclass(frozen=True)
class Query:
    text: str
    commands: tuple[Command, ...]
    field_names: frozenset[str]  # every field referenced anywhere (decides whether @ptr is computed)


# --------------------------------------------------------------------------- parser


class _Parser:
    """Recursive descent over the tokens of one command (between pipes)."""

    def __init__(self, query: str, tokens: list[_Tok]) -> None:
        self.query = query
        self.tokens = tokens
        self.pos = 0
        self.fields: set[str] = set()

    # -- cursor helpers
    def error(self, detail: str) -> QueryError:
        return _error(self.query, detail)

    def peek(self, ahead: int = 0) -> _Tok | None:
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def take(self, what: str) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.error(f"expected {what} but the command ended")
        self.pos += 1
        return tok

    def at_word(self, *words: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "ident" and tok.text.lower() in words

    def at_punct(self, char: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "punct" and tok.text == char

    def expect_punct(self, char: str) -> None:
        tok = self.take(f"'{char}'")
        if tok.kind != "punct" or tok.text != char:
            raise self.error(f"expected '{char}' but found '{tok.text}'")

    def end(self) -> None:
        tok = self.peek()
        if tok is not None:
            raise self.error(f"unsupported or unexpected token '{tok.text}'")

    def alias(self) -> str | None:
        if not self.at_word("as"):
            return None
        self.pos += 1
        tok = self.take("an alias")
        if tok.kind != "ident":
            raise self.error(f"expected an alias but found '{tok.text}'")
        return tok.value

    # -- fields
    def field(self) -> str:
        """A field name. `count(*)`-style references name a stats output column; other calls are errors."""
        tok = self.take("a field name")
        if tok.kind != "ident":
            raise self.error(f"expected a field name but found '{tok.text}'")
        if not self.at_punct("("):
            self.fields.add(tok.value)
            return tok.value
        if tok.text.lower() not in _AGGREGATIONS and tok.text.lower() != "bin":
            raise self.error(f"unsupported function '{tok.text}'")
        self.pos += 1
        parts = [tok.text, "("]
        while not self.at_punct(")"):
            parts.append(self.take("')'").text)
        self.pos += 1
        name = "".join(parts) + ")"
        self.fields.add(name)
        return name

    def comma_separated(self, item: Callable[[], _T]) -> list[_T]:
        items = [item()]
        while self.at_punct(","):
            self.pos += 1
            items.append(item())
        return items

    # -- commands
    def fields_cmd(self) -> FieldsCmd:
        def item() -> tuple[str, str]:
            name = self.field()
            return name, self.alias() or name

        return FieldsCmd(tuple(self.comma_separated(item)))

    def filter_cmd(self) -> FilterCmd:
        return FilterCmd(self.or_expr())

    def sort_cmd(self) -> SortCmd:
        def key() -> tuple[str, bool]:
            name = self.field()
            descending = True  # Logs Insights sorts descending unless told otherwise
            if self.at_word("asc", "desc"):
                descending = self.take("asc/desc").text.lower() == "desc"
            return name, descending

        return SortCmd(tuple(self.comma_separated(key)))

    def limit_cmd(self) -> LimitCmd:
        tok = self.take("a row count")
        if tok.kind != "num" or not tok.text.isdigit():
            raise self.error(f"limit needs a positive integer, found '{tok.text}'")
        n = int(tok.text)
        if not 1 <= n <= MAX_RESULT_ROWS:
            raise self.error(f"limit {n} is outside 1..{MAX_RESULT_ROWS}")
        return LimitCmd(n)

    def stats_cmd(self) -> StatsCmd:
        aggs = self.comma_separated(self.aggregation)
        by: list[GroupTerm] = []
        if self.at_word("by"):
            self.pos += 1
            by = self.comma_separated(self.group_term)
        return StatsCmd(tuple(aggs), tuple(by))

    def aggregation(self) -> Agg:
        tok = self.take("an aggregation")
        func = tok.text.lower()
        if tok.kind != "ident" or not self.at_punct("("):
            raise self.error(f"expected an aggregation function but found '{tok.text}'")
        if func not in _AGGREGATIONS:
            raise self.error(f"unsupported function '{tok.text}'")
        self.pos += 1
        arg: str | None
        if self.at_punct("*"):
            if func != "count":
                raise self.error(f"'{tok.text}(*)' is not supported; only count(*) takes *")
            self.pos += 1
            arg, arg_text = None, "*"
        else:
            arg = arg_text = self.field()
        self.expect_punct(")")
        return Agg(func, arg, self.alias() or f"{tok.text}({arg_text})")

    def group_term(self) -> GroupTerm:
        tok = self.peek()
        if tok is not None and tok.kind == "ident" and tok.text.lower() == "bin":
            next_tok = self.peek(1)
            if next_tok is not None and next_tok.kind == "punct" and next_tok.text == "(":
                self.pos += 2
                period = self.take("a bin period")
                self.expect_punct(")")
                text = f"{tok.text}({period.text})"
                return GroupTerm(None, self.bin_width(period), self.alias() or text)
        name = self.field()
        return GroupTerm(name, None, self.alias() or name)

    def bin_width(self, tok: _Tok) -> int:
        match = re.fullmatch(r"(\d+)([a-z]+)", tok.text) if tok.kind == "num" else None
        if match is None or match.group(2) not in _BIN_UNITS_MS or int(match.group(1)) == 0:
            raise self.error(f"unsupported bin period '{tok.text}' (use <n>s, <n>m, <n>h or <n>d)")
        return int(match.group(1)) * _BIN_UNITS_MS[match.group(2)]

    # -- filter expressions: or < and < not < comparison (and binds tighter than or)
    def or_expr(self) -> Expr:
        operands = [self.and_expr()]
        while self.at_word("or"):
            self.pos += 1
            operands.append(self.and_expr())
        return operands[0] if len(operands) == 1 else BoolOp("or", tuple(operands))

    def and_expr(self) -> Expr:
        operands = [self.not_expr()]
        while self.at_word("and"):
            self.pos += 1
            operands.append(self.not_expr())
        return operands[0] if len(operands) == 1 else BoolOp("and", tuple(operands))

    def not_expr(self) -> Expr:
        if self.at_word("not"):
            self.pos += 1
            return Not(self.not_expr())
        if self.at_punct("("):
            self.pos += 1
            inner = self.or_expr()
            self.expect_punct(")")
            return inner
        return self.comparison()

    def comparison(self) -> Expr:
        name = self.field()
        negate = False
        if self.at_word("not"):
            self.pos += 1
            negate = True
            if not self.at_word("like", "in"):
                raise self.error(f"expected 'like' or 'in' after '{name} not'")
        tok = self.take(f"an operator after '{name}'")
        word = tok.text.lower() if tok.kind == "ident" else None
        if word == "like" or (tok.kind == "op" and tok.text == "=~" and not negate):
            return Like(name, self.pattern(), negate)
        if word == "in":
            return In(name, tuple(self.literal_list()), negate)
        if tok.kind == "op" and not negate and tok.text != "=~":
            value = self.literal()
            if tok.text not in ("=", "!=") and isinstance(value, str):
                raise self.error(f"'{tok.text}' needs a number, found '{value}'")
            return Compare(name, tok.text, value)
        raise self.error(f"unsupported operator '{tok.text}' after '{name}'")

    def pattern(self) -> re.Pattern[str] | str:
        tok = self.take("a /regex/ or a string")
        if tok.kind == "str":
            return tok.value
        if tok.kind != "regex":
            raise self.error(f"expected a /regex/ or a string but found '{tok.text}'")
        close = tok.text.rindex("/")
        body, flag_text = tok.text[1:close].replace("\\/", "/"), tok.text[close + 1 :]
        flags = 0
        for flag in flag_text:
            if flag not in _REGEX_FLAGS:
                raise self.error(f"unsupported regex flag '{flag}' in {tok.text}")
            flags |= _REGEX_FLAGS[flag]
        try:
            return re.compile(body, flags)  # compiled once here, never per record
        except re.error as exc:
            raise self.error(f"invalid regex {tok.text}: {exc}") from None

    def literal(self) -> Scalar:
        tok = self.take("a value")
        if tok.kind == "str":
            return tok.value
        if tok.kind == "num" and re.fullmatch(r"-?\d+(?:\.\d+)?", tok.text):
            return float(tok.text) if "." in tok.text else int(tok.text)
        raise self.error(f"expected a string or a number but found '{tok.text}'")

    def literal_list(self) -> list[Scalar]:
        self.expect_punct("[")
        values: list[Scalar] = []
        if not self.at_punct("]"):
            values = self.comma_separated(self.literal)
        self.expect_punct("]")
        return values


def parse_query(query: str) -> Query:
    """Parse and validate a query; raises QueryError for any form this evaluator does not support."""
    tokens = _tokenize(query)
    if not tokens:
        raise _error(query, "empty query")
    segments: list[list[_Tok]] = [[]]
    for tok in tokens:
        if tok.kind == "pipe":
            segments.append([])
        else:
            segments[-1].append(tok)
    commands: list[Command] = []
    fields: set[str] = set()
    for segment in segments:
        if not segment:
            raise _error(query, "empty command between pipes")
        head, parser = segment[0], _Parser(query, segment)
        parser.pos = 1
        name = head.text.lower() if head.kind == "ident" else ""
        command: Command
        if name == "fields":
            command = parser.fields_cmd()
        elif name == "filter":
            command = parser.filter_cmd()
        elif name == "stats":
            command = parser.stats_cmd()
        elif name == "sort":
            command = parser.sort_cmd()
        elif name == "limit":
            command = parser.limit_cmd()
        elif name in _UNSUPPORTED_COMMANDS:
            raise _error(query, f"unsupported command '{head.text}'")
        else:
            raise _error(query, f"unknown command '{head.text}'")
        parser.end()
        commands.append(command)
        fields |= parser.fields
    return Query(query, tuple(commands), frozenset(fields))


# --------------------------------------------------------------------------- field access

Getter = Callable[[Any], Any]
Predicate = Callable[[Any], bool]


def _absent(_: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class _Acc:
    """How to read one field from a pipeline item (a LogRecord before stats, a row tuple after).

    `raw` is the cheap form used for grouping, sorting and min/max (epoch ms, bare log-group name);
    `final` turns it into the output value and is order-preserving, so extremes can be taken on raw.
    """

    raw: Getter
    final: Callable[[Any], Value] | None  # None: raw already is the value
    kind: str  # "str": value always a str; "num": raw always an int; "any": anything or None
    value: Getter  # final(raw(item)), composed once
    column: Callable[[list[Any]], Iterable[Any]]  # raw over many items, C-level where possible


def _acc(
    raw: Getter,
    final: Callable[[Any], Value] | None,
    kind: str,
    column: Callable[[list[Any]], Iterable[Any]] | None = None,
) -> _Acc:
    column = column or (lambda items: map(raw, items))
    if final is None:
        return _Acc(raw, None, kind, raw, column)
    finish = final

    def value(item: Any) -> Value | None:
        got = raw(item)
        return None if got is None else finish(got)

    return _Acc(raw, final, kind, value, column)


_ABSENT = _acc(_absent, None, "any")


class _Env:
    """Resolves field names to accessors for one pipeline stage; `fields x as y` adds aliases."""

    def __init__(self) -> None:
        self.aliases: dict[str, _Acc] = {}

    def field(self, name: str) -> _Acc:
        return self.aliases.get(name) or self.lookup(name)

    def lookup(self, name: str) -> _Acc:
        raise NotImplementedError

    def bin(self, width_ms: int) -> _Acc:
        raise NotImplementedError


class _RecordEnv(_Env):
    """Fields of raw log records (before the first stats)."""

    def __init__(self, account_id: str, ptr_of: dict[int, int]) -> None:
        super().__init__()
        log_names: dict[str, str] = {}

        def log_name(group: str) -> str:
            # Memoised: a filter on @log would otherwise build the same string per record.
            name = log_names.get(group)
            if name is None:
                name = log_names[group] = f"{account_id}:{group}"
            return name

        def ingestion(record: LogRecord) -> int:
            return record.timestamp_ms if record.ingestion_ms is None else record.ingestion_ms

        self.fields = {
            "@message": _acc(attrgetter("message"), None, "str"),
            "@logStream": _acc(attrgetter("log_stream"), None, "str"),
            "@log": _acc(attrgetter("log_group"), log_name, "str"),
            "@timestamp": _acc(attrgetter("timestamp_ms"), _Ts, "num"),
            "@ingestionTime": _acc(ingestion, _Ts, "num"),
            "@ptr": _acc(lambda record: ptr_of[id(record)], lambda index: f"ptr-{index}", "num"),
        }

    def lookup(self, name: str) -> _Acc:
        # No JSON field discovery: any other field is absent on every record.
        return self.fields.get(name, _ABSENT)

    def bin(self, width_ms: int) -> _Acc:
        # Bucket start in epoch ms, aligned to the epoch (so UTC midnight for days). The column form
        # chains C-level map()s: it runs once per record when grouping millions of them.
        stamps, widths = attrgetter("timestamp_ms"), repeat(width_ms)

        def column(records: list[Any]) -> Iterable[int]:
            return map(mul, map(floordiv, map(stamps, records), widths), widths)

        return _acc(lambda record: record.timestamp_ms // width_ms * width_ms, _Ts, "num", column)


class _RowEnv(_Env):
    """Columns of stats output rows: tuples (cheaper than dicts by the hundred thousand), None = absent."""

    def __init__(self, positions: dict[str, int]) -> None:
        super().__init__()
        self.positions = positions

    def lookup(self, name: str) -> _Acc:
        position = self.positions.get(name)
        return _ABSENT if position is None else _acc(itemgetter(position), None, "any")

    def bin(self, width_ms: int) -> _Acc:
        stamp = self.field("@timestamp").raw

        def bucket(row: Any) -> int | None:
            value = stamp(row)
            return value // width_ms * width_ms if isinstance(value, int) else None

        return _acc(bucket, _Ts, "any")


# --------------------------------------------------------------------------- filters


def _both(a: Predicate, b: Predicate) -> Predicate:
    return lambda item: a(item) and b(item)


def _either(a: Predicate, b: Predicate) -> Predicate:
    return lambda item: a(item) or b(item)


def _negated(inner: Predicate) -> Predicate:
    return lambda item: not inner(item)


def _compile_filter(expr: Expr, env: _Env) -> Predicate:
    """Turn an expression into a closure, so per-record work is only the comparison itself."""
    if isinstance(expr, (BoolOp, Not)) and not isinstance(env, _ValuesEnv):
        names = _fields_of(expr)
        getters = [env.field(name) for name in names]
        if len(names) <= 3 and all(acc.kind == "str" for acc in getters):
            # Every test reads one to three string fields (`@message like /a/ or (@logStream like /b/ and
            # @message like /c/)`): decide once per distinct combination of their values, remembered,
            # instead of once per record and per test. Log lines repeat; a memo lookup is cheap.
            decide = _memoised(_compile_filter(expr, _ValuesEnv(names)))
            if len(names) == 1:
                get = getters[0].value
                return lambda item: decide(get(item))
            key_of = _key_function([acc.value for acc in getters])
            return lambda item: decide(key_of(item))
    if isinstance(expr, BoolOp):
        parts = [_compile_filter(operand, env) for operand in expr.operands]
        return reduce(_both if expr.op == "and" else _either, parts)
    if isinstance(expr, Not):
        return _negated(_compile_filter(expr.operand, env))
    acc = env.field(expr.field)
    if isinstance(expr, Like):
        predicate = _like(acc.value, acc.kind == "str", expr.pattern)
        return _negated(predicate) if expr.negate else predicate
    if isinstance(expr, In):
        predicate = _member(acc.value, expr.values, acc.kind == "str")
        return _negated(predicate) if expr.negate else predicate
    return _compare(acc.value, expr.op, expr.value)


def _fields_of(expr: Expr) -> list[str]:
    """The fields an expression reads, sorted."""
    found: set[str] = set()
    pending: list[Expr] = [expr]
    while pending:
        node = pending.pop()
        if isinstance(node, BoolOp):
            pending.extend(node.operands)
        elif isinstance(node, Not):
            pending.append(node.operand)
        else:
            found.add(node.field)
    return sorted(found)


class _ValuesEnv(_Env):
    """Items that are the values of a few string fields: the value itself for one field, else a tuple of
    them in `names` order (see `_compile_filter`)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.accessors = {name: _acc(_identity if len(names) == 1 else itemgetter(i), None, "str")
                          for i, name in enumerate(names)}

    def lookup(self, name: str) -> _Acc:
        return self.accessors.get(name, _ABSENT)


def _identity(value: Any) -> Any:
    return value


def _key_function(getters: list[Getter]) -> Getter:
    """The tuple of several getters' results, unrolled for two and three."""
    if len(getters) == 2:
        a, b = getters
        return lambda item: (a(item), b(item))
    if len(getters) == 3:
        a, b, c = getters
        return lambda item: (a(item), b(item), c(item))
    return lambda item: tuple(g(item) for g in getters)


def _memoised(predicate: Predicate) -> Predicate:
    """`predicate(value)`, remembered per distinct value (bounded, like `_memoised_search`)."""
    memo: dict[Any, bool] = {}

    def decide(value: Any) -> bool:
        hit = memo.get(value)
        if hit is None:
            hit = bool(predicate(value))
            if len(memo) < _MEMO_LIMIT:
                memo[value] = hit
        return hit

    return decide


def _like(get: Getter, always_str: bool, pattern: re.Pattern[str] | str) -> Predicate:
    if not isinstance(pattern, str) and (literal := _regex_literal(pattern)) is not None:
        pattern = literal  # /kernel:/ matches exactly where the substring "kernel:" occurs
    if isinstance(pattern, str):
        needle = pattern
        if always_str:
            return lambda item: needle in get(item)
        return lambda item: (value := get(item)) is not None and needle in _text(value)
    search = pattern.search
    if always_str:
        matches = _memoised_search(search)
        return lambda item: matches(get(item))
    return lambda item: (value := get(item)) is not None and search(_text(value)) is not None


_REGEX_METACHARACTERS = frozenset(".^$*+?{}[]\\|()")
_MEMO_LIMIT = 1 << 18


def _regex_literal(pattern: re.Pattern[str]) -> str | None:
    """The pattern's text when it is a plain literal (no metacharacter, no flag that changes matching)."""
    text = pattern.pattern
    if pattern.flags != re.UNICODE or any(ch in _REGEX_METACHARACTERS for ch in text):
        return None
    return text


def _memoised_search(search: Callable[[str], Any]) -> Callable[[str], bool]:
    """`search(text) is not None`, remembered per distinct text: log lines repeat (periodic agents, the same
    daemon message on every node), and a regex with alternatives costs far more than a dict lookup.
    Bounded, so a stream of unique lines only pays the lookup."""
    memo: dict[str, bool] = {}

    def matches(text: str) -> bool:
        hit = memo.get(text)
        if hit is None:
            hit = search(text) is not None
            if len(memo) < _MEMO_LIMIT:
                memo[text] = hit
        return hit

    return matches


def _equals(get: Getter, literal: Scalar) -> Predicate:
    if isinstance(literal, str):
        return lambda item: (value := get(item)) is not None and _text(value) == literal
    return lambda item: _num(get(item)) == literal  # None (absent / not a number) never equals


def _compare(get: Getter, op: str, literal: Scalar) -> Predicate:
    if op == "=":
        return _equals(get, literal)
    if op == "!=":
        equal = _equals(get, literal)
        return lambda item: not equal(item)
    bound = float(literal)
    tests: dict[str, Callable[[float], bool]] = {
        "<": lambda n: n < bound,
        "<=": lambda n: n <= bound,
        ">": lambda n: n > bound,
        ">=": lambda n: n >= bound,
    }
    test = tests[op]
    return lambda item: (n := _num(get(item))) is not None and test(n)


def _member(get: Getter, literals: tuple[Scalar, ...], always_str: bool = False) -> Predicate:
    strings = frozenset(v for v in literals if isinstance(v, str))
    numbers = frozenset(v for v in literals if not isinstance(v, str))
    if always_str and not numbers:  # a str value is its own text and never a number literal
        return lambda item: get(item) in strings

    def member(item: Any) -> bool:
        value = get(item)
        if value is None:
            return False
        return _text(value) in strings or (bool(numbers) and _num(value) in numbers)

    return member


# --------------------------------------------------------------------------- stats

_NUMBER_TYPES = frozenset({int, float, _Ts})
_PLAIN_NUMBER_TYPES = frozenset({int, float})


def _extreme(values: list[Any], pick: Callable[..., Any]) -> Any:
    """min/max: numeric when every value is a number (timestamps are), else by displayed text."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    if _NUMBER_TYPES.issuperset(map(type, values)):
        return pick(values)  # keeps a _Ts a _Ts, so it prints as a timestamp
    numbers = [_num(v) for v in values]
    if None not in numbers:
        return pick(numbers)
    return pick(values, key=_text)


def _numbers(values: Iterable[Any]) -> list[int | float]:
    given = list(values)
    if _PLAIN_NUMBER_TYPES.issuperset(map(type, given)):
        return given  # _num of a plain int or float is itself (a C-level check instead of a call per value)
    return [n for n in map(_num, given) if n is not None]


def _compile_agg(agg: Agg, env: _Env, on_records: bool) -> Callable[[list[Any]], Value | None]:
    """An aggregation over the members of one group (records or rows)."""
    if agg.arg is None:
        return len
    acc = env.field(agg.arg)
    raw, final, value = acc.raw, acc.final, acc.value

    def finish(result: Any) -> Value | None:
        return result if result is None or final is None else final(result)

    func = agg.func
    if func == "count":
        if acc.kind != "any":
            return len
        return lambda members: len(members) - list(map(raw, members)).count(None)
    if func == "count_distinct":
        # raw is injective (log-group name, epoch ms), so distinct raw == distinct values; exact, not HLL.
        return lambda members: len(set(map(raw, members)) - {None})
    if func in ("sum", "avg"):

        def total(members: list[Any]) -> Value | None:
            numbers = _numbers(map(value, members))
            if not numbers:
                return None
            result = sum(numbers)
            return result if func == "sum" else result / len(numbers)

        return total
    if func in ("min", "max"):
        pick = min if func == "min" else max
        if acc.kind == "num":  # raw is always an int (epoch ms): C-level min/max, converted once
            if final is None:
                return lambda members: pick(map(raw, members))
            convert = final
            return lambda members: convert(pick(map(raw, members)))
        return lambda members: finish(_extreme(list(map(raw, members)), pick))
    # earliest / latest: the field's value on the record with the smallest / largest @timestamp.
    latest = func == "latest"
    stamp = env.field("@timestamp").raw
    if on_records and acc.kind != "any":
        pick = max if latest else min
        return lambda members: value(pick(members, key=stamp))

    def by_time(members: list[Any]) -> Value | None:
        best: Any = None
        best_time: Any = None
        for member in members:
            got, when = raw(member), stamp(member)
            if got is None or when is None:
                continue
            if best_time is None or (when > best_time if latest else when < best_time):
                best, best_time = got, when
        return finish(best)

    return by_time


def _rank(component: Any) -> tuple[int, Any]:
    if component is None:
        return (0, 0)
    if isinstance(component, (int, float)):
        return (1, component)
    return (2, component)


def _sorted_keys(keys: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Group keys ascending. Native tuple order when the types allow it (fast), else None < numbers < text."""
    key_list = list(keys)
    try:
        return sorted(key_list)
    except TypeError:
        return sorted(key_list, key=lambda key: tuple(map(_rank, key)))


def _none_safe(final: Callable[[Any], Value]) -> Callable[[Any], Value | None]:
    return lambda raw: None if raw is None else final(raw)


def _run_stats(
    cmd: StatsCmd, items: list[Any], env: _Env, on_records: bool, ordered: bool
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """One pass buckets the items by group key; the output is then built column by column, so the
    per-group work is mostly C-level builtins (len, min, max, map) rather than interpreted code.
    `ordered=False` skips sorting the groups when only another stats will consume them.
    Returns row tuples and each output name's position (a repeated name: the later one wins)."""
    by = [env.bin(t.bin_ms) if t.bin_ms is not None else env.field(t.field or "") for t in cmd.by]
    names = [t.name for t in cmd.by] + [agg.name for agg in cmd.aggs]
    positions = {name: index for index, name in enumerate(names)}
    groups: defaultdict[tuple[Any, ...], list[Any]] = defaultdict(list)
    keys_in_order = zip(*(acc.column(items) for acc in by), strict=True) if by else repeat((), len(items))
    for key, item in zip(keys_in_order, items, strict=True):  # the one per-item loop
        groups[key].append(item)
    if not groups:
        return [], positions

    keys = _sorted_keys(groups) if ordered else list(groups)
    output: list[list[Any]] = []
    for acc, key_column in zip(by, zip(*keys, strict=True), strict=True):
        final = acc.final
        if final is None:
            output.append(list(key_column))
        else:
            output.append(list(map(final if acc.kind != "any" else _none_safe(final), key_column)))
    member_lists = [groups[key] for key in keys]
    for agg in cmd.aggs:
        output.append(list(map(_compile_agg(agg, env, on_records), member_lists)))
    return list(zip(*output, strict=True)), positions


# --------------------------------------------------------------------------- sort and run


def _sort_items(items: list[Any], keys: Sequence[tuple[_Acc, bool]]) -> list[Any]:
    """Multi-key sort: numeric when every present value is a number, else text; absent values last."""
    for acc, descending in reversed(keys):  # least significant first; stable sorts compose
        if acc.kind == "num":
            items = sorted(items, key=acc.raw, reverse=descending)
            continue
        present: list[tuple[Any, Any]] = []
        absent: list[Any] = []
        for item in items:
            value = acc.value(item)
            if value is None:
                absent.append(item)
            else:
                present.append((value, item))
        numbers: list[Any] = [_num(value) for value, _ in present]
        sort_keys = numbers if None not in numbers else [_text(value) for value, _ in present]
        order = sorted(range(len(present)), key=sort_keys.__getitem__, reverse=descending)
        items = [present[i][1] for i in order] + absent
    return items


_NEWEST_FIRST = attrgetter("timestamp_ms")


def run_query(
    query: str, records: Iterable[ScanItem], start_s: int, end_s: int, account_id: str
) -> QueryOutcome:
    """Evaluate `query` over the records of the queried log groups, within [start_s, end_s] (inclusive).
    `records` may hold LogRuns among the LogRecords; the outcome is that of their lines in input order."""
    parsed = parse_query(query)
    if end_s < start_s:
        raise _error(query, f"endTime {end_s} is before startTime {start_s}")
    with _gc_paused():
        return _execute(parsed, records, start_s * 1000, end_s * 1000 + 999, account_id)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while evaluating: building hundreds of thousands of group lists and rows
    otherwise triggers repeated full collections that traverse every record, doubling the run time.
    Nothing here creates reference cycles, and the previous state is always restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _execute(
    parsed: Query, records: Iterable[ScanItem], low: int, high: int, account_id: str
) -> QueryOutcome:
    has_stats = any(isinstance(c, StatsCmd) for c in parsed.commands)
    has_fields = any(isinstance(c, FieldsCmd) for c in parsed.commands)
    needs_ptr = "@ptr" in parsed.field_names or not (has_stats or has_fields)
    ptr_of: dict[int, int] = {}
    env: _Env = _RecordEnv(account_id, ptr_of)
    on_records = True
    ordered = False  # raw records are implicitly newest first until a sort says otherwise
    display: list[tuple[str, _Acc]] | None = None  # set by `fields`, reset by `stats`
    columns: Iterable[str] = _DEFAULT_FIELDS  # output when no `fields` follows the last stage
    commands = parsed.commands
    first = 0  # the first command not yet applied
    if needs_ptr:
        # @ptr is the record's position in the caller's input, so the caller can resolve it back.
        items: list[Any] = []
        for index, record in enumerate(expanded(records)):
            if low <= record.timestamp_ms <= high:
                items.append(record)
                ptr_of[id(record)] = index
        scanned, scanned_bytes = len(items), _message_bytes(items)
        matched = scanned
    else:
        # One streaming pass, chunk by chunk, through the time range, the leading filters and (when it
        # comes next and can be merged) the first stats: the records scanned are never all held at once,
        # only those that pass the filters, or only per-group partial aggregates.
        first = next((i for i, c in enumerate(commands) if not isinstance(c, FilterCmd)), len(commands))
        tally = [0, 0, 0]  # scanned, bytes scanned, matched
        leading_exprs = [c.expr for c in commands[:first] if isinstance(c, FilterCmd)]
        leading = [_compile_filter(expr, env) for expr in leading_exprs]
        # The lines of a run differ only in their time: filters that read no time field decide a run at once.
        runs_whole = not any(_TIME_FIELDS.intersection(_fields_of(expr)) for expr in leading_exprs)
        stats = commands[first] if first < len(commands) else None
        if isinstance(stats, StatsCmd) and _mergeable(stats, env):
            kept_runs: list[LogRun] | None = [] if runs_whole and _run_aggregable(stats) else None
            chunks = _scan_chunks(records, low, high, leading, tally, runs_whole, kept_runs)
            after = commands[first + 1] if first + 1 < len(commands) else None
            if kept_runs is not None and isinstance(after, StatsCmd) and _per_stream(stats, after):
                feeds_stats = first + 2 < len(commands) and isinstance(commands[first + 2], StatsCmd)
                items, positions = _stats_of_stats(stats, after, chunks, env, kept_runs, ordered=not feeds_stats)
                first += 2
            else:
                items, positions = _stream_stats(stats, chunks, env, ordered=not isinstance(after, StatsCmd),
                                                 runs=kept_runs)
                first += 1
            env, columns, on_records, display = _RowEnv(positions), list(positions), False, None
        else:
            chunks = _scan_chunks(records, low, high, leading, tally, runs_whole, None)
            items = [record for chunk in chunks for record in chunk]
        scanned, scanned_bytes, matched = tally
    for index in range(first, len(commands)):
        command = commands[index]
        if isinstance(command, FilterCmd):
            items = list(filter(_compile_filter(command.expr, env), items))
            if on_records:
                matched = len(items)
        elif isinstance(command, FieldsCmd):
            display = display or []
            for name, out_name in command.items:
                acc = env.field(name)
                display.append((out_name, acc))
                if out_name != name:
                    env.aliases[out_name] = acc
        elif isinstance(command, SortCmd):
            items = _sort_items(items, [(env.field(name), desc) for name, desc in command.keys])
            ordered = True
        elif isinstance(command, LimitCmd):
            if on_records and not ordered:
                items = heapq.nlargest(command.n, items, key=_NEWEST_FIRST)  # == stable sort desc, cut
                ordered = True
            else:
                items = items[: command.n]
        else:
            # Group order only matters if something other than another stats sees these rows.
            feeds_stats = index + 1 < len(parsed.commands) and isinstance(
                parsed.commands[index + 1], StatsCmd
            )
            items, positions = _run_stats(command, items, env, on_records, ordered=not feeds_stats)
            env, columns, on_records, display = _RowEnv(positions), list(positions), False, None
    if on_records and not ordered:
        items = heapq.nlargest(MAX_RESULT_ROWS, items, key=_NEWEST_FIRST)
    items = items[:MAX_RESULT_ROWS]  # the AWS cap, silently, for raw and stats output alike

    if display is None:
        display = [(name, env.field(name)) for name in columns]
    getters = [(name, acc.value) for name, acc in display]
    rows = [
        [{"field": name, "value": _text(v)} for name, get in getters if (v := get(item)) is not None]
        for item in items
    ]
    return QueryOutcome(rows, scanned, matched, scanned_bytes)


_CHUNK = 1 << 15
_MESSAGE = attrgetter("message")
_STAMP = attrgetter("timestamp_ms")


def _message_bytes(records: list[Any]) -> int:
    """UTF-8 size without encoding every message: len() is the byte count for ASCII (an O(1) check)."""
    messages = list(map(_MESSAGE, records))
    size = sum(map(len, messages))
    return size + sum(len(m.encode()) - len(m) for m in filterfalse(str.isascii, messages))


def _utf8_size(message: str) -> int:
    return len(message) if message.isascii() else len(message.encode())


def expanded(items: Iterable[ScanItem]) -> Iterator[LogRecord]:
    """Every line, runs expanded in place."""
    return chain.from_iterable(item.records() if isinstance(item, LogRun) else (item,) for item in items)


def _scan_chunks(
    items: Iterable[ScanItem],
    low: int,
    high: int,
    predicates: list[Predicate],
    tally: list[int],
    runs_whole: bool,
    kept_runs: list[LogRun] | None,
) -> Iterator[list[Any]]:
    """The records in [low, high] that pass every predicate, in input order, a chunk at a time.
    `tally` accumulates records scanned, bytes scanned and records matched as the chunks are consumed.

    A run is decided on its first line when `runs_whole` (no predicate reads a time field); one that
    passes goes to `kept_runs` when given (the stats aggregates it whole), else comes out as records in
    its place. Without `runs_whole` a run is expanded and its lines filtered one by one."""
    for kind, group in groupby(items, key=type):
        if kind is not LogRun:
            yield from _record_chunks(cast(Iterator[LogRecord], group), low, high, predicates, tally)
            continue
        for run in cast(Iterator[LogRun], group):
            inside = run.within(low, high)
            if inside is None:
                continue
            if not runs_whole:
                yield from _record_chunks(inside.records(), low, high, predicates, tally)
                continue
            count = len(inside.timestamps)
            tally[0] += count
            tally[1] += count * _utf8_size(inside.message)
            first_line = LogRecord(inside.log_group, inside.log_stream, inside.timestamps[0], inside.message)
            if not all(predicate(first_line) for predicate in predicates):
                continue
            tally[2] += count
            if kept_runs is not None:
                kept_runs.append(inside)
                continue
            lines = inside.records()
            while chunk := list(islice(lines, _CHUNK)):
                yield chunk


def _record_chunks(
    records: Iterable[LogRecord], low: int, high: int, predicates: list[Predicate], tally: list[int]
) -> Iterator[list[Any]]:
    source = iter(records)
    while chunk := list(islice(source, _CHUNK)):
        stamps = list(map(_STAMP, chunk))  # the backend already cut the range, so usually all are in it
        kept = chunk if low <= min(stamps) and max(stamps) <= high else [
            r for r in chunk if low <= r.timestamp_ms <= high]
        tally[0] += len(kept)
        tally[1] += _message_bytes(kept)
        for predicate in predicates:
            kept = list(filter(predicate, kept))
        tally[2] += len(kept)
        if kept:
            yield kept


def _mergeable(cmd: StatsCmd, env: _Env) -> bool:
    """Every aggregation is one whose per-chunk results combine exactly: counts, and min/max of a field
    whose raw value is always an int (timestamps). The others keep the all-members path."""
    for agg in cmd.aggs:
        if agg.arg is None:
            continue
        kind = env.field(agg.arg).kind
        if not ((agg.func == "count" and kind != "any") or (agg.func in ("min", "max") and kind == "num")):
            return False
    return True


def _stream_stats(
    cmd: StatsCmd, chunks: Iterable[list[Any]], env: _Env, ordered: bool, runs: list[LogRun] | None = None
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """`_run_stats` on records (same rows, same order) that arrive in chunks: each chunk is grouped and
    aggregated exactly as there, then folded into per-group partials (count: add; min/max: pick), so
    memory is one chunk plus one partial per group, not every record. Only for `_mergeable` stats.
    `runs` (filled while the chunks are read) are folded in the same way, a bin of a run at a time."""
    partials, folds = _chunk_partials(cmd, chunks, env)
    if runs:
        _fold_runs(cmd, env, runs, partials, folds)
    keys = _sorted_keys(partials) if ordered else list(partials)
    return _partial_rows(cmd, env, partials, keys), _positions(cmd)


def _positions(cmd: StatsCmd) -> dict[str, int]:
    names = [t.name for t in cmd.by] + [agg.name for agg in cmd.aggs]
    return {name: index for index, name in enumerate(names)}


def _group_accessors(cmd: StatsCmd, env: _Env) -> list[_Acc]:
    return [env.bin(t.bin_ms) if t.bin_ms is not None else env.field(t.field or "") for t in cmd.by]


def _chunk_partials(
    cmd: StatsCmd, chunks: Iterable[list[Any]], env: _Env
) -> tuple[dict[tuple[Any, ...], tuple[Any, ...]], list[Callable[[Any, Any], Any]]]:
    """Per-group partial aggregates of the records in `chunks`, and how two partials of a group combine."""
    by = _group_accessors(cmd, env)
    aggregations = [_compile_agg(agg, env, True) for agg in cmd.aggs]
    folds: list[Callable[[Any, Any], Any]] = [
        _add if agg.func == "count" or agg.arg is None else (min if agg.func == "min" else max) for agg in cmd.aggs
    ]
    partials: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # tuples: a million groups is a lot of lists
    for chunk in chunks:
        groups: defaultdict[tuple[Any, ...], list[Any]] = defaultdict(list)
        keys_in_order = zip(*(acc.column(chunk) for acc in by), strict=True) if by else repeat((), len(chunk))
        for key, item in zip(keys_in_order, chunk, strict=True):
            groups[key].append(item)
        for key, members in groups.items():
            values = tuple([aggregate(members) for aggregate in aggregations])
            prior = partials.get(key)
            partials[key] = values if prior is None else tuple(
                [fold(a, b) for fold, a, b in zip(folds, prior, values, strict=True)])
    return partials, folds


def _partial_rows(
    cmd: StatsCmd, env: _Env, partials: dict[tuple[Any, ...], tuple[Any, ...]], keys: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """The output rows of the groups `keys`, in that order, popped from `partials` a slice at a time."""
    finals = [None if acc.final is None else acc.final if acc.kind != "any" else _none_safe(acc.final)
              for acc in _group_accessors(cmd, env)]
    rows: list[tuple[Any, ...]] = []
    for begin in range(0, len(keys), _CHUNK):
        part = keys[begin : begin + _CHUNK]
        output: list[Iterable[Any]] = [
            column if final is None else map(final, column)
            for final, column in zip(finals, zip(*part, strict=True), strict=True)
        ]
        output.extend(zip(*map(partials.pop, part), strict=True))
        rows.extend(zip(*output, strict=True))
    return rows


def _per_stream(first: StatsCmd, second: StatsCmd) -> bool:
    """`second` groups by exactly the fields (not bins) `first` groups by: each of its groups gathers the
    rows of one value of those fields, so the two can run one such value at a time."""
    names = list(_positions(first))
    if len(names) != len(first.by) + len(first.aggs):
        return False  # a name used twice: a later column hides an earlier one
    constant = sorted(t.name for t in first.by if t.bin_ms is None)
    wanted = sorted(t.field or "" for t in second.by if t.bin_ms is None)
    return len(wanted) == len(second.by) and constant == wanted


def _stats_of_stats(
    first: StatsCmd, second: StatsCmd, chunks: Iterable[list[Any]], env: _Env, runs: list[LogRun], ordered: bool
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """`first` then `second` (a `_per_stream` pair, `first` run-aggregable), one value of the shared fields
    (a stream, say) at a time: the rows are those of `_stream_stats` then `_run_stats`, in the same order,
    but only one stream's (stream, hour) groups are ever held, not every stream's."""
    partials, folds = _chunk_partials(first, chunks, env)  # the records only; `runs` is complete after this
    shared = [i for i, term in enumerate(first.by) if term.bin_ms is None]
    keys_of: defaultdict[tuple[Any, ...], list[tuple[Any, ...]]] = defaultdict(list)
    for key in partials:
        keys_of[tuple([key[i] for i in shared])].append(key)
    raws = [env.field(first.by[i].field or "").raw for i in shared]
    runs_of: defaultdict[tuple[Any, ...], list[LogRun]] = defaultdict(list)
    for run in runs:
        first_line = LogRecord(run.log_group, run.log_stream, run.timestamps[0], run.message)
        runs_of[tuple([raw(first_line) for raw in raws])].append(run)
    row_env = _RowEnv(_positions(first))
    rows: list[tuple[Any, ...]] = []
    for value in [*keys_of, *(v for v in runs_of if v not in keys_of)]:  # first appearance, as one pass has it
        own = {key: partials.pop(key) for key in keys_of.get(value, ())}
        _fold_runs(first, env, runs_of.get(value, []), own, folds)
        rows.extend(_run_stats(second, _partial_rows(first, env, own, list(own)), row_env, False, False)[0])
    if ordered:
        width = len(second.by)
        by_key = {row[:width]: row for row in rows}
        rows = [by_key[key] for key in _sorted_keys(by_key)]
    return rows, _positions(second)


def _add(a: Any, b: Any) -> Any:
    return a + b


_TIME_FIELDS = frozenset({"@timestamp", "@ingestionTime", "@ptr"})


def _run_aggregable(cmd: StatsCmd) -> bool:
    """A `_mergeable` stats that sees only what the lines of a run share: grouped by fields other than
    time and at most one bin, counting, and taking min/max of @timestamp or @ingestionTime (a run's
    lines have no ingestion time of their own, so it is their timestamp)."""
    if sum(term.bin_ms is not None for term in cmd.by) > 1:
        return False
    if any(term.bin_ms is None and term.field in _TIME_FIELDS for term in cmd.by):
        return False
    return all(agg.arg is None or agg.func == "count" or agg.arg in _TIME_FIELDS for agg in cmd.aggs)


def _fold_runs(
    cmd: StatsCmd,
    env: _Env,
    runs: list[LogRun],
    partials: dict[tuple[Any, ...], tuple[Any, ...]],
    folds: list[Callable[[Any, Any], Any]],
) -> None:
    """Fold each run into `partials` as `_stream_stats` folds its lines, one (group, bin) at a time:
    count is the lines in the bin, min/max their first and last timestamp (runs are ascending).
    Built a column at a time per run; a run whose groups are all new (the usual case) is one dict update."""
    keys = [None if term.bin_ms is not None else env.field(term.field or "").raw for term in cmd.by]
    width = next((term.bin_ms for term in cmd.by if term.bin_ms is not None), None)
    # Per aggregation: which of (count, first, last) it takes, and the output conversion of a timestamp.
    picks = [0 if agg.arg is None or agg.func == "count" else 1 if agg.func == "min" else 2 for agg in cmd.aggs]
    finals = [None if pick == 0 else env.field(agg.arg or "").final for pick, agg in zip(picks, cmd.aggs, strict=True)]
    for run in runs:
        stamps = run.timestamps
        first_line = LogRecord(run.log_group, run.log_stream, stamps[0], run.message)
        buckets, begins, ends = _bins(stamps, width)
        start, step = stamps.start, stamps.step
        segment = (list(map(sub, ends, begins)), [start + i * step for i in begins],
                   [start + (i - 1) * step for i in ends])
        if width is None:  # one group per run
            group_keys = [tuple([raw(first_line) for raw in keys if raw is not None])]
        else:  # the bin column bounds the repeated constant ones
            group_keys = list(zip(*[buckets if raw is None else repeat(raw(first_line)) for raw in keys], strict=False))
        values = list(zip(*[segment[pick] if final is None else map(final, segment[pick])
                            for pick, final in zip(picks, finals, strict=True)], strict=False))
        if partials.keys().isdisjoint(group_keys):
            partials.update(zip(group_keys, values, strict=True))
            continue
        for key, value in zip(group_keys, values, strict=True):
            prior = partials.get(key)
            partials[key] = value if prior is None else tuple(
                [fold(a, b) for fold, a, b in zip(folds, prior, value, strict=True)])


def _bins(stamps: range, width: int | None) -> tuple[Sequence[int | None], list[int], list[int]]:
    """Bin starts, and per bin the first index and the end index of an ascending range's timestamps in it
    (one bin of None without a width). Empty bins are left out."""
    total = len(stamps)
    if width is None:
        return [None], [0], [total]
    first, last, start, step = stamps[0] // width * width, stamps[-1] // width * width, stamps.start, stamps.step
    if step <= width:  # every bin from the first line's to the last line's holds a line
        buckets = range(first, last + 1, width)
        ends = [(bucket + width - 1 - start) // step + 1 for bucket in buckets]
        ends[-1] = total  # only the last bin's end can pass the last line
        return buckets, [0, *ends[:-1]], ends
    starts, begins, ends = [], [], []
    begin = 0
    while begin < total:
        bucket = stamps[begin] // width * width
        starts.append(bucket)
        begins.append(begin)
        begin = min(total, (bucket + width - 1 - start) // step + 1)
        ends.append(begin)
    return starts, begins, ends
