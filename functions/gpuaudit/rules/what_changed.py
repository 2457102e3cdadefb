"""What changed since the last audit of a cluster and mode, and so what alerts: the change list `compare` finds
between this audit's result and the latest state recorded for the cluster and mode (a mapping of item keys to
their string attributes, however it is stored), and the latest-state items to record for it.

Pure: no I/O, no clock. The sinks (sinks.write_and_alert: the findings table, the alert topic, the events) and the
CLI's offline events (eventbus.local_entries, against the local history: `previous_state`) call it; the alert and
the events render its Change records (report/alert.py, report/events.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from gpuaudit.model.changes import (
    ACTION_DONE,
    CHECK_FAILED,
    CHECK_RECOVERED,
    CODE_NOT_READY,
    CODE_NOT_RECHECKED,
    COVERAGE_LOST,
    COVERAGE_REGAINED,
    DONE,
    ESCALATED,
    FAIL,
    HYPOTHESIS,
    HYPOTHESIS_CHANGED,
    LEFT,
    LEFT_CLUSTER,
    NEW_VERDICT,
    NOT_OBSERVABLE,
    NOT_READY,
    NOT_RECHECKED,
    READY_AGAIN,
    RECOVERED,
    REPLACE,
    ROOT_CAUSE,
    ROOT_CAUSE_PROVEN,
    SELF_CHECK,
    SELF_CHECK_FAILED,
    VERDICT_RECOVERED,
    Change,
    cut,
)
from gpuaudit.model.history import ESCALATED as ESCALATED_MARK
from gpuaudit.model.history import FLAPPING, HistoryRead, latest_spans
from gpuaudit.model.redaction import redact
from gpuaudit.model.result import BRANCH_NAMES, NodeResult, Result
from gpuaudit.model.timeutil import iso, parse_time

ALERTING_VERDICTS = {"REPLACE", "REBOOT", "NOT OBSERVABLE"}
# Gap.prose of a source the audit could not read: a failed or unread call, a truncated read.
UNREAD_PREFIXES = ("Not checked: ", "Visibility gap: ")


@dataclass(frozen=True)
class StateWrite:
    """One latest-state item to record: its sort key (`NODE#<id>`, `CHECK#<id>`, `CAUSE`, `READY`, `SELFCHECK`), its
    attributes (the audit that recorded it and when included) and whether it expires (a node gone from the
    cluster). Where and how it is stored is the sink's (writes/sinks.py: the partition, the attribute types)."""

    sk: str
    attrs: dict[str, str]
    expires: bool = False


def read_gaps(result: Result) -> frozenset[str]:
    """The sources this audit could not read, from its visibility gaps as Gap.prose writes them (`Not checked: …`
    for a failed or unread call, `Visibility gap: …` for a truncated read), as keys that are the same for the same
    gap in another audit: without the error message (rates, request IDs) and with every number as `#` (counts,
    times of a truncated read). Capability limits and what the world itself lacks (a stream that does not exist,
    a silent log) are observations, not gaps of the audit."""
    return frozenset(_gap_key(text) for text in _unread(result))


def _unread(result: Result) -> list[str]:
    """Each unread source as said (its gap without the error message), account IDs redacted."""
    said = []
    for gap in result.visibility_gaps:
        if gap.startswith(UNREAD_PREFIXES):
            head, _, unseen = gap.partition(" — ")
            said.append(redact(head.split(" (", 1)[0] + (f" — {unseen}" if unseen else ""), result.account_ids))
    return said


def _gap_key(said: str) -> str:
    return re.sub(r"\d+", "#", said)


@dataclass
class Comparison:
    """What changed since the last audit of the cluster and mode, and the latest-state items to write for it
    (only those that differ from what is recorded)."""

    records: list[Change] = field(default_factory=list)
    writes: list[StateWrite] = field(default_factory=list)

    @property
    def changes(self) -> list[str]:
        return [c.text for c in self.records]


# Verdicts a less complete audit may confirm or raise, never clear; the order is their severity.
SEVERITY = {"REPLACE": 2, "REBOOT": 1}
_BOOKKEEPING = {"pk", "sk", "audit_id", "recorded_at"}


