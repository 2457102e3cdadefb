"""The optional cross-account role: assumable only by the auditor's account with the external ID, and
allowed only the collectors' reads."""

from __future__ import annotations

from cdk_synth import STACK, Synthesized, synthesize
from test_stack_iam import READS

from infra.app import READ_ONLY_ROLE_STACK


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
    principal_arn = statement["Condition"]["ArnLike"]["aws:PrincipalArn"]
    assert principal_arn == {"Fn::Sub": "arn:${AWS::Partition}:iam::${AuditorAccountId}:role/${AuditorRoleNamePattern}"}
    assert {"Ref": "AuditorAccountId"} in statement["Principal"]["AWS"]["Fn::Join"][1]


def test_role_holds_read_actions_only(synth: Synthesized) -> None:
    policies = [r for r in role_template(synth)["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
    actions = {a for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]
               for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert actions and actions <= READS
    assert not any("*" in a for a in actions)
