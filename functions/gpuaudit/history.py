"""Fleet memory stores (issue #18): the product's own record of earlier audits, per node and PCI bus.

Two implementations of `model.history.HistoryStore`, chosen by the caller, never by the rules:

* `SqliteHistory` — the CLI's local history (`--history DIR`, standard-library sqlite3), one file per DIR.
* `DynamoHistory` — the deployed auditor's findings table, read once per cluster: a snapshot of each node's
  latest span (`HISTSNAP#<cluster>`), and closed spans sharded over `HIST#<cluster>#<shard>` with
  `sk = <audit time>#<instance>#<audit id>`, so the look-back is one key range per shard (never a Scan); spans
  are cut after `MAX_SPAN`, so the range `[since - MAX_SPAN, until]` sees every span that reaches `since`.
  Items expire with the table's TTL (`expires_at`, the findings' retention); a quiet span is ~350 bytes.

Reads fail closed: any error is `HistoryUnreadable` carrying a typed Gap (scope "history"); the audit goes on
and says recurrence across audits is Not checked. Writes fold merged spans (model.history.merged) into each node's
latest (model.history.fold_latest), so re-running an audit writes nothing new and a less complete run never
replaces a complete one.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
import zlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import TypeAdapter

from gpuaudit.collectors.aws import GAP_KINDS
from gpuaudit.dynamo_batch import (
    Backoff,
    ItemTooLarge,
    WritesNotDone,
    batch_write,
    delete_requests,
    put_requests,
    retried,
    shard_of,
)
from gpuaudit.model.evidence import Evidence, Gap, GapKind
from gpuaudit.model.history import (
    CLUSTER_GONE,
    MAX_SPAN,
    HistoryRead,
    HistorySpan,
    HistoryStore,
    HistoryXid,
    closed_out,
    distinct,
    fold_latest,
    latest_spans,
    merged,
)
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import iso, parse_time
from gpuaudit.rules.history import actions_by_node, entries_for
from gpuaudit.rules.reboots import reboots_by_node
from gpuaudit.sinks import DYNAMODB_THREADS

SQLITE_FILE = "gpuaudit-history.sqlite3"


class HistoryUnreadable(Exception):
    """The store could not be read (or written): the audit goes on with this named gap."""

    def __init__(self, gap: Gap) -> None:
        super().__init__(gap.prose())
        self.gap = gap


def history_gap(kind: GapKind, service: str, operation: str, target: str, code: str | None,
                message: str | None) -> Gap:
    return Gap(kind=kind, service=service, operation=operation, target=target, error_code=code,
               error_message=(message or "")[:300] or None, scope="history",
               unseen="earlier audits not read: recurrence of a hardware-class Xid across audits (and a REPLACE not "
                      "acted on) is Not checked; this audit's Xids are judged on its own logs alone")


def _xids_json(xids: Iterable[HistoryXid]) -> str:
    return json.dumps([[x.code, x.signal, x.pci, iso(x.first), iso(x.last)] for x in xids], separators=(",", ":"))


def _xids_from(text: str) -> list[HistoryXid]:
    return [HistoryXid(code=c, signal=s, pci=p, first=parse_time(f), last=parse_time(last))
            for c, s, p, f, last in json.loads(text or "[]")]


def _times_json(times: Iterable[datetime]) -> str:
    return json.dumps([iso(t) for t in times])


def _times_from(text: str) -> list[datetime]:
    return [parse_time(t) for t in json.loads(text or "[]")]


# --------------------------------------------------------------------------- SQLite (the CLI)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS span (
    cluster TEXT NOT NULL, instance_id TEXT NOT NULL, audit_time TEXT NOT NULL, audit_id TEXT NOT NULL,
    last_audit_id TEXT NOT NULL, through TEXT NOT NULL, audits INTEGER NOT NULL, mode TEXT NOT NULL,
    verdict TEXT, xid_status TEXT NOT NULL, xids TEXT NOT NULL, reboots TEXT NOT NULL, launch_time TEXT,
    gaps INTEGER NOT NULL, closed TEXT, done TEXT, done_said TEXT,
    PRIMARY KEY (cluster, instance_id, audit_time, audit_id));
"""
_COLUMNS = ("cluster", "instance_id", "audit_time", "audit_id", "last_audit_id", "through", "audits", "mode",
            "verdict", "xid_status", "xids", "reboots", "launch_time", "gaps", "closed", "done", "done_said")
