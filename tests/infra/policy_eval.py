"""IAM policy evaluation as strict as AWS, for the cases the synthesized template uses (issue #33 item 1).

No maintained library evaluates resource and key policies for service principals against a CloudFormation
template (the package lists offer linters such as parliament and cloudsplaining, identity-only simulators
such as iam-ape, and principalmapper, unmaintained since 2022, which models IAM users and roles as callers, not
service principals, and cannot read intrinsics), so this is small and table-tested
(tests/infra/test_policy_eval.py) against AWS's documented logic:

- IAM User Guide, "Policy evaluation logic" and "Policy evaluation for requests within a single account": every
  request is implicitly denied; an explicit Deny in any applicable policy wins; within one account, an Allow in the
  identity policy or in the resource policy suffices.
- A service principal (cloudwatch.amazonaws.com, events.amazonaws.com) has no identity policy: only a resource
  policy naming it can allow it.
- An account principal (`arn:aws:iam::<account>:root`, or the bare account ID) in a resource policy allows nothing
  by itself: it delegates to that account's identity policies (IAM User Guide, "AWS JSON policy elements:
  Principal"); it does match the account's roles for a Deny.
- KMS (Developer Guide, "Default key policy", "Allows access to the AWS account and enables IAM policies"): no
  identity policy grants use of a key unless the key policy allows the account principal; a key policy Allow naming
  the caller grants it directly. A call to a KMS-encrypted SNS topic also needs GenerateDataKey and Decrypt on its
  key (SNS Developer Guide, "Enable compatibility between event sources from AWS services and encrypted topics").
- Condition operators (IAM User Guide, "Condition operators"): a key absent from the request context makes the
  condition false, except for the negated operators (`…Not…`), which are true, `…IfExists` (true) and `Null`. An
  operator this module does not know is an error, never "met".
- Resource and ArnLike/ArnEquals matching: each of the six colon-separated ARN parts is matched on its own, with
  `*` and `?` (the last part may itself hold colons); actions match case-insensitively, resources case-sensitively.

CloudFormation intrinsics (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split) are resolved symbolically
(`Names`): a resource's physical name is its explicit name property if it has one, else its logical ID, so an ARN
in a policy and the ARN of the caller or target resolve to the same string exactly when they name the same
resource.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REGION = "us-west-2"
ACCOUNT = "123456789012"
STACK_NAME = "GpuAudit"

# Per resource type: (the property naming it, if any; the ARN of a name; what Ref returns: "name" or "arn").
_ARN = {
    "AWS::SNS::Topic": ("TopicName", "arn:aws:sns:{r}:{a}:{n}", "arn"),
    "AWS::SQS::Queue": ("QueueName", "arn:aws:sqs:{r}:{a}:{n}", "url"),
    "AWS::S3::Bucket": ("BucketName", "arn:aws:s3:::{n}", "name"),
    "AWS::DynamoDB::Table": ("TableName", "arn:aws:dynamodb:{r}:{a}:table/{n}", "name"),
    "AWS::KMS::Key": (None, "arn:aws:kms:{r}:{a}:key/{n}", "name"),
    "AWS::Lambda::Function": ("FunctionName", "arn:aws:lambda:{r}:{a}:function:{n}", "name"),
    "AWS::IAM::Role": ("RoleName", "arn:aws:iam::{a}:role/{n}", "name"),
    "AWS::StepFunctions::StateMachine": ("StateMachineName", "arn:aws:states:{r}:{a}:stateMachine:{n}", "arn"),
    "AWS::Events::Rule": ("Name", "arn:aws:events:{r}:{a}:rule/{n}", "name"),
    "AWS::CloudWatch::Alarm": ("AlarmName", "arn:aws:cloudwatch:{r}:{a}:alarm:{n}", "name"),
    "AWS::Logs::LogGroup": ("LogGroupName", "arn:aws:logs:{r}:{a}:log-group:{n}:*", "name"),
}


class Unresolvable(ValueError):
    """A template value this module cannot turn into a string: the check must not guess."""


@dataclass(frozen=True)
class Names:
    """Symbolic physical names of a template's resources; `physical` overrides a logical ID's name (for tests that
    run the handlers against moto resources of other names)."""

    template: Mapping[str, Any]
    region: str = REGION
    account: str = ACCOUNT
    physical: Mapping[str, str] = field(default_factory=dict)

    def _resource(self, logical_id: str) -> dict[str, Any]:
        try:
            return dict(self.template["Resources"][logical_id])
        except KeyError:
            raise Unresolvable(f"no resource {logical_id!r} in the template") from None

    def name(self, logical_id: str) -> str:
        if logical_id in self.physical:
            return self.physical[logical_id]
        resource = self._resource(logical_id)
        prop = _ARN.get(resource["Type"], (None, "", ""))[0]
        given = resource.get("Properties", {}).get(prop) if prop else None
        if given is not None:
            return str(self.resolve(given))
        return logical_id.lower() if resource["Type"] == "AWS::S3::Bucket" else logical_id

    def arn(self, logical_id: str) -> str:
        kind = self._resource(logical_id)["Type"]
        if kind not in _ARN:
            raise Unresolvable(f"{logical_id}: no ARN format for {kind}")
        return _ARN[kind][1].format(r=self.region, a=self.account, n=self.name(logical_id))

    def ref(self, logical_id: str) -> str:
        pseudo = {"AWS::Partition": "aws", "AWS::Region": self.region, "AWS::AccountId": self.account,
                  "AWS::URLSuffix": "amazonaws.com", "AWS::StackName": STACK_NAME}
        if logical_id in pseudo:
            return pseudo[logical_id]
        kind = self._resource(logical_id)["Type"]
        returns = _ARN.get(kind, (None, "", "name"))[2]
        if returns == "arn":
            return self.arn(logical_id)
        if returns == "url":
            return f"https://sqs.{self.region}.amazonaws.com/{self.account}/{self.name(logical_id)}"
        return self.name(logical_id)

    def get_att(self, logical_id: str, attribute: str) -> str:
        if attribute in ("Arn", "TopicArn"):
            return self.arn(logical_id)
        if attribute in ("QueueName", "TopicName", "Name"):
            return self.name(logical_id)
        if attribute == "QueueUrl":
            return self.ref(logical_id)
        raise Unresolvable(f"{logical_id}.{attribute}: attribute not modelled")

    def resolve(self, value: Any) -> Any:
        """A template value with every intrinsic replaced by its symbolic string."""
        if isinstance(value, (str, bool, int, float)) or value is None:
            return value
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            raise Unresolvable(repr(value))
        if len(value) != 1 or not next(iter(value)).startswith(("Fn::", "Ref")):
            return {k: self.resolve(v) for k, v in value.items()}
        (function, argument), = value.items()
        if function == "Ref":
            return self.ref(argument)
        if function == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            return self.get_att(logical_id, attribute)
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(str(p) for p in self.resolve(parts))
        if function == "Fn::Select":
            index, items = argument
            return self.resolve(items)[int(index)]
        if function == "Fn::Split":
            separator, text = argument
            return str(self.resolve(text)).split(separator)
        if function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            bound = {k: str(self.resolve(v)) for k, v in variables.items()}

            def substitute(match: re.Match[str]) -> str:
                name = match[1]
                if name in bound:
                    return bound[name]
                if "." in name and not name.startswith("AWS::"):
                    return self.get_att(*name.split(".", 1))
                return self.ref(name)

            return re.sub(r"\$\{([^}!]+)\}", substitute, text)
        raise Unresolvable(f"intrinsic {function} not modelled")


@dataclass(frozen=True)
class Principal:
    """Who calls: an IAM role (its ARN) or an AWS service principal."""

    kind: str  # "AWS" | "Service"
    value: str

    @property
    def account(self) -> str | None:
        return self.value.split(":")[4] if self.kind == "AWS" else None


def role(arn: str) -> Principal:
    return Principal("AWS", arn)


def service(name: str) -> Principal:
    return Principal("Service", name)


@dataclass(frozen=True)
class Request:
    principal: Principal
    action: str
    resource: str
    context: Mapping[str, Any] = field(default_factory=dict)  # condition keys, as the service sends them


Statement = Mapping[str, Any]


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _glob(pattern: str, text: str, case_sensitive: bool = True) -> bool:
    if not case_sensitive:
        pattern, text = pattern.lower(), text.lower()
    # fnmatch treats [...] as a set; IAM knows only * and ?
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, flags=re.DOTALL) is not None


def arn_like(pattern: str, arn: str) -> bool:
    """IAM's ARN matching: the six colon-separated parts one by one (the resource part may hold colons)."""
    if pattern == "*":
        return True
    if not (pattern.startswith("arn:") and arn.startswith("arn:")):
        return _glob(pattern, arn)
    wanted, given = pattern.split(":", 5), arn.split(":", 5)
    if len(wanted) != 6 or len(given) != 6:
        return False
    return all(_glob(w, g) for w, g in zip(wanted, given, strict=True))


