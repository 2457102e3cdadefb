"""The deployed coverage cache never turns an S3 error into a lost audit (issue #14): a cache that cannot be
read means the group is read in full (always correct, only slower); one that cannot be written is skipped."""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
from botocore.stub import Stubber
from handlers.coverage_cache import S3GroupCache

from gpuaudit.collectors.cache import CacheState, GroupCache


def s3_answering(errors: list[tuple[str, str, int]]) -> tuple[object, Stubber]:
    client = boto3.client("s3", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for method, code, status in errors:
        stub.add_client_error(method, service_error_code=code, http_status_code=status)
    stub.activate()
    return client, stub


def test_a_denied_or_missing_cache_entry_means_a_full_read_not_a_failure() -> None:
    # the two entries, then each never-cached group's count of reads stopped at the deadline (none recorded here;
    # one not readable counts as none: the group is read with the other fresh ones)
    client, stub = s3_answering([("get_object", "AccessDenied", 403), ("get_object", "NoSuchKey", 404),
                                 ("get_object", "AccessDenied", 403), ("get_object", "NoSuchKey", 404)])
    state = S3GroupCache(client, "bucket", ["/g/denied", "/g/missing"]).load("c1", "us-west-2")
    assert state.groups == {} and state.stopped == {}
    stub.assert_no_pending_responses()


def test_a_cache_that_cannot_be_written_does_not_fail_the_audit() -> None:
    client, stub = s3_answering([("put_object", "AccessDenied", 403)])
    cache = S3GroupCache(client, "bucket", ["/g/one"])
    t = datetime(2026, 10, 1, tzinfo=UTC)
    state = CacheState(cluster="c1", region="us-west-2",
                       groups={"/g/one": GroupCache(covered_from=t, settled_until=t, kernel_as_of=t)})
    cache.save(state)
    stub.assert_no_pending_responses()
