"""`run_query`: parse, then run the commands in order over the records of the queried groups."""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from gpuaudit.embedded.insights.evaluate import (
    _NEWEST_FIRST,
    _TIME_FIELDS,
    _Acc,
    _compile_filter,
    _Env,
    _fields_of,
    _RecordEnv,
    _RowEnv,
    _run_stats,
    _sort_items,
    _text,
)
from gpuaudit.embedded.insights.records import LogRun, QueryOutcome, ScanItem, expanded
from gpuaudit.embedded.insights.runs import (
    _mergeable,
    _message_bytes,
    _per_stream,
    _run_aggregable,
    _scan_chunks,
    _stats_of_stats,
    _stream_stats,
)
from gpuaudit.embedded.insights.syntax import (
    INVALID_PARAMETER,
    MAX_QUERY_CHARS,
    MAX_RESULT_ROWS,
    FieldsCmd,
    FilterCmd,
    LimitCmd,
    Query,
    SortCmd,
    StatsCmd,
    _error,
    parse_query,
)

_DEFAULT_FIELDS = ("@timestamp", "@message", "@logStream", "@log", "@ptr")


def run_query(
    query: str, records: Iterable[ScanItem], start_s: int, end_s: int, account_id: str,
    max_chars: int | None = MAX_QUERY_CHARS,
) -> QueryOutcome:
    """Evaluate `query` over the records of the queried log groups, within [start_s, end_s] (inclusive).
    `records` may hold LogRuns among the LogRecords; the outcome is that of their lines in input order."""
    parsed = parse_query(query, max_chars)
    if end_s < start_s:
        raise _error(query, f"endTime {end_s} is before startTime {start_s}", INVALID_PARAMETER)
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
        computed = commands[first] if first < len(commands) else None
        if isinstance(computed, FieldsCmd) and first + 1 < len(commands) \
                and isinstance(commands[first + 1], StatsCmd):
            # `fields f(...) as x | stats ...`: the stats reads x as a field computed per record (the display the
            # fields command would set is replaced by the stats' columns), so the streaming path still applies.
            for item, name in computed.items:
                env.define(item, name)
            first += 1
        stats = commands[first] if first < len(commands) else None
        if isinstance(stats, StatsCmd) and _mergeable(stats, env):
            kept_runs: list[LogRun] | None = [] if runs_whole and _run_aggregable(stats, env) else None
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
            display.extend((name, env.define(item, name)) for item, name in command.items)
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