def _matches_principal(element: Any, principal: Principal) -> bool:
    if element == "*":
        return True
    if not isinstance(element, Mapping):
        raise Unresolvable(f"Principal {element!r}")
    for kind, values in element.items():
        for value in _list(values):
            if kind == "AWS" and value == "*":
                return True  # equivalent to "Principal": "*" (IAM User Guide, "All principals")
            if kind == principal.kind == "Service" and value == principal.value:
                return True
            if kind == principal.kind == "AWS":
                if value == principal.value:
                    return True
                if _account_of(value) == principal.account:
                    return True
    return False


def _account_of(value: str) -> str | None:
    if re.fullmatch(r"\d{12}", value):
        return value
    found = re.fullmatch(r"arn:aws:iam::(\d{12}):root", value)
    return found[1] if found else None


def _names_principal_itself(element: Any, principal: Principal) -> bool:
    """An Allow in a resource policy grants only to a principal it names (not through its account: that delegates
    to the account's identity policies)."""
    if element == "*":
        return True
    for kind, values in element.items():
        for value in _list(values):
            if kind == "AWS" and value == "*":
                return True
            if kind == principal.kind and value == principal.value:
                return True
    return False


_NEGATED = {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "ArnNotEquals", "ArnNotLike"}


def _compare(operator: str, wanted: str, given: Any) -> bool:
    given_text = str(given).lower() if isinstance(given, bool) else str(given)
    if operator in ("StringEquals", "StringNotEquals"):
        return wanted == given_text
    if operator in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return wanted.lower() == given_text.lower()
    if operator in ("StringLike", "StringNotLike"):
        return _glob(wanted, given_text)
    if operator in ("ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike"):
        return arn_like(wanted, given_text)
    if operator == "Bool":
        return wanted.lower() == given_text.lower()
    raise Unresolvable(f"condition operator {operator} not modelled")


