"""Where results go: the result and its reports (S3, `write_reports`), the findings table (DynamoDB) and the alert
topic (SNS).

Writes are idempotent: the audit's summary is put with `attribute_not_exists`, keyed by the
deterministic audit_id, so re-running the same audit window writes nothing new and
publishes no second alert. Alerts go out only when something changed against the
latest state kept per cluster and mode (`LATEST#<cluster>#<mode>`, its node items sharded over
`LATEST#<cluster>#<mode>#<shard>`), and an audit that read less than the one that recorded a state never
overwrites it. What changed, and so what alerts, is decided by rules/what_changed.py (pure); this module reads
the latest state, delivers and writes. Node rows are not written per node: the result JSON in S3 holds them. Only the
changed latest-state items are written, in batches (gpuaudit/writes/dynamo_batch.py): a first audit of 10,000 nodes
is 400 BatchWriteItem calls, an unchanged one none.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError

from gpuaudit.model.redaction import redact
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import iso
from gpuaudit.report import alert
from gpuaudit.report.alert import ALERT_MAX_CHARS, Change
from gpuaudit.report.html import render_html
from gpuaudit.rules.what_changed import StateWrite, compare
from gpuaudit.writes.dynamo_batch import batch_write, put_requests, retried, shard_of

__all__ = ["ALERT_MAX_CHARS", "Change", "alert_message", "write_and_alert"]
RETENTION_DAYS = 90


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


def alert_message(result: Result, changes: list[Change], report_link: str | None = None) -> str:
    """The alert text (report/alert.py)."""
    return alert.message(result, changes, report_link)


def _state_item(result: Result, write: StateWrite, expires: dict[str, str]) -> dict[str, Any]:
    """A latest-state item as the findings table keeps it: in its partition (a node's in its shard), every
    attribute a string, an expiry on a node gone from the cluster."""
    return {
        "pk": _s(latest_pk(result.cluster.name, result.mode, write.sk)),
        "sk": _s(write.sk),
        **{k: _s(v) for k, v in write.attrs.items()},
        **({"expires_at": {"N": expires["S"]}} if write.expires else {}),
    }


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


RESULTS_PREFIX = "results"


@dataclass(frozen=True)
class ReportObjects:
    """Where one audit's result and reports are in the evidence bucket: `results/<cluster>/<audit id>` and a suffix
    per format (the audit ID is deterministic: a rerun of the window names the same objects)."""

    base: str

    @classmethod
    def of(cls, result: Result) -> ReportObjects:
        return cls(f"{RESULTS_PREFIX}/{result.cluster.name}/{result.audit_id}")

    @property
    def json(self) -> str:
        return f"{self.base}.json"

    @property
    def markdown(self) -> str:
        return f"{self.base}.md"

    @property
    def html(self) -> str:
        return f"{self.base}.html"


def write_reports(s3: Any, bucket: str, result: Result, ddb: Any, table: str,
                  ids_files: dict[str, str] | None = None) -> ReportObjects:
    """The result JSON (every node's row: the findings table keeps only the summary and the latest state), the
    Markdown and the HTML report, and the IDs files its grouped commands read (`ids_files`: key → node IDs), to the
    evidence bucket. A rerun the findings table already holds as complete (a duplicate, `recorded_as`) writes none:
    it must not replace the complete result in S3 either."""
    objects = ReportObjects.of(result)
    if recorded_as(ddb, table, result) == "duplicate":
        return objects
    s3.put_object(Bucket=bucket, Key=objects.json, Body=result.to_json().encode(), ContentType="application/json")
    s3.put_object(Bucket=bucket, Key=objects.markdown, Body=result.report_markdown.encode(),
                  ContentType="text/markdown")
    s3.put_object(Bucket=bucket, Key=objects.html, Body=render_html(result).encode(),
                  ContentType="text/html; charset=utf-8")
    for key, ids in (ids_files or {}).items():
        s3.put_object(Bucket=bucket, Key=key, Body=ids.encode(), ContentType="text/plain; charset=utf-8")
    return objects


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
    comparison = compare(result, previous)
    outcome.changes, outcome.records = comparison.changes, comparison.records
    if outcome.records and topic_arn and _delivered(ddb, table, result, ALERT_SENT):
        outcome.already_published = True  # by an earlier attempt of this step: said once
    elif outcome.records and topic_arn:
        records = outcome.records
        outcome.alert = alert.message(result, records, report_link)
        outcome.subject = alert.subject(result, records)
        outcome.attributes = alert.message_attributes(result, records)
        chatbot = alert.chatbot_payload(result, records, outcome.alert, report_link)
        sns.publish(TopicArn=topic_arn, Subject=outcome.subject, MessageAttributes=outcome.attributes,
                    # AWS Chatbot subscribes over HTTPS and renders only the custom-notification shape; every
                    # channel (email, chat, SMS) carries the report link
                    Message=json.dumps({"default": outcome.alert, "email": outcome.alert, "chatbot": chatbot,
                                        "https": chatbot, "sms": alert.sms_text(result, records, report_link)}),
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
            items = [_state_item(result, write, expires) for write in comparison.writes]
            batch_write(ddb, table, put_requests(items))
            outcome.items_written += len(comparison.writes)
        else:
            outcome.latest_kept = True
    # The summary is the commit marker, written last: a crash before it makes a retry redo the writes and
    # the alert (at least once), never skip the alert. Two racing deliveries: the condition lets one win.
    summary = {**audit_key, "cluster": _s(result.cluster.name), "mode": _s(result.mode),
               "headline": _s(redact(result.headline, result.account_ids)),
               "window_start": _s(result.window.start.isoformat()),
               "window_end": _s(result.window.end.isoformat()), "expires_at": {"N": expires["S"]},
               "gaps": {"N": str(gaps)}, "nodes": {"N": str(len(result.nodes))}}
    if report_link:
        summary["report_link"] = _s(redact(report_link, result.account_ids))
    if result_key:
        summary["result_key"] = _s(result_key)
    if _put_new(ddb, table, summary, gaps if outcome.superseded else None):
        outcome.items_written += 1
    return outcome


def write_failure(ddb: Any, table: str, item: dict[str, Any]) -> None:
    """A cluster's audit that did not finish (the deployed RecordFailure step): its `FAILED#<cluster>` item beside
    the findings, built by the step (account IDs redacted there). One plain put, as before: throttling past
    botocore's retries reaches the step, which the state machine retries."""
    ddb.put_item(TableName=table, Item=item)
