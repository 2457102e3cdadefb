"""The CLI's stderr: progress, "wrote" lines, and a failure said in one line with its exit code."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape as escape_markup

from gpuaudit.report.escape import outward

err = Console(stderr=True)


def _fail(message: str, code: int) -> None:
    # one line however long: a CI log keeps the message whole (the terminal wraps it, Rich does not)
    err.print(f"[bold red]gpuaudit:[/] {escape_markup(outward(message))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