def condition_holds(condition: Mapping[str, Mapping[str, Any]] | None, context: Mapping[str, Any]) -> bool:
    """Every operator's every key must hold (AND); a key's values are alternatives (OR)."""
    present = {k.lower(): v for k, v in context.items()}
    for full_operator, keys in (condition or {}).items():
        qualifier, _, operator = full_operator.rpartition(":")
        if_exists = operator.endswith("IfExists")
        operator = operator.removesuffix("IfExists")
        for key, wanted in keys.items():
            given = present.get(key.lower())
            wanted_values = [str(w).lower() if isinstance(w, bool) else str(w) for w in _list(wanted)]
            if operator == "Null":
                if (given is None) != (wanted_values[0].lower() == "true"):
                    return False
                continue
            if given is None:
                if if_exists or operator in _NEGATED:
                    continue
                return False
            given_values = _list(given)
            negated = operator in _NEGATED
            hits = [any(_compare(operator, w, g) for w in wanted_values) for g in given_values]
            if qualifier == "ForAllValues":
                ok = all(hits)
            elif qualifier in ("ForAnyValue", ""):
                ok = any(hits)
            else:
                raise Unresolvable(f"set operator {qualifier} not modelled")
            if negated:
                ok = not any(hits)
            if not ok:
                return False
    return True


def _applies(statement: Statement, request: Request, resource_policy: bool) -> bool:
    actions = statement.get("Action")
    if actions is not None:
        if not any(_glob(a, request.action, case_sensitive=False) for a in _list(actions)):
            return False
    elif any(_glob(a, request.action, case_sensitive=False) for a in _list(statement["NotAction"])):
        return False
    resources = statement.get("Resource")
    if resources is not None:
        if not any(arn_like(r, request.resource) for r in _list(resources)):
            return False
    elif "NotResource" in statement:
        if any(arn_like(r, request.resource) for r in _list(statement["NotResource"])):
            return False
    elif not resource_policy:
        return False  # an identity statement without Resource is invalid
    if resource_policy:
        if "Principal" in statement:
            if not _matches_principal(statement["Principal"], request.principal):
                return False
        elif "NotPrincipal" in statement:
            if _matches_principal(statement["NotPrincipal"], request.principal):
                return False
        else:
            raise Unresolvable(f"resource policy statement without Principal: {statement}")
    return condition_holds(statement.get("Condition"), request.context)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str

    def __bool__(self) -> bool:
        return self.allowed


def evaluate(request: Request, identity: Sequence[Statement] = (), resource_policy: Sequence[Statement] | None = None,
             key_policy: Sequence[Statement] | None = None) -> Decision:
    """One request: `identity` is the caller's identity policy (empty for a service principal), `resource_policy` the
    target's (None: the resource has none), `key_policy` given for a KMS key (the request is then a KMS call)."""
    owner = resource_policy if key_policy is None else key_policy
    for where, statements, is_resource in (("identity policy", identity, False), ("resource policy", owner, True)):
        for statement in statements or ():
            if statement.get("Effect") == "Deny" and _applies(statement, request, is_resource):
                return Decision(False, f"explicit Deny in the {where} ({statement.get('Sid', 'no Sid')})")
    identity_allows = request.principal.kind == "AWS" and any(
        s.get("Effect") == "Allow" and _applies(s, request, False) for s in identity)
    owner_allows = [s for s in owner or () if s.get("Effect") == "Allow" and _applies(s, request, True)]
    if any(_names_principal_itself(s["Principal"], request.principal) for s in owner_allows if "Principal" in s):
        return Decision(True, "allowed by the resource policy")
    if key_policy is not None:
        delegated = any(_account_of(v) == request.principal.account for s in owner_allows
                        for kind, values in dict(s.get("Principal", {})).items() if kind == "AWS"
                        for v in _list(values))
        if identity_allows and delegated:
            return Decision(True, "allowed by the identity policy, which the key policy enables (account principal)")
        return Decision(False, "the key policy allows this caller neither itself nor through its account's IAM"
                        if not identity_allows else "the key policy does not enable IAM policies for this account")
    if identity_allows:
        return Decision(True, "allowed by the identity policy")
    return Decision(False, "implicit deny: no policy allows it")
