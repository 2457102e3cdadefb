"""Evidence larger than the inline limit goes through S3 by reference; both forms load back."""

from __future__ import annotations

from handlers import payload
from lambda_harness import BUCKET, Account


def test_small_documents_stay_inline(account: Account) -> None:
    document = {"nodes": ["i-0123456789abcdef0"]}
    assert payload.store(document, account.session.client("s3"), BUCKET, "evidence") is document
    assert account.object_keys() == []


def test_large_documents_are_stored_once_by_content_and_load_back(account: Account) -> None:
    s3 = account.session.client("s3")
    document = {"lines": ["x" * 1000] * 300}  # ~300 KB: over Step Functions' 256 KB
    first = payload.store(document, s3, BUCKET, "evidence")
    again = payload.store(document, s3, BUCKET, "evidence")
    assert payload.is_reference(first) and first == again
    assert first["s3"]["bucket"] == BUCKET and first["s3"]["key"].startswith("payloads/evidence/")
    assert account.object_keys() == [first["s3"]["key"]]
    assert payload.load(first, s3) == document == payload.load(document, s3)


def test_the_limit_is_per_call(account: Account) -> None:
    s3 = account.session.client("s3")
    assert payload.is_reference(payload.store({"a": "b" * 100}, s3, BUCKET, "batch", limit=50))
    assert not payload.is_reference(payload.store({"a": "b" * 100}, s3, BUCKET, "batch", limit=500))
