"""Every AWS read the auditor makes, as IAM actions, with the resource each is scoped to.

The audit path (Inventory, CollectLogs, Finish) shares one inline read policy: which step runs
which collector may change, what the collectors may call may not. tests/infra pins this list to
the operations the collectors actually call, and the template to an explicit allowlist.
Plain data (no CDK import): infra/functions.py turns it into policy statements.
"""

from __future__ import annotations

from typing import Literal

Scope = Literal["sagemaker-cluster", "sagemaker-training-plan", "log-group", "eks-cluster", "*"]

# Reads of the collectors (gpuaudit/collectors): inventory, log sources, control plane, preflight.
AUDIT_READS: dict[str, Scope] = {
    "sagemaker:DescribeCluster": "sagemaker-cluster",
    "sagemaker:ListClusterNodes": "sagemaker-cluster",
    "sagemaker:DescribeClusterNode": "sagemaker-cluster",
    "sagemaker:ListClusterEvents": "sagemaker-cluster",
    "sagemaker:DescribeTrainingPlan": "sagemaker-training-plan",
    "eks:DescribeCluster": "eks-cluster",  # endpoint and CA of a HyperPod EKS orchestrator (Kubernetes reads: #19)
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
    # An unknown cluster name is answered with the region's clusters ("did you mean"): one ListClusters page.
    "sagemaker:ListClusters": "*",
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


# cdk-nag IAM5 justifications of the read policies' wildcards (functions.py, cross_account.py).
READ_REASONS = {
    "Resource::*": "Read-only Describe/List/Get/Lookup calls of EC2, CloudTrail, Health, FSx, CloudWatch, "
                   "EventBridge, Service Quotas and Logs GetQueryResults/StopQuery: these actions support no "
                   "resource-level permissions, so IAM requires Resource '*'.",
    ":cluster/*": "Read-only SageMaker HyperPod cluster calls: cluster ARNs end in a service-generated ID, "
                  "not the configured name, so the scope is every cluster of this account and region.",
    ":training-plan/*": "DescribeTrainingPlan (read-only) of the training plans the audited clusters name.",
    ":log-group:*": "Read-only Logs calls (DescribeLogGroups/Streams, StartQuery) on log groups discovered "
                    "at run time by the cluster's name; no group is known at deploy time.",
}
