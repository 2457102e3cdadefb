"""cdk-nag acknowledgments for IAM wildcards, made next to the policy they justify.

cdk-nag 3 reports AwsSolutions-IAM5 once per wildcard resource, with the resource in the finding
ID (`AwsSolutions-IAM5[Resource::<Bucket.Arn>/payloads/*]`), and CDK matches acknowledgments by
exact ID. `acknowledge_wildcards` computes those IDs the way cdk-nag does and gives each one the
reason registered for its kind; a wildcard that no reason covers raises at synth, so a new one
must be justified where it appears.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import Construct

RULE = "AwsSolutions::AwsSolutions-IAM5"


def flatten(reference: Any) -> str:
    """cdk-nag's flattenCfnReference: a CloudFormation value as the string its finding IDs use."""
    if reference is None:
        return ""
    if isinstance(reference, str):
        return reference.replace("${", "<").replace("}", ">")
    if isinstance(reference, dict):
        if "Fn::Join" in reference:
            delimiter, items = reference["Fn::Join"]
            return delimiter.join(flatten(i) for i in items)
        if "Fn::Sub" in reference:
            return flatten(reference["Fn::Sub"])
        if "Fn::GetAtt" in reference:
            resource, attribute = reference["Fn::GetAtt"]
            return f"<{flatten(resource)}.{flatten(attribute)}>"
        if "Fn::ImportValue" in reference:
            return flatten(reference["Fn::ImportValue"])
        if "Ref" in reference:
            return f"<{flatten(reference['Ref'])}>"
    return json.dumps(reference, separators=(",", ":"))


def wildcard_findings(scope: Construct, document: iam.PolicyDocument) -> list[str]:
    resolved = Stack.of(scope).resolve(document) or {}
    findings: dict[str, None] = {}
    for statement in resolved.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        actions = statement.get("Action", [])
        for action in actions if isinstance(actions, list) else [actions]:
            if "*" in action:
                findings[f"Action::{action}"] = None
        resources = statement.get("Resource", [])
        for resource in resources if isinstance(resources, list) else [resources]:
            flat = flatten(resource)
            if "*" in flat:
                findings[f"Resource::{flat}"] = None
    return list(findings)


def acknowledge_wildcards(policy: iam.Policy, reasons: dict[str, str]) -> list[str]:
    """Acknowledge each wildcard of `policy` with the reason whose key the finding equals or contains."""
    acknowledged = []
    for finding in wildcard_findings(policy, policy.document):
        reason = reason_for(finding, reasons, policy.node.path)
        Validations.of(policy).acknowledge(Acknowledgment(id=f"{RULE}[{finding}]", reason=reason))
        acknowledged.append(finding)
    return acknowledged


def reason_for(finding: str, reasons: dict[str, str], where: str) -> str:
    """`Resource::*` matches only itself; any other key matches the findings that contain it."""
    for key, reason in reasons.items():
        if key == finding or (key != "Resource::*" and key in finding):
            return reason
    raise ValueError(f"{where}: wildcard {finding} has no justification; add one where the policy is built")


def default_policy(role: iam.IRole) -> iam.Policy:
    policy = role.node.try_find_child("DefaultPolicy")
    if not isinstance(policy, iam.Policy):
        raise ValueError(f"{role.node.path} has no default policy")
    return policy
