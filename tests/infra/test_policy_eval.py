"""policy_eval against AWS's documented evaluation logic, one documented rule per case (issue #33 item 1).

Sources: IAM User Guide "Policy evaluation logic", "Policy evaluation for requests within a single account",
"Condition operators", "AWS JSON policy elements: Principal"; KMS Developer Guide "Default key policy"; SNS
Developer Guide "Enable compatibility between event sources from AWS services and encrypted topics"."""

from __future__ import annotations

from typing import Any

import pytest
from policy_eval import Names, Request, Unresolvable, arn_like, condition_holds, evaluate, role, service

ROLE = "arn:aws:iam::123456789012:role/Verdict"
OTHER_ROLE = "arn:aws:iam::123456789012:role/Plan"
TOPIC = "arn:aws:sns:us-west-2:123456789012:alerts"
KEY = "arn:aws:kms:us-west-2:123456789012:key/k1"
ALARM = "arn:aws:cloudwatch:us-west-2:123456789012:alarm:GpuAudit-StepErrors"
TLS = {"aws:SecureTransport": True}
SSL_ONLY = {"Sid": "SslOnly", "Effect": "Deny", "Principal": "*", "Action": "sns:Publish", "Resource": TOPIC,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
ROOT = {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "kms:*", "Resource": "*"}


def allow(action: str, resource: str, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def publish(who: Any = None, context: dict[str, Any] | None = None) -> Request:
    return Request(who or role(ROLE), "sns:Publish", TOPIC, TLS if context is None else context)


def test_every_request_is_implicitly_denied() -> None:
    assert not evaluate(publish())
    assert not evaluate(publish(), identity=[allow("sns:Publish", "arn:aws:sns:us-west-2:123456789012:other")])


def test_within_one_account_the_identity_policy_suffices() -> None:
    assert evaluate(publish(), identity=[allow("sns:Publish", TOPIC)], resource_policy=[SSL_ONLY])


def test_an_explicit_deny_wins_over_any_allow() -> None:
    plain_http = publish(context={"aws:SecureTransport": False})
    identity = [allow("sns:Publish", TOPIC)]
    decision = evaluate(plain_http, identity=identity, resource_policy=[SSL_ONLY])
    assert not decision and "explicit Deny" in decision.reason
    assert not evaluate(publish(), identity=[*identity, {**allow("sns:*", "*"), "Effect": "Deny"}])


def test_a_resource_policy_naming_the_role_allows_without_an_identity_policy() -> None:
    named = {**allow("sns:Publish", TOPIC), "Principal": {"AWS": ROLE}}
    assert evaluate(publish(), resource_policy=[named])
    assert not evaluate(publish(role(OTHER_ROLE)), resource_policy=[named])


def test_an_account_principal_delegates_to_iam_and_allows_nothing_by_itself() -> None:
    account = {**allow("sns:Publish", TOPIC), "Principal": {"AWS": "arn:aws:iam::123456789012:root"}}
    assert not evaluate(publish(), resource_policy=[account])
    bare = {**account, "Principal": {"AWS": "123456789012"}}
    assert not evaluate(publish(), resource_policy=[bare])
    # ... but a Deny naming the account applies to its roles
    assert not evaluate(publish(), identity=[allow("sns:Publish", TOPIC)], resource_policy=[{**bare, "Effect": "Deny"}])


def test_a_service_principal_has_no_identity_policy_only_a_resource_policy_can_allow_it() -> None:
    cloudwatch = service("cloudwatch.amazonaws.com")
    assert not evaluate(publish(cloudwatch), identity=[allow("sns:Publish", TOPIC)], resource_policy=[SSL_ONLY])
    grant = {**allow("sns:Publish", TOPIC), "Principal": {"Service": "cloudwatch.amazonaws.com"}}
    assert evaluate(publish(cloudwatch), resource_policy=[SSL_ONLY, grant])
    assert not evaluate(publish(service("events.amazonaws.com")), resource_policy=[SSL_ONLY, grant])
    assert not evaluate(publish(cloudwatch, {"aws:SecureTransport": False}), resource_policy=[SSL_ONLY, grant]), \
        "Principal '*' in a Deny covers service principals too"


def test_a_key_policy_must_enable_iam_before_an_identity_policy_can_use_the_key() -> None:
    use = Request(role(ROLE), "kms:GenerateDataKey", KEY, TLS)
    identity = [allow("kms:GenerateDataKey", KEY)]
    assert evaluate(use, identity, key_policy=[ROOT])
    assert not evaluate(use, identity, key_policy=[]), "IAM alone never grants a KMS key"
    assert not evaluate(use, [], key_policy=[ROOT]), "the root statement delegates; it grants no role by itself"
    direct = {**allow("kms:GenerateDataKey*", "*"), "Principal": {"AWS": ROLE}}
    assert evaluate(use, [], key_policy=[direct])


def test_a_service_uses_a_key_only_as_its_key_policy_allows_with_the_conditions_the_service_sends() -> None:
    grant = {**allow(["kms:Decrypt", "kms:GenerateDataKey*"], "*"),
             "Principal": {"Service": "cloudwatch.amazonaws.com"},
             "Condition": {"StringEquals": {"aws:SourceAccount": "123456789012"},
                           "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:us-west-2:123456789012:alarm:GpuAudit-*"}}}
    context = {**TLS, "aws:SourceAccount": "123456789012", "aws:SourceArn": ALARM}
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        assert evaluate(Request(service("cloudwatch.amazonaws.com"), action, KEY, context), key_policy=[ROOT, grant])
    assert not evaluate(Request(service("cloudwatch.amazonaws.com"), "kms:Encrypt", KEY, context), key_policy=[grant])
    elsewhere = {**context, "aws:SourceArn": "arn:aws:cloudwatch:us-west-2:123456789012:alarm:someone-else"}
    assert not evaluate(Request(service("cloudwatch.amazonaws.com"), "kms:Decrypt", KEY, elsewhere),
                        key_policy=[ROOT, grant])
    # EventBridge's KMS request through SNS carries no source keys: a conditioned grant never matches it
    eventbridge = {**grant, "Principal": {"Service": "events.amazonaws.com"}}
    assert not evaluate(Request(service("events.amazonaws.com"), "kms:Decrypt", KEY, TLS), key_policy=[eventbridge])


@pytest.mark.parametrize(("pattern", "action", "matches"), [
    ("kms:GenerateDataKey*", "kms:GenerateDataKey", True),
    ("kms:GenerateDataKey*", "KMS:generatedatakeywithoutplaintext", True),  # actions: case-insensitive
    ("s3:Get*", "s3:PutObject", False),
    ("sns:Publis?", "sns:Publish", True),
    ("*", "states:StartExecution", True),
])
def test_action_wildcards(pattern: str, action: str, matches: bool) -> None:
    assert bool(evaluate(Request(role(ROLE), action, "*"), identity=[allow(pattern, "*")])) is matches


@pytest.mark.parametrize(("pattern", "arn", "matches"), [
    ("arn:aws:s3:::bucket/payloads/*", "arn:aws:s3:::bucket/payloads/a/b.json", True),
    ("arn:aws:s3:::bucket/payloads/*", "arn:aws:s3:::bucket/results/a.json", False),
    ("arn:aws:s3:::bucket/payloads/*", "arn:aws:s3:::Bucket/payloads/a.json", False),  # resources: case-sensitive
    ("arn:aws:logs:us-west-2:123456789012:log-group:*", "arn:aws:logs:us-west-2:123456789012:log-group:/a:log-stream:b",
     True),
    ("arn:aws:sns:*:123456789012:alerts", TOPIC, True),
    ("arn:aws:sns:*:123456789012:alerts", "arn:aws:sns:us-west-2:444455556666:alerts", False),
    # each colon-separated part on its own: a `*` in one part does not reach into the next
    ("arn:aws:states:us-west-2:1:execution:M:*", "arn:aws:states:us-west-2:1:execution:M/Label:0a", False),
    ("arn:aws:states:us-west-2:1:execution:M*", "arn:aws:states:us-west-2:1:execution:M/Label:0a", True),
    ("arn:aws:cloudwatch:*:*:alarm:GpuAudit-*", ALARM, True),
    ("*", "anything at all", True),
])
def test_resource_and_arn_matching(pattern: str, arn: str, matches: bool) -> None:
    assert arn_like(pattern, arn) is matches


@pytest.mark.parametrize(("condition", "context", "holds"), [
    ({"StringEquals": {"aws:SourceAccount": "123456789012"}}, {"aws:SourceAccount": "123456789012"}, True),
    ({"StringEquals": {"aws:SourceAccount": "123456789012"}}, {"aws:SourceAccount": "444455556666"}, False),
    ({"StringEquals": {"aws:SourceAccount": "123456789012"}}, {}, False),  # a missing key: false
    ({"StringEquals": {"AWS:SOURCEACCOUNT": "123456789012"}}, {"aws:SourceAccount": "123456789012"}, True),  # key names
    ({"StringEquals": {"s3:prefix": "Cache/"}}, {"s3:prefix": "cache/"}, False),  # values: case-sensitive
    ({"StringEqualsIgnoreCase": {"s3:prefix": "Cache/"}}, {"s3:prefix": "cache/"}, True),
    ({"StringLike": {"s3:prefix": ["cache/*"]}}, {"s3:prefix": "cache/a/b"}, True),
    ({"StringLike": {"s3:prefix": ["cache/*"]}}, {"s3:prefix": "payloads/a"}, False),
    ({"StringLike": {"s3:prefix": ["results/*", "cache/*"]}}, {"s3:prefix": "cache/a"}, True),  # values: OR
    ({"StringNotEquals": {"aws:SourceAccount": "1"}}, {}, True),  # negated and missing: true
    ({"ArnNotLike": {"aws:SourceArn": "arn:aws:sns:*:*:x"}}, {}, True),
    ({"StringEqualsIfExists": {"aws:SourceAccount": "1"}}, {}, True),
    ({"StringEqualsIfExists": {"aws:SourceAccount": "1"}}, {"aws:SourceAccount": "2"}, False),
    ({"ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:us-west-2:123456789012:alarm:GpuAudit-*"}},
     {"aws:SourceArn": ALARM}, True),
    ({"ArnEquals": {"aws:SourceArn": "arn:aws:events:us-west-2:123456789012:rule/Schedule"}},
     {"aws:SourceArn": "arn:aws:events:us-west-2:123456789012:rule/Other"}, False),
    ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:SecureTransport": False}, True),
    ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:SecureTransport": True}, False),
    ({"Bool": {"aws:SecureTransport": "false"}}, {}, False),
    ({"Null": {"aws:SourceArn": "true"}}, {}, True),
    ({"Null": {"aws:SourceArn": "true"}}, {"aws:SourceArn": ALARM}, False),
    # every operator and key must hold (AND)
    ({"StringEquals": {"aws:SourceAccount": "123456789012"}, "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:*"}},
     {"aws:SourceAccount": "123456789012", "aws:SourceArn": "arn:aws:events:us-west-2:123456789012:rule/r"}, False),
])
def test_condition_operators(condition: dict[str, Any], context: dict[str, Any], holds: bool) -> None:
    assert condition_holds(condition, context) is holds


