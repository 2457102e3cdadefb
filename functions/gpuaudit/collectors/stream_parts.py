"""A read past the 10,000-row cap, read in parts (RULES §4 at fleet size): streams cut by the ending of the instance ID
in their name, or by the last digit of the host name's IP address, sized from a count (`stream-count`), from the
last read, or by halving a part found capped; the count is a size, never evidence."""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuaudit.collectors import insights  # insights.MAX_ROWS: one cap, patched in one place
from gpuaudit.collectors.insights import InsightsRunner, _group_name, _Pending
from gpuaudit.domain.streams import (
    NodeIndex,
    stream_node_ids,
)
from gpuaudit.model.evidence import (
    QueryPurpose,
)

# A per-stream query (kernel-streams, stream-summary) expected past the 10,000-row cap — counted first, or known
# from the last read — or that reaches it, is read in parts, each filtered on a range of the last two hex digits
# of an instance ID in the stream's name (256 endings, uniform whether IDs are random, as EC2's are, or sequential,
# as in test worlds). The names that hold no instance ID ride with the first part (`or ... not like`), or, when the
# count (or the cache) says they would crowd it, have parts of their own from the start, so every name falls in a
# part. A name with two IDs may fall in two; rows are keyed by stream, so the overlap is harmless.
# Filtering on @logStream keeps each stream's row whole. A part that still reaches the cap is halved, down to one
# ending (2.56 million streams per batch); the names without an ID then get a part of their own, split in turn by
# the last digit of an EC2 host name (`ip-10-0-3-17`: streams named `{hostname}`), down to one digit; the names
# with neither (past 10,000 per batch) stay a gap. No look-around: the service's regular expressions are not
# Python's.
_HEX = "0123456789abcdef"


ENDINGS = 256  # two hex digits


Endings = tuple[int, int]  # [first, last + 1) of the 256 two-digit endings, as numbers


_ID_ENDING = "i-(?:[0-9a-f]{{6}}|[0-9a-f]{{15}})(?:{endings})(?:[^0-9a-f]|$)"  # IDs of 8 or 17 digits


_ANY_ID = _ID_ENDING.format(endings="[0-9a-f]{2}")


NO_INSTANCE_ID = f"filter @logStream not like /{_ANY_ID}/"


_ANY_ID_RX = re.compile(_ANY_ID)


_EC2_HOST = "ip-[0-9]+-[0-9]+-[0-9]+-[0-9]*[{digits}](?:[^0-9]|$)"  # its last digit: the IP address's


_DIGITS = "0123456789"


PART_HEADROOM = 1.2  # parts are sized for 83 % of the cap: IDs spread unevenly, and a count may be an estimate


def _endings_pattern(span: Endings) -> str:
    """The endings [lo, hi) as alternatives of explicit characters (`[9ab]`, never `[9-b]`). An ending's number
    is 16 × its last digit + the digit before, so sequential IDs, whose last digit turns fastest, spread over the
    parts as random ones do."""
    def chars(a: int, b: int) -> str:
        return _HEX[a] if a == b else f"[{_HEX[a:b + 1]}]"

    (a_last, a_before), (b_last, b_before) = divmod(span[0], 16), divmod(span[1] - 1, 16)
    if a_last == b_last:
        return chars(a_before, b_before) + _HEX[a_last]
    pieces = [chars(a_before, 15) + _HEX[a_last]]
    if b_last - a_last > 1:
        pieces.append("[0-9a-f]" + chars(a_last + 1, b_last - 1))
    return "|".join([*pieces, chars(0, b_before) + _HEX[b_last]])


