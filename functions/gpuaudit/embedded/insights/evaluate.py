"""Per-item operations of the evaluator: values and their output text, field access before and after
stats, compiled filters, aggregations, group ordering and sort."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from itertools import repeat
from operator import attrgetter, floordiv, itemgetter, mul
from typing import Any

from gpuaudit.embedded.insights.records import LogRecord
from gpuaudit.embedded.insights.syntax import (
    Agg,
    BoolOp,
    Call,
    Expr,
    In,
    Like,
    Not,
    QueryError,
    Scalar,
    StatsCmd,
)

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
        # Aliases computed from fields every line of a LogRun shares (no time field): constant along a run.
        self.run_constant: set[str] = set()

    def field(self, name: str) -> _Acc:
        return self.aliases.get(name) or self.lookup(name)

    def define(self, item: str | Call, name: str) -> _Acc:
        """`fields <item> as <name>`: the accessor, remembered under `name` when it is a new name."""
        acc = self.field(item) if isinstance(item, str) else _compile_call(item, self)
        if item != name:
            self.aliases[name] = acc
            if isinstance(item, Call) and not _TIME_FIELDS.intersection(_call_fields(item)):
                self.run_constant.add(name)
        return acc

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

    # No bin(): the parser refuses bin() in a second stats, as the service does (syntax._check_stats_rules).


# --------------------------------------------------------------------------- computed fields

_TIME_FIELDS = frozenset({"@timestamp", "@ingestionTime", "@ptr"})


def _call_fields(call: Call) -> set[str]:
    """The fields a computed value reads."""
    if call.func == "strcontains":
        return {str(call.args[0])}
    return set().union(*(_call_fields(arg) for arg in call.args if isinstance(arg, Call)))


def _compile_call(call: Call, env: _Env) -> _Acc:
    """A number per item. strcontains reads a field every record has (a string), so the answer is 1 or 0, never
    absent; what the service gives for a missing field is not documented, so the parser's callers keep to those."""
    if call.func == "strcontains":
        field, needle = str(call.args[0]), str(call.args[1])
        acc = env.field(field)
        if acc.kind != "str":
            raise QueryError(f"unsupported strcontains({field}, ...) after stats: the evaluator reads only fields "
                             "every record has (@message, @logStream, @log)")
        get = acc.value
        return _acc(lambda item: 1 if needle in get(item) else 0, None, "num")
    pick = max if call.func == "greatest" else min
    numbers = [arg for arg in call.args if not isinstance(arg, Call)]
    parts = [_compile_call(arg, env).raw for arg in call.args if isinstance(arg, Call)]
    return _acc(lambda item: pick([*numbers, *[part(item) for part in parts]]), None, "num")


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


CompiledStats = tuple[list[_Acc], list[Callable[[list[Any]], Any]]]


def compile_stats(cmd: StatsCmd, env: _Env, on_records: bool) -> CompiledStats:
    """A stats command's group-key accessors and aggregations, built once for every `_run_stats` that reuses them
    (the second stats of a pair runs once per stream: building them each time was most of its cost)."""
    by = [env.bin(t.bin_ms) if t.bin_ms is not None else env.field(t.field or "") for t in cmd.by]
    return by, [_compile_agg(agg, env, on_records) for agg in cmd.aggs]


def _run_stats(
    cmd: StatsCmd, items: list[Any], env: _Env, on_records: bool, ordered: bool,
    compiled: CompiledStats | None = None,
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """One pass buckets the items by group key; the output is then built column by column, so the
    per-group work is mostly C-level builtins (len, min, max, map) rather than interpreted code.
    `ordered=False` skips sorting the groups when only another stats will consume them.
    Returns row tuples and each output name's position (a repeated name: the later one wins)."""
    by, aggregations = compiled or compile_stats(cmd, env, on_records)
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
    for aggregate in aggregations:
        output.append(list(map(aggregate, member_lists)))
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