def compare(result: Result, previous: dict[str, dict[str, str]]) -> Comparison:
    """The change list against the latest state of the same cluster and mode, worst first: a self-check failure,
    new REPLACE/REBOOT verdicts, coverage lost, checks newly FAIL, alerting nodes gone from the cluster, alerting
    verdicts this audit could not re-check, actions shown done (a reboot, a replacement, coverage Measured again:
    NodeResult.actions_asked, read from the history), then recoveries (coverage regained, a check back to PASS, an
    alerting verdict gone whose action the history shows done earlier — never one still open). An unchanged state
    yields nothing and writes nothing.

    Completeness: each recorded node state keeps the read gaps of the audit that recorded it. An audit with a read
    gap the recorded one did not have is less complete for that state: what it could not read (Not observable, a
    verdict gone, a node missing from the node list) neither replaces the state nor counts as a loss or a recovery;
    only what it did read (coverage Measured, a verdict at least as severe) replaces it. A result that contradicts
    itself is said first and records nothing but the self-check: the next audit compares with the last trusted
    state, and the same contradiction again is not said twice. An audit narrowed to some nodes (an Xid watch audit,
    `Result.narrowed_to`) says nothing of the nodes it did not judge: they are neither gone nor re-checked."""
    gaps, rows = read_gaps(result), list[Change]()
    state = _State(result)
    broken = json.dumps(sorted(redact(b, result.account_ids) for b in result.invariants_broken))
    recorded_broken = previous.get("SELFCHECK", {}).get("invariants", "[]")
    if broken != recorded_broken:
        state.record("SELFCHECK", {"invariants": broken}, previous.get("SELFCHECK"))
    if result.invariants_broken:  # a result that contradicts itself is said first: on-call must not act on it
        if broken == recorded_broken:
            return Comparison()
        rows.append(Change(0, SELF_CHECK, f"SELF-CHECK FAILED ({len(result.invariants_broken)} invariant(s) "
                                                "broken, a gpuaudit bug)", detail="; ".join(result.invariants_broken),
                           code=SELF_CHECK_FAILED))

    left = {f"NODE#{n.instance_id}": n.status for n in result.nodes if _left(n)}
    for node in result.nodes:
        sk = f"NODE#{node.instance_id}"
        before = previous.get(sk)
        if before is not None and before.get("gone"):
            if sk in left:
                continue  # still listed as leaving: already said
            before = None  # left the cluster and came back: seen anew
        now = {"xid_status": node.xid_status, "verdict": node.verdict or "none",
               **({"escalated": "yes"} if ESCALATED_MARK in (node.verdict_evidence or "") else {})}
        rows += _done(node)  # read from the history, whichever audit recorded the state compared with
        if before is None:
            rows += _first_seen(node, result.audit_id)
            gone = {"gone": result.audit_id} if sk in left else {}  # first seen leaving: said once, recorded gone
            state.record(sk, {**now, "read_gaps": _gap_text(gaps), **gone}, previous.get(sk),
                         expires=bool(gone))
            continue
        if sk in left:  # leaving: said below if it was alerting; what it showed before it left, if worse
            if node.verdict in SEVERITY and node.verdict != before.get("verdict"):
                rows.append(_verdict_change(node, 1, previous=before.get("verdict")))
            continue
        baseline = _gap_set(before)
        unread = node.xid_status == "Not observable" and node.verdict in (None, "NOT OBSERVABLE")
        if gaps <= baseline or (not unread and _rank(now["verdict"]) >= _rank(before.get("verdict"))):
            rows += _flapping(node, _node_changes(node, before, result.audit_id))
            state.record(sk, {**now, "read_gaps": _gap_text(gaps if gaps <= baseline else baseline)}, before)
        else:
            rows += state.not_rechecked(node.instance_id, before, gaps - baseline)
    listed = {f"NODE#{n.instance_id}" for n in result.nodes}
    for sk, before in previous.items():
        if not sk.startswith("NODE#") or before.get("gone") or (sk in listed and sk not in left):
            continue
        if result.narrowed_to is not None and sk not in listed:  # not judged by an audit narrowed to other nodes
            continue
        iid, was = sk.removeprefix("NODE#"), before.get("verdict", "none")
        if sk not in left and not gaps <= _gap_set(before):  # missing from a less complete audit: not evidence
            rows += state.not_rechecked(iid, before, gaps - _gap_set(before))
            continue
        if was in ALERTING_VERDICTS:
            rows.append(Change(4, LEFT, f"{left[sk]}, left the cluster (was {was}): not a recovery" if sk in left
                               else f"no longer in the cluster (was {was}): replaced or terminated, not a recovery",
                               node=iid, code=LEFT_CLUSTER, was=was))
        state.record(sk, {**_kept(before), "gone": result.audit_id}, before, expires=True, keep_time=True)

    for check in result.checks:
        sk = f"CHECK#{check.id}"
        was_result = previous.get(sk, {}).get("result")
        if check.result == "FAIL" and was_result != "FAIL":
            rows.append(Change(3, FAIL, f"{check.id} {check.title}: FAIL", detail=check.evidence,
                               code=CHECK_FAILED, was=was_result))
        elif was_result == "FAIL" and check.result == "PASS":  # PASS and RISK rest on reads (fail closed)
            rows.append(Change(6, RECOVERED, f"{check.id} {check.title}: back to PASS (was FAIL)",
                               code=CHECK_RECOVERED, was=was_result))
        elif was_result == "FAIL" and check.result == "RISK":
            rows.append(Change(6, RECOVERED, f"{check.id} {check.title}: no longer FAIL (now RISK)",
                               detail=check.evidence, code=CHECK_RECOVERED, was=was_result))
        elif was_result == "FAIL":
            continue  # UNVERIFIED, Not checked, Needs input: not read, so the FAIL stands
        state.record(sk, {"result": check.result}, previous.get(sk))
    rows += _answer_changes(result, previous, state)
    # A self-contradicting result's verdicts are not trusted: only its self-check is recorded.
    writes = [w for w in state.writes if not result.invariants_broken or w.sk == "SELFCHECK"]
    return Comparison(records=sorted(rows, key=lambda r: r.rank), writes=writes)


