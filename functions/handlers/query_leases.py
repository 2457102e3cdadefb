"""The account-wide Logs Insights budget (collectors/query_budget.AccountBudget) as leases in the findings table.

Hourly, node-event and Capacity-Block executions overlap, and each sized its own concurrency to the whole quota.
Every CollectLogs invocation of every execution asks this one item before a StartQuery:

    pk `QUERY-BUDGET`, sk `LEASES`: `leases` {lease name: epoch second it expires}, `version` (a counter)

A lease is granted by a conditional write on the version read (optimistic: two invocations that read the same
version cannot both write), and only while fewer than `slots` leases are unexpired; expired leases are removed in
the same write. A lease is short: it expires LEASE_S (5 minutes) after its grant or its last renewal, and every
CollectLogs pass (one Wait apart) renews the leases of its queries still running. So an execution stopped, a
CollectLogs killed or caught, holds no slot more than 5 minutes after its last pass — never past the collection's
deadline plus 5 minutes, since no pass renews after the deadline (it stops what still runs). Its query may still run
at AWS (up to 60 minutes) after the lease lapses: the account's quota then refuses what exceeds it, which the
collectors wait on like a full budget. Released when the query's final status is read or it was stopped (a
conditional remove, so releasing twice is harmless).

Lease names are `<holder>:<query>`, the holder one per (execution, cluster, log batch) (collect_logs.holder_of):
a CollectLogs retried after a kill asks for the same names and is granted them without a second slot.

A budget that cannot be read or written (throttled, denied) does not hold the audit back: the query is started
and the account's own quota still refuses what exceeds it (the caller then waits in the state machine).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from gpuaudit.collectors.query_budget import LEASE_S

logger = Logger(child=True)

KEY = {"pk": {"S": "QUERY-BUDGET"}, "sk": {"S": "LEASES"}}
CONTENDED_TRIES = 5  # writes lost to another invocation's, before this one waits in the state machine instead


class TableBudget:
    """`slots` leases of the account's concurrent queries, shared through the findings table."""

    def __init__(self, ddb: Any, table: str, slots: int, now: Callable[[], float] = time.time,
                 lease_s: int = LEASE_S) -> None:
        if slots < 1:
            raise ValueError(f"a query budget needs at least one slot, got {slots}")
        self.ddb, self.table, self.slots, self.now, self.lease_s = ddb, table, slots, now, lease_s
        self.unavailable: list[str] = []  # error codes of reads/writes that failed (the query ran without a lease)

    def acquire(self, lease: str) -> bool:
        for _ in range(CONTENDED_TRIES):
            try:
                item = self.ddb.get_item(TableName=self.table, Key=KEY, ConsistentRead=True).get("Item", {})
            except (ClientError, BotoCoreError) as err:
                return self._without_budget(err)
            now = int(self.now())
            leases = {name: int(v["N"]) for name, v in item.get("leases", {}).get("M", {}).items()}
            if leases.get(lease, 0) > now:
                return True  # already held (an invocation replaying its collection)
            live = {name for name, expires in leases.items() if expires > now}
            if len(live) >= self.slots:
                return False
            try:
                self._write(item, lease, now, [name for name in leases if name not in live and name != lease])
            except ClientError as err:
                if err.response["Error"]["Code"] == "ConditionalCheckFailedException":
                    time.sleep(random.uniform(0.0, 0.05))  # another invocation wrote first: read again
                    continue
                return self._without_budget(err)
            except BotoCoreError as err:
                return self._without_budget(err)
            return True
        return False  # contended: wait in the state machine and ask again

    def _write(self, item: dict[str, Any], lease: str, now: int, expired: list[str]) -> None:
        names = {"#new": lease, **{f"#x{i}": name for i, name in enumerate(expired)}}
        values: dict[str, Any] = {":expires": {"N": str(now + self.lease_s)}, ":one": {"N": "1"}}
        update = "SET leases.#new = :expires, version = version + :one"
        if "version" in item:
            condition = "version = :seen"
            values[":seen"] = item["version"]
        else:  # the first lease of the account: the item is created with an empty map
            update = "SET leases = :first, version = :one"
            values = {":first": {"M": {lease: {"N": str(now + self.lease_s)}}}, ":one": {"N": "1"}}
            names, condition = {}, "attribute_not_exists(pk)"
        if expired and "version" in item:
            update += " REMOVE " + ", ".join(f"leases.#x{i}" for i in range(len(expired)))
        self.ddb.update_item(TableName=self.table, Key=KEY, UpdateExpression=update, ConditionExpression=condition,
                             ExpressionAttributeValues=values, **({"ExpressionAttributeNames": names} if names else {}))

    def renew(self, leases: list[str]) -> None:
        """Each lease runs another `lease_s` from now (a conditional write per lease). One reclaimed after it lapsed
        (a pass later than LEASE_S) is asked for again like a new one; with every slot taken, the query runs on
        unleased and the account's quota is the bound. The version moves, so a grant computed from an earlier read,
        which may have counted the lease as expired, is refused and reads again."""
        expires = {"N": str(int(self.now()) + self.lease_s)}
        for lease in leases:
            try:
                self.ddb.update_item(TableName=self.table, Key=KEY, UpdateExpression="SET leases.#l = :expires "
                                     "ADD version :one", ConditionExpression="attribute_exists(leases.#l)",
                                     ExpressionAttributeNames={"#l": lease},
                                     ExpressionAttributeValues={":expires": expires, ":one": {"N": "1"}})
            except ClientError as err:
                if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    self._without_budget(err)
                    return
                self.acquire(lease)
            except BotoCoreError as err:
                self._without_budget(err)
                return

    def release(self, lease: str) -> None:
        try:
            # The version moves too, so a grant computed from a read taken before this release is refused and
            # read again (it would otherwise write the released lease back).
            self.ddb.update_item(TableName=self.table, Key=KEY, UpdateExpression="REMOVE leases.#l ADD version :one",
                                 ConditionExpression="attribute_exists(leases.#l)",
                                 ExpressionAttributeNames={"#l": lease}, ExpressionAttributeValues={":one": {"N": "1"}})
        except ClientError as err:
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":  # not held: already released
                self._without_budget(err)
        except BotoCoreError as err:
            self._without_budget(err)

    def _without_budget(self, err: ClientError | BotoCoreError) -> bool:
        code = err.response["Error"]["Code"] if isinstance(err, ClientError) else type(err).__name__
        self.unavailable.append(code)
        logger.warning("query budget not readable or writable; the query runs without a lease", extra={"error": code})
        return True
