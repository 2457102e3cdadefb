"""Cross-account audits from the deployed auditor (#14 item 5): a cluster configured in `member_roles` is read
through that account's read-only role (with its external ID); every other cluster on the auditor's own role;
a role that cannot be assumed is a named failure of the step (its Catch makes it a gap), never a silent read of
the wrong account."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from handlers import runtime
from moto import mock_aws

from gpuaudit.collectors.aws import CallFailed, assumed_session

ROLE = "arn:aws:iam::444455556666:role/GpuAuditReadOnlyRole"


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUAUDIT_MEMBER_ROLES", json.dumps({"hp-member": {"role_arn": ROLE,
                                                                           "external_id": "gpuaudit-7f3a"}}))
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_REGION": "us-west-2"}.items():
        monkeypatch.setenv(name, value)


def test_a_member_cluster_is_read_through_its_role_and_others_on_the_auditors_own(configured: None) -> None:
    with mock_aws():
        session = boto3.Session(region_name="us-west-2")
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
