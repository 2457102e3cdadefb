"""Every edge the synthesized stack wires, as the requests AWS authorizes, each evaluated by policy_eval.

Edges are read from the template itself, so a new alarm, rule, target, task or function is checked without this
file knowing it:

- alarm → topic: CloudWatch (cloudwatch.amazonaws.com, aws:SourceArn = the alarm) publishes every AlarmActions /
  OKActions / InsufficientDataActions topic; a KMS-encrypted topic needs the key too.
- EventBridge rule → target: through the target's RoleArn (events.amazonaws.com assumes it, then the role calls),
  or as events.amazonaws.com itself (aws:SourceArn = the rule); its dead-letter queue as events.amazonaws.com.
  For an encrypted SNS target the KMS request carries no aws:SourceAccount / aws:SourceArn (SNS Developer Guide:
  those keys in a KMS policy are not supported for EventBridge-to-encrypted topics).
- state machine → each Lambda task's function, each DynamoDB task's table (MarkAudited), its own child executions
  (Distributed Map), its ResultWriter bucket.
- every role's trust: the service that runs it may assume it.
- each Lambda → its own log group, and the table, bucket prefixes and topic its environment names (OWN_CALLS: what
  the handler does with each; tests/deployed/test_deployed_iam.py checks the calls the handlers really make).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from policy_eval import (
    ACCOUNT,
    REGION,
    Decision,
    Names,
    Principal,
    Request,
    Statement,
    evaluate,
    role,
    service,
)

# What each handler does with the resources its environment names (verified against real calls in
# tests/deployed/test_deployed_iam.py). (action, env variable, object key or None, extra condition context)
OWN_CALLS: dict[str, list[tuple[str, str, str | None, dict[str, Any]]]] = {
    "plan": [
        ("dynamodb:PutItem", "FINDINGS_TABLE", None, {}),
        # in-flight claims and the period's kept discovery (handlers/execution_share.py, discovery_cache.py)
        ("dynamodb:GetItem", "FINDINGS_TABLE", None, {}),
        ("dynamodb:UpdateItem", "FINDINGS_TABLE", None, {}),
    ],
    "record_failure": [
        ("dynamodb:PutItem", "FINDINGS_TABLE", None, {}),
        ("dynamodb:GetItem", "FINDINGS_TABLE", None, {}),
        ("dynamodb:Query", "FINDINGS_TABLE", None, {}),
        ("dynamodb:BatchWriteItem", "FINDINGS_TABLE", None, {}),
    ],
    "inventory": [("s3:PutObject", "EVIDENCE_BUCKET", "payloads/0f3a.json", {})],
    "collect_logs": [
        ("s3:GetObject", "EVIDENCE_BUCKET", "payloads/0f3a.json", {}),
        ("s3:PutObject", "EVIDENCE_BUCKET", "payloads/1b2c.json", {}),
        ("s3:GetObject", "EVIDENCE_BUCKET", "cache/research-hp-slurm/9e8d.json", {}),
        ("s3:PutObject", "EVIDENCE_BUCKET", "cache/research-hp-slurm/9e8d.json", {}),
        ("s3:ListBucket", "EVIDENCE_BUCKET", None, {"s3:prefix": "cache/research-hp-slurm/9e8d.json"}),
    ],
    "finish": [
        ("s3:GetObject", "EVIDENCE_BUCKET", "payloads/1b2c.json", {}),
        ("s3:PutObject", "EVIDENCE_BUCKET", "payloads/3d4e.json", {}),
    ],
    "verdict": [
        ("s3:GetObject", "EVIDENCE_BUCKET", "payloads/3d4e.json", {}),
        ("s3:PutObject", "EVIDENCE_BUCKET", "results/research-hp-slurm/a1.json", {}),
        ("dynamodb:GetItem", "FINDINGS_TABLE", None, {}),
        ("dynamodb:Query", "FINDINGS_TABLE", None, {}),
        ("dynamodb:PutItem", "FINDINGS_TABLE", None, {}),
        ("dynamodb:BatchWriteItem", "FINDINGS_TABLE", None, {}),
        ("sns:Publish", "ALERT_TOPIC_ARN", None, {}),
        ("events:PutEvents", "EVENT_BUS", None, {"events:source": "gpuaudit"}),
    ],
}
# The MCP endpoint (issue #38; its StartExecution is checked call by call in tests/deployed/test_mcp_deployed.py).
OWN_CALLS["mcp_endpoint"] = [
    ("dynamodb:Query", "FINDINGS_TABLE", None, {}), ("dynamodb:GetItem", "FINDINGS_TABLE", None, {}),
    ("s3:GetObject", "EVIDENCE_BUCKET", "results/research-hp-slurm/a1.json", {}),
    ("s3:ListBucket", "EVIDENCE_BUCKET", None, {"s3:prefix": "results/research-hp-slurm/a1.json"})]
# Reads of audited services the collectors make (Logs Insights: queries on the cluster's log groups).
QUERY_CALLS = {"inventory": ["logs:DescribeLogGroups"], "collect_logs": ["logs:StartQuery", "logs:GetQueryResults"],
               "finish": ["logs:DescribeLogStreams"]}
QUERIED_GROUP = "/aws/sagemaker/Clusters/research-hp-slurm/abc123"


@dataclass(frozen=True)
class Edge:
    name: str
    requests: tuple[tuple[Request, str], ...]  # (request, what is evaluated: "identity", "resource", "key", "trust")
    caller_role: str | None = None  # the role's ARN when the caller is a role of the stack


@dataclass
class StackPolicies:
    """The template's policies, resolved: identity (per role ARN), resource (per topic/queue/bucket ARN), key, trust."""

    template: dict[str, Any]
    physical: Mapping[str, str] = field(default_factory=dict)  # logical ID -> the name a test's resource has
    region: str = REGION
    account: str = ACCOUNT
    names: Names = field(init=False)
    identity: dict[str, list[Statement]] = field(default_factory=dict)
    resource: dict[str, list[Statement]] = field(default_factory=dict)
    keys: dict[str, list[Statement]] = field(default_factory=dict)
    trust: dict[str, list[Statement]] = field(default_factory=dict)
    topic_keys: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.names = Names(self.template, region=self.region, account=self.account, physical=self.physical)
        resources = self.template["Resources"]
        for logical_id, r in resources.items():
            props, kind = r.get("Properties", {}), r["Type"]
            if kind == "AWS::IAM::Role":
                arn = self.names.arn(logical_id)
                self.trust[arn] = self._statements(props["AssumeRolePolicyDocument"])
                for inline in props.get("Policies", []):
                    self.identity.setdefault(arn, []).extend(self._statements(inline["PolicyDocument"]))
                self.identity.setdefault(arn, [])
            elif kind == "AWS::IAM::Policy":
                for ref in props.get("Roles", []):
                    arn = self.names.arn(ref["Ref"])
                    self.identity.setdefault(arn, []).extend(self._statements(props["PolicyDocument"]))
            elif kind == "AWS::SNS::TopicPolicy":
                for topic in props["Topics"]:
                    self.resource.setdefault(self.names.resolve(topic), []).extend(
                        self._statements(props["PolicyDocument"]))
            elif kind == "AWS::SQS::QueuePolicy":
                for url in props["Queues"]:
                    queue = self._queue_arn(self.names.resolve(url))
                    self.resource.setdefault(queue, []).extend(self._statements(props["PolicyDocument"]))
            elif kind == "AWS::S3::BucketPolicy":
                bucket = f"arn:aws:s3:::{self.names.resolve(props['Bucket'])}"
                self.resource.setdefault(bucket, []).extend(self._statements(props["PolicyDocument"]))
            elif kind == "AWS::KMS::Key":
                self.keys[self.names.arn(logical_id)] = self._statements(props["KeyPolicy"])
            elif kind == "AWS::SNS::Topic" and "KmsMasterKeyId" in props:
                self.topic_keys[self.names.arn(logical_id)] = self.names.resolve(props["KmsMasterKeyId"])

    def _statements(self, document: Mapping[str, Any]) -> list[Statement]:
        statements = document["Statement"]
        return list(self.names.resolve(statements if isinstance(statements, list) else [statements]))

    def _queue_arn(self, url: str) -> str:
        *_, account, name = url.rstrip("/").split("/")
        return f"arn:aws:sqs:{self.names.region}:{account}:{name}"

    def resource_policy(self, arn: str) -> list[Statement] | None:
        """The resource policy that governs `arn` (a bucket's also governs its objects)."""
        if arn.startswith("arn:aws:s3:::"):
            return self.resource.get(arn.split("/", 1)[0])
        return self.resource.get(arn)

    def decide(self, request: Request, what: str) -> Decision:
        identity = self.identity.get(request.principal.value, []) if request.principal.kind == "AWS" else []
        if what == "trust":
            return evaluate(request, resource_policy=self.trust.get(request.resource, []))
        if what == "key":
            return evaluate(request, identity, key_policy=self.keys.get(request.resource, []))
        return evaluate(request, identity, resource_policy=self.resource_policy(request.resource))

    def denied(self, edge: Edge) -> list[str]:
        out = []
        for request, what in edge.requests:
            decision = self.decide(request, what)
            if not decision:
                out.append(f"{edge.name}: {request.principal.value} {request.action} on {request.resource}: "
                           f"{decision.reason}")
        return out