def _answer_changes(result: Result, previous: dict[str, dict[str, str]], state: _State) -> list[Change]:
    """The cluster-level answer on-call must hear about, not only the nodes: a root cause newly Proven, a leading
    hypothesis that changed (incident mode, RULES §8), and pre-flight `Ready: No` (RULES §10) — each said once,
    until the answer changes again."""
    rows: list[Change] = []
    if result.mode == "incident" and result.branches:
        proven = [b.branch for b in result.branches if b.status == "Root cause" and b.label == "Proven"]
        leading = [
            b.branch for b in result.branches if b.status == "UNVERIFIED" and b.label == "Hypothesis (to validate)"
        ]
        now = {"label": "Proven", "branches": ",".join(proven)} if proven else (
            {"label": "Hypothesis", "branches": ",".join(leading)} if leading else {"label": "none", "branches": ""})
        before = previous.get("CAUSE")
        was = _kept(before) if before is not None else {"label": "none", "branches": ""}
        named = ", ".join(f"branch {b} ({BRANCH_NAMES[b]})" for b in (proven or leading))
        if now != was and now["label"] == "Proven":
            rows.append(Change(1, ROOT_CAUSE, f"ROOT CAUSE (Proven): {named}",
                               detail=result.headline.split(" — ", 1)[-1], code=ROOT_CAUSE_PROVEN,
                               was=_cause_text(was)))
        elif now != was and now["label"] == "Hypothesis":
            earlier = f"{was['label']} branch {was['branches']}" if was["branches"] else "none"
            rows.append(Change(2, HYPOTHESIS, f"NEW HYPOTHESIS (to validate): {named} (was {earlier})",
                               detail=result.headline.split(" — ", 1)[-1], code=HYPOTHESIS_CHANGED,
                               was=_cause_text(was)))
        state.record("CAUSE", now, before)
    if result.mode == "preflight" and result.ready is not None:
        before = previous.get("READY")
        was_ready = before.get("ready") if before is not None else None
        failing = ", ".join(f"{c.id} {c.title}" for c in result.checks if c.result == "FAIL")
        if result.ready == "No" and was_ready != "No":
            rows.append(Change(1, NOT_READY, f"NOT READY (Ready: No): FAIL {failing or 'see the report'}",
                               code=CODE_NOT_READY, was=was_ready))
        elif was_ready == "No":
            rows.append(Change(6, RECOVERED, f"Ready: {result.ready} (was No)", code=READY_AGAIN,
                               was=was_ready))
        state.record("READY", {"ready": result.ready}, before)
    return rows