_ADDED = ("closed", "done", "done_said")  # columns a history from an earlier version lacks (added on open)


class SqliteHistory:
    """`--history DIR`: one SQLite file in DIR. Opened per call: the CLI is one process, one audit at a time."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / SQLITE_FILE

    @property
    def name(self) -> str:
        return f"sqlite {self.path}"

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path)
        db.execute(_SCHEMA)
        present = {row[1] for row in db.execute("PRAGMA table_info(span)")}
        for column in _ADDED:  # a history written before #33 (closed) or #37 (done)
            if column not in present:
                db.execute(f"ALTER TABLE span ADD COLUMN {column} TEXT")
        return db

    def _gap(self, operation: str, exc: Exception) -> HistoryUnreadable:
        return HistoryUnreadable(history_gap("unavailable", "history", operation, str(self.path),
                                             type(exc).__name__, str(exc)))

    def read(self, cluster: str, instance_ids: Sequence[str] | None, since: datetime,
             until: datetime) -> HistoryRead:
        try:
            db = self._connect()
            try:
                rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM span WHERE cluster = ? AND audit_time >= ? "
                                  "AND audit_time <= ? AND through >= ?",
                                  (cluster, iso(since - MAX_SPAN), iso(until), iso(since))).fetchall()
            finally:
                db.close()
            wanted = set(instance_ids) if instance_ids is not None else None
            spans = [_span_from(dict(zip(_COLUMNS, row, strict=True))) for row in rows
                     if wanted is None or row[1] in wanted]
        except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
            raise self._gap("read", exc) from None
        return HistoryRead(store=self.name, since=since, until=until, spans=spans, items_read=len(rows), requests=1)

    def write(self, spans: Sequence[HistorySpan], retention_days: int, now: datetime) -> int:
        """Insert or extend; an existing span is replaced only by a later `through`, or the same one with fewer
        gaps. Spans older than the retention are deleted (the table's TTL does this in DynamoDB)."""
        try:
            db = self._connect()
            written = 0
            with db:
                for s in spans:
                    values = _row_of(s)
                    cur = db.execute(
                        f"INSERT INTO span ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
                        "ON CONFLICT (cluster, instance_id, audit_time, audit_id) DO UPDATE SET "
                        + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS[4:])
                        + " WHERE excluded.through > span.through OR (excluded.through = span.through AND "
                          "excluded.gaps < span.gaps)", values)
                    written += cur.rowcount
                db.execute("DELETE FROM span WHERE through < ?", (iso(now - timedelta(days=retention_days)),))
            db.close()
            return written
        except (sqlite3.Error, OSError) as exc:
            raise self._gap("write", exc) from None


def _row_of(s: HistorySpan) -> tuple[Any, ...]:
    return (s.cluster, s.instance_id, iso(s.audit_time), s.audit_id, s.last_audit_id, iso(s.through), s.audits,
            s.mode, s.verdict, s.xid_status, _xids_json(s.xids), _times_json(s.reboots),
            iso(s.launch_time) if s.launch_time else None, s.gaps, s.closed, s.done, s.done_said)