def _context(source_arn: str | None = None, **extra: Any) -> dict[str, Any]:
    context: dict[str, Any] = {"aws:SecureTransport": True}  # services and SDKs call over TLS
    if source_arn is not None:
        context.update({"aws:SourceArn": source_arn, "aws:SourceAccount": source_arn.split(":")[4]})
    return {**context, **extra}


def _publish(p: StackPolicies, who: Principal, topic: str, context: dict[str, Any],
             key_context: dict[str, Any] | None = None) -> list[tuple[Request, str]]:
    requests = [(Request(who, "sns:Publish", topic, context), "resource")]
    key = p.topic_keys.get(topic)
    if key is not None:
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            requests.append((Request(who, action, key, context if key_context is None else key_context), "key"))
    return requests


def _target_action(arn: str) -> str:
    service_name = arn.split(":")[2]
    return {"states": "states:StartExecution", "sqs": "sqs:SendMessage", "sns": "sns:Publish",
            "lambda": "lambda:InvokeFunction"}[service_name]


def edges(template: dict[str, Any]) -> tuple[StackPolicies, list[Edge]]:
    p = StackPolicies(template)
    n = p.names
    out: list[Edge] = []
    resources = template["Resources"]
    for logical_id, r in resources.items():
        props, kind = r.get("Properties", {}), r["Type"]
        if kind == "AWS::CloudWatch::Alarm":
            alarm = n.arn(logical_id)
            for topic in {n.resolve(a) for k in ("AlarmActions", "OKActions", "InsufficientDataActions")
                          for a in props.get(k, [])}:
                out.append(Edge(f"alarm {logical_id} → topic",
                                tuple(_publish(p, service("cloudwatch.amazonaws.com"), topic, _context(alarm)))))
        elif kind == "AWS::Events::Rule":
            rule = n.arn(logical_id)
            for target in props.get("Targets", []):
                arn = n.resolve(target["Arn"])
                action = _target_action(arn)
                if "RoleArn" in target:
                    role_arn = n.resolve(target["RoleArn"])
                    assume = (Request(service("events.amazonaws.com"), "sts:AssumeRole", role_arn, _context(rule)),
                              "trust")
                    calls = [(Request(role(role_arn), action, arn, _context()),
                              "resource")] if action != "sns:Publish" \
                        else _publish(p, role(role_arn), arn, _context())
                    out.append(Edge(f"rule {logical_id} → {arn.split(':')[2]} target", (assume, *calls), role_arn))
                else:
                    who = service("events.amazonaws.com")
                    calls = _publish(p, who, arn, _context(rule), key_context=_context()) if action == "sns:Publish" \
                        else [(Request(who, action, arn, _context(rule)), "resource")]
                    out.append(Edge(f"rule {logical_id} → {arn.split(':')[2]} target", tuple(calls)))
                if "DeadLetterConfig" in target:
                    queue = n.resolve(target["DeadLetterConfig"]["Arn"])
                    out.append(Edge(f"rule {logical_id} → dead-letter queue", (
                        (Request(service("events.amazonaws.com"), "sqs:SendMessage", queue, _context(rule)),
                         "resource"),)))
        elif kind == "AWS::StepFunctions::StateMachine":
            out += _state_machine_edges(p, logical_id, props)
        elif kind == "AWS::Lambda::Function":
            out += _function_edges(p, logical_id, props)
    return p, out


