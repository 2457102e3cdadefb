"""The one Logs Insights runner every query purpose shares (collectors/logs.py and its parts): StartQuery within the
audit's concurrency budget (collectors/query_budget.py), polling with a deadline, stopping what it gives up on, the
query journal the deployed path waits on in Step Functions (`QueriesPending`), the 10,000-row cap, and the re-read
of a capped window in time slices. Every query's record (`QueryRecord`) is kept: rows, records scanned, capped."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.query_budget import AccountBudget, QuerySlots
from gpuaudit.model.evidence import (
    Gap,
    QueryPurpose,
    QueryRecord,
)
from gpuaudit.model.timeutil import iso, parse_time

MAX_GROUPS_PER_QUERY = 50


MAX_ROWS = 10_000


FINISHED = {"Complete", "Failed", "Cancelled", "Timeout", "Unknown"}


def _batches(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def _row(row: list[dict[str, str]]) -> dict[str, str]:
    return {cell["field"]: cell.get("value", "") for cell in row}


def _group_name(log_field: str) -> str:
    # @log is `<account-id>:<group>`; the account ID stops here and never reaches the result.
    return log_field.split(":", 1)[1] if ":" in log_field else log_field


@dataclass(eq=False)  # identity: the concurrency budget tracks each query, not equal-looking ones
class _Pending:
    purpose: QueryPurpose
    groups: list[str]
    start: datetime
    end: datetime
    query_id: str | None
    subject: str = ""  # what the query reads beyond its groups, for the gap if it fails
    settle: Callable[[], None] = lambda: None
    settled: bool = False
    rows: list[dict[str, str]] | None = None
    key: str = ""  # in the journal
    record: int | None = None  # its QueryRecord in the runner's records


class JournalEntry(BaseModel):
    """One query of a batch across invocations: its ID, when it started, and its outcome once read."""

    query_id: str | None
    started: datetime
    status: str | None = None  # None: still running when last asked
    rows: list[dict[str, str]] | None = None
    scanned: float = 0.0
    failure: Gap | None = None  # GetQueryResults itself failed


class QueryJournal(BaseModel):
    """The queries a batch has started and read, kept between Lambda invocations so a query is waited for by
    the state machine (Wait state), never by a Lambda: on each invocation the batch's collection is replayed,
    started queries are not started again, finished ones are not read again, and a query still running ends the
    invocation (QueriesPending) until it finishes or its deadline passes (then it is stopped: a gap).

    The deadline is the collection's: every query of the batch ends by `begun + deadline_s` (the deployed path sets
    `begun` to the audit's start and `deadline_s` from `logs_insights_deadline_minutes`), so a cluster's log reads
    take at most that long whatever number of queries follow one another. Without `begun`, each query has its own
    `deadline_s` from when it was first asked for."""

    entries: dict[str, JournalEntry] = {}
    calls: dict[str, int] = {}  # calls made by earlier invocations, "service:operation" -> count
    begun: datetime | None = None
    deadline_s: float = 300.0
    holder: str = Field(default_factory=lambda: uuid.uuid4().hex)  # names this batch's leases in the account budget
    # The account-wide budget (query_budget.AccountBudget) each StartQuery is leased from; given per invocation.
    _budget: AccountBudget | None = PrivateAttr(default=None)

    def use_budget(self, budget: AccountBudget | None) -> QueryJournal:
        self._budget = budget
        return self

    @property
    def budget(self) -> AccountBudget | None:
        return self._budget

    def lease(self, key: str) -> str:
        return f"{self.holder}:{hashlib.sha256(key.encode()).hexdigest()[:16]}"

    def running_leases(self) -> list[str]:
        """The leases of the queries this batch started whose final status is not read yet: renewed every pass."""
        return [self.lease(key) for key, entry in self.entries.items()
                if entry.query_id is not None and entry.status is None and entry.failure is None]

    def past_deadline(self, started: datetime, now: datetime) -> bool:
        return (now - (self.begun or started)).total_seconds() >= self.deadline_s


QUOTA_FULL = "LimitExceededException"  # StartQuery past the account's concurrent-query quota


class QueriesPending(Exception):
    """A journaled query is still running: come back after a wait (the state machine's Wait state)."""


def _journal_key(purpose: str, groups: list[str], start: datetime, end: datetime, query: str) -> str:
    return json.dumps([purpose, groups, iso(start), iso(end), query])


class InsightsRunner:
    """Starts queries within the audit's concurrency budget, polls them with a deadline, stops the ones it
    gives up on. `slots` is shared by every runner of one audit; without one, the runner has its own. With a
    `journal` (the deployed path), it never sleeps: a query still running raises QueriesPending instead."""

    def __init__(self, aws: Aws, gaps: list[Gap], poll_seconds: float = 1.0, deadline_s: float = 300.0,
                 slots: QuerySlots | None = None, journal: QueryJournal | None = None) -> None:
        self.aws, self.gaps, self.poll_seconds, self.deadline_s = aws, gaps, poll_seconds, deadline_s
        self.slots = slots or QuerySlots()
        self.records: list[QueryRecord] = []
        self.journal = journal

    def start(self, purpose: QueryPurpose, groups: list[str], start: datetime, end: datetime, query: str,
              subject: str = "") -> _Pending:
        pending = _Pending(purpose, groups, start, end, None, subject)
        pending.settle = lambda: self._settle(pending)
        self.slots.take(pending)  # may first settle the oldest query in flight
        key = _journal_key(purpose, groups, start, end, query)
        pending.key = key
        entry = self.journal.entries.get(key) if self.journal is not None else None
        if entry is not None and (entry.query_id is not None or entry.failure is not None):
            pending.query_id = entry.query_id  # started (or refused for good) by an earlier invocation
            if pending.query_id is None:
                self.gaps.append(entry.failure or Gap(kind="not-read", service="logs", operation="StartQuery",
                                                      target=", ".join(groups)))
                pending.settled = True
                self.slots.release(pending)
            return pending
        if self.journal is not None and not self._may_start(pending, entry, subject):
            return pending
        try:
            # endTime is inclusive to the whole second: stop one second short so [start, end) is queried and a
            # line at exactly the padded end cannot fill an extra hour bin (and hide an empty hour in the count).
            pending.query_id = self.aws.call(
                "logs", "StartQuery", logGroupNames=groups, startTime=int(start.timestamp()),
                endTime=math.ceil(end.timestamp()) - 1, queryString=query)["queryId"]
        except CallFailed as failed:
            if self.journal is not None and self.journal.budget is not None:
                self.journal.budget.release(self.journal.lease(key))  # no query runs under this lease
            if self.journal is not None and failed.code == QUOTA_FULL:
                # Every concurrent query of the account is in use (other audits, dashboards): wait in the state
                # machine and start it then, rather than record a gap, until the query's deadline passes.
                waiting = entry or JournalEntry(query_id=None, started=self.aws.clock())
                self.journal.entries[key] = waiting
                if not self.journal.past_deadline(waiting.started, self.aws.clock()):
                    raise QueriesPending(f"{purpose}: the account's Logs Insights query quota is in use") from None
            gap = failed.gap_for(f"{purpose} query over {', '.join(groups)}{subject} not run")
            self.gaps.append(gap)
            pending.settled = True
            self.slots.release(pending)
            if self.journal is not None:
                self.journal.entries[key] = JournalEntry(query_id=None, started=self.aws.clock(), failure=gap)
            return pending
        if self.journal is not None:
            self.journal.entries[key] = JournalEntry(query_id=pending.query_id, started=self.aws.clock())
        return pending

    def _may_start(self, pending: _Pending, entry: JournalEntry | None, subject: str) -> bool:
        """Journaled only: False when the query must not be started now — the collection's deadline passed (a gap),
        or the account-wide budget has no free slot (QueriesPending: the state machine waits and asks again)."""
        journal, now = self.journal, self.aws.clock()
        assert journal is not None
        waiting = entry or JournalEntry(query_id=None, started=now)
        where = f"{', '.join(pending.groups)}{subject}"
        if entry is None and journal.past_deadline(now, now):  # a waiting one is tried once more (a gap naming why)
            unseen = (f"{pending.purpose} query over {where} not started: the collection's deadline of "
                      f"{journal.deadline_s:.0f} s had passed")
        elif journal.budget is None or journal.budget.acquire(journal.lease(pending.key)):
            return True
        else:
            journal.entries[pending.key] = waiting
            if not journal.past_deadline(waiting.started, now):
                raise QueriesPending(f"{pending.purpose}: the deployment's share of the account's Logs Insights "
                                     "queries is in use by other audits")
            unseen = (f"{pending.purpose} query over {where} not started: the deployment's share of the account's "
                      f"Logs Insights queries stayed in use by other audits for {journal.deadline_s:.0f} s")
        gap = Gap(kind="timed-out", service="logs", operation="StartQuery", outcome="not run", unseen=unseen)
        self.gaps.append(gap)
        journal.entries[pending.key] = JournalEntry(query_id=None, started=waiting.started, failure=gap)
        pending.settled = True
        self.slots.release(pending)
        return False

    def results(self, pending: _Pending) -> list[dict[str, str]] | None:
        self._settle(pending)
        return pending.rows

    def _settle(self, pending: _Pending) -> None:
        if not pending.settled:
            pending.rows = self._poll(pending)
            pending.settled = True
        self.slots.release(pending)

    def _poll(self, pending: _Pending) -> list[dict[str, str]] | None:
        if pending.query_id is None:
            return None
        if self.journal is not None:
            return self._read_journaled(pending, self.journal.entries[pending.key])
        waited = 0.0
        while True:
            try:
                out = self.aws.call("logs", "GetQueryResults", queryId=pending.query_id)
            except CallFailed as failed:
                self.gaps.append(failed.gap_for(f"{pending.purpose} results{pending.subject} not read"))
                return None
            status = out.get("status", "Unknown")
            if status in FINISHED:
                break
            if waited >= self.deadline_s:
                with contextlib.suppress(CallFailed):  # the gap below already says the query was abandoned
                    self.aws.call("logs", "StopQuery", queryId=pending.query_id)
                self.gaps.append(Gap(kind="timed-out", service="logs", operation="GetQueryResults",
                                     unseen=f"{pending.purpose} query still {status} after "
                                     f"{self.deadline_s:.0f} s over {', '.join(pending.groups)}{pending.subject}; "
                                     f"stopped"))
                self._record(pending, f"{status} (abandoned)", 0, 0.0, False)
                return None
            self.aws.sleep(self.poll_seconds)
            waited += self.poll_seconds
        rows = [_row(r) for r in out.get("results", [])]
        scanned = float((out.get("statistics") or {}).get("recordsScanned", 0.0))
        return self._finished(pending, status, rows, scanned)

    def _read_journaled(self, pending: _Pending, entry: JournalEntry) -> list[dict[str, str]] | None:
        """One look at a journaled query (or none, when an earlier invocation already read it)."""
        journal = self.journal
        assert journal is not None
        if entry.status is None and entry.failure is None:
            try:
                out = self.aws.call("logs", "GetQueryResults", queryId=pending.query_id)
            except CallFailed as failed:
                entry.failure = failed.gap_for(f"{pending.purpose} results{pending.subject} not read")
            else:
                status = out.get("status", "Unknown")
                if status in FINISHED:
                    entry.status, entry.rows = status, [_row(r) for r in out.get("results", [])]
                    entry.scanned = float((out.get("statistics") or {}).get("recordsScanned", 0.0))
                elif not journal.past_deadline(entry.started, self.aws.clock()):
                    raise QueriesPending(pending.purpose)
                else:
                    with contextlib.suppress(CallFailed):  # the gap below already says the query was abandoned
                        self.aws.call("logs", "StopQuery", queryId=pending.query_id)
                    entry.status = f"{status} (abandoned)"
            if journal.budget is not None:  # final, stopped or unreadable: its slot is free again
                journal.budget.release(journal.lease(pending.key))
        if entry.failure is not None:
            self.gaps.append(entry.failure)
            return None
        if entry.status is not None and entry.status.endswith("(abandoned)"):
            self.gaps.append(Gap(kind="timed-out", service="logs", operation="GetQueryResults",
                                 unseen=f"{pending.purpose} query still {entry.status.split(' ')[0]} at the "
                                 f"collection's deadline of {journal.deadline_s:.0f} s over "
                                 f"{', '.join(pending.groups)}{pending.subject}; stopped"))
            self._record(pending, entry.status, 0, 0.0, False)
            return None
        return self._finished(pending, entry.status or "Unknown", entry.rows or [], entry.scanned)

    def _finished(self, pending: _Pending, status: str, rows: list[dict[str, str]],
                  scanned: float) -> list[dict[str, str]] | None:
        truncated = len(rows) >= MAX_ROWS
        self._record(pending, status, len(rows), scanned, truncated)
        if status != "Complete":
            self.gaps.append(Gap(kind="query-failed", service="logs", operation="StartQuery",
                                 unseen=f"{pending.purpose} query ended {status} over "
                                 f"{', '.join(pending.groups)}{pending.subject}"))
            return None
        return rows

    def _record(self, p: _Pending, status: str, rows: int, scanned: float, truncated: bool) -> None:
        p.record = len(self.records)
        self.records.append(QueryRecord(purpose=p.purpose, log_groups=p.groups, start=p.start, end=p.end,
                                        status=status, rows=rows, records_scanned=scanned, truncated=truncated))

    def mark_reread(self, p: _Pending) -> None:
        """The capped query's streams were all read again in parts that stayed under the cap."""
        if p.record is not None:
            self.records[p.record] = self.records[p.record].model_copy(update={"reread": True})


MAX_GPU_SPLITS = 5  # up to 32 time slices of the window before the rest is reported as a gap


def _split_by_time(runner: InsightsRunner, purpose: QueryPurpose, query: str, batch: list[str], start: datetime,
                   end: datetime, gaps: list[Gap], what: str, depth: int = -1) -> tuple[list[dict[str, str]], bool]:
    """A line query (oldest first) read whole (depth -1), and at the 10,000-row cap re-read in halves of its time
    range: a flood of identical Xids, or a job logging every step, must not hide the later lines (they are
    collapsed downstream, not dropped here). Returns the rows and whether every part was read, under the cap. Each
    capped query whose halves were all read is marked read again, so a complete read seeds the incremental cache (a
    capped query not read again never does: every hourly audit of such a fleet would read the whole window)."""
    if depth < 0:
        first = runner.start(purpose, batch, start, end, query)
        whole = runner.results(first)
        if whole is None or len(whole) < MAX_ROWS:
            return whole or [], whole is not None
        halves, done = _split_by_time(runner, purpose, query, batch, start, end, gaps, what, 0)
        if done:
            runner.mark_reread(first)
        return halves, done
    middle = start + timedelta(seconds=int((end - start).total_seconds()) // 2)  # whole seconds: no overlap
    rows: list[dict[str, str]] = []
    complete = True
    for lo, hi in ((start, middle), (middle, end)):
        pending = runner.start(purpose, batch, lo, hi, query)
        part = runner.results(pending)
        if part is None:
            complete = False
            continue
        if len(part) >= MAX_ROWS and depth + 1 < MAX_GPU_SPLITS:
            part, read = _split_by_time(runner, purpose, query, batch, lo, hi, gaps, what, depth + 1)
            if read:
                runner.mark_reread(pending)
            complete &= read
        elif len(part) >= MAX_ROWS:
            complete = False
            gaps.append(Gap(kind="truncated", service="logs", operation="GetQueryResults",
                            unseen=f"more than {MAX_ROWS} {what} between {iso(lo)} and {iso(hi)} in "
                            f"{', '.join(batch)}; lines beyond the first {MAX_ROWS} of that slice were not read"))
        rows.extend(part)
    return rows, complete


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return parse_time(str(value))
    except ValueError:
        return None
