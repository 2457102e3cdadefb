"""Where results go: the findings table (DynamoDB) and the alert topic (SNS).

Writes are idempotent: the audit's summary is put with `attribute_not_exists`, keyed by the
deterministic audit_id, so re-running the same audit window writes nothing new and
publishes no second alert. Alerts go out only when something changed against the
latest state kept per cluster and mode (`LATEST#<cluster>#<mode>`, its node items sharded over
`LATEST#<cluster>#<mode>#<shard>`), and an audit that read less than the one that recorded a state never
overwrites it (`compare`). Node rows are not written per node: the result JSON in S3 holds them. Only the
changed latest-state items are written, in batches (gpuaudit/dynamo_batch.py): a first audit of 10,000 nodes
is 400 BatchWriteItem calls, an unchanged one none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError

from gpuaudit.dynamo_batch import batch_write, put_requests, retried, shard_of
from gpuaudit.model.history import ESCALATED, FLAPPING
from gpuaudit.model.result import BRANCH_NAMES, NodeResult, Result
from gpuaudit.model.timeutil import iso, parse_time
from gpuaudit.report import alert, events
from gpuaudit.report.alert import ALERT_MAX_CHARS, Change
from gpuaudit.report.redact import redact

ALERTING_VERDICTS = {"REPLACE", "REBOOT", "NOT OBSERVABLE"}
__all__ = ["ALERT_MAX_CHARS", "Change", "alert_message", "compare", "write_and_alert"]
RETENTION_DAYS = 90
# Gap.prose of a source the audit could not read: a failed or unread call, a truncated read.
UNREAD_PREFIXES = ("Not checked: ", "Visibility gap: ")


@dataclass
class SinkOutcome:
    items_written: int = 0
    duplicate: bool = False
    superseded: bool = False  # a less complete earlier result of the same window was replaced
    latest_kept: bool = False  # another audit wrote the latest state after this one read it: its state stands
    alert: str | None = None
    subject: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)  # the SNS message attributes published
    published: bool = False
    already_published: bool = False  # an earlier attempt of this audit published the alert: not sent again
    events_already_sent: bool = False  # the same for the changes as events
    changes: list[str] = field(default_factory=list)
    records: list[Change] = field(default_factory=list)


# The latest state's reads run side by side (one Query per shard): the client's pool holds a connection per thread.
DYNAMODB_THREADS = 16
# A cluster's node states are spread over this many partitions (`LATEST#<cluster>#<mode>#<shard>`): a first audit
# of 10,000 nodes writes 10,000 items, past the 1,000 writes a second one partition takes.
LATEST_SHARDS = 16
HEAD = "HEAD"  # the latest state's marker: which audit wrote it last (the writes are conditional on it)


def dynamodb_client(session: Any) -> Any:
    """A DynamoDB client whose connection pool holds a connection per thread (botocore's default is 10)."""
    return session.client("dynamodb", config=Config(max_pool_connections=DYNAMODB_THREADS))


def _put_new(ddb: Any, table: str, item: dict[str, Any], fewer_gaps_than: int | None = None) -> bool:
    """Write unless the item exists; with `fewer_gaps_than`, also replace one recorded with more gaps."""
    if fewer_gaps_than is None:
        return _put_if(ddb, table, item, "attribute_not_exists(pk)", {})
    return _put_if(ddb, table, item, "attribute_not_exists(pk) OR gaps > :gaps OR attribute_not_exists(gaps)",
                   {":gaps": {"N": str(fewer_gaps_than)}})


def _put_if(ddb: Any, table: str, item: dict[str, Any], condition: str, values: dict[str, Any]) -> bool:
    """A conditional put, retried while throttled: False when the condition does not hold (another write won)."""
    try:
        retried(lambda: ddb.put_item(TableName=table, Item=item, ConditionExpression=condition,
                                     **({"ExpressionAttributeValues": values} if values else {})))
        return True
    except ClientError as err:
        if err.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise


def _s(value: object) -> dict[str, str]:
    return {"S": str(value)}


def latest_key(cluster: str, mode: str) -> str:
    """The partition of a cluster's latest state for one mode (its HEAD, checks, self-check, answer): a coverage
    audit and an incident audit of the same cluster each compare with their own last audit, never with each
    other's."""
    return f"LATEST#{cluster}#{mode}"


def latest_pk(cluster: str, mode: str, sk: str) -> str:
    """Where one latest-state item lives: a node's in its shard (by its instance ID), the rest in the base key."""
    if not sk.startswith("NODE#"):
        return latest_key(cluster, mode)
    return f"{latest_key(cluster, mode)}#{shard_of(sk.removeprefix('NODE#'), LATEST_SHARDS):02d}"


def query_all(ddb: Any, table: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every item of one Query, across all its pages, each page retried while throttled."""
    params, items = dict(params), list[dict[str, Any]]()
    while True:
        out = retried(lambda: ddb.query(TableName=table, **params))
        items += out.get("Items", [])
        if not out.get("LastEvaluatedKey"):
            return items
        params["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def latest_state(ddb: Any, table: str, cluster: str, mode: str) -> dict[str, dict[str, str]]:
    """Every latest-state item of the cluster and mode, by sort key: the base partition and every node shard,
    each across all its query pages, read side by side. A node item left in the base partition by a release
    before the shards is read too; its shard's item, when there is one, wins."""
    base = latest_key(cluster, mode)
    keys = [base, *(f"{base}#{n:02d}" for n in range(LATEST_SHARDS))]

    def read(pk: str) -> list[dict[str, Any]]:
        return query_all(ddb, table, {"KeyConditionExpression": "pk = :p", "ConsistentRead": True,
                                      "ExpressionAttributeValues": {":p": _s(pk)}})

    with ThreadPoolExecutor(max_workers=min(DYNAMODB_THREADS, len(keys))) as pool:
        parts = list(pool.map(read, keys))
    return {i["sk"]["S"]: {k: v["S"] for k, v in i.items() if "S" in v} for part in parts for i in part}


def _claim(ddb: Any, table: str, result: Result, previous: dict[str, dict[str, str]]) -> bool:
    """Mark the latest state as this audit's, only if it is still the state compared with: an audit that wrote
    in between keeps its state (the batched writes that follow carry no condition of their own)."""
    head = {"pk": _s(latest_key(result.cluster.name, result.mode)), "sk": _s(HEAD), "audit_id": _s(result.audit_id),
            "recorded_at": _s(iso(result.window.end))}
    seen = previous.get(HEAD, {}).get("audit_id")
    if seen is None:
        claimed = _put_if(ddb, table, head, "attribute_not_exists(pk)", {})
    else:
        claimed = _put_if(ddb, table, head, "audit_id = :seen", {":seen": _s(seen)})
    if claimed:
        return True
    # At least once: a put DynamoDB applied and then answered with a 5xx or a timeout is sent again (by botocore)
    # and meets the head it wrote itself; read back, that head is this audit's claim, not another audit's.
    now = retried(lambda: ddb.get_item(TableName=table, Key={"pk": head["pk"], "sk": head["sk"]},
                                       ConsistentRead=True)).get("Item")
    return now is not None and now.get("audit_id", {}).get("S") == result.audit_id


# What one audit delivered (issue #48 item 4), kept under the audit's key (`AUDIT#<audit id>`): the alert and the
# events. A Verdict step retried after it published (a state write throttled on every attempt, a timeout) finds
# the mark and does not publish again. `gaps`: the completeness of the run that delivered, as in the summary; a
# less complete run of the same window never stops a more complete one (`recorded_as` "superseded") delivering.
ALERT_SENT, EVENTS_SENT = "DELIVERED#ALERT", "DELIVERED#EVENTS"


def _delivered(ddb: Any, table: str, result: Result, what: str) -> bool:
    """True when a run of this audit at least as complete as this one already delivered `what` (its mark)."""
    mark = retried(lambda: ddb.get_item(TableName=table, Key={"pk": _s(f"AUDIT#{result.audit_id}"), "sk": _s(what)},
                                        ConsistentRead=True)).get("Item")
    return mark is not None and int(mark.get("gaps", {}).get("N", "0")) <= len(result.visibility_gaps)


def _mark_delivered(ddb: Any, table: str, result: Result, what: str, expires: dict[str, str]) -> None:
    """Written as soon as the publish call returned, before any state write that could fail the step: only a
    crash between the two (not a failed write) can publish twice; never an alert left unsent (at least once)."""
    mark = {"pk": _s(f"AUDIT#{result.audit_id}"), "sk": _s(what), "gaps": {"N": str(len(result.visibility_gaps))},
            "expires_at": {"N": expires["S"]}}
    retried(lambda: ddb.put_item(TableName=table, Item=mark))


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
    writes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changes(self) -> list[str]:
        return [c.text for c in self.records]


# Verdicts a less complete audit may confirm or raise, never clear; the order is their severity.
SEVERITY = {"REPLACE": 2, "REBOOT": 1}
_BOOKKEEPING = {"pk", "sk", "audit_id", "recorded_at"}


def compare(result: Result, previous: dict[str, dict[str, str]], expires_at: int = 0) -> Comparison:
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
    state, and the same contradiction again is not said twice."""
    gaps, rows = read_gaps(result), list[Change]()
    state = _State(result)
    broken = json.dumps(sorted(redact(b, result.account_ids) for b in result.invariants_broken))
    recorded_broken = previous.get("SELFCHECK", {}).get("invariants", "[]")
    if broken != recorded_broken:
        state.record("SELFCHECK", {"invariants": broken}, previous.get("SELFCHECK"))
    if result.invariants_broken:  # a result that contradicts itself is said first: on-call must not act on it
        if broken == recorded_broken:
            return Comparison()
        rows.append(Change(0, alert.SELF_CHECK, f"SELF-CHECK FAILED ({len(result.invariants_broken)} invariant(s) "
                                                "broken, a gpuaudit bug)", detail="; ".join(result.invariants_broken),
                           code=events.SELF_CHECK_FAILED))

    left = {f"NODE#{n.instance_id}": n.status for n in result.nodes if _left(n)}
    for node in result.nodes:
        sk = f"NODE#{node.instance_id}"
        before = previous.get(sk)
        if before is not None and before.get("gone"):
            if sk in left:
                continue  # still listed as leaving: already said
            before = None  # left the cluster and came back: seen anew
        now = {"xid_status": node.xid_status, "verdict": node.verdict or "none",
               **({"escalated": "yes"} if ESCALATED in (node.verdict_evidence or "") else {})}
        rows += _done(node)  # read from the history, whichever audit recorded the state compared with
        if before is None:
            rows += _first_seen(node, result.audit_id)
            gone = {"gone": result.audit_id} if sk in left else {}  # first seen leaving: said once, recorded gone
            state.record(sk, {**now, "read_gaps": _gap_text(gaps), **gone}, previous.get(sk),
                         {"expires_at": {"N": str(expires_at)}} if gone else None)
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
        iid, was = sk.removeprefix("NODE#"), before.get("verdict", "none")
        if sk not in left and not gaps <= _gap_set(before):  # missing from a less complete audit: not evidence
            rows += state.not_rechecked(iid, before, gaps - _gap_set(before))
            continue
        if was in ALERTING_VERDICTS:
            rows.append(Change(4, alert.LEFT, f"{left[sk]}, left the cluster (was {was}): not a recovery" if sk in left
                               else f"no longer in the cluster (was {was}): replaced or terminated, not a recovery",
                               node=iid, code=events.LEFT_CLUSTER, was=was))
        state.record(sk, {**_kept(before), "gone": result.audit_id}, before, {"expires_at": {"N": str(expires_at)}},
                     keep_time=True)

    for check in result.checks:
        sk = f"CHECK#{check.id}"
        was_result = previous.get(sk, {}).get("result")
        if check.result == "FAIL" and was_result != "FAIL":
            rows.append(Change(3, alert.FAIL, f"{check.id} {check.title}: FAIL", detail=check.evidence,
                               code=events.CHECK_FAILED, was=was_result))
        elif was_result == "FAIL" and check.result == "PASS":  # PASS and RISK rest on reads (fail closed)
            rows.append(Change(6, alert.RECOVERED, f"{check.id} {check.title}: back to PASS (was FAIL)",
                               code=events.CHECK_RECOVERED, was=was_result))
        elif was_result == "FAIL" and check.result == "RISK":
            rows.append(Change(6, alert.RECOVERED, f"{check.id} {check.title}: no longer FAIL (now RISK)",
                               detail=check.evidence, code=events.CHECK_RECOVERED, was=was_result))
        elif was_result == "FAIL":
            continue  # UNVERIFIED, Not checked, Needs input: not read, so the FAIL stands
        state.record(sk, {"result": check.result}, previous.get(sk))
    rows += _answer_changes(result, previous, state)
    # A self-contradicting result's verdicts are not trusted: only its self-check is recorded.
    writes = [w for w in state.writes if not result.invariants_broken or w["sk"]["S"] == "SELFCHECK"]
    return Comparison(records=sorted(rows, key=lambda r: r.rank), writes=writes)


def _answer_changes(result: Result, previous: dict[str, dict[str, str]], state: _State) -> list[Change]:
    """The cluster-level answer on-call must hear about, not only the nodes: a root cause newly Proven, a leading
    hypothesis that changed (incident mode, RULES §8), and pre-flight `Ready: No` (RULES §10) — each said once,
    until the answer changes again."""
    rows: list[Change] = []
    if result.mode == "incident" and result.branches:
        proven = [b.branch for b in result.branches if b.status == "Root cause" and b.label == "Proven"]
        leading = [b.branch for b in result.branches if b.status == "UNVERIFIED" and b.label == "Hypothesis (to validate)"]
        now = {"label": "Proven", "branches": ",".join(proven)} if proven else (
            {"label": "Hypothesis", "branches": ",".join(leading)} if leading else {"label": "none", "branches": ""})
        before = previous.get("CAUSE")
        was = _kept(before) if before is not None else {"label": "none", "branches": ""}
        named = ", ".join(f"branch {b} ({BRANCH_NAMES[b]})" for b in (proven or leading))  # type: ignore[index]
        if now != was and now["label"] == "Proven":
            rows.append(Change(1, alert.ROOT_CAUSE, f"ROOT CAUSE (Proven): {named}",
                               detail=result.headline.split(" — ", 1)[-1], code=events.ROOT_CAUSE_PROVEN,
                               was=_cause_text(was)))
        elif now != was and now["label"] == "Hypothesis":
            earlier = f"{was['label']} branch {was['branches']}" if was["branches"] else "none"
            rows.append(Change(2, alert.HYPOTHESIS, f"NEW HYPOTHESIS (to validate): {named} (was {earlier})",
                               detail=result.headline.split(" — ", 1)[-1], code=events.HYPOTHESIS_CHANGED,
                               was=_cause_text(was)))
        state.record("CAUSE", now, before)
    if result.mode == "preflight" and result.ready is not None:
        before = previous.get("READY")
        was_ready = before.get("ready") if before is not None else None
        failing = ", ".join(f"{c.id} {c.title}" for c in result.checks if c.result == "FAIL")
        if result.ready == "No" and was_ready != "No":
            rows.append(Change(1, alert.NOT_READY, f"NOT READY (Ready: No): FAIL {failing or 'see the report'}",
                               code=events.NOT_READY, was=was_ready))
        elif was_ready == "No":
            rows.append(Change(6, alert.RECOVERED, f"Ready: {result.ready} (was No)", code=events.READY_AGAIN,
                               was=was_ready))
        state.record("READY", {"ready": result.ready}, before)
    return rows


class _State:
    """The latest-state items one comparison writes: only those that differ from what is recorded."""

    def __init__(self, result: Result) -> None:
        self.result = result
        self.writes: list[dict[str, Any]] = []

    def record(self, sk: str, attrs: dict[str, str], before: dict[str, str] | None,
               extra: dict[str, Any] | None = None, *, keep_time: bool = False) -> None:
        """`keep_time`: a mark on a recorded state (not re-checked, gone) keeps the time the state was recorded."""
        if before is not None and _kept(before) == attrs:
            return  # unchanged: a rerun of an unchanged state writes nothing
        recorded_at = before.get("recorded_at") if keep_time and before is not None else None
        stamp = {"audit_id": self.result.audit_id, "recorded_at": recorded_at or iso(self.result.window.end)}
        item = {"pk": _s(latest_pk(self.result.cluster.name, self.result.mode, sk)), "sk": _s(sk),
                **{k: _s(v) for k, v in {**attrs, **stamp}.items()}, **(extra or {})}
        self.writes.append(item)

    def not_rechecked(self, iid: str, before: dict[str, str], unread: frozenset[str]) -> list[Change]:
        """A less complete audit leaves the recorded state as it is. Said once, and only of a REPLACE or REBOOT the
        on-call may be acting on: that this audit could neither confirm nor clear it."""
        was = before.get("verdict", "none")
        if was not in SEVERITY or before.get("unchecked"):
            return []
        self.record(f"NODE#{iid}", {**_kept(before), "unchecked": self.result.audit_id}, before, keep_time=True)
        gap = alert.cut(next(t for t in _unread(self.result) if _gap_key(t) in unread).removeprefix("Not checked: "), 100)
        return [Change(5, alert.NOT_RECHECKED, f"not re-checked this audit ({gap}); {was} recorded by the audit to "
                                                f"{before.get('recorded_at', '?')} stands", node=iid,
                       code=events.NOT_RECHECKED, was=was)]


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
                  detail=node.verdict_evidence or "", code=events.NEW_VERDICT, was=previous)


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
        rows.append(Change(2, alert.NOT_OBSERVABLE, "coverage Not observable", node=node.instance_id,
                           code=events.COVERAGE_LOST))
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
        rows.append(Change(2 if lost else 6, alert.NOT_OBSERVABLE if lost else alert.RECOVERED,
                           f"coverage {'lost' if lost else 'regained'} ({was_x} → {node.xid_status})", node=iid,
                           code=events.COVERAGE_LOST if lost else events.COVERAGE_REGAINED, was=was_x))
    if now_v == was_v == "REPLACE" and ESCALATED in (node.verdict_evidence or "") and not before.get("escalated"):
        rows.append(Change(1, alert.REPLACE, "REPLACE escalated (given earlier, not acted on)", node=iid,
                           detail=node.verdict_evidence or "", code=events.ESCALATED, was=was_v))
    if now_v in ALERTING_VERDICTS and now_v != was_v and _asked_before(node, audit_id, before.get("recorded_at")):
        pass  # asked by an earlier audit and still open: already paged (the state is recorded all the same)
    elif now_v in ALERTING_VERDICTS and now_v != was_v:
        was = f" (was {was_v})" if was_v in ALERTING_VERDICTS else ""
        rows.append(_verdict_change(node, 1 if now_v in SEVERITY else 2, was, previous=was_v))
    elif (was_v in ALERTING_VERDICTS and now_v not in ALERTING_VERDICTS and not (was_v == "NOT OBSERVABLE" and regained)
          and _done_before(node, was_v)):
        rows.append(Change(6, alert.RECOVERED, f"recovered ({was_v} → "
                                               f"{now_v if now_v != 'none' else 'no GPU signal in the window'})", node=iid,
                           code=events.VERDICT_RECOVERED, was=was_v))
    return rows


def _done(node: NodeResult) -> list[Change]:
    """The actions this audit showed done (a reboot after the signal, a replacement or relaunch, coverage Measured
    again), each said once: the audit that shows it is the one that closes it in the history."""
    return [Change(6, alert.DONE, f"{a.verdict} done: {a.done}", node=node.instance_id,
                   detail=f"{a.verdict} given at {iso(a.given_at)}"
                          + (f" on a signal at {iso(a.signal)}" if a.signal else ""),
                   code=events.ACTION_DONE, was=a.verdict)
            for a in node.actions_asked or [] if a.status not in ("open", "superseded")]


def _done_before(node: NodeResult, verdict: str) -> bool:
    """A verdict gone is a recovery only when the history shows its action done by an earlier audit (said then):
    not while it is open (a REBOOT whose Xid left the window was not thereby rebooted), not when this audit shows it
    done (`_done` says that), and not with no history read (whether it was done is not known: nothing is said)."""
    return node.actions_asked is not None and not any(a.verdict == verdict for a in node.actions_asked)


def alert_message(result: Result, changes: list[Change], report_link: str | None = None) -> str:
    """The alert text (report/alert.py)."""
    return alert.message(result, changes, report_link)


def recorded_as(ddb: Any, table: str, result: Result) -> str | None:
    """How the findings table already holds this audit (its summary, the commit marker): "duplicate" when a result
    of the same window with as few gaps is recorded, "superseded" when one with more gaps is (this one saw more and
    replaces it), None for a new audit. Completeness is part of idempotency: a degraded early run never hides a
    complete later one, and a degraded rerun never replaces a complete result (the handler writes no S3 object
    for a duplicate either)."""
    audit_key = {"pk": _s(f"AUDIT#{result.audit_id}"), "sk": _s("SUMMARY")}
    recorded = retried(lambda: ddb.get_item(TableName=table, Key=audit_key, ConsistentRead=True)).get("Item")
    if recorded is None:
        return None
    return "duplicate" if len(result.visibility_gaps) >= int(recorded.get("gaps", {}).get("N", "0")) else "superseded"


def write_and_alert(ddb: Any, table: str, sns: Any, topic_arn: str | None, result: Result,
                    now_epoch: int, retention_days: int = RETENTION_DAYS,
                    report_link: str | None = None, result_key: str | None = None,
                    publish_events: Callable[[Sequence[Change]], object] | None = None) -> SinkOutcome:
    """`report_link`: where the HTML report is (no credentials in it); the alert's last line and the summary's.
    `result_key`: the S3 key of the result JSON, which holds every node's row: the table keeps the audit's summary
    and the latest state, never a row per node (issue #34: 10,000 puts an audit for what S3 already holds).
    `publish_events`: the changes as events (eventbus.publish), sent with the alert and, like it, before the latest
    state is written, each marked delivered under the audit's key as soon as it is sent (a retried step sends
    neither again)."""
    outcome = SinkOutcome()
    audit_key = {"pk": _s(f"AUDIT#{result.audit_id}"), "sk": _s("SUMMARY")}
    gaps = len(result.visibility_gaps)
    recorded = recorded_as(ddb, table, result)
    if recorded == "duplicate":
        outcome.duplicate = True
        return outcome
    outcome.superseded = recorded == "superseded"
    previous = latest_state(ddb, table, result.cluster.name, result.mode)
    expires = _s(now_epoch + retention_days * 86400)
    comparison = compare(result, previous, int(expires["S"]))
    outcome.changes, outcome.records = comparison.changes, comparison.records
    if outcome.records and topic_arn and _delivered(ddb, table, result, ALERT_SENT):
        outcome.already_published = True  # by an earlier attempt of this step: said once
    elif outcome.records and topic_arn:
        records = outcome.records
        outcome.alert = alert.message(result, records, report_link)
        outcome.subject = alert.subject(result, records)
        outcome.attributes = alert.message_attributes(result, records)
        chatbot = alert.chatbot_payload(result, records, outcome.alert)
        sns.publish(TopicArn=topic_arn, Subject=outcome.subject, MessageAttributes=outcome.attributes,
                    # AWS Chatbot subscribes over HTTPS and renders only the custom-notification shape
                    Message=json.dumps({"default": outcome.alert, "chatbot": chatbot, "https": chatbot}),
                    MessageStructure="json")
        outcome.published = True
        _mark_delivered(ddb, table, result, ALERT_SENT, expires)
    if outcome.records and publish_events is not None:
        if _delivered(ddb, table, result, EVENTS_SENT):
            outcome.events_already_sent = True
        else:
            publish_events(outcome.records)
            _mark_delivered(ddb, table, result, EVENTS_SENT, expires)
    # The latest state is written after the alert: never a change recorded that nobody heard of. A retry after a
    # failed state write compares with the same state and finds the delivery marks: nothing published twice (only
    # a crash between a publish and its mark publishes again: at least once). The state is written only if it is
    # still the state compared with (HEAD): an audit that wrote in between is not overwritten. The changed items
    # go in batches (BatchWriteItem, retried); what DynamoDB still refuses fails the step, which is retried.
    if comparison.writes:
        if _claim(ddb, table, result, previous):
            batch_write(ddb, table, put_requests(comparison.writes))
            outcome.items_written += len(comparison.writes)
        else:
            outcome.latest_kept = True
    # The summary is the commit marker, written last: a crash before it makes a retry redo the writes and
    # the alert (at least once), never skip the alert. Two racing deliveries: the condition lets one win.
    summary = {**audit_key, "cluster": _s(result.cluster.name), "mode": _s(result.mode),
               "headline": _s(redact(result.headline, result.account_ids)), "window_start": _s(result.window.start.isoformat()),
               "window_end": _s(result.window.end.isoformat()), "expires_at": {"N": expires["S"]},
               "gaps": {"N": str(gaps)}, "nodes": {"N": str(len(result.nodes))}}
    if report_link:
        summary["report_link"] = _s(redact(report_link, result.account_ids))
    if result_key:
        summary["result_key"] = _s(result_key)
    if _put_new(ddb, table, summary, gaps if outcome.superseded else None):
        outcome.items_written += 1
    return outcome