def _state_machine_edges(p: StackPolicies, logical_id: str, props: dict[str, Any]) -> list[Edge]:
    n = p.names
    machine, role_arn = n.arn(logical_id), n.resolve(props["RoleArn"])
    who = role(role_arn)
    found = [Edge(f"states.amazonaws.com assumes {logical_id}'s role", ((Request(
        service("states.amazonaws.com"), "sts:AssumeRole", role_arn, _context(machine)), "trust"),))]
    definition = json.loads(n.resolve(props["DefinitionString"]))
    for name, state in _states(definition):
        if state["Type"] == "Task" and state["Resource"].endswith(":states:::lambda:invoke"):
            function = state["Parameters"]["FunctionName"]
            found.append(Edge(f"state {name} → Lambda {function.rsplit(':', 1)[-1]}", ((Request(
                who, "lambda:InvokeFunction", function, _context()), "resource"),), role_arn))
        if state["Type"] == "Task" and ":states:::dynamodb:" in state["Resource"]:
            operation = state["Resource"].rsplit(":", 1)[-1]
            action = "dynamodb:" + operation[0].upper() + operation[1:]
            table = f"arn:aws:dynamodb:{n.region}:{n.account}:table/{state['Parameters']['TableName']}"
            found.append(Edge(f"state {name} → DynamoDB {action}", ((Request(who, action, table, _context()),
                                                                     "resource"),), role_arn))
        if state["Type"] == "Map" and state.get("ItemProcessor", {}).get("ProcessorConfig", {}).get("Mode") == \
                "DISTRIBUTED":
            # Child executions are started on the state machine itself (Step Functions Developer Guide, "IAM
            # policies for using Distributed Map states"). Not checked: DescribeExecution/StopExecution on the child
            # executions, whose ARN form the docs available here do not state.
            found.append(Edge(f"Distributed Map {name} → its child executions", (
                (Request(who, "states:StartExecution", machine, _context()), "resource"),), role_arn))
            writer = state.get("ResultWriter")
            if writer:
                # JSONPath states name the writer's target in Parameters, JSONata states in Arguments
                target = writer.get("Arguments") or writer["Parameters"]
                bucket, prefix = target["Bucket"], target.get("Prefix", "")
                found.append(Edge(f"Distributed Map {name} → ResultWriter bucket", ((Request(
                    who, "s3:PutObject", f"arn:aws:s3:::{bucket}/{prefix}0a1b/SUCCEEDED_0.json", _context()),
                    "resource"),), role_arn))
    return found


