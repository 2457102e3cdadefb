"""IAM: the audit path reads, and writes only the product's own table, topic and bucket.

Every action of every identity policy in the template must be in ALLOWLIST (exact names, no
wildcards), each write is scoped to the stack's own resources, and the read policy covers every
operation the collectors call (found by reading their source)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cdk_synth import TEST_CONFIG, Synthesized, synthesize

from infra.permissions import AUDIT_READS, PLAN_READS, iam_action

ROOT = Path(__file__).resolve().parents[2]

READS = {
    "sagemaker:DescribeCluster", "eks:DescribeCluster", "sagemaker:ListClusterNodes", "sagemaker:DescribeClusterNode",
    "sagemaker:ListClusterEvents", "sagemaker:DescribeTrainingPlan", "sagemaker:ListClusters", "sagemaker:ListTags",
    "logs:DescribeLogGroups", "logs:DescribeLogStreams", "logs:StartQuery", "logs:GetQueryResults", "logs:StopQuery",
    "ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeInstanceStatus",
    "ec2:DescribeCapacityReservations", "ec2:DescribeCapacityBlockExtensionOfferings", "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets", "ec2:DescribeRouteTables", "cloudtrail:LookupEvents", "health:DescribeEvents",
    "health:DescribeAffectedEntities", "fsx:DescribeFileSystems", "cloudwatch:ListMetrics", "cloudwatch:GetMetricData",
    "cloudwatch:DescribeAlarms", "events:ListRules", "servicequotas:GetServiceQuota", "servicequotas:ListServiceQuotas",
}
OWN_RESOURCE_ACCESS = {"s3:GetObject", "s3:PutObject", "s3:ListBucket", "dynamodb:GetItem", "dynamodb:PutItem",
                       "dynamodb:Query",
                       "dynamodb:BatchWriteItem",
                       # the query budget's leases (CollectLogs), the audit order (state machine)
                       "dynamodb:UpdateItem",
                       "sns:Publish",
                       "kms:GenerateDataKey", "kms:Decrypt",
                       "ssm:GetParameter"}  # exactly the member roles' external-ID SecureStrings
# The product's own plumbing: its log groups and traces, the state machine invoking its functions and
# starting its own child executions, EventBridge starting the state machine, vended log delivery.
PLUMBING = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords",
            "xray:GetSamplingRules", "xray:GetSamplingTargets", "lambda:InvokeFunction", "states:StartExecution",
            "states:DescribeExecution", "states:StopExecution", "states:RedriveExecution", "logs:CreateLogDelivery",
            "logs:GetLogDelivery", "logs:UpdateLogDelivery", "logs:DeleteLogDelivery", "logs:ListLogDeliveries",
            "logs:PutResourcePolicy", "logs:DescribeResourcePolicies"}
# Findings as events (issue #38): on the configured bus only (test_findings_are_put_on_the_configured_bus_only).
EVENT_PUBLISHING = {"events:PutEvents"}
ALLOWLIST = READS | OWN_RESOURCE_ACCESS | PLUMBING | EVENT_PUBLISHING


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def identity_statements(synth: Synthesized) -> list[tuple[str, dict[str, Any]]]:
    """(role logical ID, statement) for every inline and attached policy of every role."""
    out = []
    for role_id, role in synth.resources("AWS::IAM::Role").items():
        assert "ManagedPolicyArns" not in role["Properties"], f"{role_id}: managed policies widen silently"
        for policy in role["Properties"].get("Policies", []):
            out += [(role_id, s) for s in policy["PolicyDocument"]["Statement"]]
    for policy in synth.resources("AWS::IAM::Policy").values():
        for role in policy["Properties"]["Roles"]:
            out += [(role["Ref"], s) for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    assert not synth.resources("AWS::IAM::ManagedPolicy") and not synth.resources("AWS::IAM::User")
    return out


def step_roles(synth: Synthesized) -> dict[str, str]:
    """Handler module -> its role's logical ID."""
    return {f["Properties"]["Handler"].split(".")[1]: f["Properties"]["Role"]["Fn::GetAtt"][0]
            for f in synth.resources("AWS::Lambda::Function").values()}


