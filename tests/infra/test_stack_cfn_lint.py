"""The checkers AWS users already trust, on the default synthesis and the production-shaped one (issue #47 item 2):
cfn-lint finds no error in either template, and every state machine definition is valid Amazon States Language by
cfn-lint's own ASL rule (E3601, its States Language schema), run on the definition with its intrinsics resolved
first — CDK writes it as a `Fn::Join` string, which cfn-lint does not read — beside our own policy evaluator
(test_stack_edges.py). cfn-lint is a dev dependency (pyproject.toml); where it is not installed these tests skip."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from cdk_synth import Synthesized
from policy_eval import Names

cfnlint_api = pytest.importorskip("cfnlint.api", reason="cfn-lint is not installed (pyproject.toml dev extra)")

REGION = "us-west-2"
ASL_RULE = "E3601"  # cfn-lint: "Validate the structure of a StateMachine definition"


@pytest.fixture(params=["synth", "production_synth"])
def either(request: pytest.FixtureRequest) -> Synthesized:
    found: Synthesized = request.getfixturevalue(request.param)
    return found


def lint(template: dict[str, Any]) -> list[Any]:
    return list(cfnlint_api.lint(json.dumps(template), config=cfnlint_api.ManualArgs(regions=[REGION])))


def errors(template: dict[str, Any]) -> list[str]:
    """cfn-lint's errors (rule IDs E…; warnings and informational findings are not failures)."""
    return [f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}" for m in lint(template)
            if m.rule.id.startswith("E")]


def with_definitions_resolved(template: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A copy whose state machines carry their definition as an object (`Definition`), intrinsics resolved
    (policy_eval.Names: each resource's ARN or name in its symbolic form), which cfn-lint validates as ASL."""
    resolved = copy.deepcopy(template)
    names = Names(template)
    machines = 0
    for r in resolved["Resources"].values():
        if r["Type"] == "AWS::StepFunctions::StateMachine":
            text = names.resolve(r["Properties"].pop("DefinitionString"))
            r["Properties"]["Definition"] = json.loads(text)
            machines += 1
    return resolved, machines


def test_cfn_lint_finds_no_error_and_every_state_machine_definition_is_valid_states_language(
        either: Synthesized) -> None:
    # One lint of the template with its definitions resolved: the same template cfn-lint would read as synthesized
    # (every other property unchanged), plus the definitions it cannot read there.
    resolved, machines = with_definitions_resolved(either.template)
    assert machines >= 1
    assert errors(resolved) == []


def test_the_states_language_check_can_fail(synth: Synthesized) -> None:
    """A Task without its Resource and a retry count that is not a number, inside the Distributed Map's processor:
    both reported by the ASL rule (so the check above reads the nested definition, not only its top)."""
    resolved, _machines = with_definitions_resolved(synth.template)
    (machine,) = [r for r in resolved["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    (cluster_map,) = [s for s in machine["Properties"]["Definition"]["States"].values() if s["Type"] == "Map"]
    processor = cluster_map["ItemProcessor"]["States"]
    processor["Inventory"]["Retry"][0]["MaxAttempts"] = "six"
    processor["Unfinished"] = {"Type": "Task", "End": True}
    found = [e for e in errors(resolved) if e.startswith(ASL_RULE)]
    assert any("'six' is not of type 'number'" in e for e in found), found
    assert any("'Resource' is a required property" in e for e in found), found
