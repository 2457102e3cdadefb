"""Every AWS read the auditor makes, as IAM actions, with the resource each is scoped to.

The audit path (Inventory, CollectLogs, Finish) shares one inline read policy: which step runs
which collector may change, what the collectors may call may not. tests/infra pins this list to
the operations the collectors actually call, and the template to an explicit allowlist.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam

Scope = Literal["sagemaker-cluster", "sagemaker-training-plan", "log-group", "*"]

# Reads of the collectors (gpuaudit/collectors): inventory, log sources, control plane, preflight.
AUDIT_READS: dict[str, Scope] = {
    "sagemaker:DescribeCluster": "sagemaker-cluster",
    "sagemaker:ListClusterNodes": "sagemaker-cluster",
    "sagemaker:DescribeClusterNode": "sagemaker-cluster",
    "sagemaker:ListClusterEvents": "sagemaker-cluster",
    "sagemaker:DescribeTrainingPlan": "sagemaker-training-plan",
    "logs:DescribeLogGroups": "log-group",
    "logs:DescribeLogStreams": "log-group",
    "logs:StartQuery": "log-group",
    "logs:GetQueryResults": "*",  # query IDs are not resources IAM can name
    "logs:StopQuery": "*",
    "ec2:DescribeInstances": "*",  # EC2 Describe* calls support no resource-level scoping
    "ec2:DescribeInstanceTypes": "*",
    "ec2:DescribeInstanceStatus": "*",
    "ec2:DescribeCapacityReservations": "*",
    "ec2:DescribeCapacityBlockExtensionOfferings": "*",
    "ec2:DescribeSecurityGroups": "*",
    "ec2:DescribeSubnets": "*",
    "ec2:DescribeRouteTables": "*",
    "cloudtrail:LookupEvents": "*",
    "health:DescribeEvents": "*",
    "health:DescribeAffectedEntities": "*",
    "fsx:DescribeFileSystems": "*",
    "cloudwatch:ListMetrics": "*",
    "cloudwatch:GetMetricData": "*",
    "cloudwatch:DescribeAlarms": "*",
    "events:ListRules": "*",
    "servicequotas:GetServiceQuota": "*",
    "servicequotas:ListServiceQuotas": "*",
}

# Reads of the Plan function (handlers/targets.py): cluster discovery and Capacity Block lookup.
PLAN_READS: dict[str, Scope] = {
    "sagemaker:ListClusters": "*",
    "sagemaker:ListTags": "sagemaker-cluster",
    "ec2:DescribeInstances": "*",
}

# boto3 service name -> IAM service prefix, where they differ.
IAM_PREFIX = {"service-quotas": "servicequotas"}


def iam_action(service: str, operation: str) -> str:
    return f"{IAM_PREFIX.get(service, service)}:{operation}"


def _resource(stack: Stack, scope: Scope) -> str:
    if scope == "sagemaker-cluster":
        return stack.format_arn(service="sagemaker", resource="cluster", resource_name="*")
    if scope == "sagemaker-training-plan":
        return stack.format_arn(service="sagemaker", resource="training-plan", resource_name="*")
    if scope == "log-group":
        return stack.format_arn(service="logs", resource="log-group", resource_name="*",
                                arn_format=ArnFormat.COLON_RESOURCE_NAME)
    return "*"


def read_statements(stack: Stack, reads: dict[str, Scope]) -> list[iam.PolicyStatement]:
    """One statement per scope, actions sorted: the policy reads like the table above."""
    by_scope: dict[Scope, list[str]] = defaultdict(list)
    for action, scope in reads.items():
        by_scope[scope].append(action)
    return [iam.PolicyStatement(sid=f"Read{''.join(p.title() for p in scope.replace('*', 'any').split('-'))}",
                                actions=sorted(actions), resources=[_resource(stack, scope)])
            for scope, actions in sorted(by_scope.items())]
