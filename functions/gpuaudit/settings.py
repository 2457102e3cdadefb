"""Every setting gpuaudit reads from the environment, in one place (the CLI and the Lambda handlers use it).

The stack sets these on each function (infra/); the CLI reads only the Xid overrides. A bad Xid override is bad
input (`BadOverride`, exit 2 in the CLI); a missing required value names its variable.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuaudit.model.history import DEFAULT_LOOKBACK_DAYS
from gpuaudit.rules.context import BadOverride, parse_overrides
from gpuaudit.writes.sinks import RETENTION_DAYS

XID_OVERRIDES_ENV = "GPUAUDIT_XID_CLASS_OVERRIDES"
# The Xid watch's alarms are named `<stack><infix><cluster>` (infra/xid_watch.py); Plan reads the cluster back.
XID_WATCH_ALARM_INFIX = "-xid-watch-"
MEMBER_ROLES_ENV = "GPUAUDIT_MEMBER_ROLES"
KUBE_READERS_ENV = "GPUAUDIT_KUBE_READERS"
# The deployment document (issue #33): the audited set and the member roles, too large for Lambda's 4 KB
# environment, shipped as a JSON file in a layer of the stack (infra/functions.py); this names its path.
DEPLOYMENT_ENV = "GPUAUDIT_DEPLOYMENT"
DEPLOYMENT_PATH = "/opt/gpuaudit/deployment.json"


class MemberRole(BaseModel):
    """The read-only role a member account deploys (infra/cross_account.py) and the external ID it requires."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role_arn: str = Field(max_length=2048, pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]+$")
    # The external ID is a secret: the deployed auditor reads it at run time from this SSM SecureString parameter
    # (encrypted with the account's aws/ssm key), never from its configuration or environment.
    external_id_parameter: str | None = Field(default=None, max_length=1011, pattern=r"^/[A-Za-z0-9_.\-/]+$")
    external_id: str | None = Field(default=None, min_length=2, max_length=1224)  # the CLI's --external-id only


class DeploymentDocument(BaseModel):
    """What the stack ships in the deployment layer: the audited set and the member roles."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clusters: list[str] = Field(default_factory=list)
    discover: bool = False
    discovery_tag: dict[str, str] | None = None  # {"key": …, "value": …}
    log_groups: dict[str, list[str]] = Field(default_factory=dict)
    instances: dict[str, list[str]] = Field(default_factory=dict)
    file_systems: dict[str, list[str]] = Field(default_factory=dict)
    member_roles: dict[str, MemberRole] = Field(default_factory=dict)


class BadSetting(RuntimeError):
    """A variable of the deployed functions is missing or malformed: one sentence naming the variable."""


def _json_of(given: dict[str, str], name: str, default: str) -> Any:
    try:
        return json.loads(given.pop(name, default))
    except json.JSONDecodeError as err:
        raise BadSetting(f"environment variable {name}: not JSON ({err.msg} at character {err.pos})") from None


# The audited set as variables, when no deployment document is named (a stack before issue #33, direct tests):
# GPUAUDIT_CLUSTERS (JSON list), GPUAUDIT_DISCOVER (true/false), GPUAUDIT_DISCOVERY_TAG (key=value),
# GPUAUDIT_LOG_GROUPS, GPUAUDIT_INSTANCES, GPUAUDIT_FILE_SYSTEMS (JSON objects by cluster).
AUDITED_SET_ENV = ("GPUAUDIT_CLUSTERS", "GPUAUDIT_DISCOVER", "GPUAUDIT_DISCOVERY_TAG", "GPUAUDIT_LOG_GROUPS",
                   "GPUAUDIT_INSTANCES", "GPUAUDIT_FILE_SYSTEMS")


def _audited_set(environ: Mapping[str, str]) -> dict[str, Any]:
    """The deployment document's fields from the GPUAUDIT_* variables, each malformed one named."""
    given = {name: environ[name] for name in AUDITED_SET_ENV if environ.get(name)}
    key, _, value = given.pop("GPUAUDIT_DISCOVERY_TAG", "").partition("=")
    discover = given.pop("GPUAUDIT_DISCOVER", "false").strip().lower()
    if discover not in ("true", "false"):
        raise BadSetting(f"environment variable GPUAUDIT_DISCOVER: expected true or false (got {discover[:40]!r})")
    fields = {"clusters": _json_of(given, "GPUAUDIT_CLUSTERS", "[]"),
              "log_groups": _json_of(given, "GPUAUDIT_LOG_GROUPS", "{}"),
              "instances": _json_of(given, "GPUAUDIT_INSTANCES", "{}"),
              "file_systems": _json_of(given, "GPUAUDIT_FILE_SYSTEMS", "{}")}
    try:
        DeploymentDocument.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        name = f"GPUAUDIT_{str(first['loc'][0]).upper()}"
        raise BadSetting(f"environment variable {name}: {first['msg']} (got {str(first.get('input'))[:120]!r})") \
            from None
    return {**fields, "discover": discover == "true", "discovery_tag": {"key": key, "value": value} if key else None}


