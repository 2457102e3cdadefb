"""Gaps are typed in Evidence (issue #12): why a read failed is a kind, prose is made only for the Result."""

from __future__ import annotations

import pytest

from gpuaudit.collectors.aws import CallFailed
from gpuaudit.model.evidence import Gap


@pytest.mark.parametrize(("code", "kind"), [
    ("AccessDeniedException", "denied"), ("UnauthorizedOperation", "denied"),
    ("ThrottlingException", "throttled"), ("RequestLimitExceeded", "throttled"),
    ("ExpiredToken", "expired-credentials"), ("ServiceUnavailableException", "unavailable"),
    ("EndpointConnectionError", "unreachable"), ("AuditDeadlineExceeded", "deadline"),
    ("ValidationException", "not-read"),
])
def test_a_failed_call_becomes_a_gap_of_its_kind_naming_the_call(code: str, kind: str) -> None:
    gap = CallFailed("ec2", "DescribeCapacityReservations", code, "why").gap_for("capacity reservations not read")
    assert gap.kind == kind
    assert gap.closing_call == "ec2 DescribeCapacityReservations"
    assert gap.unseen == "capacity reservations not read"
    assert gap.prose() == (f"Not checked: ec2 DescribeCapacityReservations failed ({code}: why) — capacity "
                           "reservations not read")


def test_truncation_and_capability_limits_read_as_their_own_sentences() -> None:
    assert Gap(kind="truncated", service="logs", operation="GetQueryResults",
               unseen="rows beyond 10000 not read").prose() == "Visibility gap: rows beyond 10000 not read"
    assert Gap(kind="unsupported", service="sagemaker", operation="ListClusterEvents",
               unseen="events need Continuous provisioning").prose() == \
        "Capability limit: events need Continuous provisioning"


def test_a_gap_without_an_error_code_names_the_call_and_what_it_leaves_unseen() -> None:
    gap = Gap(kind="timed-out", service="logs", operation="GetQueryResults", unseen="gpu-lines query still Running")
    assert gap.prose() == "Not checked: logs GetQueryResults — gpu-lines query still Running"


def test_a_gap_survives_the_json_that_crosses_state_machine_steps() -> None:
    gap = CallFailed("sagemaker", "ListClusterNodes", "ThrottlingException", "slow").gap_for(
        "node list incomplete", scope="node-list")
    assert Gap.model_validate_json(gap.model_dump_json()) == gap
