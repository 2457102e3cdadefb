"""No starved clusters: Plan orders the audits least recently finished first.

The cluster Map starts its children in the order of Plan's targets, a few at a time; an execution that reaches its
timeout stops the children still running and never starts the rest. In a fixed order the same tail clusters would
be cut every hour. The state machine records when each cluster's audit of a mode ended (MarkAudited, after Verdict
and after RecordFailure, a DynamoDB UpdateItem of the state machine itself, infra/workflow.py):

    pk `AUDITED#<mode>`, sk `<cluster>`: `audited_at` (the ISO time the audit ended)

and Plan reads that partition (one Query, paged) and puts never-audited clusters first, then the oldest. A cluster
cut off by the timeout keeps its older time and so leads the next execution: with N clusters of which an execution
finishes at least K, every cluster is audited within ceil(N / K) executions — within two periods while K ≥ N / 2.
A failed audit (recorded and alarmed by RecordFailure; MarkFailedAudit writes `failed_at` and counts `failures`)
keeps the cluster's last audited time once, so a cluster hit by one transient failure (a killed or timed-out step)
leads the next execution and is audited within the period after it, not two periods later; from its second failure
in a row it takes its turn by the failure's time, so a cluster that always fails cannot hold the front of the queue.
MarkAudited clears both.

When the marks cannot be read, the order stays as configured and the plan names the gap.

The same item holds what Plan needs to keep executions apart and within their period (handlers/execution_share.py):
`audit_s` (how long that audit took, from its start in Inventory to its Verdict, on the handlers' clock) and, while
an execution is auditing the cluster, `in_flight_by` / `in_flight_until` (its claim, removed by the same MarkAudited
write).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from handlers.models import AuditTarget

AUDITED_PREFIX = "AUDITED#"


def audited_key(cluster: str, mode: str) -> dict[str, dict[str, str]]:
    """The item MarkAudited writes (infra/workflow.py builds the same key with States.Format)."""
    return {"pk": {"S": f"{AUDITED_PREFIX}{mode}"}, "sk": {"S": cluster}}


@dataclass(frozen=True)
class AuditMark:
    """One cluster's `AUDITED#<mode>` item: when its last audit ended and how long it took (who audits it now is
    claimed and read by handlers/execution_share.py on the item itself)."""

    audited_at: str = ""  # ISO; "" never audited
    audit_s: int = 0  # how long it took; 0 not measured (a failed audit keeps the last measure)
    failed_at: str = ""  # ISO: when its last audit failed, "" when the last one completed
    failures: int = 0  # failed audits since the last completed one

    @property
    def turn(self) -> str:
        """Where the cluster stands in the rotation: its last audit's time, or, from the second failure in a row,
        the last failure's (one failure is retried first; a cluster that keeps failing takes its turn)."""
        return max(self.audited_at, self.failed_at) if self.failures >= 2 else self.audited_at


Marks = dict[tuple[str, str], AuditMark]  # (cluster, mode) -> its mark


def audit_marks(ddb: Any, table: str, mode: str) -> dict[str, AuditMark]:
    """Cluster -> its mark for `mode` (one Query, paged)."""
    out: dict[str, AuditMark] = {}
    query: dict[str, Any] = {"TableName": table, "KeyConditionExpression": "pk = :pk",
                             "ExpressionAttributeValues": {":pk": {"S": f"{AUDITED_PREFIX}{mode}"}},
                             "ProjectionExpression": "sk, audited_at, audit_s, failed_at, failures"}
    while True:
        page = ddb.query(**query)
        for item in page.get("Items", []):
            out[item["sk"]["S"]] = AuditMark(
                audited_at=item.get("audited_at", {}).get("S", ""), audit_s=int(item.get("audit_s", {}).get("N", "0")),
                failed_at=item.get("failed_at", {}).get("S", ""), failures=int(item.get("failures", {}).get("N", "0")))
        if "LastEvaluatedKey" not in page:
            return out
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def read_marks(ddb: Any, table: str, targets: list[AuditTarget]) -> tuple[Marks | None, list[str]]:
    """The marks of every mode the targets name; None (and the gap) when they cannot be read."""
    marks: Marks = {}
    for mode in sorted({t.request.mode for t in targets}):
        try:
            marks.update({(cluster, mode): m for cluster, m in audit_marks(ddb, table, mode).items()})
        except (ClientError, BotoCoreError) as err:
            code = err.response["Error"]["Code"] if isinstance(err, ClientError) else type(err).__name__
            return None, [f"audit order not read ({code}): clusters audited in the configured order, so an "
                          "execution that times out may leave the same clusters unaudited again"]
    return marks, []


def ordered_by_marks(targets: list[AuditTarget], marks: Marks) -> list[AuditTarget]:
    """Never-audited first, then by their turn (when their last audit of their mode ended, or failed again: AuditMark
    .turn), oldest first; ties keep the planned order."""
    return sorted(targets, key=lambda t: marks.get((t.request.cluster, t.request.mode), AuditMark()).turn)
