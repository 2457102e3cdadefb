"""The SYNTHESIZED state machine definition, executed by moto's Step Functions interpreter (moto
5.2.5's real ASL interpreter), each Lambda task routed in-process to its handler module, against
a shared world whose `now` freezes every handler's clock.

It runs a scheduled audit end to end, shows that a collector that raises still yields a SUCCEEDED
execution with a `Not checked` gap in the result, and ties the task states to the domain
functions the CLI runs so the two paths cannot drift apart.
"""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path[:0] = [str(Path(__file__).parents[1] / "handlers"), str(Path(__file__).parents[1] / "infra")]

import moto  # noqa: E402
from cdk_synth import Synthesized, state_machine_definition, synthesize, task_states  # noqa: E402
from lambda_harness import (  # noqa: E402
    HANDLER_MODULES,
    PCLUSTER_WORLD,
    TABLE,
    Account,
    LambdaContext,
    capacity_block_warning,
    hyperpod_node_health_event,
    scheduled_event,
    world_account,
)
from moto.awslambda_simple.models import LambdaSimpleBackend  # noqa: E402

from gpuaudit import pipeline  # noqa: E402
from gpuaudit.collectors.aws import Aws  # noqa: E402
from gpuaudit.writes.history import SqliteHistory  # noqa: E402
from gpuaudit.writes.sinks import latest_pk  # noqa: E402

MOTO_PIN = "5.2.5"  # the interpreter behaviour these tests were written against (pyproject.toml pins it)
SFN_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
DOMAIN_STEPS = ("read_inventory", "log_batches", "collect_logs", "finish_collection", "judge_with_history",
                "read_history", "judge", "record_history", "finalize")
VERDICT_SEQUENCE = ["read_history", "judge", "record_history", "finalize"]
SCHEDULED = scheduled_event("2026-10-01T18:17:04Z")


@pytest.fixture(scope="module")
def synth() -> Synthesized:
    return synthesize()


@dataclass
class Machine:
    account: Account
    client: Any
    arn: str
    handler_of: dict[str, str]  # function logical ID -> handler module

    def run(self, event: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        execution = self.client.start_execution(stateMachineArn=self.arn, name=uuid.uuid4().hex,
                                                input=json.dumps(event))["executionArn"]
        deadline = time.monotonic() + timeout_s
        while (described := self.client.describe_execution(executionArn=execution))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "execution still RUNNING"
            time.sleep(0.05)
        return described  # type: ignore[no-any-return]


def route_to_handlers(modules: dict[str, Any]) -> Callable[..., bytes]:
    """LambdaSimpleBackend.invoke, replaced: run the handler in-process, errors as Lambda reports them."""

    def invoke(_backend: Any, function_name: str, _qualifier: Any, body: Any, _headers: Any,
               response_headers: dict[str, str]) -> bytes:
        module = modules[function_name.rsplit(":", 1)[-1]]
        try:
            return json.dumps(module.handler(json.loads(body), LambdaContext(function_name=module.__name__))).encode()
        except Exception as exc:  # what the Lambda runtime does with an unhandled exception
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}).encode()

    return invoke


@contextmanager
def deployed(synth: Synthesized, monkeypatch: pytest.MonkeyPatch, **world: Any) -> Iterator[Machine]:
    functions = synth.resources("AWS::Lambda::Function")
    handler_of = {logical_id: f["Properties"]["Handler"].rsplit(".", 1)[0] for logical_id, f in functions.items()}
    modules = {logical_id: sys.modules[name] for logical_id, name in handler_of.items()}
    assert set(modules.values()) == set(HANDLER_MODULES)
    with world_account(monkeypatch, mock_config=SFN_CONFIG, **world) as account:
        for f in functions.values():  # the query deadline and budget the stack configures (plain values)
            for name, value in f["Properties"].get("Environment", {}).get("Variables", {}).items():
                if name.startswith("GPUAUDIT_QUERY_") and isinstance(value, str):
                    monkeypatch.setenv(name, value)
        monkeypatch.setattr(LambdaSimpleBackend, "invoke", route_to_handlers(modules))
        client = account.session.client("stepfunctions")
        arn = client.create_state_machine(name="gpuaudit",
                                          definition=json.dumps(for_moto(state_machine_definition(synth))),
                                          roleArn="arn:aws:iam::123456789012:role/gpuaudit-state-machine")
        yield Machine(account, client, arn["stateMachineArn"], handler_of)


