"""The fault matrix (issue #13): every read operation each mode makes, on every shipped world, failing one at a
time with each fault kind. Every run must answer (a Result, or the 'cluster cannot be read' exit for the calls
the audit cannot start without), name the gap, and keep every invariant of rules/consistency.py.

The operations are not listed by hand: a clean run of each (world, mode) records the calls it makes, so a new
read added to a collector is in the matrix the day it is added.

Each combination is a whole audit as the CLI runs it, with a backend holding no state from the last one (no
query, no fault counted); what the combinations of one world share is only what never differs between them: the
botocore session (its parsed service models and exception classes) and its clients (building them was ~60 % of
the matrix's time; the backend answers through the session's handlers, so a client holds no world state), with
each client's retry quota made new for every audit, as a fresh client's would be, and the world's data. The
(world, mode) pairs are spread over the machine's cores."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.retries import quota, standard

from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.devtools.demo import demo_request
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import World, load_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Result
from gpuaudit.pipeline import collect, run_audit
from gpuaudit.rules import consistency
from gpuaudit.rules import judge as judge_module

WORLDS = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "worlds"
MODES = ("coverage", "incident", "preflight")
# One error per kind a caller sees: denied, throttled past every retry, unavailable, expired credentials,
# endpoint unreachable; Logs Insights queries also end Failed or Timeout.
ERRORS = ("AccessDeniedException", "ThrottlingException", "ServiceUnavailable", "ExpiredTokenException",
          "EndpointConnectionError")
QUERY_ENDINGS = ("Failed", "Timeout")
# Without these the audit has no cluster to audit: the CLI exits 3 ("the account could not be read").
CLUSTER_READS = {("sagemaker", "DescribeCluster"), ("sagemaker", "ListClusters"), ("ec2", "DescribeInstances")}


def shipped_audits() -> Iterator[tuple[World, AuditRequest]]:
    for audit in json.loads((WORLDS / "demo.json").read_text())["audits"]:
        world = load_world(WORLDS / audit["world"])
        for mode in MODES:
            yield world, demo_request({**audit, "mode": mode})  # with its scope: --instances, --log-group…


class WorldSession:
    """One world's botocore session, wired to one backend that each audit gets back empty: the world with only
    that audit's fault, no query running, no fault counted (everything WorldBackend keeps between calls)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.backend = WorldBackend(world)
        self.session: boto3.Session = self.backend.session()
        self.clients: dict[str, Any] = {}  # Aws's own client cache, kept across this world's audits

    def aws(self, fault: dict[str, Any] | None = None) -> Aws:
        fresh = WorldBackend(dataclasses.replace(self.world, faults=[fault] if fault else []))
        for f in dataclasses.fields(WorldBackend):  # every field, so one added later is reset too
            setattr(self.backend, f.name, getattr(fresh, f.name))
        for checker in _RETRY_QUOTAS:  # a client's one state that lives across calls: its standard-mode retry quota
            checker._quota = quota.RetryQuota()
        return Aws(session=self.session, region=self.world.region, clock=lambda: self.world.now,
                   sleep=self.backend.sleep, monotonic=self.backend.monotonic, _clients=self.clients)


_RETRY_QUOTAS: list[standard.RetryQuotaChecker] = []  # every client's in this process, made new per audit


def _record_retry_quotas(monkeypatch: pytest.MonkeyPatch) -> None:
    built = standard.RetryQuotaChecker.__init__

    def init(self: standard.RetryQuotaChecker, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **kwargs)
        _RETRY_QUOTAS.append(self)

    monkeypatch.setattr(standard.RetryQuotaChecker, "__init__", init)


def faults_for(service: str, operation: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for error in ERRORS:
        yield error, {"service": service, "operation": operation, "error": error, "message": f"injected {error}"}
    if operation == "GetQueryResults":
        for status in QUERY_ENDINGS:
            yield f"query {status}", {"service": service, "operation": operation, "status": status}


def audit(aws: Aws, world: World, request: AuditRequest) -> Result | None:
    """The pipeline as the CLI runs it, judged without the test-wide strictness (this test collects every
    broken invariant itself, to print them all); None where the CLI would exit 3."""
    try:
        evidence = collect(aws, request)
    except CallFailed:
        return None
    return judge_module.judge(evidence, judge_module.JudgeConfig.from_request(request), generated_at=world.now)


def matrix_of(world: World, request: AuditRequest) -> tuple[int, list[str]]:
    """One (world, mode): its clean run, then each of its read operations failing with each fault kind."""
    runs, wrong = 0, []
    name = world.source.split("/")[-1]
    worlds = WorldSession(world)
    clean = run_audit(worlds.aws(), request)
    if clean.invariants_broken:
        wrong.append(f"{name} {request.mode} with no fault: {clean.invariants_broken}")
    operations = sorted({(c.service, c.operation) for c in clean.calls})
    for service, operation in operations:
        for kind, fault in faults_for(service, operation):
            runs += 1
            case = f"{name} {request.mode} {service} {operation} {kind}"
            try:
                result = audit(worlds.aws(fault), world, request)
            except Exception as exc:  # a traceback is the one outcome never allowed
                wrong.append(f"{case}: raised {type(exc).__name__}: {exc}")
                continue
            if result is None:
                if (service, operation) not in CLUSTER_READS:
                    wrong.append(f"{case}: no result (exit 3) for a call the audit can do without")
                continue
            if result.invariants_broken:
                wrong.append(f"{case}: {'; '.join(result.invariants_broken)}")
            named = [g for g in result.visibility_gaps if operation in g or service in g]
            if not named and kind not in ("ThrottlingException",):
                wrong.append(f"{case}: the gap is not named")
    return runs, wrong


_AUDITS: list[tuple[World, AuditRequest]] = []  # read before the workers fork: they inherit it


def _matrix_at(index: int) -> tuple[int, list[str]]:
    return matrix_of(*_AUDITS[index])


def test_every_read_failing_one_at_a_time_still_answers_names_the_gap_and_keeps_every_invariant(
        capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(judge_module, "check_consistency", consistency.check_consistency)  # collect, don't raise
    _record_retry_quotas(monkeypatch)
    _AUDITS[:] = shipped_audits()
    workers = min(2, os.cpu_count() or 1)
    # Forked after the patch above, so each worker judges as this process does; largest-first is not needed:
    # the pairs are handed out one at a time as workers free up.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        outcomes = list(pool.map(_matrix_at, range(len(_AUDITS))))
    runs = sum(n for n, _ in outcomes)
    wrong = [w for _, found in outcomes for w in found]
    with capsys.disabled():
        print(f"\nfault matrix: {runs} combinations run over {len(_AUDITS)} (world, mode) pairs in {workers} "
              f"process(es), {len(wrong)} wrong")
    assert runs > 300
    assert not wrong, "\n".join(wrong[:40]) + f"\n… {len(wrong)} wrong of {runs}"
