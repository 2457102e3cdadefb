"""Configuration read one way (issue #52 item 8): every step starts with `runtime.begin` or `runtime.settings`, which
validate the function's environment once (gpuaudit/settings.py `Settings.deployed`) and check the variables the step
needs. A missing or malformed variable fails the step in one sentence naming it, before any AWS call."""

from __future__ import annotations

from typing import Any

import pytest
from handlers import plan, record_failure, runtime, verdict
from lambda_harness import Account, LambdaContext, scheduled_event

from gpuaudit.settings import DEPLOYMENT_ENV, BadSetting, Settings

VERDICT_EVENT = {"request": {"cluster": "research-hp-slurm", "mode": "coverage"}, "evidence": {"inline": {}}}
FAILED_EVENT = {"cluster": "research-hp-slurm", "mode": "coverage",
                "failure": {"step": "Inventory", "error": "States.Timeout", "cause": None}}


def no_session() -> Any:
    pytest.fail("the step opened a session before its settings were valid")


@pytest.mark.parametrize(("handler", "event", "variable"), [
    (verdict, VERDICT_EVENT, "FINDINGS_TABLE"),
    (verdict, VERDICT_EVENT, "EVIDENCE_BUCKET"),
    (record_failure, FAILED_EVENT, "FINDINGS_TABLE"),
])
def test_a_step_missing_a_variable_it_needs_fails_naming_it_before_any_call(
        account: Account, monkeypatch: pytest.MonkeyPatch, handler: Any, event: dict[str, Any],
        variable: str) -> None:
    monkeypatch.delenv(variable)
    monkeypatch.setattr(handler, "session_factory", no_session)
    with pytest.raises(BadSetting, match=f"^environment variable {variable} is not set"):
        handler.handler(event, LambdaContext())


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("FINDING_RETENTION_DAYS", "ninety", "valid integer"),
    ("GPUAUDIT_HISTORY_DAYS", "0", "greater than 0"),
    ("GPUAUDIT_XID_CLASS_OVERRIDES", "31=oops", "'31=oops'"),
    ("GPUAUDIT_KUBE_READERS", "{not json", "not JSON"),
    ("GPUAUDIT_CLUSTER_LANES", "two", "valid integer"),
])
def test_a_malformed_variable_fails_the_step_naming_it(account: Account, monkeypatch: pytest.MonkeyPatch,
                                                       variable: str, value: str, said: str) -> None:
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(verdict, "session_factory", no_session)
    with pytest.raises(BadSetting) as raised:
        verdict.handler(VERDICT_EVENT, LambdaContext())
    assert str(raised.value).startswith(f"environment variable {variable}: ") and said in str(raised.value)


def test_a_malformed_audited_set_without_a_document_names_its_variable(account: Account,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEPLOYMENT_ENV)
    monkeypatch.setenv("GPUAUDIT_CLUSTERS", '["research-hp-slurm"')
    monkeypatch.setattr(plan, "session_factory", no_session)
    with pytest.raises(BadSetting, match="^environment variable GPUAUDIT_CLUSTERS: not JSON"):
        plan.handler(scheduled_event("2026-10-01T18:17:04Z"), LambdaContext())


def test_an_unreadable_deployment_document_names_its_variable(account: Account,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEPLOYMENT_ENV, "/no/such/deployment.json")
    monkeypatch.setattr(plan, "session_factory", no_session)
    with pytest.raises(BadSetting, match=f"^environment variable {DEPLOYMENT_ENV}: deployment document"):
        plan.handler(scheduled_event("2026-10-01T18:17:04Z"), LambdaContext())


def test_the_environment_is_validated_once_per_container(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step, and each read inside it (the AWS port, the member role), reads the one validated model."""
    runtime._settings_of.cache_clear()
    validated: list[int] = []
    real = Settings.deployed.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Settings], environ: Any, needs: Any = ()) -> Settings:
        validated.append(1)
        return real(cls, environ, needs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Settings, "deployed", classmethod(counted))
    targets = plan.handler(scheduled_event("2026-10-01T18:17:04Z"), LambdaContext())["targets"]
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-6750a1b2-0123456789abcdef01234567")  # Lambda's, per invocation
    plan.handler(scheduled_event("2026-10-01T19:17:04Z"), LambdaContext())
    assert targets and len(validated) == 1
    monkeypatch.setenv("GPUAUDIT_SCHEDULE_PERIOD_S", "900")  # a variable of the settings: read anew
    plan.handler(scheduled_event("2026-10-01T20:17:04Z"), LambdaContext())
    assert len(validated) == 2
    assert runtime.settings() is runtime.settings("FINDINGS_TABLE", "EVIDENCE_BUCKET")


def test_the_typed_settings_hold_what_the_stack_sets(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"GPUAUDIT_CLUSTER_LANES": "3", "GPUAUDIT_EXECUTION_BUDGET_S": "1800",
                        "GPUAUDIT_IN_FLIGHT_S": "5400", "GPUAUDIT_SCHEDULE_PERIOD_S": "900"}.items():
        monkeypatch.setenv(name, value)
    read = runtime.settings("FINDINGS_TABLE")
    assert (read.cluster_lanes, read.execution_budget_s, read.in_flight_s, read.schedule_period_s) == (3, 1800, 5400,
                                                                                                        900)
    assert read.audited.clusters == ["research-hp-slurm"]  # the deployment document the harness ships
    assert (read.bucket, read.table) == ("gpuaudit-evidence-test", "gpuaudit-findings-test")
