"""One synthesis for all infra tests (see cdk_synth.py)."""

from __future__ import annotations

import pytest
from cdk_synth import Synthesized, synthesize


@pytest.fixture(scope="session")
def synth() -> Synthesized:
    return synthesize()
