"""No overlapping work: each execution takes what fits its period, and never a cluster another one is auditing.

Hourly executions may overlap (the execution timeout, `cluster_audit_bound` plus Plan, exceeds the hour), and event
and Capacity-Block executions overlap them. Two rules keep them apart, both on the cluster's `AUDITED#<mode>` item
(handlers/rotation.py):

- **Fit the period.** Plan keeps, in rotation order (least recently audited first), only the targets the cluster Map
  can finish within the execution budget (GPUAUDIT_EXECUTION_BUDGET_S: the schedule period less Plan's timeout and a
  margin). It lays them on the Map's lanes (GPUAUDIT_CLUSTER_LANES, its MaxConcurrency) the way the Map starts them,
  each taking as long as that cluster's last audit took (`audit_s`, the Verdict's measure), or, when it has none, the
  upper quartile of the fleet's measures (NEW_CLUSTER_ESTIMATE_S before any); the first target that would end past the
  budget, or whose slim form would take Plan's output past MAX_TARGET_BYTES, and every one after it are deferred (named
  in `skipped`). Deferred clusters keep their older mark, so they lead the next period. A healthy fleet's execution so
  ends within its period, well before its timeout: the timeout alarm means something is wrong.
- **Claim what you audit.** Plan claims each kept target with a conditional write (`in_flight_by` = its execution,
  `in_flight_until` = now + GPUAUDIT_IN_FLIGHT_S, the execution timeout: no execution audits past it); a target
  another execution holds an unexpired claim on is skipped, named. MarkAudited (after Verdict or RecordFailure)
  removes the claim. A claim held by an execution that has ended (stopped, timed out, failed: Plan asks Step
  Functions, DescribeExecution of the holder) is taken over at once, so the next execution audits a stopped one's
  clusters; a holder whose status cannot be read is taken as still running, and its claim lapses at its expiry. A
  claim that cannot be written for another reason (throttled, denied) does not block the audit (the plan names it):
  two audits cost queries, a missed one the answer.

A console request is neither capped nor claimed: an operator asked for that audit, now.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpuaudit.model.timeutil import iso
from gpuaudit.settings import Settings
from handlers.models import AuditTarget
from handlers.rotation import AuditMark, Marks, audited_key
from handlers.targets import slim

# How long a cluster's audit is assumed to take before it has one measured: the upper quartile of the fleet's measured
# audits (a new cluster is most likely one like the others), or, before any is measured (a fresh deployment), 10
# minutes (a small cluster's audit takes 1-3: docs/BENCHMARKS.md). A new large one is measured by its first audit and
# laid out by that afterwards. With 10 minutes for every cluster, a fresh deployment of 210 clusters took 9 periods to
# audit each once; with the fleet's quartile from the second period on, 2.
NEW_CLUSTER_ESTIMATE_S = 600
# Plan's output stays under half of Step Functions' 256 KB whatever the fleet: the targets' slim JSON, measured as they
# are kept, takes at most 96 KB (a slim target is ~330 bytes with a 30-character name, ~600 with a 256-character one:
# 160 to 300 targets), and the skipped and gap notes are bounded apart (SKIPPED_NOTES). A byte bound, not a count: a
# count safe for 256-character names would defer a third of a fleet of ordinary names every period.
MAX_TARGET_BYTES = 96 * 1024


@dataclass(frozen=True)
class ExecutionShape:
    """What the stack tells Plan about the execution it plans (infra/functions.py sets the variables)."""

    lanes: int = 5  # the cluster Map's MaxConcurrency
    budget_s: int | None = None  # audit time per lane one execution may plan; None: no period to fit
    claim_s: int | None = None  # how long a claim holds (the execution timeout); None: no claims

    @classmethod
    def of(cls, settings: Settings) -> ExecutionShape:
        return cls(lanes=settings.cluster_lanes, budget_s=settings.execution_budget_s, claim_s=settings.in_flight_s)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ExecutionShape:
        """From a function's environment as the template sets it (tests/benchmarks): its three variables, typed by
        Settings; the deployment document it names is not read (it exists only under the deployed function)."""
        names = ("GPUAUDIT_CLUSTER_LANES", "GPUAUDIT_EXECUTION_BUDGET_S", "GPUAUDIT_IN_FLIGHT_S")
        return cls.of(Settings.model_validate({n: environ[n] for n in names if environ.get(n)}))


def new_cluster_estimate(marks: Marks) -> float:
    """What a never-measured cluster's audit is laid out at: the upper quartile of the measured ones, or
    NEW_CLUSTER_ESTIMATE_S when none is."""
    measured = sorted(m.audit_s for m in marks.values() if m.audit_s > 0)
    return float(measured[(3 * (len(measured) - 1)) // 4]) if measured else float(NEW_CLUSTER_ESTIMATE_S)


def audit_seconds(mark: AuditMark | None, estimate: float = NEW_CLUSTER_ESTIMATE_S) -> float:
    """How long the cluster's last audit took, or the estimate for one never measured."""
    return float(mark.audit_s) if mark is not None and mark.audit_s > 0 else estimate


