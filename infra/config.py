"""The deployment's configuration: which clusters, how often, who is alerted, how long findings live.

Read from CDK context key `gpuaudit` (cdk.json, or `-c gpuaudit='{…}'`), or from a JSON file named
by `-c config=path.json`. `python app.py` without the CDK CLI reads cdk.json's context itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuaudit.collectors.query_budget import DEFAULT_BUDGET_SHARE, budget_slots
from gpuaudit.model.evidence import MAX_FILE_SYSTEMS, MAX_INSTANCES, FileSystemId, InstanceId, LogGroupName
from gpuaudit.settings import MemberRole
from infra.packaging import ROOT

RESULT_WRITER_CLUSTERS = 50
# PutEvents' EventBusName: a bus name, or the ARN of a bus (EventBridge API reference, PutEventsRequestEntry).
EVENT_BUS_PATTERN = r"^(arn:aws[\w-]*:events:[a-z]{2}(-[a-z]+)+-\d:\d{12}:event-bus/)?[/.\-_A-Za-z0-9]{1,256}$"
# Where the auditor's own functions and state machine log (a watch there would start an audit from an audit).
AUDITOR_LOG_PREFIXES = ("/aws/lambda/", "/aws/vendedlogs/states/")
QUERIES_PER_BATCH = 3  # collect_batch starts three Logs Insights queries at once (kernel, summary, GPU lines)


class DiscoveryTag(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1)
    value: str


class SlackChannel(BaseModel):
    """An AWS Chatbot Slack channel; the workspace must already be authorised in the Chatbot console."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace_id: str = Field(min_length=1)
    channel_id: str = Field(min_length=1)