class _State:
    """The latest-state items one comparison writes: only those that differ from what is recorded."""

    def __init__(self, result: Result) -> None:
        self.result = result
        self.writes: list[StateWrite] = []

    def record(self, sk: str, attrs: dict[str, str], before: dict[str, str] | None, *, expires: bool = False,
               keep_time: bool = False) -> None:
        """`keep_time`: a mark on a recorded state (not re-checked, gone) keeps the time the state was recorded;
        `expires`: the item is a node gone from the cluster, kept only for the findings' retention."""
        if before is not None and _kept(before) == attrs:
            return  # unchanged: a rerun of an unchanged state writes nothing
        recorded_at = before.get("recorded_at") if keep_time and before is not None else None
        stamp = {"audit_id": self.result.audit_id, "recorded_at": recorded_at or iso(self.result.window.end)}
        self.writes.append(StateWrite(sk, {**attrs, **stamp}, expires))

    def not_rechecked(self, iid: str, before: dict[str, str], unread: frozenset[str]) -> list[Change]:
        """A less complete audit leaves the recorded state as it is. Said once, and only of a REPLACE or REBOOT the
        on-call may be acting on: that this audit could neither confirm nor clear it."""
        was = before.get("verdict", "none")
        if was not in SEVERITY or before.get("unchecked"):
            return []
        self.record(f"NODE#{iid}", {**_kept(before), "unchecked": self.result.audit_id}, before, keep_time=True)
        gap = cut(next(t for t in _unread(self.result) if _gap_key(t) in unread).removeprefix("Not checked: "), 100)
        return [Change(5, NOT_RECHECKED, f"not re-checked this audit ({gap}); {was} recorded by the audit to "
                                                f"{before.get('recorded_at', '?')} stands", node=iid,
                       code=CODE_NOT_RECHECKED, was=was)]


def _cause_text(cause: dict[str, str]) -> str | None:
    """A recorded cluster answer as an event says it: `Proven A`, `Hypothesis B,D`; None when there was none."""
    return f"{cause['label']} {cause['branches']}" if cause.get("branches") else None


def _left(node: NodeResult) -> bool:
    """EC2 `terminated`/`shutting-down`, HyperPod `ShuttingDown`: the node is leaving the cluster."""
    return node.status.lower().replace("-", "") in ("terminated", "shuttingdown")


def _rank(verdict: str | None) -> int:
    return SEVERITY.get(verdict or "none", 0)


def _gap_text(gaps: frozenset[str]) -> str:
    return json.dumps(sorted(gaps))


def _gap_set(item: dict[str, str]) -> frozenset[str]:
    return frozenset(json.loads(item.get("read_gaps", "[]")))


def _kept(before: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in before.items() if k not in _BOOKKEEPING}


def _verdict_change(node: NodeResult, rank: int, was: str = "", previous: str | None = None) -> Change:
    """`was`: the earlier verdict as the alert says it; `previous`: as recorded (None: the node is first seen)."""
    return Change(rank, str(node.verdict), f"new verdict {node.verdict}{was}", node=node.instance_id,
                  detail=node.verdict_evidence or "", code=NEW_VERDICT, was=previous)


def _asked_before(node: NodeResult, audit_id: str, recorded_at: str | None = None) -> bool:
    """The node's verdict is an action another audit of the cluster asked for after the state compared with was
    recorded (`recorded_at`; None: no state of this mode yet), still open: on-call was paged for it by that audit.
    The latest state is kept per mode, so the hourly coverage audit after an incident audit (a HyperPod event's, the
    Xid watch's) would otherwise say the same "new verdict" again. An action given before that state (the same mode's
    own earlier REBOOT, gone from the window and back: flapping) is said again as before; no history read (None):
    not known, said."""
    since = parse_time(recorded_at) if recorded_at else None
    return any(a.verdict == node.verdict and a.status == "open" and a.given_in != audit_id
               and (since is None or a.given_at > since) for a in node.actions_asked or [])


def _first_seen(node: NodeResult, audit_id: str = "") -> list[Change]:
    rows = []
    if node.xid_status == "Not observable" and (node.gpu_count or 0) != 0:
        rows.append(Change(2, NOT_OBSERVABLE, "coverage Not observable", node=node.instance_id,
                           code=COVERAGE_LOST))
    if node.verdict in ALERTING_VERDICTS and not _asked_before(node, audit_id):
        rows.append(_verdict_change(node, 1 if node.verdict in SEVERITY else 2))
    return rows


