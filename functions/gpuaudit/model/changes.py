"""What changed since the last audit, as a typed record: the contract between the rule that finds the changes
(rules/what_changed.py) and every consumer of them (the alert, report/alert.py; the events, report/events.py; the
sinks that deliver both).

A Change carries two vocabularies: `kind`, what the alert counts and orders its lines by (the alert's order and
severities are report/alert.py's), and `code`, the stable change code an EventBridge event says (its detail-type
is report/events.py's DETAIL_TYPES)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The kinds of change (Change.kind). Node kinds are the alerting verdicts; a cluster-level answer (a Proven root
# cause, Ready: No) has its own.
SELF_CHECK, ROOT_CAUSE, NOT_READY = "SELF-CHECK FAILED", "ROOT CAUSE", "NOT READY"
REPLACE, NOT_OBSERVABLE, REBOOT = "REPLACE", "NOT OBSERVABLE", "REBOOT"
FAIL, HYPOTHESIS, LEFT, NOT_RECHECKED, RECOVERED = "FAIL", "NEW HYPOTHESIS", "LEFT", "NOT RE-CHECKED", "RECOVERED"
# An action a verdict asked for (REPLACE, REBOOT, NOT OBSERVABLE's collection) that this audit showed done: a reboot
# after the signal, a replacement or relaunch, coverage Measured again (rules/history.py `actions_of`).
DONE = "DONE"

# Change codes (Change.code; an event's `change`), grouped by the detail-type they are sent as (report/events.py).
NEW_VERDICT, ESCALATED, VERDICT_RECOVERED = "new-verdict", "escalated", "recovered"
ACTION_DONE = "action-done"  # an action a verdict asked for, shown done by this audit (`previous_verdict`: which)
LEFT_CLUSTER, CODE_NOT_RECHECKED = "left-cluster", "not-rechecked"
COVERAGE_LOST, COVERAGE_REGAINED = "coverage-lost", "coverage-regained"
ROOT_CAUSE_PROVEN, HYPOTHESIS_CHANGED = "root-cause-proven", "hypothesis-changed"
CODE_NOT_READY, READY_AGAIN = "not-ready", "ready-again"
CHECK_FAILED, CHECK_RECOVERED = "check-failed", "check-recovered"
SELF_CHECK_FAILED = "self-check-failed"


@dataclass(frozen=True)
class Change:
    """One thing on-call must hear about. `rank` is the order of urgency (0 a self-check failure … 6 a
    recovery); `kind` what the alert counts; `node` the instance it is about (None: the cluster, a check);
    `what` the change in words, `detail` its evidence (cut first when the line is long)."""

    rank: int
    kind: str
    what: str
    node: str | None = None
    detail: str = ""
    flapping: bool = False  # the node's verdict keeps changing across audits (fleet memory)
    # The change as a stable code and the recorded value it changed from (report/events.py: an event's
    # detail-type, `change` and `previous_*`); the alert reads neither.
    code: str = ""
    was: str | None = None

    @property
    def text(self) -> str:
        """The change as one line of prose (SinkOutcome.changes; the alert renders its own lines)."""
        who = f"{self.node}{' (flapping across audits)' if self.flapping else ''}: " if self.node else ""
        return who + self.what + (f" — {cut(self.detail, 160)}" if self.detail else "")


def cut(text: str | None, limit: int) -> str:
    """At most `limit` characters, cut at a word (a word longer than the line is cut where it stands)."""
    text = re.sub(r"\s*[\r\n]+\s*", " ", (text or "").strip())  # one line; spaces inside quoted text kept
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" ,;:—-") + "…"
