"""One settings model (issue #12): the environment is read in one place, by the CLI and the handlers alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.rules.context import BadOverride
from gpuaudit.settings import Settings

WORLDS = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "worlds"
WORLD = WORLDS / "hyperpod-xid31-app-error.world.json"


def test_the_deployed_environment_reads_into_typed_settings() -> None:
    settings = Settings.from_env({"GPUAUDIT_XID_CLASS_OVERRIDES": "31=application, 79=hardware",
                                  "EVIDENCE_BUCKET": "b", "FINDINGS_TABLE": "t", "ALERT_TOPIC_ARN": "",
                                  "FINDING_RETENTION_DAYS": "30", "UNRELATED": "x"})
    assert settings.xid_overrides == {31: "application", 79: "hardware"}
    assert (settings.evidence_bucket, settings.findings_table) == ("b", "t")
    assert settings.alert_topic_arn is None  # "" is unset: no alert topic configured
    assert settings.finding_retention_days == 30


def test_defaults_when_nothing_is_set() -> None:
    settings = Settings.from_env({})
    assert settings.xid_overrides == {} and settings.finding_retention_days == 90


def test_a_bad_override_is_bad_input_naming_it() -> None:
    with pytest.raises(BadOverride, match="'31=oops'"):
        Settings.from_env({"GPUAUDIT_XID_CLASS_OVERRIDES": "31=oops"})


def test_a_missing_required_value_names_its_variable() -> None:
    with pytest.raises(RuntimeError, match="EVIDENCE_BUCKET is not set"):
        Settings.from_env({}).required("EVIDENCE_BUCKET")


def test_the_cli_reads_overrides_from_the_same_settings() -> None:
    args = ["audit", "--world", str(WORLD), "--cluster", "research-hp-slurm", "--mode", "incident",
            "--since", "2026-09-25T17:00:00Z", "--format", "json"]
    bad = CliRunner().invoke(app, args, env={"GPUAUDIT_XID_CLASS_OVERRIDES": "31=oops"})
    assert bad.exit_code == 2 and "31=oops" in bad.stderr
    good = CliRunner().invoke(app, args, env={"GPUAUDIT_XID_CLASS_OVERRIDES": "31=hardware"})
    assert good.exit_code == 0 and "Xid 31 class overridden to hardware by configuration" in good.stdout
