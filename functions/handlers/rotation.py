"""No starved clusters: Plan orders the audits least recently finished first.

The cluster Map starts its children in the order of Plan's targets, a few at a time; an execution that reaches its
timeout stops the children still running and never starts the rest. In a fixed order the same tail clusters would
be cut every hour. The state machine records when each cluster's audit of a mode ended (MarkAudited, after Verdict
and after RecordFailure, a DynamoDB UpdateItem of the state machine itself, infra/workflow.py):

    pk `AUDITED#<mode>`, sk `<cluster>`: `audited_at` (the ISO time the audit ended)

and Plan reads that partition (one Query, paged) and puts never-audited clusters first, then the oldest. A cluster
cut off by the timeout keeps its older time and so leads the next execution: with N clusters of which an execution
finishes at least K, every cluster is audited within ceil(N / K) executions — within two periods while K ≥ N / 2.
An audit that failed counts as ended (recorded and alarmed by RecordFailure), so a cluster that always fails
cannot hold the front of the queue.

When the marks cannot be read, the order stays as configured and the plan names the gap.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from handlers.models import AuditTarget

AUDITED_PREFIX = "AUDITED#"


def last_audited(ddb: Any, table: str, mode: str) -> dict[str, str]:
    """Cluster -> ISO time its last audit of `mode` ended."""
    out: dict[str, str] = {}
    query: dict[str, Any] = {"TableName": table, "KeyConditionExpression": "pk = :pk",
                             "ExpressionAttributeValues": {":pk": {"S": f"{AUDITED_PREFIX}{mode}"}},
                             "ProjectionExpression": "sk, audited_at"}
    while True:
        page = ddb.query(**query)
        out.update({i["sk"]["S"]: i["audited_at"]["S"] for i in page.get("Items", []) if "audited_at" in i})
        if "LastEvaluatedKey" not in page:
            return out
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def least_recently_audited(ddb: Any, table: str, targets: list[AuditTarget]) -> tuple[list[AuditTarget], list[str]]:
    """`targets` never-audited first, then by when their last audit (of their mode) ended, oldest first; ties keep
    the planned order. (ordered targets, gaps)."""
    ends: dict[tuple[str, str], str] = {}
    for mode in sorted({t.request.mode for t in targets}):
        try:
            ends.update({(cluster, mode): at for cluster, at in last_audited(ddb, table, mode).items()})
        except (ClientError, BotoCoreError) as err:
            code = err.response["Error"]["Code"] if isinstance(err, ClientError) else type(err).__name__
            return targets, [f"audit order not read ({code}): clusters audited in the configured order, so an "
                             "execution that times out may leave the same clusters unaudited again"]
    return sorted(targets, key=lambda t: ends.get((t.request.cluster, t.request.mode), "")), []