def actions_of(statements: list[tuple[str, dict[str, Any]]], role: str) -> set[str]:
    return {a for r, s in statements if r == role for a in _list(s["Action"])}


def test_every_action_is_in_the_allowlist(synth: Synthesized) -> None:
    statements = identity_statements(synth)
    actions = {a for _, s in statements for a in _list(s["Action"])}
    assert all(s["Effect"] == "Allow" for _, s in statements)
    assert not [a for a in actions if "*" in a], "no wildcard actions"
    assert actions - ALLOWLIST == set(), f"actions outside the allowlist: {sorted(actions - ALLOWLIST)}"


def test_own_resource_access_is_scoped_to_the_stacks_own_table_topic_key_and_bucket(synth: Synthesized) -> None:
    own = {*synth.resources("AWS::DynamoDB::Table"), *synth.resources("AWS::SNS::Topic"),
           *synth.resources("AWS::KMS::Key"), *synth.resources("AWS::S3::Bucket")}
    for role, statement in identity_statements(synth):
        if not set(_list(statement["Action"])) & OWN_RESOURCE_ACCESS:
            continue
        for resource in _list(statement["Resource"]):
            text = json.dumps(resource)
            assert any(f'"{logical_id}"' in text for logical_id in own), f"{role}: {statement}"
            if "s3:PutObject" in _list(statement["Action"]):
                assert text.endswith(('/payloads/*"]]}', '/results/*"]]}',
                                      '/cache/*"]]}')), f"{role} writes outside its prefixes"
            if "s3:ListBucket" in _list(statement["Action"]):  # only to learn that a cache key is missing
                assert statement.get("Condition") == {"StringLike": {"s3:prefix": ["cache/*"]}}, statement


def test_the_audit_path_only_reads(synth: Synthesized) -> None:
    statements, roles = identity_statements(synth), step_roles(synth)
    for step in ("inventory", "collect_logs", "finish"):
        extra = actions_of(statements, roles[step]) - READS - {"s3:GetObject", "s3:PutObject", "s3:ListBucket",
                                                               "logs:CreateLogStream",
                                                               "logs:PutLogEvents", "xray:PutTraceSegments",
                                                               "xray:PutTelemetryRecords"}
        if step == "collect_logs":  # the account-wide query budget: leases in the stack's own table, nothing else
            extra -= {"dynamodb:GetItem", "dynamodb:UpdateItem"}
        assert extra == set(), f"{step} holds {sorted(extra)}"
    assert actions_of(statements, roles["plan"]) & READS == set(PLAN_READS)
    verdict = actions_of(statements, roles["verdict"])
    assert verdict & READS == set(), "the verdict judges evidence; it reads no audited service"
    assert {"dynamodb:PutItem", "sns:Publish"} <= verdict


def test_the_verdict_may_make_every_call_the_sinks_make(synth: Synthesized) -> None:
    """writes/sinks.py's table and topic calls, read from its source, are each granted to the Verdict function."""
    source = (ROOT / "functions" / "gpuaudit" / "writes" / "sinks.py").read_text()
    calls = {(client, method) for client, method in re.findall(r"\b(ddb|sns)\.(\w+)\(", source)}
    needed = {("dynamodb" if c == "ddb" else "sns") + ":" + "".join(p.title() for p in m.split("_")) for c, m in calls}
    granted = actions_of(identity_statements(synth), step_roles(synth)["verdict"])
    assert needed and needed <= granted, sorted(needed - granted)


def test_reads_are_scoped_where_the_service_allows(synth: Synthesized) -> None:
    functions = set(step_roles(synth).values())
    for role, statement in identity_statements(synth):
        if role not in functions:
            continue  # the state machine's vended-log delivery also lists log groups, on '*' (CDK-generated)
        actions = set(_list(statement["Action"]))
        if actions & {"sagemaker:DescribeCluster", "sagemaker:ListTags"}:
            assert ":cluster/*" in json.dumps(statement["Resource"]), role
        if actions & {"logs:StartQuery", "logs:DescribeLogGroups"}:
            assert ":log-group:*" in json.dumps(statement["Resource"]), role


