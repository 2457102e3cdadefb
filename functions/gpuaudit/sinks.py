"""Where results go: the findings table (DynamoDB) and the alert topic (SNS).

Writes are idempotent: audit items are put with `attribute_not_exists`, keyed by the
deterministic audit_id, so re-running the same audit window writes nothing new and
publishes no second alert. Alerts go out only when something changed against the
latest state kept per node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from gpuaudit.model.result import Result
from gpuaudit.report.escape import alert_text
from gpuaudit.report.redact import redact

ALERTING_VERDICTS = {"REPLACE", "REBOOT", "NOT OBSERVABLE"}
# An alert is one message on a phone: bounded well under Chatbot's and SNS's limits at any fleet size.
ALERT_MAX_CHARS = 3500
ALERT_HEADLINE_CHARS = 800
ALERT_CHANGE_CHARS = 200
ALERT_MAX_CHANGES = 20
RETENTION_DAYS = 90


@dataclass
class SinkOutcome:
    items_written: int = 0
    duplicate: bool = False
    superseded: bool = False  # a less complete earlier result of the same window was replaced
    alert: str | None = None
    published: bool = False
    changes: list[str] = field(default_factory=list)


def _put_new(ddb: Any, table: str, item: dict[str, Any], fewer_gaps_than: int | None = None) -> bool:
    """Write unless the item exists; with `fewer_gaps_than`, also replace one recorded with more gaps."""
    condition = "attribute_not_exists(pk)"
    values: dict[str, Any] = {}
    if fewer_gaps_than is not None:
        condition += " OR gaps > :gaps OR attribute_not_exists(gaps)"
        values = {":gaps": {"N": str(fewer_gaps_than)}}
    try:
        ddb.put_item(TableName=table, Item=item, ConditionExpression=condition,
                     **({"ExpressionAttributeValues": values} if values else {}))
        return True
    except ClientError as err:
        if err.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise


def _s(value: object) -> dict[str, str]:
    return {"S": str(value)}


def latest_state(ddb: Any, table: str, cluster: str) -> dict[str, dict[str, str]]:
    """Every latest-state item of the cluster, across all query pages (a 2,000-node cluster passes 1 MB)."""
    state: dict[str, dict[str, str]] = {}
    params: dict[str, Any] = {"TableName": table, "KeyConditionExpression": "pk = :p",
                              "ExpressionAttributeValues": {":p": _s(f"LATEST#{cluster}")}}
    while True:
        out = ddb.query(**params)
        state.update({i["sk"]["S"]: {k: v["S"] for k, v in i.items() if "S" in v} for i in out.get("Items", [])})
        if not out.get("LastEvaluatedKey"):
            return state
        params["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def changes_against(result: Result, previous: dict[str, dict[str, str]]) -> list[str]:
    """What an on-call engineer must hear about: coverage lost or regained, a new alerting verdict, a FAIL."""
    changes = []
    if result.invariants_broken:  # a result that contradicts itself is said first: on-call must not act on it
        changes.append(f"SELF-CHECK FAILED ({len(result.invariants_broken)} invariant(s) broken, a gpuaudit bug): "
                       + _short("; ".join(result.invariants_broken)))
    for node in result.nodes:
        before = previous.get(f"NODE#{node.instance_id}", {})
        was = before.get("xid_status")
        if was and was != node.xid_status and "Not observable" in (was, node.xid_status):
            word = "lost" if node.xid_status == "Not observable" else "regained"
            changes.append(f"{node.instance_id}: coverage {word} ({was} → {node.xid_status})")
        elif not was and node.xid_status == "Not observable" and (node.gpu_count or 0) != 0:
            changes.append(f"{node.instance_id}: coverage Not observable")
        if node.verdict in ALERTING_VERDICTS and before.get("verdict") != node.verdict:
            changes.append(f"{node.instance_id}: new verdict {node.verdict} — {_short(node.verdict_evidence)}")
    for check in result.checks:
        if check.result == "FAIL" and previous.get(f"CHECK#{check.id}", {}).get("result") != "FAIL":
            changes.append(f"{check.id} {check.title}: FAIL — {_short(check.evidence)}")
    return changes


def _short(text: str | None, limit: int = 160) -> str:
    """On-call reads a phone: one line per change; the report carries the full evidence."""
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def alert_message(result: Result, changes: list[str], report_link: str | None = None) -> str:
    """One SNS/Chatbot message at any fleet size: at most ALERT_MAX_CHARS characters (the headline counts, the
    changes are listed while they fit, then counted); the report carries the rest."""
    head = [f"gpuaudit {result.mode} · {result.cluster.name} ({result.cluster.region})",
            _short(result.headline, ALERT_HEADLINE_CHARS), ""]
    tail = ["", f"Report: {report_link}"] if report_link else []
    listed = [f"- {_short(c, ALERT_CHANGE_CHARS)}" for c in changes]

    def text(shown: int) -> str:
        more = [f"- … and {len(listed) - shown} more (see the report)"] if shown < len(listed) else []
        return redact(alert_text("\n".join([*head, *listed[:shown], *more, *tail])), result.account_ids)

    shown = min(len(listed), ALERT_MAX_CHANGES)
    while shown and len(text(shown)) > ALERT_MAX_CHARS:
        shown -= 1
    return text(shown)[:ALERT_MAX_CHARS]


def chatbot_payload(result: Result, message: str) -> str:
    """AWS Chatbot custom-notification shape."""
    return json.dumps({"version": "1.0", "source": "custom", "content": {
        "textType": "client-markdown", "title": redact(f"gpuaudit: {result.cluster.name}", result.account_ids),
        "description": message}})


def write_and_alert(ddb: Any, table: str, sns: Any, topic_arn: str | None, result: Result,
                    now_epoch: int, retention_days: int = RETENTION_DAYS,
                    report_link: str | None = None) -> SinkOutcome:
    """`report_link`: where the HTML report is (no credentials in it); the alert's last line and the summary's."""
    outcome = SinkOutcome()
    audit_key = {"pk": _s(f"AUDIT#{result.audit_id}"), "sk": _s("SUMMARY")}
    gaps = len(result.visibility_gaps)
    recorded = ddb.get_item(TableName=table, Key=audit_key, ConsistentRead=True).get("Item")
    if recorded is not None:
        # Completeness is part of idempotency: the same window again is a duplicate, unless this result saw
        # more (fewer gaps) than the one recorded — a degraded early run never hides a complete later one.
        if gaps >= int(recorded.get("gaps", {}).get("N", "0")):
            outcome.duplicate = True
            return outcome
        outcome.superseded = True
    previous = latest_state(ddb, table, result.cluster.name)
    expires = _s(now_epoch + retention_days * 86400)
    for node in result.nodes:
        item = {"pk": _s(f"AUDIT#{result.audit_id}"), "sk": _s(f"NODE#{node.instance_id}"),
                "xid_status": _s(node.xid_status), "verdict": _s(node.verdict or "none"),
                "verdict_evidence": _s(redact(node.verdict_evidence or "", result.account_ids)), "expires_at": {"N": expires["S"]}}
        outcome.items_written += int(_put_new(ddb, table, {**item, "gaps": {"N": str(gaps)}},
                                              gaps if outcome.superseded else None))
    outcome.changes = changes_against(result, previous)
    for node in result.nodes:  # latest state per node: what the next audit compares against
        ddb.put_item(TableName=table, Item={"pk": _s(f"LATEST#{result.cluster.name}"), "sk": _s(f"NODE#{node.instance_id}"),
                                            "xid_status": _s(node.xid_status), "verdict": _s(node.verdict or "none"),
                                            "audit_id": _s(result.audit_id)})
        outcome.items_written += 1
    for check in result.checks:
        ddb.put_item(TableName=table, Item={"pk": _s(f"LATEST#{result.cluster.name}"), "sk": _s(f"CHECK#{check.id}"),
                                            "result": _s(check.result), "audit_id": _s(result.audit_id)})
        outcome.items_written += 1
    if outcome.changes and topic_arn:
        outcome.alert = alert_message(result, outcome.changes, report_link)
        sns.publish(TopicArn=topic_arn, Subject=f"gpuaudit: {result.cluster.name}"[:100],
                    Message=json.dumps({"default": outcome.alert, "chatbot": chatbot_payload(result, outcome.alert),
                                        # AWS Chatbot subscribes over HTTPS and renders only this shape
                                        "https": chatbot_payload(result, outcome.alert)}),
                    MessageStructure="json")
        outcome.published = True
    # The summary is the commit marker, written last: a crash before it makes a retry redo the writes and
    # the alert (at least once), never skip the alert. Two racing deliveries: the condition lets one win.
    summary = {**audit_key, "cluster": _s(result.cluster.name), "mode": _s(result.mode),
               "headline": _s(redact(result.headline, result.account_ids)), "window_start": _s(result.window.start.isoformat()),
               "window_end": _s(result.window.end.isoformat()), "expires_at": {"N": expires["S"]},
               "gaps": {"N": str(gaps)}}
    if report_link:
        summary["report_link"] = _s(redact(report_link, result.account_ids))
    if _put_new(ddb, table, summary, gaps if outcome.superseded else None):
        outcome.items_written += 1
    return outcome