@dataclass(frozen=True)
class Part:
    """A share of a per-stream read by the names of its streams: those whose instance ID ends in `endings`, and
    with `unnamed` those that hold no ID. Without `endings`, only names without an ID: all of them (`host_digits`
    None), those whose EC2 host name ends in one of `host_digits` (with `unhosted`, also those with no such host
    name), or ("") those with no such host name either."""

    endings: Endings | None = None
    unnamed: bool = False
    host_digits: str | None = None
    unhosted: bool = False

    def filter(self) -> str:
        if self.endings is not None:
            where = f"filter @logStream like /{_ID_ENDING.format(endings=_endings_pattern(self.endings))}/"
            return f"{where} or @logStream not like /{_ANY_ID}/" if self.unnamed else where
        if self.host_digits is None:
            return NO_INSTANCE_ID
        if self.host_digits:
            hosted = f"@logStream like /{_EC2_HOST.format(digits=self.host_digits)}/"
            if self.unhosted:
                return f"{NO_INSTANCE_ID} and ({hosted} or @logStream not like /{_EC2_HOST.format(digits=_DIGITS)}/)"
            return f"{NO_INSTANCE_ID} and {hosted}"
        return f"{NO_INSTANCE_ID} and @logStream not like /{_EC2_HOST.format(digits=_DIGITS)}/"

    def halves(self) -> list[Part]:
        """The parts this one is read again in when it reaches the cap; none when it cannot be split."""
        if self.endings is not None:
            if self.unnamed:  # the names without an ID leave it first: its range was sized for the IDs alone
                return [Part(self.endings), Part()]
            lo, hi = self.endings
            return [Part((lo, (lo + hi) // 2)), Part(((lo + hi) // 2, hi))] if hi - lo > 1 else []
        if self.host_digits is None:
            return host_parts(2)
        digits, unhosted = self.host_digits, self.unhosted
        if len(digits) > 1:
            return [Part(host_digits=digits[:len(digits) // 2]),
                    Part(host_digits=digits[len(digits) // 2:], unhosted=unhosted)]
        return [Part(host_digits=digits), Part(host_digits="")] if unhosted and digits else []


def host_parts(count: int) -> list[Part]:
    """The names without an instance ID in `count` parts (2 to 10) by their EC2 host name's last digit, the names
    with no such host name riding with the last."""
    cut = [len(_DIGITS) * i // count for i in range(count + 1)]
    return [Part(host_digits=_DIGITS[a:b], unhosted=b == len(_DIGITS)) for a, b in zip(cut, cut[1:], strict=False)]


def stream_part_filter(span: Endings | None, unnamed: bool = False) -> str:
    """The streams whose name holds an instance ID ending in `span`, and with `unnamed` those whose name holds
    none (`span` None: only those)."""
    return Part(span, unnamed).filter()


def part_ranges(streams: int) -> list[Endings]:
    """Endings for about `streams` streams: as few near-equal parts as keep the widest within 83 % of the cap, at
    least two (at most 256: one ending each)."""
    parts = max(2, math.ceil(streams * PART_HEADROOM / insights.MAX_ROWS))
    while parts < ENDINGS and math.ceil(ENDINGS / parts) * streams * PART_HEADROOM > ENDINGS * insights.MAX_ROWS:
        parts += 1
    parts = min(parts, ENDINGS)
    return [(ENDINGS * i // parts, ENDINGS * (i + 1) // parts) for i in range(parts)]


@dataclass(frozen=True)
class Rows:
    """How many rows a per-stream read returns: its streams, and of them those whose name holds no instance ID."""

    streams: int
    unnamed: int = 0


def id_parts(ranges: list[Endings]) -> list[Part]:
    """Parts by instance-ID ending, the names without an ID riding with the first."""
    return [Part(span, unnamed=i == 0) for i, span in enumerate(ranges)]


def planned_parts(rows: Rows, ranges: list[Endings] | None = None) -> list[Part]:
    """The parts of a read of `rows` expected past the cap: its ID-named streams by ending (`ranges`, else as few
    near-equal ranges as `part_ranges` gives); the names without an ID ride with the first part while that part
    stays within 83 % of the cap, else they are read apart from the start (by the last digit of their EC2 host name
    when they alone would pass it), not found by the first part's cap."""
    named = max(rows.streams - rows.unnamed, 0)
    if ranges is None:
        ranges = part_ranges(named) if in_parts(named) else [(0, ENDINGS)]
    widest = max(hi - lo for lo, hi in ranges)
    if not in_parts(named * widest // ENDINGS + rows.unnamed):
        return id_parts(ranges)
    if not in_parts(rows.unnamed):
        return [*map(Part, ranges), Part()]
    return [*map(Part, ranges),
            *host_parts(min(len(_DIGITS), math.ceil(rows.unnamed * PART_HEADROOM / insights.MAX_ROWS)))]


def _fits(streams: int, width: int) -> bool:
    """Do `width` of the 256 endings of `streams` ID-named streams stay within 83 % of the cap?"""
    return width * streams * PART_HEADROOM <= ENDINGS * insights.MAX_ROWS


def _near_equal(lo: int, hi: int, parts: int) -> list[Endings]:
    return [(lo + (hi - lo) * i // parts, lo + (hi - lo) * (i + 1) // parts) for i in range(parts)]


def _own_ranges(rows: Rows, width: int) -> list[Endings]:
    """A group's ID ranges below the top `width` endings: one fewer than `part_ranges` gives it alone."""
    return _near_equal(0, ENDINGS - width, len(part_ranges(max(rows.streams - rows.unnamed, 0))) - 1)


def _tail_width(rows: Rows) -> int | None:
    """The fewest endings at the top of the range a group in parts can leave to a part shared with other groups: its
    own parts then one fewer than alone (`planned_parts`), each still within 83 % of the cap; None when it cannot."""
    named, alone = max(rows.streams - rows.unnamed, 0), len(planned_parts(rows))
    for width in range(1, ENDINGS):
        ranges = _own_ranges(rows, width)
        if ranges and _fits(named, max(hi - lo for lo, hi in ranges)) and len(planned_parts(rows, ranges)) == alone - 1:
            return width
    return None


def _shared_tail(counts: Mapping[str, Rows]) -> tuple[int, list[str]]:
    """The groups in parts whose last parts become one query over them all, and how many endings that part takes:
    as many groups as keep it within 83 % of the cap, the smallest first. No group is scanned more often than read
    alone (its own parts, one fewer, plus the shared one; a wider shared part may even let a group's names without
    an ID ride with its first part); the queries are fewer by at least the groups joined less one (#50 item 1:
    10,001 kernel streams in each of two groups, 4 queries → 3)."""
    widths = {g: w for g, rows in counts.items() if (w := _tail_width(rows))}
    joined: list[str] = []
    width = 0
    for group in sorted(widths, key=lambda g: (counts[g].streams, g)):
        wider = max(width, widths[group])
        if _fits(sum(counts[g].streams - counts[g].unnamed for g in [*joined, group]), wider):
            joined, width = [*joined, group], wider
    return (width, joined) if len(joined) > 1 else (0, [])


def holds_instance_id(stream: str) -> bool:
    """Does the stream's name hold an instance ID, as the parts' filters read it (8 or 17 hex digits)?"""
    return _ANY_ID_RX.search(stream) is not None


def in_parts(streams: int) -> bool:
    """Is a per-stream read of about `streams` streams read in parts from the start (its whole would be capped)?"""
    return streams * PART_HEADROOM > insights.MAX_ROWS


def stream_part_ranges(rows: Sequence[dict[str, str]], index: NodeIndex, node_count: int) -> list[Endings]:
    """The endings of a re-read, for an estimate of the streams from the capped rows: the most streams any one
    node has among them (a node's streams are alike across the fleet), times the nodes."""
    per_node = Counter(iid for r in rows for iid in stream_node_ids(r.get("@logStream", ""), index))
    return part_ranges(max(per_node.values(), default=1) * max(node_count, len(per_node), 1))


@dataclass
class PartsRead:
    rows: list[dict[str, str]]
    left: int  # parts still at the cap or unanswered: 0 when every stream was read
    answered: bool  # at least one part returned rows


def _streams_counted(rows: list[dict[str, str]] | None) -> dict[str, dict[str, Rows]] | None:
    """The rows each per-stream read will return, per group, from a STREAM_COUNTS result (a group with no row: none);
    None when it was not read."""
    if rows is None:
        return None
    out: dict[str, dict[str, Rows]] = {"summary": {}, "kernel": {}}
    for row in rows:
        try:
            streams, named, kernel, kernel_named = (int(float(row.get(name, "0"))) for name in (
                "streams", "id_streams", "kernel_streams", "kernel_id_streams"))
        except ValueError:
            return None
        group = _group_name(row.get("@log", ""))
        out["summary"][group] = Rows(streams, streams - named)
        out["kernel"][group] = Rows(kernel, kernel - kernel_named)
    return out


def group_parts(batch: list[str], rows: Mapping[str, Rows]) -> list[tuple[list[str], list[Part]]]:
    """The queries of a per-stream read past the cap, each naming only the groups it reads: a group that alone would
    pass 83 % of the cap in its own parts (`planned_parts`), the others together, as many per query as keep it
    within 83 % of the cap (one part over all their streams, halved if it reaches the cap anyway). A part over both
    groups of a fleet scans both; apart, each part scans only its group (#34 item 7: the summary re-scanned every
    group per part). Groups in parts share their last part where it fits (`_shared_tail`): no group scanned more
    often, fewer queries."""
    out: list[tuple[list[str], list[Part]]] = []
    together: list[str] = []
    held = 0
    big = {g: rows[g] for g in batch if g in rows and in_parts(rows[g].streams)}
    width, sharing = _shared_tail(big)
    for group in batch:
        count = rows.get(group, Rows(0))
        if group in big:
            out.append(([group], planned_parts(count, _own_ranges(count, width)) if group in sharing
                        else planned_parts(count)))
            continue
        if together and in_parts(held + count.streams):
            out.append((together, [Part((0, ENDINGS), unnamed=True)]))
            together, held = [], 0
        together.append(group)
        held += count.streams
    if sharing:
        out.append(([g for g in batch if g in sharing], [Part((ENDINGS - width, ENDINGS))]))
    if together:
        out.append((together, [Part((0, ENDINGS), unnamed=True)]))
    return out


class _Parts:
    """A per-stream read in parts: every part is started at once (within the query budget), then read, and a part
    still at the cap is halved. `rows`: a capped whole's rows, when the whole was read first (`capped`)."""

    def __init__(self, runner: InsightsRunner, purpose: QueryPurpose, groups: list[str], start: datetime,
                 end: datetime, query: str, parts: list[Part], rows: Sequence[dict[str, str]] = (),
                 capped: _Pending | None = None) -> None:
        self.runner, self.purpose, self.groups, self.start, self.end, self.query = \
            runner, purpose, groups, start, end, query
        self.by_stream = {(r.get("@log", ""), r.get("@logStream", "")): r for r in rows}
        self.superseded = [capped] if capped else []  # the queries whose rows the parts read again
        self.queue = deque(map(self._begin, parts))

    def _begin(self, part: Part) -> tuple[Part, _Pending]:
        where = part.filter()
        return part, self.runner.start(self.purpose, self.groups, self.start, self.end, f"{where} | {self.query}",
                                       f" for streams matching {where.removeprefix('filter @logStream ')}")

    def read(self) -> PartsRead:
        left, answered = 0, False
        while self.queue:
            part, p = self.queue.popleft()
            rows = self.runner.results(p)
            answered |= rows is not None
            self.by_stream.update(((r.get("@log", ""), r.get("@logStream", "")), r) for r in rows or [])
            halves = part.halves() if rows is not None and len(rows) >= insights.MAX_ROWS else []
            if not halves:
                left += rows is None or len(rows) >= insights.MAX_ROWS
                continue
            self.superseded.append(p)
            self.queue.extend(self._begin(half) for half in halves)
        if not left:
            for p in self.superseded:
                self.runner.mark_reread(p)
        return PartsRead(list(self.by_stream.values()), left, answered)