def _states(definition: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in definition["States"].items():
        yield name, state
        for nested in (state.get("ItemProcessor"), state.get("Iterator"), *state.get("Branches", [])):
            if nested:
                yield from _states(nested)


def _function_edges(p: StackPolicies, logical_id: str, props: dict[str, Any]) -> list[Edge]:
    n = p.names
    role_arn = n.resolve(props["Role"])
    who = role(role_arn)
    module = props["Handler"].split(".")[1]
    found = [Edge(f"lambda.amazonaws.com assumes {logical_id}'s role", ((Request(
        service("lambda.amazonaws.com"), "sts:AssumeRole", role_arn, _context()), "trust"),))]
    group = props.get("LoggingConfig", {}).get("LogGroup")
    if group is not None:
        stream = f"arn:aws:logs:{n.region}:{n.account}:log-group:{n.resolve(group)}:log-stream:2026/10/01/[$LATEST]0a"
        found.append(Edge(f"{logical_id} → its log group", tuple(
            (Request(who, a, stream, _context()), "resource") for a in ("logs:CreateLogStream", "logs:PutLogEvents")),
            role_arn))
    env = n.resolve(props.get("Environment", {}).get("Variables", {}))
    for action, variable, key, extra in OWN_CALLS.get(module, []):
        if variable not in env:
            continue  # tests/deployed/test_deployed_iam.py: a handler needing an unset variable fails there
        value = env[variable]
        if variable == "EVIDENCE_BUCKET":
            target = f"arn:aws:s3:::{value}" + (f"/{key}" if key else "")
            requests = [(Request(who, action, target, _context(**extra)), "resource")]
        elif variable == "FINDINGS_TABLE":
            target = f"arn:aws:dynamodb:{n.region}:{n.account}:table/{value}"
            requests = [(Request(who, action, target, _context(**extra)), "resource")]
        elif variable == "EVENT_BUS":  # the bus's ARN (infra/functions.event_bus_arn)
            target = value
            requests = [(Request(who, action, target, _context(**extra)), "resource")]
        else:
            target = value
            requests = _publish(p, who, value, _context())
        found.append(Edge(f"{logical_id} → {action} {target.split(':')[-1]}", tuple(requests), role_arn))
    for action in QUERY_CALLS.get(module, []):
        target = "*" if action == "logs:GetQueryResults" else \
            f"arn:aws:logs:{n.region}:{n.account}:log-group:{QUERIED_GROUP}"
        found.append(Edge(f"{logical_id} → {action}", ((Request(who, action, target, _context()), "resource"),),
                          role_arn))
    return found


def denied_edges(template: dict[str, Any]) -> list[str]:
    policies, wired = edges(template)
    return [problem for edge in wired for problem in policies.denied(edge)]


def without_statements(template: dict[str, Any], sids: set[str]) -> dict[str, Any]:
    """A copy of the template with every policy statement whose Sid is in `sids` removed (a mutation)."""
    mutated = copy.deepcopy(template)
    for r in mutated["Resources"].values():
        props = r.get("Properties", {})
        for key in ("PolicyDocument", "KeyPolicy"):
            document = props.get(key)
            if isinstance(document, dict) and isinstance(document.get("Statement"), list):
                document["Statement"] = [s for s in document["Statement"] if s.get("Sid") not in sids]
    return mutated
