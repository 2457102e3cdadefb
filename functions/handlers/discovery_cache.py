"""Discovery at most once per period: the region's clusters, kept in the findings table between triggers.

ParallelCluster discovery reads every live instance tagged `parallelcluster:cluster-name` in the region (EC2 has
no cheaper way to list them: DescribeInstances returns whole instances, ~6 ms of parsing per p5 instance). Done on
every trigger, a burst of node events or Capacity-Block warnings repeated that scan per event. Plan keeps what the
first trigger of a period discovered:

    pk `DISCOVERY`, sk `<tag key>=<tag value>` (or `*`): `period` (epoch second the period starts), `clusters`
    (the names), `expires_at` (the table's TTL, a day later)

and any later trigger of the same period (the trigger's own time, floored to GPUAUDIT_SCHEDULE_PERIOD_S) reads it
instead of discovering. A discovery with a gap (a source that could not be listed) is not kept: the next trigger
tries again. An item that cannot be read or written costs a discovery, never the audit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from handlers.targets import DiscoveryTag

DAY_S = 86_400


def key(tag: DiscoveryTag | None) -> dict[str, dict[str, str]]:
    return {"pk": {"S": "DISCOVERY"}, "sk": {"S": f"{tag.key}={tag.value}" if tag else "*"}}


def period_start(time: datetime, period_s: int) -> int:
    epoch = int(time.timestamp())
    return epoch - epoch % max(1, period_s)


def kept_discovery(ddb: Any, table: str, tag: DiscoveryTag | None, period: int) -> list[str] | None:
    """This period's discovery, or None when none is kept (or it cannot be read)."""
    try:
        item = ddb.get_item(TableName=table, Key=key(tag), ConsistentRead=True).get("Item")
    except (ClientError, BotoCoreError):
        return None
    if not item or item.get("period", {}).get("N") != str(period):
        return None
    return [name["S"] for name in item.get("clusters", {}).get("L", [])]


def keep_discovery(ddb: Any, table: str, tag: DiscoveryTag | None, period: int, clusters: list[str]) -> None:
    try:
        ddb.put_item(TableName=table, Item={**key(tag), "period": {"N": str(period)},
                                            "clusters": {"L": [{"S": c} for c in clusters]},
                                            "expires_at": {"N": str(period + DAY_S)}})
    except (ClientError, BotoCoreError):
        return  # the next trigger discovers again
