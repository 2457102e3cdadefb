"""Command line: `gpuaudit audit …` against an account or a world, `gpuaudit history`, `gpuaudit report`.

The commands by family: `audit.py`, `operator_commands.py` (report, explain, history, mcp),
`developer_commands.py` (demo, world, bench); what the flags accept `flags.py`; the stderr and the one-line failure
`stderr.py`. This module makes the app and registers every command, in the order `--help` lists them.

Exit codes: 0 audited (whatever the findings, unless a gate below is asked for); 2 bad input, naming what;
3 the account or world could not be reached or read (credentials, region, endpoints); 4 a gate failed
(`--fail-on VERDICT`, `--fail-if-not-ready`); 130 interrupted (Ctrl-C). A user error never prints a traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuaudit import __version__
from gpuaudit.access import EXIT_OK
from gpuaudit.cli.audit import AUDIT_EXAMPLES, audit
from gpuaudit.cli.developer_commands import bench, bench_history, demo, world_app
from gpuaudit.cli.flags import DEVELOPER
from gpuaudit.cli.operator_commands import explain, history_command, mcp, report
from gpuaudit.model.result import SCHEMA
from gpuaudit.report.records import FINDINGS_SCHEMA

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="rich", help="Read-only auditor for GPU training clusters on AWS.")


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"gpuaudit {__version__} (result schema {SCHEMA}, findings schema {FINDINGS_SCHEMA})\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and the result/findings schema versions, then exit")] = False) -> None:
    """Read-only auditor for GPU training clusters on AWS: log coverage proof, node verdicts, readiness."""


app.command(epilog=AUDIT_EXAMPLES)(audit)
app.command()(report)
app.command()(explain)
app.command("history")(history_command)
app.command()(mcp)
app.command()(demo)
app.add_typer(world_app, name="world", rich_help_panel=DEVELOPER)
app.command(rich_help_panel=DEVELOPER)(bench)
app.command("bench-history", rich_help_panel=DEVELOPER)(bench_history)


def main() -> None:
    app()