def _flapping(node: NodeResult, rows: list[Change]) -> list[Change]:
    """A node whose verdict keeps changing across audits (fleet memory) says so on each of its lines: on-call
    reads it as one more flip, not a new event."""
    if FLAPPING not in (node.history or ""):
        return rows
    return [replace(c, flapping=True) for c in rows]


def _node_changes(node: NodeResult, before: dict[str, str], audit_id: str = "") -> list[Change]:
    iid, rows = node.instance_id, list[Change]()
    was_x, was_v, now_v = before.get("xid_status"), before.get("verdict", "none"), node.verdict or "none"
    regained = False
    if was_x and was_x != node.xid_status and "Not observable" in (was_x, node.xid_status):
        lost = node.xid_status == "Not observable"
        regained = not lost
        rows.append(Change(2 if lost else 6, NOT_OBSERVABLE if lost else RECOVERED,
                           f"coverage {'lost' if lost else 'regained'} ({was_x} → {node.xid_status})", node=iid,
                           code=COVERAGE_LOST if lost else COVERAGE_REGAINED, was=was_x))
    if now_v == was_v == "REPLACE" and ESCALATED_MARK in (node.verdict_evidence or "") and not before.get("escalated"):
        rows.append(Change(1, REPLACE, "REPLACE escalated (given earlier, not acted on)", node=iid,
                           detail=node.verdict_evidence or "", code=ESCALATED, was=was_v))
    if now_v in ALERTING_VERDICTS and now_v != was_v and _asked_before(node, audit_id, before.get("recorded_at")):
        pass  # asked by an earlier audit and still open: already paged (the state is recorded all the same)
    elif now_v in ALERTING_VERDICTS and now_v != was_v:
        was = f" (was {was_v})" if was_v in ALERTING_VERDICTS else ""
        rows.append(_verdict_change(node, 1 if now_v in SEVERITY else 2, was, previous=was_v))
    elif (was_v in ALERTING_VERDICTS and now_v not in ALERTING_VERDICTS and not (was_v == "NOT OBSERVABLE" and regained)
          and _done_before(node, was_v)):
        rows.append(
            Change(
                6,
                RECOVERED,
                f"recovered ({was_v} → {now_v if now_v != 'none' else 'no GPU signal in the window'})",
                node=iid,
                code=VERDICT_RECOVERED,
                was=was_v,
            )
        )
    return rows


def _done(node: NodeResult) -> list[Change]:
    """The actions this audit showed done (a reboot after the signal, a replacement or relaunch, coverage Measured
    again), each said once: the audit that shows it is the one that closes it in the history."""
    return [Change(6, DONE, f"{a.verdict} done: {a.done}", node=node.instance_id,
                   detail=f"{a.verdict} given at {iso(a.given_at)}"
                          + (f" on a signal at {iso(a.signal)}" if a.signal else ""),
                   code=ACTION_DONE, was=a.verdict)
            for a in node.actions_asked or [] if a.status not in ("open", "superseded")]


def _done_before(node: NodeResult, verdict: str) -> bool:
    """A verdict gone is a recovery only when the history shows its action done by an earlier audit (said then):
    not while it is open (a REBOOT whose Xid left the window was not thereby rebooted), not when this audit shows it
    done (`_done` says that), and not with no history read (whether it was done is not known: nothing is said)."""
    return node.actions_asked is not None and not any(a.verdict == verdict for a in node.actions_asked)


def previous_state(result: Result, read: HistoryRead | None) -> dict[str, dict[str, str]]:
    """The latest state `compare` expects, from a local history read before this audit: each node's latest span in
    the same mode (not this audit's own). The history keeps node states only: a root cause, readiness and check
    results compare as if first seen. No history: an empty state, so the first audit's state is the change."""
    if read is None:
        return {}
    same_mode = read.model_copy(update={"spans": [s for s in read.spans if s.mode == result.mode
                                                  and result.audit_id not in (s.audit_id, s.last_audit_id)]})
    state: dict[str, dict[str, str]] = {}
    for iid, span in latest_spans(same_mode).items():
        item = {"verdict": span.verdict or "none", "xid_status": span.xid_status, "read_gaps": "[]",
                "audit_id": span.last_audit_id}
        state[f"NODE#{iid}"] = {**item, "gone": span.last_audit_id} if span.closed else item
    return state
