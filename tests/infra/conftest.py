"""One synthesis for all infra tests (see cdk_synth.py)."""

from __future__ import annotations

import pytest
from cdk_synth import Synthesized, production_config, synthesize


@pytest.fixture(scope="session")
def synth() -> Synthesized:
    return synthesize()


@pytest.fixture(scope="session")
def production_synth() -> Synthesized:
    """The production-shaped synthesis (cdk_synth.production_config): discovery, 200 clusters, member roles,
    self-managed fleets, a private EKS endpoint, the MCP endpoint, e-mail and Slack."""
    return synthesize(config=production_config())
