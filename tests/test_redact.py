"""Account IDs never leave the auditor (RULES §0.7): ARN account fields, owner fields, the `@log`
prefix and bare 12-digit IDs are masked; ParallelCluster log-group timestamps are quoted intact."""

from __future__ import annotations

import pytest

from gpuaudit.report.redact import MASK, redact

ACCOUNT = "111122223333"
OTHER = "123456789012"


@pytest.mark.parametrize(("text", "expected"), [
    (f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:cluster/k3m9x2pq7wla",
     f"arn:aws:sagemaker:us-west-2:{MASK}:cluster/k3m9x2pq7wla"),
    (f"arn:aws:iam::{ACCOUNT}:role/sagemaker-exec", f"arn:aws:iam::{MASK}:role/sagemaker-exec"),
    (f"arn:aws:logs:us-west-2:{OTHER}:log-group:/aws/x:*", f"arn:aws:logs:us-west-2:{MASK}:log-group:/aws/x:*"),
    (f"arn:aws-us-gov:ec2:us-gov-west-1:{ACCOUNT}:capacity-reservation/cr-0123",
     f"arn:aws-us-gov:ec2:us-gov-west-1:{MASK}:capacity-reservation/cr-0123"),
])
def test_arn_account_fields_are_masked(text: str, expected: str):
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    f'"OwnerId": "{ACCOUNT}"',
    f'{{"OwnerId":"{OTHER}","InterfaceType":"efa"}}',
    f"OwnerId={ACCOUNT}",
    f'"recipientAccountId": "{ACCOUNT}"',
    f'"UnusedReservationBillingOwnerId": "{OTHER}"',
])
def test_owner_and_account_fields_are_masked(text: str):
    out = redact(text)
    assert ACCOUNT not in out and OTHER not in out
    assert MASK in out


def test_logs_insights_log_field_account_prefix_is_masked():
    # `@log` is `<account-id>:<log group>`
    assert redact(f"{ACCOUNT}:/aws/sagemaker/Clusters/c/abc") == f"{MASK}:/aws/sagemaker/Clusters/c/abc"


def test_bare_twelve_digit_ids_are_masked():
    assert redact(f"account {ACCOUNT} owns it") == f"account {MASK} owns it"
    assert redact(f"({OTHER})") == f"({MASK})"
    assert redact(f"`{ACCOUNT}`") == f"`{MASK}`"


@pytest.mark.parametrize("text", [
    "/aws/parallelcluster/x-202608261551",
    "`/aws/parallelcluster/llm-pretrain-b200-202607141022` / `ip-10-20-1-24.i-086e4d3cea27d2693.system-messages`",
    "/aws/parallelcluster/llm-pretrain-b200-202607141022:*",
])
def test_parallelcluster_log_group_timestamps_stay_intact(text: str):
    assert redact(text) == text


def test_other_numbers_are_not_accounts():
    # epoch milliseconds (13 digits), shorter numbers, and IDs with hex letters stay as they are
    for text in ("1790180654225", "12345678901", "i-0e58b081006f7e3df", "fs-0c255404e4fb44003", "cr-04941d4072014b3"):
        assert redact(text) == text


def test_a_known_account_id_is_masked_even_inside_a_resource_name():
    # The SageMaker default bucket embeds the account after a hyphen, where a timestamp would not be masked
    text = f"s3://sagemaker-us-west-2-{ACCOUNT}/checkpoints next to /aws/parallelcluster/x-202608261551"
    assert redact(text, {ACCOUNT}) == "s3://sagemaker-us-west-2-<account>/checkpoints next to " \
                                      "/aws/parallelcluster/x-202608261551"


def test_redact_masks_every_occurrence_in_a_report():
    report = "\n".join([
        f"- cluster arn:aws:sagemaker:us-west-2:{ACCOUNT}:cluster/abc",
        f"- owner {ACCOUNT}",
        "- group `/aws/parallelcluster/x-202608261551`",
    ])
    out = redact(report)
    assert ACCOUNT not in out
    assert out.count(MASK) == 2
    assert "/aws/parallelcluster/x-202608261551" in out