def _span_from(row: dict[str, Any]) -> HistorySpan:
    return HistorySpan(cluster=row["cluster"], instance_id=row["instance_id"], audit_id=row["audit_id"],
                       audit_time=parse_time(row["audit_time"]), last_audit_id=row["last_audit_id"],
                       through=parse_time(row["through"]), audits=int(row["audits"]), mode=row["mode"],
                       verdict=row["verdict"] or None, xid_status=row["xid_status"], xids=_xids_from(row["xids"]),
                       reboots=_times_from(row["reboots"]),
                       launch_time=parse_time(row["launch_time"]) if row["launch_time"] else None,
                       gaps=int(row["gaps"]), closed=row["closed"] or None, done=row["done"] or None,
                       done_said=row["done_said"] or None)


# --------------------------------------------------------------------------- DynamoDB (deployed)


HISTORY_SHARDS = 16  # closed spans of a cluster spread over HIST#<cluster>#00..15: no partition takes every write
SNAPSHOT_PIECE_BYTES = 350_000  # a snapshot piece stays well inside DynamoDB's 400 KB item limit
SNAPSHOT_READS = 3  # a snapshot replaced while it was read (pieces deleted under the reader) is read again
SNAPSHOT_WRITES = 3  # another audit switched the snapshot first: read it again and fold this audit's spans into it
_SPANS = TypeAdapter(list[HistorySpan])


def history_pk(cluster: str, instance_id: str) -> str:
    """The partition of a node's closed spans: its cluster's shard, by instance ID."""
    return f"HIST#{cluster}#{shard_of(instance_id, HISTORY_SHARDS):02d}"


def snapshot_pk(cluster: str) -> str:
    return f"HISTSNAP#{cluster}"


def snapshot_chunks(latest: dict[str, HistorySpan]) -> list[bytes]:
    """Each node's latest span as compressed JSON, cut in pieces that each fit one item."""
    data = zlib.compress(_SPANS.dump_json(sorted(latest.values(), key=lambda s: s.instance_id),
                                          exclude_defaults=True), 6)
    return [data[i:i + SNAPSHOT_PIECE_BYTES] for i in range(0, len(data), SNAPSHOT_PIECE_BYTES)] or [b""]


@dataclass
class Snapshot:
    """Each node's latest span as one audit read it, and the generation it came from (None: no snapshot yet)."""

    generation: str | None = None
    latest: dict[str, HistorySpan] = field(default_factory=dict)
    pieces: int = 0
    items: int = 0
    requests: int = 0
    # The head names a generation whose pieces are gone (found `found` of `pieces`): each node's latest span is
    # lost. The read says so (a named gap); the write repairs it (a new generation, switched from this one).
    lost: bool = False
    found: int = 0