class BadDeployment(RuntimeError):
    """The deployment document is missing or does not match DeploymentDocument: a message naming the field."""


@functools.cache
def _document_at(path: str) -> DeploymentDocument:
    """Read once per container (the layer's file does not change under a running function)."""
    try:
        raw: Any = json.loads(Path(path).read_text(encoding="utf-8"))
        return DeploymentDocument.model_validate(raw)
    except OSError as err:
        raise BadDeployment(f"deployment document {path} not readable ({err.strerror}): the stack ships it in its "
                            "deployment layer") from None
    except json.JSONDecodeError as err:
        raise BadDeployment(f"deployment document {path} is not JSON: {err}") from None
    except ValidationError as err:
        fields = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise BadDeployment(f"deployment document {path}: {fields}") from None


def deployment(environ: Mapping[str, str]) -> DeploymentDocument | None:
    """The deployment document the environment names, or None when it names none (the CLI, older tests)."""
    path = environ.get(DEPLOYMENT_ENV)
    return _document_at(path) if path else None


MAX_DAYS = 36_500  # a hundred years: any retention or look-back a deployment means


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    xid_overrides: dict[int, str] = Field(default_factory=dict, alias="GPUAUDIT_XID_CLASS_OVERRIDES")  # CODE=CLASS,…
    evidence_bucket: str | None = Field(default=None, alias="EVIDENCE_BUCKET")
    findings_table: str | None = Field(default=None, alias="FINDINGS_TABLE")
    alert_topic_arn: str | None = Field(default=None, alias="ALERT_TOPIC_ARN")
    event_bus_arn: str | None = Field(default=None, alias="EVENT_BUS")  # findings as events (issue #38); unset: none
    # Days are bounded: a time this many days back must stay a date (issue #48 item 6: 10^14 days overflowed).
    finding_retention_days: int = Field(default=RETENTION_DAYS, gt=0, le=MAX_DAYS, alias="FINDING_RETENTION_DAYS")
    # Fleet memory: how many days of a node's earlier audits the Verdict step reads (issue #18).
    history_lookback_days: int = Field(default=DEFAULT_LOOKBACK_DAYS, gt=0, le=MAX_DAYS, alias="GPUAUDIT_HISTORY_DAYS")
    aws_region: str | None = Field(default=None, alias="AWS_REGION")  # set by Lambda itself
    # Per cluster of a member account: the role the collectors assume (cdk.json `member_roles`), JSON.
    member_roles: dict[str, MemberRole] = Field(default_factory=dict, alias="GPUAUDIT_MEMBER_ROLES")
    # Per EKS cluster with a private endpoint: the in-VPC KubeRead function that reads it (cdk.json
    # `eks_private_endpoints`), JSON.
    kube_readers: dict[str, str] = Field(default_factory=dict, alias="GPUAUDIT_KUBE_READERS")
    # CollectLogs: how long a cluster's Logs Insights reads may take (cdk.json `logs_insights_deadline_minutes`), and
    # the account-wide share of the concurrent-query quota leased from the findings table (unset: no shared budget).
    query_deadline_s: int = Field(default=300, gt=0, alias="GPUAUDIT_QUERY_DEADLINE_S")
    query_slots: int | None = Field(default=None, gt=0, alias="GPUAUDIT_QUERY_SLOTS")
    # Plan: the schedule's period (discovery is kept for it), the cluster Map's lanes, the audit time one execution
    # may plan per lane and how long a claim holds (handlers/execution_share.py); unset budget or claim: none.
    schedule_period_s: int = Field(default=3600, gt=0, alias="GPUAUDIT_SCHEDULE_PERIOD_S")
    cluster_lanes: int = Field(default=5, gt=0, alias="GPUAUDIT_CLUSTER_LANES")
    execution_budget_s: int | None = Field(default=None, gt=0, alias="GPUAUDIT_EXECUTION_BUDGET_S")
    in_flight_s: int | None = Field(default=None, gt=0, alias="GPUAUDIT_IN_FLIGHT_S")
    state_machine_arn: str | None = Field(default=None, alias="STATE_MACHINE_ARN")  # the MCP endpoint's start_audit
    function_name: str | None = Field(default=None, alias="AWS_LAMBDA_FUNCTION_NAME")  # set by Lambda itself
    # The audited set: the deployment document the stack ships (GPUAUDIT_DEPLOYMENT), else the GPUAUDIT_* variables.
    audited: DeploymentDocument = Field(default_factory=DeploymentDocument)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """An empty variable counts as unset (CloudFormation writes "" for an optional parameter left out)."""
        given = {name: environ[name] for name in cls.env_names() if environ.get(name)}
        overrides = [i for i in given.pop(XID_OVERRIDES_ENV, "").split(",") if i.strip()]
        roles = _json_of(given, MEMBER_ROLES_ENV, "{}")
        document = deployment(environ)
        if document is not None:
            roles = {c: r.model_dump(exclude_none=True) for c, r in document.member_roles.items()}
        audited = document.model_dump() if document is not None else _audited_set(environ)
        readers = _json_of(given, KUBE_READERS_ENV, "{}")
        return cls.model_validate({**given, XID_OVERRIDES_ENV: parse_overrides(overrides), MEMBER_ROLES_ENV: roles,
                                   KUBE_READERS_ENV: readers, "audited": audited})

    @classmethod
    def deployed(cls, environ: Mapping[str, str], needs: Iterable[str] = ()) -> Settings:
        """A deployed function's settings: every variable validated, and the ones it `needs` present; a missing or
        malformed one is BadSetting, one sentence naming the variable (never a pydantic dump or a traceback)."""
        try:
            settings = cls.from_env(environ)
        except ValidationError as err:
            raise BadSetting("; ".join(
                f"environment variable {'.'.join(str(p) for p in e['loc'])}: {e['msg']} "
                f"(got {str(e.get('input'))[:120]!r})" for e in err.errors())) from None
        except BadOverride as err:
            raise BadSetting(f"environment variable {XID_OVERRIDES_ENV}: {err}") from None
        except BadDeployment as err:
            raise BadSetting(f"environment variable {DEPLOYMENT_ENV}: {err}") from None
        for name in needs:
            settings.required(name)
        return settings

    @classmethod
    def env_names(cls) -> list[str]:
        return [f.alias for f in cls.model_fields.values() if f.alias]

    @classmethod
    def read_names(cls) -> list[str]:
        """Every variable `from_env` reads: the fields', the deployment document's and the audited set's."""
        return [*cls.env_names(), DEPLOYMENT_ENV, *AUDITED_SET_ENV]

    def required(self, env_name: str) -> str:
        """A value the deployed functions cannot run without, by its environment name."""
        field = next((name for name, f in type(self).model_fields.items() if f.alias == env_name), None)
        if field is None:
            raise KeyError(f"{env_name} is no setting of gpuaudit (settings.Settings names every one)")
        value = getattr(self, field)
        if value is None:
            raise BadSetting(f"environment variable {env_name} is not set (the stack sets it on this function)")
        return str(value)

    # The values a step needs, typed: `Settings.deployed(..., needs=...)` has checked them at the step's start.
    @property
    def bucket(self) -> str:
        return self.required("EVIDENCE_BUCKET")

    @property
    def table(self) -> str:
        return self.required("FINDINGS_TABLE")
