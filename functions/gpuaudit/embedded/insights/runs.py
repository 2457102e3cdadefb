"""The streaming path: records scanned a chunk at a time, mergeable stats folded per chunk, and `LogRun`s
decided and aggregated whole where the query cannot tell their lines apart (outcome = that of their lines)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import filterfalse, groupby, islice, repeat
from operator import attrgetter, sub
from typing import Any, cast

from gpuaudit.embedded.insights.evaluate import (
    _TIME_FIELDS,
    Predicate,
    _Acc,
    _compile_agg,
    _Env,
    _none_safe,
    _RowEnv,
    _run_stats,
    _sorted_keys,
    compile_stats,
)
from gpuaudit.embedded.insights.records import LogRecord, LogRun, ScanItem
from gpuaudit.embedded.insights.syntax import StatsCmd

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
    """Every aggregation is one whose per-chunk results combine exactly: counts, and min/max/sum of a field
    whose raw value is always an int (timestamps, `strcontains`). The others keep the all-members path."""
    for agg in cmd.aggs:
        if agg.arg is None:
            continue
        kind = env.field(agg.arg).kind
        if not ((agg.func == "count" and kind != "any") or (agg.func in ("min", "max", "sum") and kind == "num")):
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
        _add if agg.func in ("count", "sum") or agg.arg is None else (min if agg.func == "min" else max)
        for agg in cmd.aggs
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
    compiled = compile_stats(second, row_env, False)
    rows: list[tuple[Any, ...]] = []
    for value in [*keys_of, *(v for v in runs_of if v not in keys_of)]:  # first appearance, as one pass has it
        own = {key: partials.pop(key) for key in keys_of.get(value, ())}
        _fold_runs(first, env, runs_of.get(value, []), own, folds)
        rows.extend(_run_stats(second, _partial_rows(first, env, own, list(own)), row_env, False, False,
                               compiled)[0])
    if ordered:
        width = len(second.by)
        by_key = {row[:width]: row for row in rows}
        rows = [by_key[key] for key in _sorted_keys(by_key)]
    return rows, _positions(second)


def _add(a: Any, b: Any) -> Any:
    return a + b


def _run_aggregable(cmd: StatsCmd, env: _Env) -> bool:
    """A `_mergeable` stats that sees only what the lines of a run share: grouped by fields other than
    time and at most one bin, counting, and taking min/max of @timestamp or @ingestionTime (a run's
    lines have no ingestion time of their own, so it is their timestamp) or min/max/sum of a value computed from
    the fields its lines share (`fields strcontains(@message, "x") as k`: a bin's sum is k times its lines)."""
    if sum(term.bin_ms is not None for term in cmd.by) > 1:
        return False
    if any(term.bin_ms is None and term.field in _TIME_FIELDS for term in cmd.by):
        return False
    return all(agg.arg is None or agg.func == "count" or agg.arg in env.run_constant
               or (agg.arg in _TIME_FIELDS and agg.func in ("min", "max")) for agg in cmd.aggs)


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
    # Per aggregation: which of (count, first, last, the run's constant value, that value times the count) it
    # takes, and the output conversion of a timestamp.
    picks = [0 if agg.arg is None or agg.func == "count"
             else (4 if agg.func == "sum" else 3) if agg.arg in env.run_constant
             else 1 if agg.func == "min" else 2 for agg in cmd.aggs]
    finals = [None if pick in (0, 3, 4) else env.field(agg.arg or "").final
              for pick, agg in zip(picks, cmd.aggs, strict=True)]
    constants = [env.field(agg.arg or "").raw for agg in cmd.aggs if agg.arg in env.run_constant]
    for run in runs:
        stamps = run.timestamps
        first_line = LogRecord(run.log_group, run.log_stream, stamps[0], run.message)
        buckets, begins, ends = _bins(stamps, width)
        start, step = stamps.start, stamps.step
        segment = (list(map(sub, ends, begins)), [start + i * step for i in begins],
                   [start + (i - 1) * step for i in ends], *[[raw(first_line)] * len(begins) for raw in constants])
        if width is None:  # one group per run
            group_keys = [tuple([raw(first_line) for raw in keys if raw is not None])]
        else:  # the bin column bounds the repeated constant ones
            group_keys = list(zip(*[buckets if raw is None else repeat(raw(first_line)) for raw in keys], strict=False))
        columns = iter(segment[3:])
        values = list(zip(*[next(columns) if pick == 3
                            else [n * v for n, v in zip(segment[0], next(columns), strict=True)] if pick == 4
                            else segment[pick] if final is None
                            else map(final, segment[pick]) for pick, final in zip(picks, finals, strict=True)],
                          strict=False))
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