class DynamoHistory:
    """The findings table, read once per cluster and written only where something changed (issue #34 item 3).

    * Each node's latest span — the one the next audit extends — lives in the cluster's snapshot: zlib-compressed
      JSON cut in pieces of at most 350 KB (`HISTSNAP#<cluster>` / `GEN#<generation>#<n>`), named by a head item
      (`HISTSNAP#<cluster>` / `HEAD`). One GetItem and one Query read it; an audit writes a new generation in a few
      BatchWriteItem calls and switches the head only if it still names the generation it read, so two audits
      never mix their snapshots (the one that lost reads the new one and folds its spans in again).
    * A span that is no longer a node's latest (its state changed, or it reached MAX_SPAN) is closed: written once
      to `HIST#<cluster>#<shard>` / `<audit time>#<instance>#<audit id>` by BatchWriteItem, never rewritten. The
      look-back reads each shard with one key range (`since - MAX_SPAN` .. `until`), paged.

    At 10,000 quiet nodes an hourly audit reads in ~20 calls and writes in ~3 (before: 10,000 Query, 10,000
    PutItem)."""

    def __init__(self, ddb: Any, table: str, threads: int = DYNAMODB_THREADS, backoff: Backoff | None = None) -> None:
        self.ddb, self.table, self.threads, self.backoff = ddb, table, threads, backoff
        self._snapshots: dict[str, Snapshot] = {}  # as read by this audit: the write folds into it

    @property
    def name(self) -> str:
        return f"dynamodb {self.table}"

    def _gap(self, operation: str, target: str, exc: Exception) -> HistoryUnreadable:
        code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else type(exc).__name__
        message = exc.response.get("Error", {}).get("Message", "") if isinstance(exc, ClientError) else str(exc)
        return HistoryUnreadable(history_gap(GAP_KINDS.get(code, "not-read"), "dynamodb", operation, target, code,
                                             message))

    # -- the snapshot of latest spans ---------------------------------------------------------------
    def _read_snapshot(self, cluster: str) -> Snapshot:
        pk, requests = {"S": snapshot_pk(cluster)}, 0
        missing: str | None = None  # a generation the head named whose pieces were not all there
        for _ in range(SNAPSHOT_READS):
            head = retried(lambda: self.ddb.get_item(TableName=self.table, Key={"pk": pk, "sk": {"S": "HEAD"}},
                                                     ConsistentRead=True), self.backoff).get("Item")
            requests += 1
            if head is None:
                return Snapshot(requests=requests)
            generation, pieces = head["generation"]["S"], int(head["pieces"]["N"])
            items, calls = self._query(pk, f"GEN#{generation}#")
            requests += calls
            if len(items) == pieces:
                in_order = sorted(items, key=lambda i: i["sk"]["S"])
                data = zlib.decompress(b"".join(bytes(i["spans"]["B"]) for i in in_order))
                latest = {s.instance_id: s for s in _SPANS.validate_json(data)}
                return Snapshot(generation, latest, pieces, items=len(items) + 1, requests=requests)
            if generation == missing:
                # Named twice with its pieces gone: not a switch under the reader (an audit writes the pieces
                # before it points the head at them, and deletes the old ones after), an orphaned head.
                return Snapshot(generation, {}, pieces, items=len(items) + 1, requests=requests, lost=True,
                                found=len(items))
            missing = generation
        raise HistoryUnreadable(history_gap("not-read", "dynamodb", "Query", f"{self.table} {pk['S']}", "Replaced",
                                            f"the snapshot was replaced {SNAPSHOT_READS} times while it was read"))

    def _query(self, pk: dict[str, str], prefix: str) -> tuple[list[dict[str, Any]], int]:
        params: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True,
                                  "KeyConditionExpression": "pk = :p AND begins_with(sk, :g)",
                                  "ExpressionAttributeValues": {":p": pk, ":g": {"S": prefix}}}
        items, calls = list[dict[str, Any]](), 0
        while True:
            out = retried(lambda: self.ddb.query(**params), self.backoff)
            calls += 1
            items += out.get("Items", [])
            if not out.get("LastEvaluatedKey"):
                return items, calls
            params["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def _snapshot(self, cluster: str) -> Snapshot:
        if cluster not in self._snapshots:
            try:
                self._snapshots[cluster] = self._read_snapshot(cluster)
            except (ClientError, BotoCoreError, KeyError, ValueError, zlib.error) as exc:
                raise self._gap("Query", f"{self.table} {snapshot_pk(cluster)}", exc) from None
        return self._snapshots[cluster]

    # -- closed spans --------------------------------------------------------------------------------
    def _closed(self, cluster: str, shard: int, since: datetime, until: datetime) -> tuple[list[HistorySpan], int, int]:
        params: dict[str, Any] = {
            "TableName": self.table, "KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
            "ExpressionAttributeValues": {":p": {"S": f"HIST#{cluster}#{shard:02d}"},
                                          ":a": {"S": iso(since - MAX_SPAN)}, ":b": {"S": iso(until) + "#~"}}}
        spans, items, requests = [], 0, 0
        while True:
            out = retried(lambda: self.ddb.query(**params), self.backoff)
            requests += 1
            items += len(out.get("Items", []))
            spans += [_span_of_item(cluster, None, i) for i in out.get("Items", [])]
            if not out.get("LastEvaluatedKey"):
                return spans, items, requests
            params["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def read(self, cluster: str, instance_ids: Sequence[str] | None, since: datetime,
             until: datetime) -> HistoryRead:
        """The cluster's spans in the look-back, once for all its nodes: the snapshot, then every shard of closed
        spans side by side. `instance_ids` narrows what is returned, not what is read."""
        self._snapshots.pop(cluster, None)  # read afresh: a write after this read folds into what was read
        snapshot = self._snapshot(cluster)
        if snapshot.lost:  # kept as read: this audit's write replaces the orphaned head (the repair)
            raise HistoryUnreadable(history_gap(
                "not-read", "dynamodb", "Query", f"{self.table} {snapshot_pk(cluster)}", "SnapshotLost",
                f"the snapshot head names generation {snapshot.generation}, of which {snapshot.found} of "
                f"{snapshot.pieces} piece(s) exist: each node's latest span is lost; this audit writes a new snapshot"))
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(self.threads, HISTORY_SHARDS))) as pool:
                parts = list(pool.map(lambda n: self._closed(cluster, n, since, until), range(HISTORY_SHARDS)))
        except (ClientError, BotoCoreError, KeyError, ValueError) as exc:
            raise self._gap("Query", f"{self.table} HIST#{cluster}#…", exc) from None
        wanted = set(instance_ids) if instance_ids is not None else None
        # A span closed by an audit that then lost the snapshot switch may be in both: the latest copy wins.
        spans = distinct([*(s for p in parts for s in p[0]), *snapshot.latest.values()])
        return HistoryRead(store=self.name, since=since, until=until,
                           spans=[s for s in spans if (wanted is None or s.instance_id in wanted)
                                  and s.through >= since and since - MAX_SPAN <= s.audit_time <= until],
                           items_read=snapshot.items + sum(p[1] for p in parts),
                           requests=snapshot.requests + sum(p[2] for p in parts))

    # -- writes --------------------------------------------------------------------------------------
    def write(self, spans: Sequence[HistorySpan], retention_days: int, now: datetime) -> int:
        """This audit's spans folded into each node's latest: the spans they close written once (BatchWriteItem),
        then a new snapshot if anything in it changed. How many spans were new or changed; a write DynamoDB still
        refuses after the retries is a named gap (the next audit would not see this one), never dropped."""
        expires = str(int(now.timestamp()) + retention_days * 86400)
        oldest = now - timedelta(days=retention_days)
        by_cluster: dict[str, list[HistorySpan]] = {}
        for span in spans:
            by_cluster.setdefault(span.cluster, []).append(span)
        written = 0
        for cluster, given in by_cluster.items():
            try:
                written += self._write_cluster(cluster, given, expires, oldest)
            except (ClientError, BotoCoreError, WritesNotDone, ItemTooLarge) as exc:
                raise self._gap("BatchWriteItem", f"{self.table} HIST#{cluster}#…", exc) from None
        return written

    def _write_cluster(self, cluster: str, given: list[HistorySpan], expires: str, oldest: datetime) -> int:
        for _ in range(SNAPSHOT_WRITES):
            snapshot = self._snapshot(cluster)
            latest, closed, changed = fold_latest(snapshot.latest, given)
            latest = {iid: s for iid, s in latest.items() if s.through >= oldest}  # past the retention: gone
            if closed:
                batch_write(self.ddb, self.table, put_requests([history_item(s, expires) for s in closed]),
                            self.backoff)
            if latest == snapshot.latest:
                return changed
            if self._switch(cluster, snapshot, latest, expires):
                return changed
            self._snapshots.pop(cluster, None)  # another audit switched first: read its snapshot, fold again
        raise WritesNotDone(self.table, [], f"the snapshot of {cluster} kept being replaced by other audits")

    def _switch(self, cluster: str, snapshot: Snapshot, latest: dict[str, HistorySpan], expires: str) -> bool:
        """Write `latest` as a new generation, then point the head at it if it still names the one read; the old
        generation's pieces are deleted after (a reader that finds them gone reads the head again)."""
        pk = {"S": snapshot_pk(cluster)}
        generation = uuid.uuid4().hex[:16]
        pieces = [{"pk": pk, "sk": {"S": f"GEN#{generation}#{n:05d}"}, "spans": {"B": chunk},
                   "expires_at": {"N": expires}} for n, chunk in enumerate(snapshot_chunks(latest))]
        batch_write(self.ddb, self.table, put_requests(pieces), self.backoff)
        head = {"pk": pk, "sk": {"S": "HEAD"}, "generation": {"S": generation}, "pieces": {"N": str(len(pieces))},
                "nodes": {"N": str(len(latest))}, "expires_at": {"N": expires}}
        condition = ("attribute_not_exists(pk)" if snapshot.generation is None else "generation = :seen")
        try:
            retried(
                lambda: self.ddb.put_item(
                    TableName=self.table,
                    Item=head,
                    ConditionExpression=condition,
                    **(
                        {"ExpressionAttributeValues": {":seen": {"S": snapshot.generation}}}
                        if snapshot.generation
                        else {}
                    ),
                ),
                self.backoff,
            )
        except (ClientError, BotoCoreError) as exc:
            # At least once: a put DynamoDB applied and then answered with a 5xx or a timeout is sent again (by
            # botocore) and meets its own head. Whatever the error, the head read back says whose write stands.
            if self._head_generation(pk) != generation:
                lost_race = isinstance(exc, ClientError) and \
                    exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"
                if not lost_race:
                    raise  # not applied, as far as can be read: a named gap; the new pieces wait for the TTL
                self._drop_generation(pk, generation, len(pieces))
                return False
        if snapshot.generation is not None:
            self._drop_generation(pk, snapshot.generation, snapshot.pieces)
        self._snapshots[cluster] = Snapshot(generation, latest, len(pieces))
        return True

    def _head_generation(self, pk: dict[str, str]) -> str | None:
        """The generation the head names now (consistent read): after a failed switch, whose write stands."""
        head = retried(lambda: self.ddb.get_item(TableName=self.table, Key={"pk": pk, "sk": {"S": "HEAD"}},
                                                 ConsistentRead=True), self.backoff).get("Item")
        return head["generation"]["S"] if head else None

    def _drop_generation(self, pk: dict[str, str], generation: str, pieces: int) -> None:
        """A generation no head names any more. Left to the table's TTL if DynamoDB refuses the deletes: no reader
        follows it (the head names another), so nothing is lost, it only waits for the TTL."""
        keys = [{"pk": pk, "sk": {"S": f"GEN#{generation}#{n:05d}"}} for n in range(pieces)]
        with suppress(WritesNotDone, ClientError):
            batch_write(self.ddb, self.table, delete_requests(keys), self.backoff)


