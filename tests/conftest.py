"""Shared test setup.

- `helpers` (tiny world builders) is importable from every test module.
- One botocore data loader for the whole run: every audit builds fresh boto3 sessions (one per
  world, as the CLI does), and each would otherwise re-read the same service-model JSON files
  (~0.1 s per service). The loader only caches botocore's own read-only model data.
- The API methods botocore builds for a client class, once per service model the shared loader read (every new
  session builds a client class of its own; building its ~100-400 methods was ~15 % of an audit test's time). Each
  client class is still made per session, through the session's own `creating-client-class` handlers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.client
import botocore.loaders
import botocore.session
import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture(autouse=True, scope="session")
def _shared_botocore_loader() -> Iterator[None]:
    shared = botocore.loaders.create_loader()
    original = botocore.session.create_loader

    def create_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
        return shared if search_path_string is None else original(search_path_string)

    built = botocore.client.ClientCreator._create_methods
    methods: dict[int, tuple[Any, dict[str, Any]]] = {}

    def create_methods(self: botocore.client.ClientCreator, service_model: Any) -> dict[str, Any]:
        # keyed by the model's own description (the shared loader's one dict per service and version), held so
        # its id stays its own; a copy each time, as creating-client-class handlers add to it
        description = service_model._service_description
        if id(description) not in methods:
            methods[id(description)] = (description, built(self, service_model))
        return dict(methods[id(description)][1])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session, "create_loader", create_loader)
        patch.setattr(botocore.client.ClientCreator, "_create_methods", create_methods)
        yield


@pytest.fixture(autouse=True)
def _broken_invariants_fail_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Result any test builds through `judge` keeps every invariant of rules/consistency.py: a broken one
    fails the test that produced it (tests of the invariants themselves call check_consistency directly)."""
    from gpuaudit.rules import consistency, judge

    def strict(result, evidence):  # type: ignore[no-untyped-def]
        checked = consistency.check_consistency(result, evidence)
        assert not checked.invariants_broken, checked.self_check
        return checked

    monkeypatch.setattr(judge, "check_consistency", strict)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fuzz suites' figures (how many inputs were tried), printed once at the end of the run."""
    fuzz = sys.modules.get("tests.test_fuzz_inputs") or sys.modules.get("test_fuzz_inputs")
    tried = getattr(fuzz, "TRIED", None)
    if tried and sum(tried.values()):
        terminalreporter.write_line(f"fuzz: {tried['worlds']} hostile worlds (x3 formats), {tried['args']} CLI "
                                    "argument sets tried")
