"""The optional cross-account role: assumable only by the auditor's account with the external ID, and
allowed only the collectors' reads."""

from __future__ import annotations

import json

from cdk_synth import STACK, Synthesized, synthesize
from test_stack_iam import READS

from infra.app import READ_ONLY_ROLE_STACK
from infra.cross_account import ROLE_NAME


def role_template(_auditor: Synthesized) -> dict:
    return synthesize(member_account=True).template


def test_each_app_holds_one_stack_so_deploy_needs_no_stack_name(synth: Synthesized) -> None:
    assert sorted(p.name for p in synth.outdir.glob("*.template.json")) == [f"{STACK}.template.json"]
    member = synthesize(member_account=True)
    assert sorted(p.name for p in member.outdir.glob("*.template.json")) == [f"{READ_ONLY_ROLE_STACK}.template.json"]


def test_trust_requires_the_external_id_and_names_only_the_auditor_account(synth: Synthesized) -> None:
    roles = [r for r in role_template(synth)["Resources"].values() if r["Type"] == "AWS::IAM::Role"]
    assert len(roles) == 1
    (statement,) = roles[0]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRole"
    assert statement["Condition"]["StringEquals"] == {"sts:ExternalId": {"Ref": "ExternalId"}}
    # #33 item 5: exactly the role ARNs given (the auditor's CollectorRoleArns output), no name pattern
    assert statement["Condition"]["ArnEquals"] == {"aws:PrincipalArn": {"Ref": "AuditorRoleArns"}}
    assert set(statement["Condition"]) == {"StringEquals", "ArnEquals"}
    template = role_template(synth)
    assert template["Parameters"]["AuditorRoleArns"]["Type"] == "CommaDelimitedList"
    assert "Default" not in template["Parameters"]["AuditorRoleArns"] and "*" not in json.dumps(statement)
    assert {"Ref": "AuditorAccountId"} in statement["Principal"]["AWS"]["Fn::Join"][1]
    assert roles[0]["Properties"]["RoleName"] == ROLE_NAME == "gpuaudit-read-only"


def test_the_auditor_outputs_exactly_its_collecting_role_arns(synth: Synthesized) -> None:
    """What the member stack's AuditorRoleArns takes: Inventory, CollectLogs and Finish, the roles that assume it."""
    joined = synth.template["Outputs"]["CollectorRoleArns"]["Value"]["Fn::Join"]
    roles = {f["Properties"]["Handler"].split(".")[1]: f["Properties"]["Role"]["Fn::GetAtt"][0]
             for f in synth.resources("AWS::Lambda::Function").values()}
    assert joined[0] == "," and joined[1] == [{"Fn::GetAtt": [roles[s], "Arn"]}
                                              for s in ("inventory", "collect_logs", "finish")]


def test_role_holds_read_actions_only(synth: Synthesized) -> None:
    policies = [r for r in role_template(synth)["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
    actions = {a for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]
               for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert actions and actions <= READS
    assert not any("*" in a for a in actions)