def history_item(s: HistorySpan, expires: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": history_pk(s.cluster, s.instance_id)},
        "sk": {"S": f"{iso(s.audit_time)}#{s.instance_id}#{s.audit_id}"},
        "last_audit_id": {"S": s.last_audit_id}, "through": {"S": iso(s.through)}, "audits": {"N": str(s.audits)},
        "mode": {"S": s.mode}, "xid_status": {"S": s.xid_status}, "gaps": {"N": str(s.gaps)},
        "expires_at": {"N": expires}}
    if s.verdict:
        item["verdict"] = {"S": s.verdict}
    if s.xids:
        item["xids"] = {"S": _xids_json(s.xids)}
    if s.reboots:
        item["reboots"] = {"S": _times_json(s.reboots)}
    if s.launch_time:
        item["launch_time"] = {"S": iso(s.launch_time)}
    if s.closed:
        item["closed"] = {"S": s.closed}
    if s.done:
        item["done"] = {"S": s.done}
    if s.done_said:
        item["done_said"] = {"S": s.done_said}
    return item


def _span_of_item(cluster: str, instance_id: str | None, item: dict[str, Any]) -> HistorySpan:
    """A closed span from its item (`sk` = `<audit time>#<instance>#<audit id>`)."""
    when, named, audit = item["sk"]["S"].split("#", 2)
    instance_id = instance_id or named

    def text(name: str) -> str | None:
        return item[name]["S"] if name in item else None

    return HistorySpan(cluster=cluster, instance_id=instance_id, audit_id=audit, audit_time=parse_time(when),
                       last_audit_id=item["last_audit_id"]["S"], through=parse_time(item["through"]["S"]),
                       audits=int(item["audits"]["N"]), mode=item["mode"]["S"], verdict=text("verdict"),
                       xid_status=item["xid_status"]["S"], xids=_xids_from(text("xids") or "[]"),
                       reboots=_times_from(text("reboots") or "[]"),
                       launch_time=parse_time(lt) if (lt := text("launch_time")) else None,
                       gaps=int(item["gaps"]["N"]), closed=text("closed"),
                       done=text("done"),  # type: ignore[arg-type]  # pydantic checks the word: else ValueError, a gap
                       done_said=text("done_said"))


