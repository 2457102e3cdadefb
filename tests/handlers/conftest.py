"""Fixtures of the handler tests: a world-backed account (lambda_harness) per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lambda_harness import Account, world_account


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[Account]:
    with world_account(monkeypatch) as acct:
        yield acct
