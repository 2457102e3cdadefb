"""An optional read-only role for auditing clusters in other accounts of an organization.

Deploy `GpuAuditReadOnlyRole` in each member account (`npx aws-cdk@2 deploy -c member_account=true`); the
auditor (CLI `--role-arn … --external-id …`) assumes it. The trust names the auditor's account and requires the external ID, so a confused deputy
cannot borrow it; the permissions are exactly the collectors' reads (infra/permissions.py), nothing else.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, CfnParameter, Fn, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import permissions
from infra.functions import read_statements
from infra.nag import acknowledge_wildcards


class ReadOnlyRoleStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: object) -> None:
        super().__init__(scope, construct_id, description="gpuaudit: read-only role for cross-account audits",
                         **kwargs)  # type: ignore[arg-type]
        auditor = CfnParameter(self, "AuditorAccountId", type="String", allowed_pattern=r"^\d{12}$",
                               description="The account the gpuaudit stack (or CLI user) runs in")
        external_id = CfnParameter(self, "ExternalId", type="String", min_length=16, no_echo=True,
                                   description="Shared secret the auditor passes when it assumes the role")
        # Which identities of the auditor's account may assume it: by default the deployed auditor's own Lambda
        # roles (CDK names them `GpuAudit-Functions…`); a CLI user passes their role's name pattern.
        CfnParameter(self, "AuditorRoleNamePattern", type="String", default="GpuAudit-Functions*",
                     description="IAM role names in the auditor account allowed to assume this role")
        self.role = iam.Role(
            self, "Role", role_name="gpuaudit-read-only",
            assumed_by=iam.AccountPrincipal(auditor.value_as_string).with_conditions({
                "StringEquals": {"sts:ExternalId": external_id.value_as_string},
                "ArnLike": {"aws:PrincipalArn": Fn.sub("arn:${AWS::Partition}:iam::${AuditorAccountId}:role/"
                                                       "${AuditorRoleNamePattern}")}}),
            description="Read-only access for gpuaudit; no write action of any audited service")
        policy = iam.Policy(self, "AuditReads", roles=[self.role],
                            statements=read_statements(self, permissions.AUDIT_READS))
        acknowledge_wildcards(policy, permissions.READ_REASONS)
        CfnOutput(self, "RoleArn", value=self.role.role_arn)
