"""Logs Insights query text → a small frozen AST: the tokenizer, the AST and a recursive-descent parser.

`parse_query` raises `QueryError` for any form the evaluator does not support, naming the query and the part."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

_T = TypeVar("_T")

# Limits StartQuery enforces (docs/decisions.md, "Logs Insights as AWS documents it", lists which are
# confirmed and which assumed). Sources:
#   API: https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_StartQuery.html
#   stats: https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/CWL_QuerySyntax-Stats.html#CWL_QuerySyntax-stats-multi
MAX_RESULT_ROWS = 10_000  # StartQuery `limit`: 1..10,000 (API page; botocore model EventsLimit max 10000)
MAX_LOG_GROUPS = 50  # StartQuery `logGroupNames`: "You can include up to 50 log groups" (API page)
MAX_QUERY_CHARS = 10_000  # StartQuery `queryString`: maximum length 10,000 (API page; botocore model max 10000)
MAX_STATS = 2  # "Use multiple stats commands in a single query": at most two (stats page)
MALFORMED = "MalformedQueryException"  # the query text does not compile (StartQuery Errors)
INVALID_PARAMETER = "InvalidParameterException"  # a parameter outside its constraints (StartQuery Errors)

_ERROR_QUERY_CHARS = 200
_AGGREGATIONS = frozenset({"count", "count_distinct", "sum", "min", "max", "avg", "earliest", "latest"})
# Functions the evaluator computes per record in `fields` (documented on the query syntax page: "String functions",
# "Numeric operations"): strcontains(string1, string2) "returns 1 if string1 contains string2 and 0 otherwise";
# greatest / least of numbers. Others the service has are refused as unsupported (a limit of the evaluator).
_SCALAR_FUNCTIONS = frozenset({"strcontains", "greatest", "least"})
_ALWAYS_PRESENT = frozenset({"@message", "@logStream", "@log"})
_BIN_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}
_UNSUPPORTED_COMMANDS = frozenset(
    {"parse", "display", "dedup", "unmask", "pattern", "diff", "anomaly", "unnest", "lookup", "source"}
)


class QueryError(ValueError):
    """Query form not supported / malformed; message names the query text and the unsupported part.
    `exception` is the error code StartQuery answers with for it."""

    def __init__(self, message: str, exception: str = MALFORMED) -> None:
        super().__init__(message)
        self.exception = exception


def _error(query: str, detail: str, exception: str = MALFORMED) -> QueryError:
    return QueryError(f"{detail} in Logs Insights query: {query[:_ERROR_QUERY_CHARS]}", exception)


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
class Call:
    """A function computed per record: `strcontains(field, "text")`, `greatest(...)` / `least(...)` of calls."""

    func: str  # lower-case
    args: tuple[str | Scalar | Call, ...]  # strcontains: (field name, string); greatest/least: calls or numbers


@dataclass(frozen=True)
class FieldsCmd:
    items: tuple[tuple[str | Call, str], ...]  # (field or computed value, output name)


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

    def at_call(self, names: frozenset[str]) -> bool:
        tok, after = self.peek(), self.peek(1)
        return (tok is not None and tok.kind == "ident" and tok.text.lower() in names
                and after is not None and after.kind == "punct" and after.text == "(")

    def call(self) -> Call:
        """`strcontains(<field>, "<text>")`, or `greatest` / `least` of such calls and numbers."""
        func = self.take("a function").text.lower()
        self.expect_punct("(")
        args: list[str | Scalar | Call]
        if func == "strcontains":
            args = [self.field()]
            if args[0] not in _ALWAYS_PRESENT:
                raise self.error(f"unsupported strcontains on {args[0]} (the evaluator reads only "
                                 f"{', '.join(sorted(_ALWAYS_PRESENT))}, which every record has)")
            self.expect_punct(",")
            text = self.literal()
            if not isinstance(text, str):
                raise self.error(f"strcontains needs a string to look for, found {text}")
            args.append(text)
        else:
            def operand() -> Scalar | Call:
                if self.at_call(_SCALAR_FUNCTIONS):
                    return self.call()
                number = self.literal()
                if isinstance(number, str):
                    raise self.error(f"{func} needs numbers, found '{number}'")
                return number

            args = list(self.comma_separated(operand))
        self.expect_punct(")")
        return Call(func, tuple(args))

    def comma_separated(self, item: Callable[[], _T]) -> list[_T]:
        items = [item()]
        while self.at_punct(","):
            self.pos += 1
            items.append(item())
        return items

    # -- commands
    def fields_cmd(self) -> FieldsCmd:
        def item() -> tuple[str | Call, str]:
            start = self.pos
            value = self.call() if self.at_call(_SCALAR_FUNCTIONS) else self.field()
            text = "".join(tok.text for tok in self.tokens[start:self.pos])
            return value, self.alias() or (text if isinstance(value, Call) else value)

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


def parse_query(query: str, max_chars: int | None = MAX_QUERY_CHARS) -> Query:
    """Parse and validate a query; raises QueryError for any form this evaluator does not support or the
    service rejects. `max_chars=None` skips the length check (a `limit` the caller appended itself)."""
    if max_chars is not None and len(query) > max_chars:
        raise _error(query, f"queryString is {len(query)} characters; StartQuery accepts at most {max_chars}",
                     INVALID_PARAMETER)
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
    _check_stats_rules(query, commands)
    return Query(query, tuple(commands), frozenset(fields))


def _check_stats_rules(query: str, commands: list[Command]) -> None:
    """The service's rules for two `stats` in one query (stats page, "Use multiple stats commands in a
    single query"): at most two; `sort` and `limit` only after the second; the second reads only the
    fields the first produced, and groups by no `bin()` (the first's time bins are already fields)."""
    stats_at = [i for i, command in enumerate(commands) if isinstance(command, StatsCmd)]
    if len(stats_at) > MAX_STATS:
        raise _error(query, f"{len(stats_at)} stats commands; a query may use at most {MAX_STATS}")
    if len(stats_at) < MAX_STATS:
        return
    first_at, second_at = stats_at
    early = next((c for c in commands[:second_at] if isinstance(c, (SortCmd, LimitCmd))), None)
    if early is not None:
        raise _error(query, f"'{'sort' if isinstance(early, SortCmd) else 'limit'}' before the second stats; "
                            "with two stats, sort and limit may only follow the second")
    first, second = (command for command in commands if isinstance(command, StatsCmd))
    if any(term.bin_ms is not None for term in second.by):
        raise _error(query, "bin() in the second stats; only the first stats may group by time bins")
    produced = {term.name for term in first.by} | {agg.name for agg in first.aggs}
    for command in commands[first_at + 1 : second_at]:  # `fields x as y` between the two names new columns
        if isinstance(command, FieldsCmd):
            produced |= {alias for item, alias in command.items if item in produced}
    read = [term.field for term in second.by if term.field] + [agg.arg for agg in second.aggs if agg.arg]
    unknown = sorted({name for name in read if name not in produced})
    if unknown:
        raise _error(query, f"the second stats reads {', '.join(unknown)}, which the first stats does not produce")