def borrowed_readers(path: Path) -> list[ast.AST]:
    """The functions a handler imports from the collectors (`from gpuaudit.collectors.X import f`): their calls
    are the handler's calls too, and its policy must allow them."""
    borrowed: list[ast.AST] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpuaudit.collectors."):
            module = ROOT / "functions" / (node.module or "").replace(".", "/")
            names = {alias.name for alias in node.names}
            tree = ast.parse(module.with_suffix(".py").read_text(encoding="utf-8"))
            borrowed += [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in names]
    return borrowed


def collector_operations(paths: list[Path], follow_imports: bool = False) -> set[str]:
    """Every `aws.call("svc", "Op")` / `aws.paginate(...)` / `aws.read_all(gaps, why, "svc", "Op")` in the
    source, as IAM actions (with `follow_imports`, also in the collector functions the source imports)."""
    found = set()
    trees: list[tuple[Path, ast.AST]] = []
    for path in paths:
        trees.append((path, ast.parse(path.read_text(encoding="utf-8"))))
        if follow_imports:
            trees += [(path, function) for function in borrowed_readers(path)]
    for path, tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("call", "paginate", "read_all")):
                continue
            receiver = node.func.value
            if not ((isinstance(receiver, ast.Name) and receiver.id == "aws")
                    or (isinstance(receiver, ast.Attribute) and receiver.attr == "aws")):
                continue
            service, operation = node.args[2:4] if node.func.attr == "read_all" else node.args[:2]
            assert isinstance(service, ast.Constant) and isinstance(operation, ast.Constant), \
                f"{path.name}:{node.lineno}: a computed operation cannot be checked against IAM"
            found.add(iam_action(service.value, operation.value))
    return found


DISCOVERY = ROOT / "functions/gpuaudit/collectors/discovery.py"  # the plan's reads (and the MCP server's), no step's


@pytest.mark.parametrize(("sources", "granted"), [
    (sorted(set((ROOT / "functions/gpuaudit/collectors").glob("*.py")) - {DISCOVERY}), AUDIT_READS),
    ([ROOT / "functions/handlers/targets.py", DISCOVERY], PLAN_READS),
], ids=["collectors", "plan"])
def test_the_read_policy_covers_every_operation_the_code_calls(sources: list[Path], granted: dict[str, str]) -> None:
    called = collector_operations(sources, follow_imports=granted is PLAN_READS)
    assert called, "the scan found no AWS call: the pattern no longer matches the code"
    assert called - set(granted) == set(), f"called but not granted (add to infra/permissions.py): " \
                                           f"{sorted(called - set(granted))}"
    assert set(granted) - called == set(), f"granted but never called: {sorted(set(granted) - called)}"


def test_the_template_grants_the_read_policy_as_declared(synth: Synthesized) -> None:
    statements, roles = identity_statements(synth), step_roles(synth)
    for step in ("inventory", "collect_logs", "finish"):
        assert actions_of(statements, roles[step]) & READS == set(AUDIT_READS), step


MEMBER_ROLE = "arn:aws:iam::444455556666:role/GpuAuditReadOnlyRole"


