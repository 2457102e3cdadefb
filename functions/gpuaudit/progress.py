"""An optional progress hook: the pipeline says which phase it is in, the AWS port reports each call.

Nothing here decides anything: the hook only watches. The CLI shows it on stderr (Rich progress on a terminal,
one line per AWS call with --verbose); the deployed steps pass no hook.
"""

from __future__ import annotations

from typing import Any, Protocol

# The phases of one audit, in order (pipeline.py says each as it enters it; the CLI adds "rendering").
PHASES = ("inventory", "log groups", "queries", "control plane", "judging", "rendering")


class ProgressHook(Protocol):
    def phase(self, name: str, *, nodes: int | None = None, log_groups: int | None = None) -> None:
        """Entering `name` (one of PHASES); `nodes`/`log_groups` in scope once known."""

    def call(self, service: str, operation: str, response: dict[str, Any] | None, error: str | None) -> None:
        """One AWS call attempt ended: its response, or the error code it failed with."""


class Silent:
    """The hook when nobody watches."""

    def phase(self, name: str, *, nodes: int | None = None, log_groups: int | None = None) -> None:
        return None

    def call(self, service: str, operation: str, response: dict[str, Any] | None, error: str | None) -> None:
        return None
