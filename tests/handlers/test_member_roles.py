"""Cross-account audits from the deployed auditor (#14 item 5): a cluster configured in `member_roles` is read
through that account's read-only role (with its external ID); every other cluster on the auditor's own role;
a role that cannot be assumed is a named failure of the step (its Catch makes it a gap), never a silent read of
the wrong account."""

from __future__ import annotations

import json
import os
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from handlers import runtime
from lambda_harness import deploy_configuration
from moto import mock_aws

from gpuaudit.collectors.aws import CallFailed, assumed_session

ROLE = "arn:aws:iam::444455556666:role/GpuAuditReadOnlyRole"


PARAMETER = "/gpuaudit/external-id/member"


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployment document the stack ships for this cdk.json `member_roles` (no external ID in it)."""
    deploy_configuration(monkeypatch, {"clusters": ["hp-own", "hp-member"], "member_roles": {
        "hp-member": {"role_arn": ROLE, "external_id_parameter": PARAMETER}}})
    monkeypatch.setattr(runtime, "_EXTERNAL_IDS", {})
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_REGION": "us-west-2"}.items():
        monkeypatch.setenv(name, value)


def _recorded(session: boto3.Session) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    session.events.register("provide-client-params.sts.AssumeRole", lambda params, **_: calls.append(("sts", params)))
    session.events.register("provide-client-params.ssm.GetParameter", lambda params, **_: calls.append(("ssm", params)))
    return calls


def test_the_external_id_is_read_from_its_securestring_once_per_container_and_passed(configured: None) -> None:
    with mock_aws():
        session = boto3.Session(region_name="us-west-2")
        session.client("ssm").put_parameter(Name=PARAMETER, Value="gpuaudit-7f3a-from-ssm", Type="SecureString")
        calls = _recorded(session)
        runtime.audit_port(session, runtime.utc_now, None, "hp-member")
        runtime.audit_port(session, runtime.utc_now, None, "hp-member")
    assert [c for c in calls if c[0] == "ssm"] == [("ssm", {"Name": PARAMETER, "WithDecryption": True})]
    assert [p["ExternalId"] for service, p in calls if service == "sts"] == ["gpuaudit-7f3a-from-ssm"] * 2
    assert "gpuaudit-7f3a" not in json.dumps(dict(os.environ))  # the secret is in no environment variable


def test_an_unreadable_external_id_parameter_is_a_named_failure(configured: None) -> None:
    with mock_aws():
        session = boto3.Session(region_name="us-west-2")
        with pytest.raises(CallFailed) as failed:
            runtime.audit_port(session, runtime.utc_now, None, "hp-member")
    assert (failed.value.service, failed.value.operation, failed.value.code) == ("ssm", "GetParameter",
                                                                                 "ParameterNotFound")
    assert PARAMETER in failed.value.message


def test_a_member_cluster_is_read_through_its_role_and_others_on_the_auditors_own(configured: None) -> None:
    with mock_aws():
        session = boto3.Session(region_name="us-west-2")
        session.client("ssm").put_parameter(Name=PARAMETER, Value="gpuaudit-7f3a", Type="SecureString")
        own = runtime.audit_port(session, runtime.utc_now, None, "hp-own")
        assert own.session is session
        member = runtime.audit_port(session, runtime.utc_now, None, "hp-member")
        identity = member.session.client("sts").get_caller_identity()
        assert identity["Account"] == "444455556666"
        assert identity["Arn"].endswith("assumed-role/GpuAuditReadOnlyRole/gpuaudit-hp-member")
        assert member.region == "us-west-2"


class _Session:
    """Only what assumed_session asks of a session: its STS client (stubbed) and region."""

    region_name = "us-west-2"

    def __init__(self, client: Any) -> None:
        self._client = client

    def client(self, _service: str) -> Any:
        return self._client


def test_a_role_that_cannot_be_assumed_is_a_named_failure() -> None:
    sts = boto3.client("sts", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(sts) as stub:
        stub.add_client_error("assume_role", "AccessDenied", "not authorized to perform: sts:AssumeRole",
                              expected_params={"RoleArn": ROLE, "RoleSessionName": "gpuaudit-hp-member",
                                               "ExternalId": "gpuaudit-7f3a"})
        with pytest.raises(CallFailed) as failed:
            assumed_session(_Session(sts), ROLE, "gpuaudit-7f3a", "gpuaudit-hp-member")  # type: ignore[arg-type]
    assert (failed.value.service, failed.value.operation, failed.value.code) == ("sts", "AssumeRole", "AccessDenied")