EksClusterName = Annotated[str, Field(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")]


class PrivateEndpoint(BaseModel):
    """Where the KubeRead function runs to reach an EKS cluster's private API endpoint: subnets with a route to the
    endpoint and a security group the cluster's security group accepts on 443. KubeRead calls no AWS API, so the
    subnets need no NAT gateway or VPC endpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subnet_ids: list[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]] = Field(min_length=1, max_length=16)
    security_group_ids: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]] = Field(min_length=1, max_length=5)


class McpEndpointConfig(BaseModel):
    """The optional MCP endpoint (issue #38): a Lambda behind a Function URL (AWS_IAM) and a role the named agent
    principal assumes to invoke it. Present: deployed; absent (the default): not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The IAM role or user (or account root) of the agent that assumes the invoke role, e.g. a DevOps Agent's role.
    agent_principal: str = Field(max_length=2048, pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:(root|(role|user)/"
                                                          r"[A-Za-z0-9_+=,.@/-]{1,512})$")


class XidWatchConfig(BaseModel):
    """The Xid watch (issue #51) as an object: which clusters, and per cluster the kernel-carrying log groups to watch
    beside those named in `log_groups`. `clusters` left out: every configured cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clusters: dict[str, Annotated[list[LogGroupName], Field(max_length=50)]] | None = None


class DeployConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    clusters: list[str] = Field(default_factory=list)
    discover: bool = False  # also audit every HyperPod cluster and ParallelCluster found in the region
    discovery_tag: DiscoveryTag | None = None  # restrict discovery to clusters carrying this tag
    schedule: str = "rate(1 hour)"
    alert_emails: list[str] = Field(default_factory=list)
    slack: SlackChannel | None = None
    finding_retention_days: int = Field(default=90, ge=1)
    # Fleet memory (issue #18): how far back the Verdict step reads a node's earlier audits (at most the retention).
    history_lookback_days: int = Field(default=30, ge=1)
    payload_retention_days: int = Field(default=3, ge=1)
    log_retention_days: Literal[1, 3, 7, 14, 30, 90, 180, 365] = 30  # the stack's own log groups
    logs_insights_concurrent_queries: int = Field(default=30, ge=QUERIES_PER_BATCH)
    # The share of that quota every execution of this deployment together may hold (hourly, node-event and
    # Capacity-Block executions overlap): leased from the findings table; the rest is left to on-call's own queries.
    logs_insights_budget_share: float = Field(default=DEFAULT_BUDGET_SHARE, gt=0, le=1)
    # How long one cluster's Logs Insights reads may take, from its audit's start: AWS stops a query at 60 min;
    # the state machine waits (not a Lambda), and its timeout is derived from this (`execution_timeout`).
    logs_insights_deadline_minutes: int = Field(default=30, ge=5, le=55)
    clusters_in_flight: int = Field(default=5, ge=1)
    # Seconds the state machine waits before asking CollectLogs again about queries still running.
    query_wait_seconds: int = Field(default=10, ge=1, le=300)
    xid_class_overrides: list[str] = Field(default_factory=list)  # CODE=CLASS, as the CLI's --xid-class
    # Per cluster, log groups to search beside those found by substring (the CLI's --log-group), e.g. a job's stdout.
    # Each list within what one audit takes (AuditRequest): StartQuery names at most 50 log groups; DescribeInstances
    # and DescribeFileSystems are read with the IDs of one audit (MAX_INSTANCES, MAX_FILE_SYSTEMS). Past that the
    # synth stops naming the field, instead of every hourly Plan failing on it.
    log_groups: dict[str, Annotated[list[LogGroupName], Field(max_length=50)]] = Field(default_factory=dict)
    # Per configured name, the scope the CLI takes as --instances and --filesystem: a self-managed fleet's instance
    # IDs (the name is then its label), and FSx for Lustre file systems audited with it.
    instances: dict[str, Annotated[list[InstanceId], Field(max_length=MAX_INSTANCES)]] = Field(default_factory=dict)
    file_systems: dict[str, Annotated[list[FileSystemId], Field(max_length=MAX_FILE_SYSTEMS)]] = \
        Field(default_factory=dict)
    # EKS clusters (HyperPod EKS orchestrators, in this account) whose Kubernetes API the collectors read: the stack
    # gives each collecting role an access entry in Kubernetes group gpuaudit-readers, which the shipped RBAC
    # manifest (deploy/kubernetes/gpuaudit-reader.yaml, applied with kubectl) binds to read nodes and events.
    eks_access_entries: list[EksClusterName] = Field(default_factory=list)
    # Of those, clusters whose API endpoint is private: read by a KubeRead function placed in the cluster's VPC,
    # whose role (not the collectors') gets the access entry.
    eks_private_endpoints: dict[EksClusterName, PrivateEndpoint] = Field(default_factory=dict)
    # Per cluster in a member account: the read-only role its collectors assume (infra/cross_account.py there) and
    # the SSM SecureString parameter holding its external ID.
    member_roles: dict[str, MemberRole] = Field(default_factory=dict)
    # Findings as EventBridge events (issue #38): the bus the Verdict step puts them on — a name in this account and
    # region (`default`: the account's default bus) or a bus's ARN; `publish_events: false` sends none.
    publish_events: bool = True
    event_bus: str = Field(default="default", max_length=1600, pattern=EVENT_BUS_PATTERN)
    # The SSM SecureString parameter holding the external ID of every member role that names none of its own (one
    # secret for the organization keeps the collectors' policy to one parameter ARN).
    external_id_parameter: str | None = Field(default=None, max_length=1011, pattern=r"^/[A-Za-z0-9_.\-/]+$")
    # The MCP endpoint for agents (issue #38), off unless set: {"agent_principal": "arn:aws:iam::…:role/…"}.
    mcp_endpoint: McpEndpointConfig | None = None
    # The opt-in Xid watch (issue #51), off by default: `true` for every configured cluster, or
    # {"clusters": {"<cluster>": ["<log group>", ...]}}. A metric filter per named group, an alarm per cluster.
    xid_watch: XidWatchConfig | None = None

    @field_validator("xid_watch", mode="before")
    @classmethod
    def _watch_switch(cls, value: object) -> object:
        """`true`: every configured cluster (an empty object); `false`: off. One shape validated, one message."""
        return {} if value is True else None if value is False else value

    @model_validator(mode="after")
    def _something_to_audit(self) -> DeployConfig:
        if not self.clusters and not self.discover:
            raise ValueError("configure `clusters` (names) or `discover: true` (tag-based discovery)")
        if self.discovery_tag and not self.discover:
            raise ValueError("`discovery_tag` needs `discover: true`")
        for key, named in (("log_groups", self.log_groups), ("member_roles", self.member_roles),
                           ("instances", self.instances), ("file_systems", self.file_systems)):
            unknown = sorted(set(named) - set(self.clusters)) if not self.discover else []
            if unknown:
                raise ValueError(f"`{key}` names clusters that are not configured: {', '.join(unknown)}")
        if self.history_lookback_days > self.finding_retention_days:
            raise ValueError(f"`history_lookback_days` ({self.history_lookback_days}) reaches past "
                             f"`finding_retention_days` "
                             f"({self.finding_retention_days}): the table keeps no older audit")
        plaintext = sorted(c for c, r in self.member_roles.items() if r.external_id is not None)
        if plaintext:
            raise ValueError(f"`member_roles.{plaintext[0]}.external_id`: the stack deploys no plaintext external ID "
                             "(it would sit in the functions' configuration); store it as an SSM SecureString "
                             "(`aws ssm put-parameter --type SecureString --name /gpuaudit/external-id --value …`) and "
                             "name it in `external_id_parameter`")
        self.xid_watch_groups  # noqa: B018 -- a watch that cannot be built stops the synth, naming the cluster
        private = sorted(set(self.eks_private_endpoints) - set(self.eks_access_entries))
        if private:
            raise ValueError(f"`eks_private_endpoints` names EKS clusters not in `eks_access_entries`: "
                             f"{', '.join(private)}")
        return self

    @property
    def xid_watch_groups(self) -> dict[str, list[str]]:
        """Per watched cluster, the log groups its metric filters go on: those `log_groups` names for it and those
        `xid_watch.clusters` names. A group is never guessed: the groups an audit finds by substring at run time
        are not known at deploy time, and a filter goes on no group the configuration does not name."""
        if self.xid_watch is None:
            return {}
        named = self.xid_watch.clusters
        if named is not None:
            unknown = sorted(set(named) - set(self.clusters))
            if unknown:
                raise ValueError(f"`xid_watch.clusters` names clusters that are not configured: {', '.join(unknown)} "
                                 "(discovered clusters are not known at deploy time: name them in `clusters`)")
        watched = list(named) if named is not None else list(self.clusters)
        if not watched:
            raise ValueError("`xid_watch` is on but names no configured cluster to watch (discovered clusters are "
                             "not known at deploy time: name them in `clusters`)")
        groups = {c: list(dict.fromkeys([*self.log_groups.get(c, []), *((named or {}).get(c, []))])) for c in watched}
        own = sorted({g for gs in groups.values() for g in gs if g.startswith(AUDITOR_LOG_PREFIXES)})
        if own:
            raise ValueError(f"`xid_watch`: {own[0]} is where Lambda functions or state machines log, not a GPU node's "
                             "kernel log: the auditor's own logs quote the lines it read, and a watch on them would "
                             "start an audit from an audit")
        bare = [c for c, g in groups.items() if not g]
        if bare:
            raise ValueError(f"`xid_watch`: no log group to watch for {', '.join(bare)}: name its kernel log groups in "
                             f"`xid_watch.clusters.{bare[0]}` (or `log_groups.{bare[0]}`), or deploy with "
                             "`-c check_xid_watch=true` to watch the groups whose name holds the cluster's (read "
                             "from the account at synth; none is when this appears with it)")
        return groups

    @property
    def resolved_member_roles(self) -> dict[str, MemberRole]:
        """Each member role with the external-ID parameter it is read with (its own, else the shared one)."""
        return {c: r if r.external_id_parameter or not self.external_id_parameter else
                r.model_copy(update={"external_id_parameter": self.external_id_parameter})
                for c, r in self.member_roles.items()}

    @property
    def writes_map_results(self) -> bool:
        """The cluster Map's output (an audit summary per cluster, ~1 KB) nears Step Functions' 256 KB limit near
        200 clusters: from RESULT_WRITER_CLUSTERS configured clusters, or with discovery (no bound), it goes to S3."""
        return self.discover or len(self.clusters) >= RESULT_WRITER_CLUSTERS

    @property
    def schedule_period_s(self) -> int:
        """Seconds between scheduled executions: a `rate(…)` expression's; a `cron(…)` one is taken as hourly."""
        match = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", self.schedule.strip())
        if match is None:
            return 3600
        return int(match.group(1)) * {"minute": 60, "hour": 3600, "day": 86400}[match.group(2).rstrip("s")]

    @property
    def query_slots(self) -> int:
        """Concurrent Logs Insights queries all executions of this deployment together may hold."""
        return budget_slots(self.logs_insights_concurrent_queries, self.logs_insights_budget_share)

    @property
    def batches_in_flight(self) -> int:
        """Log batches running at once across the whole execution, under the Logs Insights query quota."""
        return self.logs_insights_concurrent_queries // QUERIES_PER_BATCH

    @property
    def cluster_concurrency(self) -> int:
        return min(self.clusters_in_flight, self.batches_in_flight)

    @property
    def batch_concurrency(self) -> int:
        """Per cluster: clusters × batches × 3 queries stays within the quota."""
        return max(1, self.batches_in_flight // self.cluster_concurrency)


def _context_value(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def cdk_json_context() -> dict[str, Any]:
    """cdk.json's context, for `python app.py` run without the CDK CLI (which would pass it itself)."""
    path = ROOT / "cdk.json"
    if not path.exists():
        return {}
    return dict(json.loads(path.read_text(encoding="utf-8")).get("context", {}))


class BadConfig(ValueError):
    """The deployment configuration is malformed: raised at synth, naming every bad field."""


def load_config(context: dict[str, Any],
                resolve: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> DeployConfig:
    """The configuration from context, `resolve` (reads of the target account, e.g. the Xid watch's groups) applied
    to it before it is validated."""
    where = f"-c config={context['config']}" if context.get("config") else "context `gpuaudit`"
    try:
        if context.get("config"):
            raw = json.loads(Path(str(context["config"])).read_text(encoding="utf-8"))
        else:
            raw = _context_value(context.get("gpuaudit"))
    except (OSError, json.JSONDecodeError) as err:
        raise BadConfig(f"gpuaudit configuration ({where}) not readable as JSON: {err}") from None
    if raw is None:
        raise BadConfig("no gpuaudit configuration: set context `gpuaudit` in cdk.json or pass -c config=FILE")
    if resolve is not None and isinstance(raw, dict):
        raw = resolve(raw)
    try:
        return DeployConfig.model_validate(raw)
    except ValidationError as err:
        raise BadConfig(f"gpuaudit configuration ({where}) is malformed: " + "; ".join(
            f"`{'.'.join(str(p) for p in e['loc']) or 'configuration'}`: {e['msg']}" for e in err.errors())) from None


def deployment_document(config: DeployConfig) -> dict[str, Any]:
    """What the functions read at run time from the deployment layer (gpuaudit.settings.DeploymentDocument): the
    parts of the configuration that grow with the fleet and would not fit Lambda's 4 KB environment."""
    return {"clusters": config.clusters, "discover": config.discover,
            "discovery_tag": config.discovery_tag.model_dump() if config.discovery_tag else None,
            "log_groups": config.log_groups, "instances": config.instances, "file_systems": config.file_systems,
            "member_roles": {c: r.model_dump(exclude_none=True) for c, r in config.resolved_member_roles.items()}}


def bundling_enabled(context: dict[str, Any]) -> bool:
    value = context.get("bundle", True)
    return value if isinstance(value, bool) else str(value).strip().lower() not in ("false", "0", "no")
