"""Findings as Amazon EventBridge events (issue #38): one PutEvents entry per change the alert is about (the
Change records of what_changed.compare), so an operator's rule can open a ticket, page or start a drain on a typed field
instead of parsing the SNS prose.

* `source` is SOURCE; `detail-type` says what changed (DETAIL_TYPES): a node's verdict, a node's coverage, the
  incident's root cause or leading hypothesis, pre-flight readiness, a pre-flight check, the result's self-check.
* `detail` is the versioned schema EVENT_SCHEMA: every detail has every field of DETAIL_FIELDS (null or empty when
  it does not apply), so a rule can test any of them with `exists` and a consumer never meets a missing key.
  Fields may be added at the end; none is renamed or changes meaning without a new version.
* Account text (names, log lines quoted in a reason) is redacted of account IDs and its control characters are
  shown as `\\xNN` (report/escape.visible), as in the alert; the JSON is ASCII. `Resources` carries the node's
  instance ARN and the cluster's ARN (issue #49 item 9), unredacted like the result's `cluster.arn`: EventBridge's
  own `account` field already names the account to whoever may see the event.
* One event per node per audit (`one_per_node`): a node's changes (a new verdict, its coverage lost) are one event
  led by the most urgent, every code in `changes`.
* Limits (EventBridge User Guide, "Calculating PutEvents event entry size"; API reference, PutEvents): at most
  MAX_ENTRIES_PER_CALL entries per call, and an entry — Time (14 bytes when given), Source, DetailType, Detail and
  each Resources item in UTF-8 bytes — under MAX_ENTRY_BYTES; AWS also rejects a call whose entries together pass
  it ("Total size of the entries in the request is over the limit"), so `batches` keeps each call's total under it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.changes import (
    ACTION_DONE,
    CHECK_FAILED,
    CHECK_RECOVERED,
    COVERAGE_LOST,
    COVERAGE_REGAINED,
    ESCALATED,
    HYPOTHESIS_CHANGED,
    LEFT_CLUSTER,
    NEW_VERDICT,
    READY_AGAIN,
    ROOT_CAUSE_PROVEN,
    SELF_CHECK_FAILED,
    VERDICT_RECOVERED,
)
from gpuaudit.model.changes import CODE_NOT_READY as NOT_READY
from gpuaudit.model.changes import CODE_NOT_RECHECKED as NOT_RECHECKED
from gpuaudit.model.redaction import redact
from gpuaudit.model.result import NodeResult, Result, verdict_code
from gpuaudit.model.timeutil import iso
from gpuaudit.report.alert import Change, cut, dedup_key, kind_rank, severity
from gpuaudit.report.escape import visible
from gpuaudit.report.order import verdict_rank, xid_codes
from gpuaudit.report.records import reason_code

SOURCE = "gpuaudit"
EVENT_SCHEMA = "gpu-audit-event/1"
NODE_VERDICT_CHANGED = "GPU Audit Node Verdict Changed"
COVERAGE_CHANGED = "GPU Audit Coverage Changed"
ROOT_CAUSE_CHANGED = "GPU Audit Root Cause Changed"
READINESS_CHANGED = "GPU Audit Readiness Changed"
CHECK_CHANGED = "GPU Audit Check Changed"
SELF_CHECK_FAILED_TYPE = "GPU Audit Self-Check Failed"

# Change codes (Change.code, set by rules/what_changed.py; the detail's `change`): model/changes.py.
DETAIL_TYPES = {
    NEW_VERDICT: NODE_VERDICT_CHANGED, ESCALATED: NODE_VERDICT_CHANGED, VERDICT_RECOVERED: NODE_VERDICT_CHANGED,
    LEFT_CLUSTER: NODE_VERDICT_CHANGED, NOT_RECHECKED: NODE_VERDICT_CHANGED, ACTION_DONE: NODE_VERDICT_CHANGED,
    COVERAGE_LOST: COVERAGE_CHANGED, COVERAGE_REGAINED: COVERAGE_CHANGED,
    ROOT_CAUSE_PROVEN: ROOT_CAUSE_CHANGED, HYPOTHESIS_CHANGED: ROOT_CAUSE_CHANGED,
    NOT_READY: READINESS_CHANGED, READY_AGAIN: READINESS_CHANGED,
    CHECK_FAILED: CHECK_CHANGED, CHECK_RECOVERED: CHECK_CHANGED,
    SELF_CHECK_FAILED: SELF_CHECK_FAILED_TYPE,
}

MAX_ENTRIES_PER_CALL = 10
MAX_ENTRY_BYTES = 256 * 1024  # an entry (and a call's entries together) must stay under this
TIME_BYTES = 14  # what EventBridge counts for a given Time, whatever its value
TEXT_CHARS = 1000  # one text field of a detail; every field cut, an entry stays far under the limit
SHORT_TEXT_CHARS = 120  # the cut when a detail still does not fit (a hostile name repeated in many fields)

# The detail's fields, in this order; every detail has all of them.
DETAIL_FIELDS = ("schema", "change", "kind", "severity", "audit_id", "cluster", "region", "mode", "window_start",
                 "window_end", "node", "instance_group", "instance_type", "node_status", "verdict",
                 "previous_verdict", "verdict_rank", "reason_code", "reason", "xid_codes", "xid_classes", "coverage",
                 "previous_coverage", "root_cause", "branches", "previous_root_cause", "ready", "previous_ready",
                 "check_id", "check_result", "previous_check_result", "summary", "report", "dedup_key", "event_key",
                 # the verdicts' machine forms (`NOT_OBSERVABLE` beside `NOT OBSERVABLE`), what a pattern matches
                 "verdict_code", "previous_verdict_code",
                 # every change of the node this event carries (one event per node per audit), the leading one first
                 "changes")
LIST_FIELDS = ("xid_codes", "xid_classes", "branches", "changes")


def detail_type(change: Change) -> str:
    """The detail-type a change is sent as; a change without a known code is a gpuaudit bug, said as such."""
    try:
        return DETAIL_TYPES[change.code]
    except KeyError:
        raise ValueError(
            f"change {change.what!r} carries no event code (what_changed.compare sets one per change)"
        ) from None


def _recorded(value: str | None) -> str | None:
    """A recorded value as the detail says it: `none` (no verdict recorded) is null."""
    return None if value in (None, "", "none") else value


def _node_fields(node: NodeResult | None, change: Change) -> dict[str, Any]:
    node_change = DETAIL_TYPES[change.code] in (NODE_VERDICT_CHANGED, COVERAGE_CHANGED)
    fields: dict[str, Any] = {"node": change.node}
    if node_change and change.code in (COVERAGE_LOST, COVERAGE_REGAINED):
        fields["previous_coverage"] = change.was
    elif node_change:
        fields["previous_verdict"] = _recorded(change.was)
        fields["previous_verdict_code"] = verdict_code(_recorded(change.was))
    if node is None:  # gone from the node list: only what was recorded is known
        return fields
    return {**fields, "instance_group": node.instance_group, "instance_type": node.instance_type,
            "node_status": node.status, "verdict": node.verdict, "verdict_code": verdict_code(node.verdict),
            "verdict_rank": verdict_rank(node.verdict),
            "reason_code": reason_code(node), "reason": node.verdict_evidence,
            # this audit's Xids (an earlier audit's, from fleet memory, are named in the reason)
            "xid_codes": xid_codes(node, history=False),  # the Xid the verdict rests on first
            "xid_classes": sorted({e.class_ for e in node.gpu_errors if e.source != "history"}),
            "coverage": node.xid_status}


def _answer_fields(result: Result, change: Change) -> dict[str, Any]:
    kind = DETAIL_TYPES[change.code]
    if kind == ROOT_CAUSE_CHANGED:
        proven = [b.branch for b in result.branches if b.status == "Root cause" and b.label == "Proven"]
        leading = [b.branch for b in result.branches
                   if b.status == "UNVERIFIED" and b.label == "Hypothesis (to validate)"]
        return {"root_cause": "Proven" if change.code == ROOT_CAUSE_PROVEN else "Hypothesis",
                "branches": proven if change.code == ROOT_CAUSE_PROVEN else leading,
                "previous_root_cause": change.was}
    if kind == READINESS_CHANGED:
        return {"ready": result.ready, "previous_ready": change.was}
    if kind == CHECK_CHANGED:
        check = next((c for c in result.checks if change.what.startswith(f"{c.id} ")), None)
        return {"ready": result.ready, "check_id": check.id if check else None,
                "check_result": check.result if check else None, "previous_check_result": change.was,
                "reason": check.evidence if check else None}
    return {"reason": change.detail}


def one_per_node(changes: Sequence[Change]) -> list[list[Change]]:
    """The changes as events: a node's changes together (a new NOT OBSERVABLE verdict and its coverage lost are one
    event, not two saying the same verdict), the most urgent leading — the alert's order (kind, then rank), a verdict
    change before a coverage change of the same urgency; a cluster-level change alone. In the order of `changes`."""
    grouped: dict[str, list[Change]] = {}
    out: list[list[Change]] = []
    for change in changes:
        if change.node is None:
            out.append([change])
        elif change.node in grouped:
            grouped[change.node].append(change)
        else:
            grouped[change.node] = [change]
            out.append(grouped[change.node])
    return [sorted(group, key=lambda c: (kind_rank(c.kind), c.rank, DETAIL_TYPES.get(c.code) != NODE_VERDICT_CHANGED))
            for group in out]


@dataclass(frozen=True)
class _AuditFields:
    """What every event of one audit reads alike: its nodes by ID and its dedup key (of all its changes)."""

    nodes: dict[str, NodeResult]
    dedup_key: str

    @classmethod
    def of(cls, result: Result, changes: Sequence[Change]) -> _AuditFields:
        return cls({n.instance_id: n for n in result.nodes}, dedup_key(result, changes))


def detail(result: Result, change: Change, changes: Sequence[Change], report: str | None = None,
           also: Sequence[Change] = (), audit: _AuditFields | None = None) -> dict[str, Any]:
    """One event's detail (EVENT_SCHEMA): `change` leads, `also` are the node's other changes this audit (their
    coverage fields filled, their codes in `changes`); account IDs redacted and control characters shown. `audit`:
    what every event of the audit shares, built once by `entries` (each event rebuilding it made 10,000 nodes'
    events quadratic: ~3,000 events × every node and every change)."""
    audit = audit or _AuditFields.of(result, changes)
    nodes = audit.nodes
    kind = detail_type(change)
    about = _node_fields(nodes.get(change.node), change) if change.node is not None else _answer_fields(result, change)
    for other in also:  # the node's other changes: only ever of the same node (one_per_node)
        extra = _node_fields(nodes.get(other.node) if other.node is not None else None, other)
        about.update({k: v for k, v in extra.items() if about.get(k) is None})
    key = [result.audit_id, kind, change.code, change.node or about.get("check_id") or ""]
    row = {"schema": EVENT_SCHEMA, "change": change.code, "kind": change.kind,
           "severity": severity([change, *also]),
           "audit_id": result.audit_id, "cluster": result.cluster.name, "region": result.cluster.region,
           "mode": result.mode, "window_start": iso(result.window.start), "window_end": iso(result.window.end),
           **about, "summary": "; ".join(dict.fromkeys(c.text for c in (change, *also))), "report": report,
           "dedup_key": audit.dedup_key, "changes": [c.code for c in (change, *also)],
           # the same change of the same audit: the same key (a retried PutEvents, a re-delivered event)
           "event_key": hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]}
    empty: dict[str, Any] = {f: ([] if f in LIST_FIELDS else None) for f in DETAIL_FIELDS}
    return _shown({**empty, **row}, result.account_ids, TEXT_CHARS)


def _shown(value: Any, account_ids: frozenset[str], limit: int) -> Any:
    """Every string of a detail: account IDs redacted, control characters shown, one line of at most `limit`."""
    if isinstance(value, str):
        return cut(visible(redact(value, account_ids)), limit)
    if isinstance(value, list):
        return [_shown(v, account_ids, limit) for v in value]
    if isinstance(value, dict):
        return {k: _shown(v, account_ids, limit) for k, v in value.items()}
    return value


def _detail_json(fields: dict[str, Any]) -> str:
    return json.dumps(fields, ensure_ascii=True, separators=(",", ":"))


def _partition(region: str) -> str:
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def resources(result: Result, node: str | None) -> list[str]:
    """The event's `Resources`: the node's EC2 instance ARN (a node's event) and the cluster's ARN, for a rule to
    match on or a target to act on. The account in them is the audited one, whose ID EventBridge's own `account`
    field already carries; like the result's `cluster.arn`, they are not redacted (an ARN with `<account>` names
    nothing). The instance ARN needs the account: the cluster ARN's, else the one account the audit read."""
    arn = result.cluster.arn
    parts = arn.split(":") if arn else []
    account: str | None
    if len(parts) > 5 and parts[4].isdigit():
        partition, account = parts[1], parts[4]
    else:
        only = sorted(result.account_ids)
        partition, account = _partition(result.cluster.region), only[0] if len(only) == 1 else None
    out = []
    if node is not None and account is not None and node.startswith("i-"):
        out.append(f"arn:{partition}:ec2:{result.cluster.region}:{account}:instance/{node}")
    return out + ([arn] if arn else [])


