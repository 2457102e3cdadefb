"""Fleet memory (issue #18): what earlier audits saw of each node, typed and pure.

Only what the rules need is kept, per node and per GPU PCI bus: each hardware-class Xid (and non-Xid memory
signal) with its first and last time, the reboots seen, the verdict given, the coverage status, and the audit
(id and time) that saw it. A node whose state does not change from one audit to the next is one *span*
(`audits` > 1, `through` the last of them), so thirty days of hourly audits of a quiet node are a handful of
records, not 720 (a span is cut after `MAX_SPAN`, so a bounded look-back stays one bounded range read).

Two stores implement `HistoryStore` (gpuaudit/writes/history.py): SQLite for the CLI (`--history DIR`) and the findings
table (DynamoDB) for the deployed auditor. The pipeline does not care which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Literal, Protocol

from pydantic import Field

from gpuaudit.model.frozen import Frozen
from gpuaudit.model.timeutil import UtcDatetime

DEFAULT_LOOKBACK_DAYS = 30
MAX_SPAN = timedelta(days=7)  # a span is cut after a week: a read of [since - MAX_SPAN, until] sees every span
# How the rules say what history found, in a node's verdict evidence and history line; the alerts read them too.
ESCALATED = "escalated, not a new verdict"  # a REPLACE given by an earlier audit and not acted on
FLAPPING = "flapping:"  # the verdict keeps changing across audits


class HistoryXid(Frozen):
    """One hardware-class Xid (or a non-Xid memory signal, `code` None and `signal` its marker) on one bus."""

    code: int | None
    signal: str | None = None
    pci: str | None = None
    first: UtcDatetime
    last: UtcDatetime


class HistorySpan(Frozen):
    """One node across one or more consecutive audits that saw the same state and nothing new."""

    cluster: str
    instance_id: str
    audit_id: str  # the first audit of the span
    audit_time: UtcDatetime  # its time: the end of its window
    last_audit_id: str
    through: UtcDatetime  # the last audit's time
    audits: int = Field(default=1, ge=1)
    mode: str
    verdict: str | None = None
    xid_status: str
    xids: list[HistoryXid] = Field(default_factory=list)
    reboots: list[UtcDatetime] = Field(default_factory=list)
    launch_time: UtcDatetime | None = None
    gaps: int = 0  # visibility gaps of the audit (an audit of the same window with fewer gaps supersedes it)
    # Why the node's standing verdict ended without a new one (CLUSTER_GONE): a closing span, never extended.
    closed: str | None = None
    # What this audit saw done to the node after the signal an action it was asked for rests on (rules/acted.py
    # `already_done`: a reboot, a replacement), with the source that shows it; rules/history.py `actions_of` reads
    # it to close the action.
    done: Literal["rebooted", "replaced"] | None = None
    done_said: str | None = None

    def quiet(self) -> bool:
        return not self.xids and not self.reboots

    def same_state(self, other: HistorySpan) -> bool:
        return (self.verdict, self.xid_status, self.launch_time, self.mode, self.closed, self.done) == (
            other.verdict, other.xid_status, other.launch_time, other.mode, other.closed, other.done)


# Verdicts that ask the operator to do something, and what (RULES §7); REPLACE ranks above REBOOT and subsumes it.
ASKS = {"REPLACE": "replace the node", "REBOOT": "reboot the node",
        "NOT OBSERVABLE": "collect its kernel log (coverage not proven)"}


# How a later audit showed an action done (rules/history.py `_closer`); `superseded`: a REBOOT a REPLACE took over.
Closure = Literal["closed", "replaced", "relaunched", "rebooted", "measured", "superseded"]


@dataclass(frozen=True)
class Action:
    """One action a verdict asked for: from the audit that first gave it to the one that showed it done
    (rules/history.py `actions_of` reads them from a node's spans)."""

    verdict: str  # REPLACE, REBOOT or NOT OBSERVABLE
    given: HistorySpan  # the span that first gave it
    last_given: UtcDatetime  # the last audit that gave it again
    signal: UtcDatetime | None  # the latest hardware signal it rests on: what was done must come after it
    audits_since: int = 0  # audits after the last one giving it that showed nothing done
    closed_at: UtcDatetime | None = None  # the audit that showed it done (None: still open)
    closed_by: str | None = None  # what was done, and which audit showed it
    closed_how: Closure | None = None
    closed_said: str | None = None  # what was done, as closed_by says it without the audit
    closed_in: str | None = None  # the id of the audit that showed it done

    @property
    def open(self) -> bool:
        return self.closed_at is None

    @property
    def after(self) -> datetime:
        """What closes it must come after this: its signal, else the audit that gave it."""
        return self.signal or self.given.audit_time


class HistoryRead(Frozen):
    """What one audit read of its cluster's history: the spans of its nodes in [since, until]."""

    store: str  # "sqlite <path>" or "dynamodb <table>": where it was read
    since: UtcDatetime
    until: UtcDatetime
    spans: list[HistorySpan] = Field(default_factory=list)
    items_read: int = 0
    requests: int = 0

    @cached_property
    def by_node(self) -> dict[str, list[HistorySpan]]:
        """Each node's spans in time order, grouped once: an audit asks for every node (a scan per node was
        quadratic, 25 s of a 10,000-node Verdict)."""
        grouped: dict[str, list[HistorySpan]] = {}
        for span in sorted(self.spans, key=lambda s: (s.audit_time, s.audit_id)):
            grouped.setdefault(span.instance_id, []).append(span)
        return grouped

    def of(self, instance_id: str, excluding_audit: str | None = None) -> list[HistorySpan]:
        """One node's spans in time order, without the audit being judged (a re-run of the same window)."""
        return [s for s in self.by_node.get(instance_id, []) if s.audit_id != excluding_audit]


class HistoryStore(Protocol):
    """Where the history lives. `read` raises gpuaudit.writes.history.HistoryUnreadable (a named gap); `write` puts
    spans already merged (see `merged`). `instance_ids` None reads every node of the cluster."""

    @property
    def name(self) -> str: ...

    def read(self, cluster: str, instance_ids: Sequence[str] | None, since: datetime,
             until: datetime) -> HistoryRead: ...

    def write(self, spans: Sequence[HistorySpan], retention_days: int, now: datetime) -> int: ...


def merged(entries: Sequence[HistorySpan], latest: Mapping[str, HistorySpan]) -> list[HistorySpan]:
    """This audit's one-audit entries, each folded into its node's latest span when nothing changed: same
    verdict, coverage, launch time and mode, no Xid or reboot on either side, later than the span, and the span
    not past MAX_SPAN. A span that cannot take the entry is left as it is and the entry starts a new one."""
    out = []
    for entry in entries:
        last = latest.get(entry.instance_id)
        if last is not None and last.audit_id != entry.audit_id and last.last_audit_id == entry.audit_id:
            continue  # this audit is already the end of the node's span (a re-run of the same window)
        if (last is not None and last.same_state(entry) and last.quiet() and entry.quiet()
                and entry.audit_time > last.through and entry.audit_time - last.audit_time < MAX_SPAN
                and last.audit_id != entry.audit_id):
            out.append(last.model_copy(update={"through": entry.audit_time, "last_audit_id": entry.audit_id,
                                               "audits": last.audits + 1, "gaps": max(last.gaps, entry.gaps)}))
        else:
            out.append(entry)
    return out


def _replaces(new: HistorySpan, old: HistorySpan) -> bool:
    """The same span (node, first audit) recorded again: a later `through`, or as late with fewer gaps, wins."""
    return new.through > old.through or (new.through == old.through and new.gaps < old.gaps)


def span_key(span: HistorySpan) -> tuple[str, datetime, str]:
    return span.instance_id, span.audit_time, span.audit_id


def distinct(spans: Sequence[HistorySpan]) -> list[HistorySpan]:
    """Each span once: of two records of the same span, the one that replaces the other."""
    best: dict[tuple[str, datetime, str], HistorySpan] = {}
    for span in spans:
        known = best.get(span_key(span))
        if known is None or _replaces(span, known):
            best[span_key(span)] = span
    return list(best.values())


def fold_latest(latest: Mapping[str, HistorySpan], spans: Sequence[HistorySpan]) -> tuple[
        dict[str, HistorySpan], list[HistorySpan], int]:
    """Spans (already `merged`) folded into each node's latest span: (the new latest per node, the spans that are
    no longer anyone's latest — closed, to be kept as they are —, how many given spans changed something). A span
    extending the latest replaces it; a later one closes it; an earlier one is closed at once; the same span again
    with nothing later or more complete changes nothing (a rerun writes nothing)."""
    out, closed, changed = dict(latest), list[HistorySpan](), 0
    for span in spans:
        known = out.get(span.instance_id)
        if known is None or (span_key(known) == span_key(span) and _replaces(span, known)):
            out[span.instance_id] = span
        elif span_key(known) == span_key(span):
            continue
        elif (span.audit_time, span.through) > (known.audit_time, known.through):
            closed.append(known)
            out[span.instance_id] = span
        else:
            closed.append(span)
        changed += 1
    return out, closed, changed


CLUSTER_GONE = "cluster no longer exists"


def closed_out(read: HistoryRead, audit_id: str, now: datetime, reason: str) -> list[HistorySpan]:
    """A closing span per node whose latest span still stands: no verdict, nothing observed, and the reason, so the
    history ends the node's verdict instead of leaving its last one frozen as if it were still true."""
    return [HistorySpan(cluster=last.cluster, instance_id=iid, audit_id=audit_id, audit_time=now,
                        last_audit_id=audit_id, through=now, mode=last.mode, verdict=None,
                        xid_status="Not observable", closed=reason)
            for iid, last in sorted(latest_spans(read).items()) if last.closed is None and last.through < now]


def latest_spans(read: HistoryRead | None) -> dict[str, HistorySpan]:
    """Each node's latest span in a read: what this audit's entry may extend."""
    latest: dict[str, HistorySpan] = {}
    for span in sorted(read.spans if read else [], key=lambda s: (s.audit_time, s.through)):
        latest[span.instance_id] = span
    return latest