def fit_period(targets: list[AuditTarget], marks: Marks, shape: ExecutionShape,
               max_bytes: int = MAX_TARGET_BYTES) -> tuple[list[AuditTarget], list[AuditTarget]]:
    """(kept, deferred): the targets, in order, the Map finishes within the budget on its lanes (list scheduling,
    as the Map starts an item whenever a lane frees up), whose slim JSON together takes at most `max_bytes`; the
    first always runs."""
    lanes = [0.0] * shape.lanes
    kept: list[AuditTarget] = []
    size, estimate = 0, new_cluster_estimate(marks)
    for i, target in enumerate(targets):
        start = heapq.heappop(lanes)
        end = start + audit_seconds(marks.get((target.request.cluster, target.request.mode)), estimate)
        size += len(slim(target).model_dump_json()) + 1  # the list's comma
        if kept and (size > max_bytes or (shape.budget_s is not None and end > shape.budget_s)):
            return kept, targets[i:]
        kept.append(target)
        heapq.heappush(lanes, end)
    return kept, []


class Holders:
    """Whether the execution holding a claim has ended (DescribeExecution, once per holder per Plan)."""

    ENDED = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}

    def __init__(self, sfn: Any) -> None:
        self.sfn, self.known = sfn, dict[str, bool]()

    def ended(self, holder: str) -> bool:
        if holder not in self.known:
            try:
                status = self.sfn.describe_execution(executionArn=holder)["status"]
            except ClientError as err:  # gone from Step Functions' history: ended; unreadable: taken as running
                self.known[holder] = err.response["Error"]["Code"] == "ExecutionDoesNotExist"
            except BotoCoreError:
                self.known[holder] = False
            else:
                self.known[holder] = status in self.ENDED
        return self.known[holder]


def claim(ddb: Any, table: str, targets: list[AuditTarget], execution: str, now: datetime,
          claim_s: int, holders: Holders | None = None) -> tuple[list[AuditTarget], list[str], list[str]]:
    """(targets this execution audits, skipped as another execution's, claims that could not be made)."""
    kept, skipped, failed = [], [], []
    epoch = int(now.timestamp())
    for target in targets:
        key = audited_key(target.request.cluster, target.request.mode)
        values = {":me": {"S": execution}, ":until": {"N": str(epoch + claim_s)}}
        try:
            ddb.update_item(
                TableName=table, Key=key, UpdateExpression="SET in_flight_by = :me, in_flight_until = :until",
                ConditionExpression="attribute_not_exists(in_flight_until) OR in_flight_until <= :now "
                                    "OR in_flight_by = :me",
                ExpressionAttributeValues={**values, ":now": {"N": str(epoch)}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as err:
            code = err.response["Error"]["Code"]
            holder = err.response.get("Item", {}).get("in_flight_by", {}).get("S", "")
            if code == "ConditionalCheckFailedException" and holder and holders is not None and \
                    holders.ended(holder) and _take_over(ddb, table, key, values, holder):
                kept.append(target)  # the holder ended without marking it (stopped, timed out): audited now
                continue
            if code == "ConditionalCheckFailedException":
                held = err.response.get("Item", {}).get("in_flight_until", {}).get("N")
                until = f" (its claim lapses at {iso(datetime.fromtimestamp(int(held), now.tzinfo))})" if held else ""
                skipped.append(f"{target.request.cluster}: a {target.request.mode} audit of it is running in another "
                               f"execution{until}; not audited twice")
                continue
            failed.append(f"{target.request.cluster}: in-flight claim not made ({code}); audited")
        except BotoCoreError as err:
            failed.append(f"{target.request.cluster}: in-flight claim not made ({type(err).__name__}); audited")
        kept.append(target)
    return kept, skipped, failed


def _take_over(ddb: Any, table: str, key: dict[str, Any], values: dict[str, Any], holder: str) -> bool:
    """The claim of an ended execution, taken if it still holds it (another Plan may have taken it first)."""
    try:
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET in_flight_by = :me, in_flight_until = :until",
                        ConditionExpression="in_flight_by = :ended",
                        ExpressionAttributeValues={**values, ":ended": {"S": holder}})
    except (ClientError, BotoCoreError):
        return False
    return True


# The skipped and gap notes of one plan, at most this many lines each kind (then one line saying how many more): a
# fleet whose every cluster another execution holds would otherwise write a line per cluster into Plan's output.
SKIPPED_NOTES = 20


def summarised(notes: list[str], kind: str) -> list[str]:
    """`notes`, at most SKIPPED_NOTES of them and a line counting the rest."""
    if len(notes) <= SKIPPED_NOTES:
        return notes
    return notes[:SKIPPED_NOTES] + [f"… and {len(notes) - SKIPPED_NOTES} more {kind} (the execution's log names them)"]


def deferred_note(deferred: list[AuditTarget], shape: ExecutionShape, recurring: bool = True) -> list[str]:
    if not deferred:
        return []
    names = ", ".join(t.request.cluster for t in deferred[:10]) + (", …" if len(deferred) > 10 else "")
    cap = f"{MAX_TARGET_BYTES // 1024} KB of targets (Step Functions' state size)"
    if not recurring:  # an event's audits: nothing re-plans them
        return [f"{len(deferred)} audits not planned: one execution plans at most {cap} — {names}"]
    budget = f"{shape.budget_s} s on each of {shape.lanes} lanes" if shape.budget_s is not None else "its cap"
    return [f"{len(deferred)} audits deferred to the next period (they lead it): past what one execution finishes "
            f"within {budget} or past {cap} — {names}"]
