"""Every setting gpuaudit reads from the environment, in one place (the CLI and the Lambda handlers use it).

The stack sets these on each function (infra/); the CLI reads only the Xid overrides. A bad Xid override is bad
input (`BadOverride`, exit 2 in the CLI); a missing required value names its variable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from gpuaudit.model.history import DEFAULT_LOOKBACK_DAYS
from gpuaudit.rules.judge import parse_overrides
from gpuaudit.sinks import RETENTION_DAYS

XID_OVERRIDES_ENV = "GPUAUDIT_XID_CLASS_OVERRIDES"
MEMBER_ROLES_ENV = "GPUAUDIT_MEMBER_ROLES"
KUBE_READERS_ENV = "GPUAUDIT_KUBE_READERS"


class MemberRole(BaseModel):
    """The read-only role a member account deploys (infra/cross_account.py) and the external ID it requires."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role_arn: str = Field(max_length=2048, pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]+$")
    external_id: str | None = Field(default=None, min_length=2, max_length=1224)


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    xid_overrides: dict[int, str] = Field(default_factory=dict, alias="GPUAUDIT_XID_CLASS_OVERRIDES")  # CODE=CLASS,…
    evidence_bucket: str | None = Field(default=None, alias="EVIDENCE_BUCKET")
    findings_table: str | None = Field(default=None, alias="FINDINGS_TABLE")
    alert_topic_arn: str | None = Field(default=None, alias="ALERT_TOPIC_ARN")
    finding_retention_days: int = Field(default=RETENTION_DAYS, gt=0, alias="FINDING_RETENTION_DAYS")
    # Fleet memory: how many days of a node's earlier audits the Verdict step reads (issue #18).
    history_lookback_days: int = Field(default=DEFAULT_LOOKBACK_DAYS, gt=0, alias="GPUAUDIT_HISTORY_DAYS")
    aws_region: str | None = Field(default=None, alias="AWS_REGION")  # set by Lambda itself
    # Per cluster of a member account: the role the collectors assume (cdk.json `member_roles`), JSON.
    member_roles: dict[str, MemberRole] = Field(default_factory=dict, alias="GPUAUDIT_MEMBER_ROLES")
    # Per EKS cluster with a private endpoint: the in-VPC KubeRead function that reads it (cdk.json
    # `eks_private_endpoints`), JSON.
    kube_readers: dict[str, str] = Field(default_factory=dict, alias="GPUAUDIT_KUBE_READERS")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """An empty variable counts as unset (CloudFormation writes "" for an optional parameter left out)."""
        given = {name: environ[name] for name in cls.env_names() if environ.get(name)}
        overrides = [i for i in given.pop(XID_OVERRIDES_ENV, "").split(",") if i.strip()]
        roles = json.loads(given.pop(MEMBER_ROLES_ENV, "{}"))
        readers = json.loads(given.pop(KUBE_READERS_ENV, "{}"))
        return cls.model_validate({**given, XID_OVERRIDES_ENV: parse_overrides(overrides), MEMBER_ROLES_ENV: roles,
                                   KUBE_READERS_ENV: readers})

    @classmethod
    def env_names(cls) -> list[str]:
        return [f.alias for f in cls.model_fields.values() if f.alias]

    def required(self, env_name: str) -> str:
        """A value the deployed functions cannot run without, by its environment name."""
        field = next(name for name, f in type(self).model_fields.items() if f.alias == env_name)
        value = getattr(self, field)
        if value is None:
            raise RuntimeError(f"environment variable {env_name} is not set (the stack sets it on every function)")
        return str(value)
