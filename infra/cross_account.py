"""An optional read-only role for auditing clusters in other accounts of an organization.

Deploy the stack `GpuAuditReadOnlyRole` in each member account (`npx aws-cdk@2 deploy -c member_account=true`); it
creates the role `gpuaudit-read-only`, which the auditor (CLI `--role-arn … --external-id …`) assumes. The trust names
the auditor's account, exactly the auditor role ARNs given, and requires the external ID, so a confused deputy
cannot borrow it; the permissions are exactly the collectors' reads (infra/permissions.py), nothing else.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, CfnParameter, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import permissions
from infra.functions import read_statements
from infra.nag import acknowledge_wildcards

ROLE_NAME = "gpuaudit-read-only"


class ReadOnlyRoleStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: object) -> None:
        super().__init__(scope, construct_id, description="gpuaudit: read-only role for cross-account audits",
                         **kwargs)  # type: ignore[arg-type]
        auditor = CfnParameter(self, "AuditorAccountId", type="String", allowed_pattern=r"^\d{12}$",
                               description="The account the gpuaudit stack (or CLI user) runs in")
        external_id = CfnParameter(self, "ExternalId", type="String", min_length=16, no_echo=True,
                                   description="Shared secret the auditor passes when it assumes the role")
        # Exactly which identities of the auditor's account may assume it: the deployed auditor's collecting roles
        # (its stack output CollectorRoleArns) and any CLI user's role, by full ARN; no name pattern, which would
        # also admit roles created later under the same prefix.
        principals = CfnParameter(self, "AuditorRoleArns", type="CommaDelimitedList",
                                  description="IAM role ARNs in the auditor account allowed to assume this role "
                                              "(the gpuaudit stack's CollectorRoleArns output, comma-separated)")
        self.role = iam.Role(
            self, "Role", role_name=ROLE_NAME,
            assumed_by=iam.AccountPrincipal(auditor.value_as_string).with_conditions({
                "StringEquals": {"sts:ExternalId": external_id.value_as_string},
                "ArnEquals": {"aws:PrincipalArn": principals.value_as_list}}),
            description="Read-only access for gpuaudit; no write action of any audited service")
        policy = iam.Policy(self, "AuditReads", roles=[self.role],
                            statements=read_statements(self, permissions.AUDIT_READS))
        acknowledge_wildcards(policy, permissions.READ_REASONS)
        CfnOutput(self, "RoleArn", value=self.role.role_arn)
