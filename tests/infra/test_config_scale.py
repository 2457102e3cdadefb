"""Configuration that scales (issue #33 item 5, bad input): a large fleet's configuration ships in the deployment
layer, not the Lambda environment (4 KB in total per function); the external ID comes from an SSM SecureString read
at run time; a malformed configuration stops the synth with a message naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cdk_synth import (
    LAMBDA_ENV_LIMIT,
    ROOT,
    TEST_CONTEXT,
    Synthesized,
    environment_bytes,
    refusal,
    scale_config,
    synthesize,
)
from test_stack_iam import identity_statements, step_roles

from gpuaudit.settings import DEPLOYMENT_ENV, DEPLOYMENT_PATH, DeploymentDocument
from infra.config import DeployConfig, deployment_document


@pytest.fixture(scope="module")
def large() -> Synthesized:
    return synthesize(config=scale_config(clusters=200, member_roles=50, instances=500))


def _functions(synth: Synthesized) -> dict[str, dict[str, Any]]:
    return {f["Properties"]["Handler"].split(".")[1]: f for f in synth.resources("AWS::Lambda::Function").values()}


def test_every_functions_environment_stays_under_4_kb_at_200_clusters_50_roles_500_instances(
        large: Synthesized) -> None:
    sizes = {name: environment_bytes(f) for name, f in _functions(large).items()}
    assert len(sizes) == 6 and all(size < LAMBDA_ENV_LIMIT for size in sizes.values()), sizes
    for function in _functions(large).values():  # nothing of the fleet is in any environment
        variables = json.dumps(function["Properties"]["Environment"]["Variables"])
        assert "gpu-training-cluster-" not in variables and "i-0000" not in variables and ":role/" not in variables


def test_the_fleet_ships_in_the_deployment_layer_the_collectors_and_plan_read(large: Synthesized) -> None:
    (layer_id,) = large.resources("AWS::Lambda::LayerVersion")
    (layer,) = large.resources("AWS::Lambda::LayerVersion").values()
    asset_hash = layer["Properties"]["Content"]["S3Key"].removesuffix(".zip")
    asset = large.outdir / f"asset.{asset_hash}"  # the staged layer content, as CDK uploads it
    document = DeploymentDocument.model_validate_json((asset / Path(DEPLOYMENT_PATH).relative_to("/opt")).read_text())
    assert len(document.clusters) == 200 and len(document.member_roles) == 50
    assert sum(len(ids) for ids in document.instances.values()) == 500
    assert all(r.external_id is None and r.external_id_parameter for r in document.member_roles.values())
    functions = _functions(large)
    for name in ("plan", "inventory", "collect_logs", "finish"):
        props = functions[name]["Properties"]
        assert {"Ref": layer_id} in props["Layers"] and props["Environment"]["Variables"][DEPLOYMENT_ENV] == \
            DEPLOYMENT_PATH
    assert {"Ref": layer_id} not in functions["verdict"]["Properties"].get("Layers", [])


def test_the_external_id_parameters_are_granted_exactly_to_the_collectors(large: Synthesized) -> None:
    statements, roles = identity_statements(large), step_roles(large)
    config = DeployConfig.model_validate(scale_config())
    names = sorted({r.external_id_parameter for r in config.resolved_member_roles.values() if r.external_id_parameter})
    assert names == ["/gpuaudit/member-external-id"]
    for step, role in roles.items():
        granted = [s for r, s in statements if r == role and "ssm:GetParameter" in json.dumps(s["Action"])]
        if step not in ("inventory", "collect_logs", "finish"):
            assert not granted, step
            continue
        (statement,) = granted
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        rendered = sorted(json.dumps(r) for r in resources)
        assert len(rendered) == len(names) and all("*" not in r for r in rendered)
        assert all(any(n.lstrip("/") + '"' in r for r in rendered) for n in names)


def test_the_deployment_document_is_what_the_functions_validate() -> None:
    config = DeployConfig.model_validate(scale_config(clusters=3, member_roles=1, instances=10))
    assert DeploymentDocument.model_validate(deployment_document(config)).clusters == config.clusters


def _synth_exit(config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path), "CDK_CONTEXT_JSON": json.dumps({**TEST_CONTEXT,
                                                                                      "gpuaudit": config}),
           "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true"}
    return subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.parametrize(("bad", "named"), [
    ({"clusters": "gpu-a"}, "`clusters`: Input should be a valid list"),
    ({"instances": {"gpu-a": ["i-123"]}}, "`instances.gpu-a.0`"),
    ({"member_roles": {"gpu-a": {"role_arn": "arn:aws:iam::123:role/x"}}}, "`member_roles.gpu-a.role_arn`"),
    ({"member_roles": {"gpu-a": {"role_arn": "arn:aws:iam::444455556666:role/gpuaudit-read-only",
                                 "external_id": "plaintext-secret-1"}}}, "member_roles.gpu-a.external_id"),
    ({"schedulee": "rate(1 hour)"}, "`schedulee`: Extra inputs are not permitted"),
    # past an API's per-call limit (one audit reads at most 1,000 instance IDs): refused at synth, not every hour
    ({"instances": {"gpu-a": [f"i-{n:017x}" for n in range(1001)]}}, "`instances.gpu-a`: List should have at most "
                                                                      "1000 items"),
    # past CloudFormation's 500 resources per stack (an audit-age alarm per configured cluster)
    ({"clusters": [f"gpu-{n}" for n in range(480)]}, "past the 500 one stack may hold"),
])
def test_a_malformed_configuration_is_a_synth_error_naming_the_field(
        bad: dict[str, Any], named: str, tmp_path: Path) -> None:
    # through the shared synthesis process (app.py's build_app and its message); app.py's exit code and stderr below
    said = refusal({"clusters": ["gpu-a"], **bad}, tmp_path)
    assert said is not None and said.startswith("gpuaudit: "), said
    assert named in said and "Traceback" not in said
    assert not list(tmp_path.glob("*.template.json"))


def test_python_app_py_exits_2_with_one_message_naming_the_field_and_writes_nothing(tmp_path: Path) -> None:
    done = _synth_exit({"clusters": ["gpu-a"], "instances": {"gpu-a": ["i-123"]}}, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "gpuaudit: " in done.stderr and "`instances.gpu-a.0`" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.glob("*.template.json"))