# --------------------------------------------------------------------------- in the pipeline


def read_into(store: HistoryStore, evidence: Evidence, lookback_days: int) -> Evidence:
    """The cluster's history for this audit's nodes, `lookback_days` back from the audit's own time; a store that
    cannot be read leaves `history` None and a named gap (recurrence across audits then Not checked)."""
    since = evidence.now - timedelta(days=lookback_days)
    try:
        read = store.read(evidence.cluster.name, [n.instance_id for n in evidence.nodes], since, evidence.now)
    except HistoryUnreadable as exc:
        return evidence.model_copy(update={"gaps": [*evidence.gaps, exc.gap], "history": None})
    return evidence.model_copy(update={"history": read})


def close_gone_cluster(store: HistoryStore, cluster: str, now: datetime, lookback_days: int,
                       retention_days: int) -> int:
    """The cluster no longer exists: every node it had in the look-back gets a closing span (CLUSTER_GONE) instead
    of its last verdict standing frozen. Returns how many nodes were closed; 0 when the history knew the cluster
    not (a name never audited is only an unknown cluster)."""
    read = store.read(cluster, None, now - timedelta(days=lookback_days), now)
    closing = closed_out(read, f"gone-{iso(now)}", now, CLUSTER_GONE)
    if closing:
        store.write(closing, retention_days, now)
    return len(closing)