def test_an_operator_not_modelled_is_an_error_never_a_met_condition() -> None:
    with pytest.raises(Unresolvable):
        condition_holds({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, {"aws:SourceIp": "10.1.2.3"})


TEMPLATE = {"Resources": {
    "Topic": {"Type": "AWS::SNS::Topic", "Properties": {}},
    "Named": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "gpuaudit-alerts"}},
    "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
    "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
    "Machine": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {}},
    "Rule": {"Type": "AWS::Events::Rule", "Properties": {}},
}}


@pytest.mark.parametrize(("value", "resolved"), [
    ({"Ref": "Topic"}, "arn:aws:sns:us-west-2:123456789012:Topic"),  # a topic's Ref is its ARN
    ({"Ref": "Named"}, "arn:aws:sns:us-west-2:123456789012:gpuaudit-alerts"),  # an explicit name is used
    ({"Ref": "Queue"}, "https://sqs.us-west-2.amazonaws.com/123456789012/Queue"),  # a queue's Ref is its URL
    ({"Fn::GetAtt": ["Queue", "Arn"]}, "arn:aws:sqs:us-west-2:123456789012:Queue"),
    ({"Ref": "Bucket"}, "bucket"),
    ({"Fn::GetAtt": ["Rule", "Arn"]}, "arn:aws:events:us-west-2:123456789012:rule/Rule"),
    ({"Fn::Join": ["", [{"Ref": "Machine"}, "/AuditClusters"]]},
     "arn:aws:states:us-west-2:123456789012:stateMachine:Machine/AuditClusters"),
    ({"Fn::Sub": "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:${AWS::StackName}-*"},
     "arn:aws:cloudwatch:us-west-2:123456789012:alarm:GpuAudit-*"),
    ({"Fn::Sub": ["${Q}/x", {"Q": {"Fn::GetAtt": ["Queue", "Arn"]}}]}, "arn:aws:sqs:us-west-2:123456789012:Queue/x"),
    ({"Fn::Sub": "${Bucket.Arn}/*"}, "arn:aws:s3:::bucket/*"),
    ({"Fn::Select": [6, {"Fn::Split": [":", {"Ref": "Machine"}]}]}, "Machine"),
])
def test_intrinsics_resolve_symbolically_against_logical_ids(value: Any, resolved: str) -> None:
    assert Names(TEMPLATE).resolve(value) == resolved


def test_an_unknown_reference_or_intrinsic_is_an_error() -> None:
    with pytest.raises(Unresolvable):
        Names(TEMPLATE).resolve({"Ref": "NoSuchResource"})
    with pytest.raises(Unresolvable):
        Names(TEMPLATE).resolve({"Fn::ImportValue": "x"})