def entry_size(entry: dict[str, Any]) -> int:
    """The size EventBridge counts for one PutEvents entry (User Guide, "Calculating PutEvents event entry size")."""
    size = TIME_BYTES if entry.get("Time") is not None else 0
    size += len(entry["Source"].encode()) + len(entry["DetailType"].encode())
    size += len(entry["Detail"].encode()) if entry.get("Detail") is not None else 0
    return size + sum(len(r.encode()) for r in entry.get("Resources") or [] if r is not None)


def entries(result: Result, changes: Sequence[Change], report: str | None = None,
            bus: str | None = None) -> list[dict[str, Any]]:
    """The PutEvents entries of one audit's changes, in the alert's order (worst first). `bus`: the event bus's
    name or ARN; None leaves EventBusName out (the account's default bus)."""
    out = []
    audit = _AuditFields.of(result, changes)
    for change, *also in one_per_node(changes):
        kind = detail_type(change)
        fields = detail(result, change, changes, report, also, audit)
        entry: dict[str, Any] = {"Time": result.generated_at, "Source": SOURCE, "DetailType": kind,
                                 "Detail": _detail_json(fields), **({"EventBusName": bus} if bus else {})}
        if arns := resources(result, change.node):
            entry["Resources"] = arns
        if entry_size(entry) >= MAX_ENTRY_BYTES:  # only a hostile name or text: cut every field shorter
            entry["Detail"] = _detail_json(_shown(fields, result.account_ids, SHORT_TEXT_CHARS))
        out.append(entry)
    return out


def batches(items: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """PutEvents calls: at most MAX_ENTRIES_PER_CALL entries each, their sizes together under MAX_ENTRY_BYTES."""
    calls: list[list[dict[str, Any]]] = []
    size = 0
    for entry in items:
        grows = entry_size(entry)
        if grows >= MAX_ENTRY_BYTES:
            raise ValueError(f"an event entry of {grows:,} bytes is over EventBridge's limit of {MAX_ENTRY_BYTES:,}")
        if not calls or len(calls[-1]) >= MAX_ENTRIES_PER_CALL or size + grows >= MAX_ENTRY_BYTES:
            calls.append([])
            size = 0
        calls[-1].append(entry)
        size += grows
    return calls


def to_ndjson(items: Sequence[dict[str, Any]]) -> str:
    """One PutEvents entry per line, as it would be sent (Time as ISO-8601 UTC; Detail the JSON string)."""
    return "".join(json.dumps({k: iso(v) if k == "Time" else v for k, v in e.items()}, ensure_ascii=True,
                              separators=(",", ":")) + "\n" for e in items)
