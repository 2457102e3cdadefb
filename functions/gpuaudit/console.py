"""What the CLI shows on stderr while an audit runs: a Rich progress line on a terminal (phase, nodes in scope,
Logs Insights queries done/started with records scanned, elapsed), and with --verbose one line per AWS call.

It implements progress.ProgressHook: it only watches the pipeline and the AWS port, it decides nothing.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from gpuaudit.report.escape import one_line

FINISHED = {"Complete", "Failed", "Cancelled", "Timeout", "Unknown"}


class AuditProgress:
    """The progress hook of one CLI audit. `show`: the live line (a terminal, not --quiet); `verbose`: each call."""

    def __init__(self, console: Console, *, show: bool, verbose: bool) -> None:
        self.console, self.verbose = console, verbose
        self.phase_name = "starting"
        self.nodes: int | None = None
        self.log_groups: int | None = None
        self.started = self.done = 0
        self.scanned = 0.0
        self.calls = 0
        self.began = time.monotonic()
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                  console=console, transient=True) if show else None
        self._task = self._progress.add_task(self.describe()) if self._progress is not None else None

    def __enter__(self) -> AuditProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def describe(self) -> str:
        parts = [self.phase_name]
        if self.nodes is not None:
            parts.append(f"{self.nodes:,} nodes")
        if self.log_groups is not None:
            parts.append(f"{self.log_groups:,} log groups")
        if self.started:
            parts.append(f"queries {self.done}/{self.started}, {self.scanned:,.0f} records scanned")
        parts.append(f"{self.calls:,} AWS calls")
        return " · ".join(parts)

    def _refresh(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=self.describe())

    def phase(self, name: str, *, nodes: int | None = None, log_groups: int | None = None) -> None:
        self.phase_name = name
        self.nodes = nodes if nodes is not None else self.nodes
        self.log_groups = log_groups if log_groups is not None else self.log_groups
        if self.verbose:
            self._say(f"phase: {self.describe()}")
        self._refresh()

    def call(self, service: str, operation: str, response: dict[str, Any] | None, error: str | None) -> None:
        self.calls += 1
        if operation == "StartQuery" and response is not None:
            self.started += 1
        if operation == "GetQueryResults" and response is not None and response.get("status") in FINISHED:
            self.done += 1
            self.scanned += float((response.get("statistics") or {}).get("recordsScanned", 0.0))
        if self.verbose:
            elapsed = time.monotonic() - self.began
            self._say(f"aws {service} {operation} → {error or 'ok'} ({elapsed:.1f} s)")
        self._refresh()

    def _say(self, line: str) -> None:
        target = self._progress.console if self._progress is not None else self.console
        target.print(Text(one_line(line)), soft_wrap=True, highlight=False)
