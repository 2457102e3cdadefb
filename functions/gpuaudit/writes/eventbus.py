"""Findings to Amazon EventBridge (issue #38): the PutEvents publisher of the deployed Verdict step, and the same
entries for the CLI (`--format events`) computed against the local history.

The entries are built by report/events.py from the Change records of rules/what_changed.py. A call carries at most
ten entries under EventBridge's size limit (report/events.batches). An entry the bus refuses with a retryable error code
(PutEventsResultEntry: InternalFailure, ThrottlingException) is sent again with exponential backoff; one refused
for good (MalformedDetail, AccessDeniedException, …) or still failing after the last attempt is counted as
failed, by error code: the Verdict step reports it in the EventsFailed metric (an alarm notifies the topic). An
event bus that cannot be reached never fails the audit: the findings and the SNS alert stand.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpuaudit.model.history import HistoryRead, HistoryStore
from gpuaudit.model.result import Result
from gpuaudit.report import events
from gpuaudit.report.alert import Change
from gpuaudit.rules.what_changed import compare, previous_state

RETRYABLE = frozenset({"InternalFailure", "ThrottlingException"})
MAX_ATTEMPTS = 4  # the first send and three retries
FIRST_DELAY_S = 0.2


@dataclass
class Delivery:
    """What one audit's events came to: entries accepted, entries given up on (by error code), calls made."""

    sent: int = 0
    retried: int = 0  # entry re-sends after a retryable refusal
    calls: int = 0
    failed: Counter[str] = field(default_factory=Counter)


def put_events(client: Any, entries: Sequence[dict[str, Any]], sleep: Callable[[float], None] = time.sleep,
               max_attempts: int = MAX_ATTEMPTS) -> Delivery:
    """Send every entry: batched within EventBridge's limits, each refused entry retried while its error code is
    retryable, with exponential backoff."""
    outcome = Delivery()
    pending = list(entries)
    delay = FIRST_DELAY_S
    for attempt in range(1, max_attempts + 1):
        again: list[dict[str, Any]] = []
        for batch in events.batches(pending):
            outcome.calls += 1
            try:
                answer = client.put_events(Entries=batch)
            except ClientError as err:  # the whole call refused (botocore has retried what it retries)
                code = err.response.get("Error", {}).get("Code", "Unknown")
                if code in RETRYABLE:
                    again.extend(batch)
                else:
                    outcome.failed[code] += len(batch)
                continue
            except BotoCoreError as err:  # no answer at all (endpoint unreachable, timeout)
                outcome.failed[type(err).__name__] += len(batch)
                continue
            # Entries answer in the order sent (PutEvents): a result without an EventId is a refusal.
            for entry, result in zip(batch, answer.get("Entries", []), strict=True):
                code = result.get("ErrorCode")
                if result.get("EventId") and not code:
                    outcome.sent += 1
                elif code in RETRYABLE:
                    again.append(entry)
                else:
                    outcome.failed[code or "NoEventId"] += 1
        if not again:
            return outcome
        if attempt == max_attempts:
            outcome.failed.update({"RetriesExhausted": len(again)})
            return outcome
        outcome.retried += len(again)
        sleep(delay)
        delay *= 2
        pending = again
    return outcome


def publish(client: Any, bus: str, result: Result, changes: Sequence[Change], report: str | None = None,
            sleep: Callable[[float], None] = time.sleep) -> Delivery:
    """One audit's changes to the bus (a name or an ARN; `default` is the account's default bus)."""
    return put_events(client, events.entries(result, changes, report, bus), sleep)


# --------------------------------------------------------------------------- the CLI: the local history


class RememberingHistory:
    """A history store that keeps what the audit read of it: the state before this audit, for `--format events`."""

    def __init__(self, store: HistoryStore) -> None:
        self.store = store
        self.read_before: HistoryRead | None = None

    @property
    def name(self) -> str:
        return self.store.name

    def read(self, cluster: str, instance_ids: Sequence[str] | None, since: Any, until: Any) -> HistoryRead:
        read = self.store.read(cluster, instance_ids, since, until)
        if self.read_before is None:
            self.read_before = read
        return read

    def write(self, spans: Sequence[Any], retention_days: int, now: Any) -> int:
        return self.store.write(spans, retention_days, now)


def local_entries(result: Result, read: HistoryRead | None, report: str | None = None) -> list[dict[str, Any]]:
    """What the deployed auditor would send for this result, given the local history as the previous state."""
    return events.entries(result, compare(result, previous_state(result, read)).records, report)
