"""The five Lambda functions of the state machine, each with its own role written inline.

The audit path (Inventory, CollectLogs, Finish) holds the read policy of permissions.py and
nothing else of AWS but its own payload objects. Only Verdict writes: its findings table items,
its topic, its result objects, its findings as events on the configured bus. Every role may write its own log
group and X-Ray traces.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Acknowledgment, ArnFormat, Duration, RemovalPolicy, Stack, Stage, Validations
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from gpuaudit.domain.kube_access import READER_GROUP
from gpuaudit.report.events import SOURCE as EVENT_SOURCE
from gpuaudit.settings import DEPLOYMENT_ENV, DEPLOYMENT_PATH
from infra import permissions
from infra.bundling import function_code
from infra.config import DeployConfig, deployment_document
from infra.findings import CACHE_PREFIX, PAYLOADS_PREFIX, RESULTS_PREFIX, FindingsStore
from infra.nag import acknowledge_wildcards, default_policy
from infra.packaging import ARCHITECTURE, pinned_version, runtime_requirements

RUNTIME = lambda_.Runtime.PYTHON_3_12
RETENTION = {1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 7: logs.RetentionDays.ONE_WEEK,
             14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
             90: logs.RetentionDays.THREE_MONTHS, 180: logs.RetentionDays.SIX_MONTHS,
             365: logs.RetentionDays.ONE_YEAR}


@dataclass(frozen=True)
class Spec:
    module: str  # handlers.<module>.handler
    memory_mb: int
    timeout: Duration
    description: str


SPECS = {
    # Plan 1,024 MB: Lambda's CPU grows with memory (1 vCPU at 1,769 MB), and the period's ParallelCluster discovery
    # parses every live instance of the region: 12.5 s of CPU at 2,000 p5 through wire parsing (issue #47, measured
    # in-process, the backend's share included), ≈ 86 s at 256 MB, past the 60 s timeout; ≈ 22 s at 1,024 MB
    # (derived from that scaling, not measured in Lambda). A HyperPod event's Plan scans no instance.
    "Plan": Spec("plan", 1024, Duration.minutes(1), "gpuaudit: trigger -> audits to run"),
    # Inventory 15 min: its wall at 2,000 p5 nodes through wire parsing passed a third of 5 min (docs/BENCHMARKS.md).
    "Inventory": Spec("inventory", 512, Duration.minutes(15), "gpuaudit step 1: pipeline.read_inventory"),
    # One invocation starts and reads what it can and returns (the state machine waits between invocations, up to
    # `logs_insights_deadline_minutes` from the audit's start). Memory: at 10,000 nodes the
    # step's heap peaks at 277 MB over a 52 MB interpreter (docs/BENCHMARKS.md, deployed steps): 512 MB left too
    # little room for allocator overhead; Finish and Verdict (269 and 349 MB) keep 1,024 MB.
    "CollectLogs": Spec("collect_logs", 1024, Duration.minutes(15), "gpuaudit step 2: pipeline.collect_logs"),
    "Finish": Spec("finish", 1024, Duration.minutes(10), "gpuaudit step 3: pipeline.finish_collection"),
    # Verdict 15 min: its wall at 10,000 p5 nodes through wire parsing (216 s traced) passed a third of 5 min
    # (docs/BENCHMARKS.md, the deployed steps through wire parsing).
    "Verdict": Spec("verdict", 1024, Duration.minutes(15), "gpuaudit step 4: judge + finalize + sinks"),
    # The Verdict's and Inventory's Catch: one item and one metric per cluster whose audit did not finish. For a
    # deleted cluster it also closes a span per node: at 10,000 nodes 1.9 s of the client's CPU (12.9 s at 256 MB's
    # vCPU share, past a third of 30 s), 402 BatchWriteItem calls and a 76 MB heap over the interpreter's ~53 MB
    # (tests/benchmarks/record_failure.py; docs/BENCHMARKS.md): 1,024 MB (0.58 vCPU) and 2 minutes.
    "RecordFailure": Spec("record_failure", 1024, Duration.minutes(2), "gpuaudit: a cluster's failed audit, recorded"),
}


def _resource(stack: Stack, scope: permissions.Scope) -> str:
    if scope == "sagemaker-cluster":
        return stack.format_arn(service="sagemaker", resource="cluster", resource_name="*")
    if scope == "sagemaker-training-plan":
        return stack.format_arn(service="sagemaker", resource="training-plan", resource_name="*")
    if scope == "eks-cluster":
        return stack.format_arn(service="eks", resource="cluster", resource_name="*")
    if scope == "log-group":
        return stack.format_arn(service="logs", resource="log-group", resource_name="*",
                                arn_format=ArnFormat.COLON_RESOURCE_NAME)
    return "*"


def read_statements(stack: Stack, reads: dict[str, permissions.Scope]) -> list[iam.PolicyStatement]:
    """One statement per scope, actions sorted: the policy reads like the table in permissions.py."""
    by_scope: dict[permissions.Scope, list[str]] = defaultdict(list)
    for action, scope in reads.items():
        by_scope[scope].append(action)
    return [iam.PolicyStatement(sid=f"Read{''.join(p.title() for p in scope.replace('*', 'any').split('-'))}",
                                actions=sorted(actions), resources=[_resource(stack, scope)])
            for scope, actions in sorted(by_scope.items())]


def event_bus_arn(stack: Stack, bus: str) -> str:
    """The configured event bus as an ARN: given as one, or a name of this account and region."""
    return bus if bus.startswith("arn:") else stack.format_arn(service="events", resource="event-bus",
                                                                resource_name=bus)


def execution_shape(config: DeployConfig) -> dict[str, str]:
    """What Plan needs to keep executions within their period and apart (handlers/execution_share.py)."""
    from infra.workflow import execution_budget, execution_timeout  # the workflow imports SPECS from here

    return {"GPUAUDIT_CLUSTER_LANES": str(config.cluster_concurrency),
            "GPUAUDIT_EXECUTION_BUDGET_S": str(int(execution_budget(config).to_seconds())),
            "GPUAUDIT_IN_FLIGHT_S": str(int(execution_timeout(config).to_seconds())),
            "GPUAUDIT_SCHEDULE_PERIOD_S": str(config.schedule_period_s)}


def powertools_version() -> str:
    return pinned_version("aws-lambda-powertools", runtime_requirements())


# One GET of a node or event list page (500 items, slimmed); the collectors' own 10 s HTTPS timeout applies inside.
KUBE_READ = Spec("kube_read", 256, Duration.seconds(30), "gpuaudit: GET of a private EKS endpoint's nodes/events")


def _id(name: str) -> str:
    """A construct ID fragment from a cluster name."""
    return "".join(c for c in name.title() if c.isalnum())


class AuditFunctions(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig, store: FindingsStore,
                 bundle: bool) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        code = function_code(bundle)
        layers = [] if bundle else [self._powertools_layer()]
        common = {"POWERTOOLS_SERVICE_NAME": "gpuaudit", "POWERTOOLS_METRICS_NAMESPACE": "gpuaudit",
                  "POWERTOOLS_LOG_LEVEL": "INFO", "EVIDENCE_BUCKET": store.bucket.bucket_name,
                  # X-Ray segments take at most 64 KB: Logs Insights results and payloads are far larger.
                  "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false"}
        # The audited set and the member roles grow with the fleet: they ship in the deployment layer, a versioned
        # JSON file (a new configuration is a new layer version), not in the 4 KB environment (issue #33).
        deployment = {DEPLOYMENT_ENV: DEPLOYMENT_PATH}
        specific = {
            "Plan": {"FINDINGS_TABLE": store.table.table_name, **deployment, **execution_shape(config)},
            # Inventory: an Xid watch audit locates its lines with the watch's terms, the overrides applied (issue #51)
            "Inventory": {**deployment, "GPUAUDIT_XID_CLASS_OVERRIDES": ",".join(config.xid_class_overrides)},
            "Finish": dict(deployment),
            "CollectLogs": {**deployment, "FINDINGS_TABLE": store.table.table_name,
                            "GPUAUDIT_QUERY_DEADLINE_S": str(config.logs_insights_deadline_minutes * 60),
                            "GPUAUDIT_QUERY_SLOTS": str(config.query_slots)},
            "Verdict": {"FINDINGS_TABLE": store.table.table_name, "ALERT_TOPIC_ARN": store.topic.topic_arn,
                        "FINDING_RETENTION_DAYS": str(config.finding_retention_days),
                        "GPUAUDIT_HISTORY_DAYS": str(config.history_lookback_days),
                        "GPUAUDIT_XID_CLASS_OVERRIDES": ",".join(config.xid_class_overrides),
                        **({"EVENT_BUS": event_bus_arn(stack, config.event_bus)} if config.publish_events else {})},
            "RecordFailure": {"FINDINGS_TABLE": store.table.table_name,
                              "FINDING_RETENTION_DAYS": str(config.finding_retention_days),
                              "GPUAUDIT_HISTORY_DAYS": str(config.history_lookback_days)},
        }
        payloads = store.bucket.arn_for_objects(f"{PAYLOADS_PREFIX}*")
        own = {
            # Bursts: one conditional claim per cluster, mode and quarter hour (handlers/coalesce.py); the audit
            # order: when each cluster's last audit ended (handlers/rotation.py)
            "Plan": [iam.PolicyStatement(sid="BurstClaims", actions=["dynamodb:PutItem"],
                                         resources=[store.table.table_arn]),
                     # In-flight claims (handlers/execution_share.py) and the period's kept discovery
                     # (handlers/discovery_cache.py): items of the stack's own table
                     iam.PolicyStatement(sid="InFlightAndDiscovery", actions=["dynamodb:GetItem",
                                                                              "dynamodb:UpdateItem"],
                                         resources=[store.table.table_arn]),
                     iam.PolicyStatement(sid="AuditOrder", actions=["dynamodb:Query"],
                                         resources=[store.table.table_arn])],
            "Inventory": [iam.PolicyStatement(sid="StorePayloads", actions=["s3:PutObject"], resources=[payloads])],
            "CollectLogs": [iam.PolicyStatement(sid="Payloads", actions=["s3:GetObject", "s3:PutObject"],
                                                resources=[payloads]),
                            iam.PolicyStatement(sid="CoverageCache", actions=["s3:GetObject", "s3:PutObject"],
                                                resources=[store.bucket.arn_for_objects(f"{CACHE_PREFIX}*")]),
                            # Without ListBucket, S3 answers GetObject of a missing key with 403, not 404: the
                            # first audit of every group would read as a denied cache instead of an empty one.
                            iam.PolicyStatement(sid="CoverageCacheMisses", actions=["s3:ListBucket"],
                                                resources=[store.bucket.bucket_arn],
                                                conditions={"StringLike": {"s3:prefix": [f"{CACHE_PREFIX}*"]}}),
                            # The account-wide query budget: leases in one item (handlers/query_leases.py)
                            iam.PolicyStatement(sid="QueryBudget", actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                                                resources=[store.table.table_arn])],
            "Finish": [iam.PolicyStatement(sid="Payloads", actions=["s3:GetObject", "s3:PutObject"],
                                           resources=[payloads]),
                       # The account's shared CloudTrail reads (handlers/trail_share.py), under cache/ too.
                       iam.PolicyStatement(sid="TrailShare", actions=["s3:GetObject", "s3:PutObject"],
                                           resources=[store.bucket.arn_for_objects(f"{CACHE_PREFIX}*")]),
                       iam.PolicyStatement(sid="TrailShareMisses", actions=["s3:ListBucket"],
                                           resources=[store.bucket.bucket_arn],
                                           conditions={"StringLike": {"s3:prefix": [f"{CACHE_PREFIX}*"]}})],
            # The failed audit's item; for a cluster deleted between runs, its history read and closed
            # (handlers/record_failure.py): the snapshot and closed spans of the own table only.
            "RecordFailure": [iam.PolicyStatement(sid="FailedAudits",
                                                  actions=["dynamodb:BatchWriteItem", "dynamodb:GetItem",
                                                           "dynamodb:PutItem", "dynamodb:Query"],
                                                  resources=[store.table.table_arn])],
            "Verdict": [
                iam.PolicyStatement(sid="LoadPayloads", actions=["s3:GetObject"], resources=[payloads]),
                iam.PolicyStatement(sid="StoreResults", actions=["s3:PutObject"],
                                    resources=[store.bucket.arn_for_objects(f"{RESULTS_PREFIX}*")]),
                # BatchWriteItem: the changed latest state, closed history spans and the history snapshot's pieces
                # (puts, and deletes of a snapshot generation no head names), on the own table only.
                iam.PolicyStatement(sid="Findings", actions=["dynamodb:BatchWriteItem", "dynamodb:GetItem",
                                                             "dynamodb:PutItem", "dynamodb:Query"],
                                    resources=[store.table.table_arn]),
                iam.PolicyStatement(sid="Alerts", actions=["sns:Publish"], resources=[store.topic.topic_arn]),
                iam.PolicyStatement(sid="AlertEncryption", actions=["kms:GenerateDataKey", "kms:Decrypt"],
                                    resources=[store.alert_key.key_arn]),
            ],
        }
        if config.publish_events:  # findings as events: PutEvents on the configured bus only
            # ... and only as gpuaudit: events:source is EventBridge's condition key of PutEvents (User Guide, "Using
            # IAM policy conditions"), so the role cannot pose as another source on a bus others' rules trust.
            own["Verdict"].append(iam.PolicyStatement(sid="FindingEvents", actions=["events:PutEvents"],
                                                      resources=[event_bus_arn(stack, config.event_bus)],
                                                      conditions={"StringEquals": {"events:source": EVENT_SOURCE}}))
        # Clusters of member accounts: their collectors read through that account's read-only role, with the external
        # ID read at run time from its SecureString parameter (exactly those parameters; the aws/ssm key's policy
        # lets the account's principals decrypt through SSM).
        member_arns = sorted({r.role_arn for r in config.member_roles.values()})
        parameters = sorted({stack.format_arn(service="ssm", resource="parameter",
                                              resource_name=r.external_id_parameter.lstrip("/"))
                             for r in config.resolved_member_roles.values() if r.external_id_parameter})
        for name in ("Inventory", "CollectLogs", "Finish"):
            if member_arns:
                own[name].append(iam.PolicyStatement(sid="MemberAccountRoles", actions=["sts:AssumeRole"],
                                                     resources=member_arns))
            if parameters:
                own[name].append(iam.PolicyStatement(sid="MemberExternalIds", actions=["ssm:GetParameter"],
                                                     resources=parameters))
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        self.deployment_layer = self._deployment_layer(config)
        self._code, self._layers, self._retention = code, layers, RETENTION[config.log_retention_days]
        self._common = common
        for name, spec in SPECS.items():
            self._function(name, spec, own[name], {**common, **specific.get(name, {})},
                           layers=[*layers, self.deployment_layer] if DEPLOYMENT_ENV in specific.get(name, {})
                           else layers)
        self.kube_readers = self._kube_readers(config, common)
        plan_reads = iam.Policy(self, "PlanReads", statements=read_statements(stack, permissions.PLAN_READS),
                                roles=[self.roles["Plan"]])
        audit_reads = iam.Policy(self, "AuditReads",
                                 statements=read_statements(stack, permissions.AUDIT_READS),
                                 roles=[self.roles[n] for n in ("Inventory", "CollectLogs", "Finish")])
        acknowledge_wildcards(plan_reads, permissions.READ_REASONS)
        acknowledge_wildcards(audit_reads, permissions.READ_REASONS)
        # Read-only Kubernetes access on the configured EKS clusters (issues #19, #33): for the collecting roles, or
        # for the in-VPC reader's role when the cluster's endpoint is private (the collectors never reach it then).
        # The entry puts the role in READER_GROUP; Kubernetes RBAC (the shipped ClusterRole gpuaudit-reader, bound to
        # that group by deploy/kubernetes/gpuaudit-reader.yaml) grants the reads. No EKS access policy: the view
        # policy mirrors the namespaced `view` role and cannot list nodes.
        for cluster in config.eks_access_entries:
            readers = [f"KubeRead{_id(cluster)}"] if cluster in config.eks_private_endpoints else \
                ["Inventory", "CollectLogs", "Finish"]
            for name in readers:
                eks.CfnAccessEntry(self, f"EksView{name}{'' if name.startswith('KubeRead') else _id(cluster)}",
                                   cluster_name=cluster, principal_arn=self.roles[name].role_arn, type="STANDARD",
                                   kubernetes_groups=[READER_GROUP])
        for name in SPECS:  # the KubeRead roles acknowledged theirs where they were built
            acknowledge_wildcards(default_policy(self.roles[name]), {
                "Resource::*": f"{name}: X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) take no "
                               "resource; IAM requires Resource '*'.",
                f"/{PAYLOADS_PREFIX}*": f"{name}: its own step payloads in the evidence bucket; keys are content "
                                        "hashes, so only the prefix can be named.",
                f"/{RESULTS_PREFIX}*": f"{name}: audit results in the evidence bucket, keyed by cluster and audit ID.",
                f"/{CACHE_PREFIX}*": f"{name}: proven hourly coverage bins, one object per cluster and log group, "
                                     "and the account's shared CloudTrail reads (names hashed), so only the prefix "
                                     "can be named.",
            })
        for function in self.functions.values():
            Validations.of(function).acknowledge(Acknowledgment(
                id="AwsSolutions::AwsSolutions-L1",
                reason="Pinned to Python 3.12: the bundle is built for CPython 3.12 wheels and the Powertools "
                       "layer used offline is published per Python version; upgrade both together."))

    def _deployment_layer(self, config: DeployConfig) -> lambda_.LayerVersion:
        """gpuaudit/deployment.json (under /opt in the function) in a layer of its own, written at synth into the
        cloud assembly; its asset hash is its content's, so a changed configuration deploys a new layer version."""
        stage = Stage.of(self)
        outdir = Path(stage.outdir if stage is not None else tempfile.mkdtemp())
        folder = Path(tempfile.mkdtemp(prefix="gpuaudit-deployment-", dir=outdir))
        target = folder / Path(DEPLOYMENT_PATH).relative_to("/opt")
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(deployment_document(config), sort_keys=True, separators=(",", ":")),
                          encoding="utf-8")
        return lambda_.LayerVersion(self, "Deployment", code=lambda_.Code.from_asset(str(folder)),
                                    compatible_architectures=[lambda_.Architecture.ARM_64],
                                    compatible_runtimes=[RUNTIME],
                                    description="gpuaudit: the deployment document (audited set, member roles)")

    def add_function(self, name: str, spec: Spec, statements: list[iam.PolicyStatement],
                     environment: dict[str, str]) -> lambda_.Function:
        """A function beside the state machine's (the MCP endpoint, infra/mcp_endpoint.py): the same code, layers,
        deployment document and common environment; its role holds `statements`, its own logs and X-Ray."""
        function = self._function(name, spec, statements, {**self._common, DEPLOYMENT_ENV: DEPLOYMENT_PATH,
                                                           **environment},
                                  layers=[*self._layers, self.deployment_layer])
        Validations.of(function).acknowledge(Acknowledgment(
            id="AwsSolutions::AwsSolutions-L1",
            reason="Pinned to Python 3.12: the bundle is built for CPython 3.12 wheels and the Powertools "
                   "layer used offline is published per Python version; upgrade both together."))
        return function

    def timed_functions(self) -> dict[str, tuple[lambda_.IFunction, Duration]]:
        """Every function of the stack (the KubeRead readers too) with its timeout, for the alarms."""
        timed: dict[str, tuple[lambda_.IFunction, Duration]] = {
            name: (self.functions[name], spec.timeout) for name, spec in SPECS.items()}
        for cluster, reader in self.kube_readers.items():
            timed[f"KubeRead{_id(cluster)}"] = (reader, KUBE_READ.timeout)
        return timed

    def _function(self, name: str, spec: Spec, statements: list[iam.PolicyStatement], environment: dict[str, str],
                  traced: bool = True, layers: list[lambda_.ILayerVersion] | None = None) -> lambda_.Function:
        log_group = logs.LogGroup(self, f"{name}Logs", retention=self._retention, removal_policy=RemovalPolicy.DESTROY)
        role = iam.Role(self, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description=f"gpuaudit {name}: least privilege, written inline")
        role.add_to_policy(iam.PolicyStatement(sid="OwnLogs", actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                                               resources=[log_group.log_group_arn]))
        for statement in statements:
            role.add_to_policy(statement)
        self.roles[name] = role
        self.functions[name] = lambda_.Function(
            self, name, runtime=RUNTIME, architecture=lambda_.Architecture.ARM_64, code=self._code,
            handler=f"handlers.{spec.module}.handler", memory_size=spec.memory_mb, timeout=spec.timeout,
            description=spec.description, role=role, log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE if traced else lambda_.Tracing.DISABLED,
            layers=self._layers if layers is None else layers, environment=environment)
        return self.functions[name]

    def _kube_readers(self, config: DeployConfig, common: dict[str, str]) -> dict[str, lambda_.Function]:
        """One KubeRead function per private EKS endpoint, in the cluster's VPC; the collectors may invoke exactly
        these. Its role holds only what Lambda itself needs to attach the function to the subnets (network
        interfaces, created and deleted by the Lambda service, never by gpuaudit's code) and no AWS read at all:
        the endpoint and CA come in the event, the token is presigned locally."""
        stack = Stack.of(self)
        readers: dict[str, lambda_.Function] = {}
        for cluster, where in config.eks_private_endpoints.items():
            name = f"KubeRead{_id(cluster)}"
            subnets = [stack.format_arn(service="ec2", resource="subnet", resource_name=s) for s in where.subnet_ids]
            groups = [stack.format_arn(service="ec2", resource="security-group", resource_name=g)
                      for g in where.security_group_ids]
            interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
            statements = [
                iam.PolicyStatement(sid="VpcAttachment", actions=["ec2:CreateNetworkInterface"],
                                    resources=[interfaces, *subnets, *groups]),
                # Only the interfaces in the configured subnets (ec2:Subnet, the interface's subnet ARN): Lambda's
                # own, never another network interface of the region (the only write on an audited service).
                iam.PolicyStatement(sid="VpcAttachmentLifecycle", resources=[interfaces], actions=[
                    "ec2:AssignPrivateIpAddresses", "ec2:DeleteNetworkInterface", "ec2:UnassignPrivateIpAddresses"],
                    conditions={"ArnEquals": {"ec2:Subnet": subnets}}),
                # AWSLambdaVPCAccessExecutionRole's read actions: Lambda looks the subnets up when it attaches.
                iam.PolicyStatement(sid="VpcAttachmentLookup",
                                    actions=["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"],
                                    resources=["*"])]
            function = self._function(name, KUBE_READ, statements,
                                      {**common, "POWERTOOLS_TRACE_DISABLED": "true"}, traced=False)
            cfn = function.node.default_child
            assert isinstance(cfn, lambda_.CfnFunction)
            # Not the `vpc` prop: it attaches the AWS managed AWSLambdaVPCAccessExecutionRole (Resource "*" on
            # every ENI action); the statements above are the same actions scoped to these subnets and groups.
            cfn.add_property_override("VpcConfig", {"SubnetIds": where.subnet_ids,
                                                    "SecurityGroupIds": where.security_group_ids})
            acknowledge_wildcards(default_policy(self.roles[name]), {
                ":network-interface/*": f"{name}: Lambda creates and deletes the function's network interfaces in the "
                                        "configured subnets; their IDs are not known before it does.",
                "Resource::*": f"{name}: ec2:DescribeNetworkInterfaces and ec2:DescribeSubnets support no "
                               "resource-level permissions; Lambda needs them to attach the function to the configured "
                               "subnets."})
            readers[cluster] = function
        if readers:
            for name in ("Inventory", "CollectLogs", "Finish"):
                self.roles[name].add_to_policy(iam.PolicyStatement(
                    sid="PrivateEksReaders", actions=["lambda:InvokeFunction"],
                    resources=[f.function_arn for f in readers.values()]))
                self.functions[name].add_environment("GPUAUDIT_KUBE_READERS", json.dumps(
                    {c: f.function_name for c, f in readers.items()}))
        return readers

    def _powertools_layer(self) -> lambda_.ILayerVersion:
        """The public Powertools layer for this region, resolved at deploy time from AWS's SSM parameter."""
        arn = ssm.StringParameter.value_for_string_parameter(
            self, f"/aws/service/powertools/python/{ARCHITECTURE}/python3.12/{powertools_version()}")
        return lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", arn)