def test_member_account_clusters_are_read_through_their_role_and_only_by_the_collectors(synth: Synthesized) -> None:
    """#14 item 5: a cluster of a member account (cdk.json `member_roles`) is read through that account's
    read-only role: the three collecting functions may assume exactly that role, nothing else may."""
    config = {**TEST_CONFIG, "member_roles": {"llm-pretrain-b200": {
        "role_arn": MEMBER_ROLE, "external_id_parameter": "/gpuaudit/external-id/b200"}}}
    member = synthesize(config=config)
    statements, roles = identity_statements(member), step_roles(member)
    for module, role in roles.items():
        assuming = [s for r, s in statements if r == role and "sts:AssumeRole" in _list(s["Action"])]
        if module in ("inventory", "collect_logs", "finish"):
            (statement,) = assuming
            assert _list(statement["Resource"]) == [MEMBER_ROLE]
        else:
            assert assuming == [], module
        reading = [s for r, s in statements if r == role and "ssm:GetParameter" in _list(s["Action"])]
        if module in ("inventory", "collect_logs", "finish"):  # the external ID's parameter, and only it
            (statement,) = reading
            (arn,) = _list(statement["Resource"])
            assert json.dumps(arn).endswith(':parameter/gpuaudit/external-id/b200"]]}')
        else:
            assert reading == [], module
    # the role and its external ID are in no environment: the deployment layer names the role, SSM holds the ID
    assert "b200" not in json.dumps([f["Properties"]["Environment"] for f in
                                     member.resources("AWS::Lambda::Function").values()])
    # without member roles, no function may assume anything (the default test stack)
    assert not [s for _, s in identity_statements(synth) if "sts:AssumeRole" in _list(s["Action"])]


@pytest.mark.parametrize(("bus", "arn"), [
    (None, "arn:aws:events:us-west-2:123456789012:event-bus/default"),
    ("arn:aws:events:us-east-1:111122223333:event-bus/central",
     "arn:aws:events:us-east-1:111122223333:event-bus/central"),
])
def test_findings_are_put_on_the_configured_bus_only(bus: str | None, arn: str) -> None:
    """Only the Verdict role may put events, only events:PutEvents, only on the configured bus (the default bus
    when none is configured), and its environment names that bus; `publish_events: false` grants and sets nothing."""
    from stack_edges import StackPolicies

    synth = synthesize(config={**TEST_CONFIG, **({"event_bus": bus} if bus else {})})
    names = StackPolicies(synth.template).names
    granted = [(role, names.resolve(statement["Resource"])) for role, statement in identity_statements(synth)
               if set(_list(statement["Action"])) & EVENT_PUBLISHING]
    assert granted == [(step_roles(synth)["verdict"], arn)]
    (statement,) = [s for r, s in identity_statements(synth) if "events:PutEvents" in _list(s["Action"])]
    assert _list(statement["Action"]) == ["events:PutEvents"]
    assert statement["Condition"] == {"StringEquals": {"events:source": "gpuaudit"}}  # only as gpuaudit
    verdict = next(f for f in synth.resources("AWS::Lambda::Function").values()
                   if f["Properties"]["Handler"] == "handlers.verdict.handler")
    assert names.resolve(verdict["Properties"]["Environment"]["Variables"]["EVENT_BUS"]) == arn
    silent = synthesize(config={**TEST_CONFIG, "publish_events": False})
    assert not [s for _, s in identity_statements(silent) if "events:PutEvents" in _list(s["Action"])]
    assert not [f for f in silent.resources("AWS::Lambda::Function").values()
                if "EVENT_BUS" in f["Properties"].get("Environment", {}).get("Variables", {})]


def test_the_verdict_role_may_put_events_only_as_gpuaudit_on_its_bus(synth: Synthesized) -> None:
    """Evaluated as AWS does (tests/infra/policy_eval.py): the source condition holds, another source or bus is
    denied."""
    from policy_eval import Request, role
    from stack_edges import StackPolicies

    policies = StackPolicies(synth.template)
    verdict = next(f for f in synth.resources("AWS::Lambda::Function").values()
                   if f["Properties"]["Handler"] == "handlers.verdict.handler")
    who = role(policies.names.resolve(verdict["Properties"]["Role"]))
    bus = "arn:aws:events:us-west-2:123456789012:event-bus/default"

    def allowed(resource: str, source: str) -> bool:
        context = {"aws:SecureTransport": True, "events:source": source}
        return bool(policies.decide(Request(who, "events:PutEvents", resource, context), "resource"))

    assert allowed(bus, "gpuaudit")
    assert not allowed(bus, "aws.ec2") and not allowed(bus.replace("/default", "/other"), "gpuaudit")