def record(store: HistoryStore, result: Result, evidence: Evidence, retention_days: int) -> int:
    """After judging: this audit's entry per node, folded into each node's latest span when nothing changed."""
    entries = entries_for(result, evidence, reboots_by_node(evidence))
    return store.write(merged(entries, latest_spans(evidence.history)), retention_days, evidence.now)


# --------------------------------------------------------------------------- `gpuaudit history`


def render_history(everything: HistoryRead, cluster: str, fmt: str, days: int, *,
                   verdicts: frozenset[str] = frozenset(), open_only: bool = False, changed: bool = False,
                   show_all: bool = False) -> str:
    """What `gpuaudit history` prints (md, json, html, table) from every span read of a cluster: the look-back is `days`
    before its latest audit; the actions are judged on every span read (rules.history.actions_by_node), so one given
    before the look-back and never done is still open."""
    from gpuaudit.report import history as report

    until = max((s.through for s in everything.spans), default=everything.until)
    view = report.HistoryView(since=until - timedelta(days=days), until=until, days=days, verdicts=verdicts,
                              open_only=open_only, changed_only=changed, show_all=show_all,
                              actions=actions_by_node(everything.spans))
    render = {"md": report.render_markdown, "json": report.render_json, "html": report.render_html,
              "table": report.render_table}[fmt]
    return render(everything, cluster, view)