def for_moto(definition: dict[str, Any]) -> dict[str, Any]:
    """moto 5.2.5's ASL parser refuses `ToleratedFailurePercentage` (valid ASL for a Distributed Map, set so one
    cluster's failure never aborts the others). It changes nothing when every cluster succeeds, and the
    tests that fail a cluster assert on that cluster's own result, so it is dropped for the interpreter only;
    tests/infra pins it in the synthesized template."""
    text = json.dumps(definition)
    return with_table(json.loads(re.sub(r',\s*"ToleratedFailurePercentage":\s*\d+', "", text)))


def with_table(definition: dict[str, Any]) -> dict[str, Any]:
    """The state machine's own DynamoDB tasks (MarkAudited) on the test account's findings table: CloudFormation
    resolves the table's Ref to its name, the synthesized text holds the logical ID."""
    for states in _state_maps(definition):
        for state in states.values():
            if state["Type"] == "Task" and ":states:::dynamodb:" in state["Resource"]:
                state["Parameters"]["TableName"] = TABLE
    return definition


def _state_maps(definition: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack = [definition]
    while stack:
        states = stack.pop()["States"]
        yield states
        stack += [s.get("ItemProcessor") or s.get("Iterator") for s in states.values()
                  if s["Type"] == "Map" and (s.get("ItemProcessor") or s.get("Iterator"))]


def audits(described: dict[str, Any]) -> list[dict[str, Any]]:
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    return json.loads(described["output"])["audits"]  # type: ignore[no-any-return]


@dataclass
class Spied:
    calls: list[tuple[str, str]] = field(default_factory=list)  # (calling module, domain function)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in DOMAIN_STEPS:
            real = getattr(pipeline, name)

            def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                self.calls.append((sys._getframe(1).f_globals["__name__"], _name))
                return _real(*args, **kwargs)

            monkeypatch.setattr(pipeline, name, spy)


@dataclass
class ScheduledRun:
    described: dict[str, Any]
    result: dict[str, Any]
    findings: list[dict[str, Any]]
    cli_result: dict[str, Any]
    deployed_calls: list[tuple[str, str]]
    cli_calls: list[tuple[str, str]]
    handler_of: dict[str, str]


@pytest.fixture(scope="module")
def scheduled_run(synth: Synthesized, tmp_path_factory: pytest.TempPathFactory) -> ScheduledRun:
    """One scheduled execution of hyperpod-xid31-app-error (research-hp-slurm), then the CLI on the same audit."""
    with pytest.MonkeyPatch.context() as monkeypatch, deployed(synth, monkeypatch) as machine:
        deployed_spy, cli_spy = Spied(), Spied()
        deployed_spy.install(monkeypatch)
        described = machine.run(SCHEDULED)
        (audit,) = audits(described)
        result = machine.account.read_json(audit["result"]["json"])
        findings = machine.account.findings()
        monkeypatch.undo()
        cli_spy.install(monkeypatch)
        world = machine.account.world
        request = pipeline.AuditRequest.model_validate(json.loads(described["output"])["targets"][0]["request"])
        # Both with a history, empty before this first audit: the findings table's, and the CLI's --history DIR
        cli = pipeline.run_audit(Aws(session=machine.account.backend.session(), region=world.region,
                                     clock=lambda: world.now), request,
                                 history=SqliteHistory(tmp_path_factory.mktemp("history")))
        return ScheduledRun(described, result, findings, json.loads(cli.to_json()), deployed_spy.calls,
                            cli_spy.calls, machine.handler_of)


def test_moto_is_pinned_to_the_interpreter_these_tests_expect() -> None:
    assert moto.__version__ == MOTO_PIN
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert re.search(rf'"moto\[[^\]]*\]=={re.escape(MOTO_PIN)}"', pyproject)


def test_a_scheduled_audit_runs_end_to_end_with_findings_in_dynamodb(scheduled_run: ScheduledRun) -> None:
    (audit,) = audits(scheduled_run.described)
    assert audit["audited"] and audit["cluster"] == "research-hp-slurm" and audit["mode"] == "coverage"
    assert audit["window"] == {"start": "2026-09-30T18:00:00Z", "end": "2026-10-01T18:00:00Z", "source": "schedule"}
    assert audit["not_checked"] == [] and audit["xid_status"] == {"Measured": 1, "No HMA detections": 1,
                                                                  "Not observable": 1}
    keys = {(i["pk"], i["sk"]) for i in scheduled_run.findings}
    assert (f"AUDIT#{audit['audit_id']}", "SUMMARY") in keys
    assert (latest_pk("research-hp-slurm", "coverage", "NODE#i-0cc3fc1626e53a130"), "NODE#i-0cc3fc1626e53a130") in keys
    # every node's row is in the result JSON the summary names, not an item per node
    assert not any(pk.startswith("AUDIT#") and sk.startswith("NODE#") for pk, sk in keys)
    assert ("AUDITED#coverage", "research-hp-slurm") in keys  # MarkAudited: the next plan's order (rotation.py)


def test_the_deployed_result_is_the_cli_result(scheduled_run: ScheduledRun) -> None:
    deployed, cli = scheduled_run.result, scheduled_run.cli_result
    assert deployed["window"]["source"] == "schedule" and cli["window"]["source"] == "user"
    for key in ("audit_id", "cluster", "headline", "confidence", "nodes", "branches", "checks", "visibility_gaps",
                "actions", "resources", "calls", "generated_at"):
        assert deployed[key] == cli[key], key


def test_each_task_state_calls_the_domain_functions_the_cli_calls_in_the_same_order(synth: Synthesized,
                                                                                  scheduled_run: ScheduledRun) -> None:
    tasks = task_states(state_machine_definition(synth))
    modules = [scheduled_run.handler_of[state["Parameters"]["FunctionName"].rsplit(":", 1)[-1]] for _, state in tasks]
    assert [name for name, _ in tasks] == ["Plan", "Inventory", "CollectLogs", "Finish", "Verdict"]
    per_task = [[fn for caller, fn in scheduled_run.deployed_calls if caller == module] for module in modules]
    assert per_task == [[], ["read_inventory", "log_batches"], ["collect_logs"], ["finish_collection"],
                        ["judge_with_history"]]
    # the verdict sequence is the pipeline's, written once: the Verdict step calls it, never its steps
    inside = [fn for caller, fn in scheduled_run.deployed_calls if caller == "gpuaudit.pipeline"]
    assert inside == VERDICT_SEQUENCE
    assert [fn for _, fn in scheduled_run.deployed_calls] == [*sum(per_task, []), *VERDICT_SEQUENCE]
    assert [fn for _, fn in scheduled_run.cli_calls] == [fn for _, fn in scheduled_run.deployed_calls]
    assert {caller for caller, _ in scheduled_run.cli_calls} == {"gpuaudit.pipeline"}


def test_a_collector_that_raises_still_succeeds_with_the_gap_in_the_result(synth: Synthesized,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*_args: Any, **_kwargs: Any) -> Any:
        raise ConnectionError("Logs Insights endpoint unreachable")

    with deployed(synth, monkeypatch) as machine:
        monkeypatch.setattr(pipeline, "collect_logs", unreachable)
        (audit,) = audits(machine.run(SCHEDULED))
        result = machine.account.read_json(audit["result"]["json"])
        findings = machine.account.findings()
    (gap,) = audit["not_checked"]
    assert gap.startswith("Not checked: step CollectLogs failed for log groups /aws/")
    assert "(ConnectionError: Logs Insights endpoint unreachable)" in gap and gap in result["visibility_gaps"]
    assert not [n for n in result["nodes"] if n["xid_status"] == "Measured"]  # nothing proven without the logs
    assert any(i["sk"] == "SUMMARY" for i in findings)


def test_a_failed_finish_is_still_judged_and_recorded(synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("control plane collector crashed")

    with deployed(synth, monkeypatch) as machine:
        monkeypatch.setattr(pipeline, "finish_collection", crash)
        (audit,) = audits(machine.run(SCHEDULED))
    (gap,) = audit["not_checked"]
    assert gap.startswith("Not checked: step Finish failed (RuntimeError: control plane collector crashed)")
    assert audit["audited"] and audit["findings"]["written"] > 0


def test_an_inventory_that_fails_leaves_the_cluster_not_checked_not_the_execution_failed(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    with deployed(synth, monkeypatch) as machine:
        (audit,) = audits(machine.run({"cluster": "decommissioned-cluster", "mode": "coverage"}))
    assert audit["audited"] is False and audit["cluster"] == "decommissioned-cluster"
    assert (audit["failure"]["step"], audit["failure"]["error"]) == ("Inventory", "UnknownCluster")


def test_a_malformed_console_input_fails_the_execution_with_the_validation_error(
        synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    with deployed(synth, monkeypatch) as machine:
        described = machine.run({"cluster": "research-hp-slurm", "mode": "bogus"})
    assert described["status"] == "FAILED" and described["error"] == "InvalidEvent"
    assert "mode: Input should be 'coverage', 'incident' or 'preflight'" in described["cause"]


def findings_of_audits(machine: Machine) -> list[dict[str, Any]]:
    """The table without the state machine's own bookkeeping — the audit-order marks (MarkAudited records when each
    run ended, a rerun included) and the query budget's lease item (its version moves with every grant): what a rerun
    must not write again is the audit's own items."""
    return [i for i in machine.account.findings() if not i["pk"].startswith(("AUDITED#", "QUERY-BUDGET"))]


def test_rerunning_the_same_window_writes_and_alerts_nothing_new(synth: Synthesized,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    denied = {"service": "logs", "operation": "StartQuery", "error": "AccessDeniedException",
              "message": "not authorized to perform: logs:StartQuery"}
    with deployed(synth, monkeypatch, faults=[denied]) as machine:
        (first,) = audits(machine.run(SCHEDULED))
        items, alerts = findings_of_audits(machine), machine.account.published()
        (second,) = audits(machine.run(SCHEDULED))
        assert (findings_of_audits(machine), machine.account.published()) == (items, alerts)
    assert first["alert_published"] and len(alerts) == 1
    assert "coverage Not observable" in alerts[0]["message"]["default"]
    assert second["audit_id"] == first["audit_id"]
    assert second["findings"] == {"written": 0, "duplicate": True} and not second["alert_published"]


def test_event_triggers_run_incident_and_preflight_audits(synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    with deployed(synth, monkeypatch) as machine:
        (incident,) = audits(machine.run(hyperpod_node_health_event("research-hp-slurm", "2026-10-01T16:42:31Z")))
    assert (incident["mode"], incident["window"]["source"], incident["window"]["end"]) == \
        ("incident", "event", "2026-10-01T16:42:00Z")
    with deployed(synth, monkeypatch, world_path=PCLUSTER_WORLD, clusters=("llm-pretrain-b200",)) as machine:
        (preflight,) = audits(machine.run(capacity_block_warning("cr-0107f80e222f82876", "2026-10-01T17:50:12Z")))
    assert preflight["audited"] and preflight["mode"] == "preflight" and preflight["cluster"] == "llm-pretrain-b200"


def _states_with(definition: dict[str, Any], name: str) -> dict[str, Any]:
    """The state map (top level or a Map's item processor) that holds `name`."""
    stack = [definition]
    while stack:
        states = stack.pop()["States"]
        if name in states:
            return states  # type: ignore[no-any-return]
        stack += [s.get("ItemProcessor") or s.get("Iterator") for s in states.values()
                  if s["Type"] == "Map" and (s.get("ItemProcessor") or s.get("Iterator"))]
    raise AssertionError(f"no state {name}")


def test_running_queries_are_waited_for_by_the_state_machine_not_a_lambda(synth: Synthesized) -> None:
    """CollectLogs → (pending?) → Wait → CollectLogs: the loop the handler's `pending` output drives."""
    states = _states_with(state_machine_definition(synth), "CollectLogs")
    assert states["CollectLogs"]["Next"] == "QueriesStillRunning"
    (rule,) = states["QueriesStillRunning"]["Choices"]
    assert (rule["Variable"], rule["BooleanEquals"], rule["Next"]) == ("$.pending", True, "WaitForQueries")
    assert states["WaitForQueries"] == {"Type": "Wait", "Seconds": 10, "Next": "CollectLogs"}
    assert states[states["QueriesStillRunning"]["Default"]]["Type"] == "Pass"
