"""The commands around an audit's result: `report` (render a saved result), `explain` (a word of a report),
`history` (fleet memory across audits) and `mcp` (the read-only tools served to an agent)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import textwrap
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape as escape_markup

from gpuaudit.access import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_UNREACHABLE, UserError, aws_for
from gpuaudit.cli.flags import (
    ACCESS,
    FORMATS,
    _cache_path,
    _history_dir,
    _out_dir,
    _out_path,
    _verdicts,
)
from gpuaudit.cli.stderr import _fail, err
from gpuaudit.embedded.world import WorldError
from gpuaudit.files import same_file, write_atomically
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.report.escape import visible
from gpuaudit.writes.history import SQLITE_FILE, SqliteHistory


def report(
    result_file: Annotated[
        Path, typer.Argument(metavar="RESULT.json", help="A result written by `audit --format json`")
    ],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="table | md | json | html | ndjson | csv | events, as `audit` takes them (default: html, or "
            "--out's extension)",
        ),
    ] = None,
    out: Annotated[
        str | None, typer.Option(help="Write here (format from the extension, as `audit --out`); - is stdout")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", help="Write every format in one run, as `audit --out-dir`")
    ] = None,
    verdict: Annotated[
        str | None,
        typer.Option(
            help="Show only nodes with these verdicts, e.g. REPLACE,NOT_OBSERVABLE (table and finding records)"
        ),
    ] = None,
    only_exceptions: Annotated[
        bool, typer.Option("--only-exceptions", help="Show only nodes that need something: not LEAVE ALONE")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No 'wrote' lines on stderr")] = False,
) -> None:
    """Render a saved result in any of `audit`'s formats and filters: HTML or Markdown report, the terminal summary,
    the JSON, finding records, events."""
    from pydantic import ValidationError

    from gpuaudit.cli.audit import _node_filter, _write
    from gpuaudit.outputs import BadOutput, Output, plan
    from gpuaudit.report.markdown import render

    stdout = Console(highlight=False, soft_wrap=True)
    try:
        if out not in (None, "-") and same_file(Path(str(out)), result_file):
            raise UserError(f"--out {visible(str(out))}: is the RESULT.json being rendered; refusing to overwrite it")
        outputs = plan(fmt, out, _out_dir(out_dir), stdout.is_terminal)
        if fmt is None and out is None and out_dir is None:
            outputs = [Output("html", None)]  # `report RESULT.json` alone: the HTML report, as it always was
        for o in outputs:
            _out_path(o.path, "--out-dir" if out_dir is not None and o.path is not None and o.path.parent == out_dir
                      else "--out")
        for o in outputs:
            if o.path is not None and same_file(o.path, result_file):
                raise UserError(f"--out {visible(str(o.path))}: is the RESULT.json being rendered; refusing to "
                                "overwrite it")
        keep, filtered = _node_filter(_verdicts(verdict, "--verdict"), only_exceptions)
        try:
            text = result_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read {result_file}: {exc}") from None
        try:
            result = Result.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "document"
            raise UserError(f"{result_file} is not a gpuaudit result JSON ({exc.error_count()} error(s); "
                            f"first at {where}: {first['msg']})") from None
        # the Markdown as this version renders it (a saved result may come from an older one)
        _write(outputs, result.model_copy(update={"report_markdown": render(result)}), keep, filtered, stdout, quiet)
    except UserError as exc:
        _fail(str(exc), exc.code)
    except BadOutput as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        _fail(f"cannot write output: {exc}", EXIT_BAD_INPUT)


def explain(
    term: Annotated[str, typer.Argument(help="A verdict, label, Xid status, `RULES §7`, or an Xid code (`79`)")],
) -> None:
    """What a word of a report means: a verdict's bar, Proven vs Hypothesis, a `RULES §N` a report cites, an Xid
    (the glossary docs/VERDICTS.md and the Xid catalog, shipped with the package)."""
    from gpuaudit.agent.glossary import explain as glossary_explain
    from gpuaudit.agent.glossary import terms

    entries = glossary_explain(term)
    if not entries:
        _fail(f"{term!r} is not in the glossary; terms: {', '.join(terms())}", EXIT_BAD_INPUT)
    # wrapped at the terminal's width (COLUMNS, else 80 in a pipe), at spaces only: a word, a command or an Xid
    # code is never split; the entries are separated by a blank line
    width = max(40, shutil.get_terminal_size((80, 24)).columns - 1)
    sys.stdout.write("\n\n".join(textwrap.fill(f"{e.term} ({e.section}): {e.meaning}", width=width,
                                               subsequent_indent="  ", break_long_words=False,
                                               break_on_hyphens=False) for e in entries) + "\n")


def history_command(
    cluster: Annotated[str | None, typer.Option(help="Cluster name, as the audits named it")] = None,
    node: Annotated[str | None, typer.Option(help="One node, i-…: its timeline only")] = None,
    history: Annotated[Path | None, typer.Option(
        "--history", help="The directory `gpuaudit audit --history DIR` keeps its history in")] = None,
    days: Annotated[int, typer.Option(help="Look-back in days, ending at the cluster's latest recorded audit")] = 30,
    fmt: Annotated[str, typer.Option("--format", help="md | json | html | table")] = "md",
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout")] = None,
    verdict: Annotated[str | None, typer.Option(
        help="Only nodes that an audit gave one of these verdicts, or with one open, e.g. "
        "REBOOT,NOT_OBSERVABLE")] = None,
    open_only: Annotated[bool, typer.Option(
        "--open",
        help="Only nodes with an action still open (REPLACE, REBOOT or NOT OBSERVABLE not shown done)")] = False,
    changed: Annotated[bool, typer.Option(
        "--changed", help="Only nodes whose verdict changed in the look-back (or whose action was done)")] = False,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Also list and draw the steady nodes (nothing open, no change), and every timeline")] = False,
) -> None:
    """Each node across audits, worst first, leading with the actions still open: verdicts, hardware-class Xids,
    reboots, coverage (fleet memory)."""

    from gpuaudit.model.evidence import InstanceId
    from gpuaudit.pipeline import render_history
    from gpuaudit.writes.history import HistoryUnreadable

    try:
        if not cluster or not cluster.strip():
            raise UserError("--cluster is required (the cluster name the audits used)")
        if node is not None:
            try:
                TypeAdapter(InstanceId).validate_python(node)
            except ValidationError:
                raise UserError(f"--node must be an instance ID like i-0123456789abcdef0; got {node!r}") from None
        if fmt not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
        if not 1 <= days <= 3650:
            raise UserError(f"--days must be between 1 and 3650; got {days}")
        verdicts = frozenset(_verdicts(verdict, "--verdict"))
        if history is None:
            raise UserError("--history DIR is required: the directory `gpuaudit audit --history DIR` wrote")
        directory = _history_dir(history, must_exist=True)
        if directory is None or not (directory / SQLITE_FILE).is_file():
            raise UserError(f"--history {history}: holds no gpuaudit history ({SQLITE_FILE} not found)")
        out = _out_path(out)
        if out is not None and same_file(out, directory / SQLITE_FILE):
            raise UserError(f"--out {visible(str(out))}: is the --history file being read; refusing to overwrite it")
        store = SqliteHistory(directory)
        first, last = parse_time("1970-01-01T00:00:00Z"), parse_time("2100-01-01T00:00:00Z")
        try:
            # every recorded date is read, so a span outside the years any time input may name is said, not hidden
            read = store.read(cluster, [node] if node else None, parse_time("1100-01-01T00:00:00Z"),
                              parse_time("9999-12-31T23:59:59Z"))
        except HistoryUnreadable as exc:
            raise UserError(f"--history {history}: {exc}", EXIT_UNREACHABLE) from None
        outside = [s for s in read.spans if not first <= s.audit_time <= last or not first <= s.through <= last]
        everything = read.model_copy(update={"since": first, "until": last,
                                             "spans": [s for s in read.spans if s not in outside]})
        if outside:
            dates = sorted({s.audit_time.isoformat() for s in outside})
            err.print(escape_markup(visible(
                f"gpuaudit: {len(outside)} recorded span(s) dated outside 1970-2100 are not shown (a wrong clock or an "
                f"edited history): {', '.join(dates[:3])}{' …' if len(dates) > 3 else ''}")), highlight=False,
                soft_wrap=True)
        if not everything.spans:
            flag = f"--node {node}" if node else f"--cluster {cluster}"
            raise UserError(f"{flag}: no audit of it is recorded in --history {history}")
        text = render_history(everything, cluster, fmt, days, verdicts=verdicts, open_only=open_only,
                              changed=changed, show_all=show_all or bool(node))
        if out is not None:
            write_atomically(out, text.rstrip("\n") + "\n")
            err.print(f"wrote {out}")
        else:
            sys.stdout.write(text.rstrip("\n") + "\n")
    except UserError as exc:
        _fail(str(exc), exc.code)
    except OSError as exc:
        _fail(f"cannot write output: {exc}", EXIT_BAD_INPUT)


def mcp(
    world: Annotated[Path | None, typer.Option(help="Serve a world file (a frozen account) instead of AWS")] = None,
    profile: Annotated[str | None, typer.Option(
        help="AWS profile (default: AWS_PROFILE, then the default chain)", rich_help_panel=ACCESS)] = None,
    region: Annotated[str | None, typer.Option(
        help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's; a world's own)",
        rich_help_panel=ACCESS)] = None,
    role_arn: Annotated[str | None, typer.Option(help="Audit another account through its read-only role",
                                                 rich_help_panel=ACCESS)] = None,
    external_id: Annotated[str | None, typer.Option(help="External ID the read-only role requires",
                                                    rich_help_panel=ACCESS)] = None,
    results_dir: Annotated[Path, typer.Option(
        "--results-dir", help="Where each audit's result JSON and HTML report are written (<cluster>/<audit_id>.*)")
    ] = Path("~/.gpuaudit/results"),
    history: Annotated[Path | None, typer.Option(
        "--history", help="Fleet memory: the local history audits read and add to, and latest_findings/node_history "
                          "read (default: off)")] = None,
    cache: Annotated[Path | None, typer.Option(help="Incremental audits: the coverage cache file")] = None,
) -> None:
    """Serve gpuaudit's read-only tools to an MCP client over stdio (Claude Desktop, VS Code, any agent)."""
    try:
        if world is not None and profile is not None:
            raise UserError("--profile applies to AWS accounts, not to --world")
        if role_arn and world is not None:
            raise UserError("--role-arn applies to AWS accounts, not to --world")
        directory = results_dir.expanduser()
        _out_dir(directory) if directory.parent.is_dir() else directory.mkdir(parents=True, exist_ok=True)
        history = _history_dir(history.expanduser() if history else None)
        if world is not None:
            aws_for(world, region)  # a bad world or region is said now, not on the first tool call
        from gpuaudit.agent.local_backend import LocalBackend
        from gpuaudit.agent.server import build_server

        backend = LocalBackend(results_dir=directory, world=world, profile=profile, region=region, role_arn=role_arn,
                               external_id=external_id, history_dir=history, cache=_cache_path(cache))
        server = build_server(backend)
        signal.signal(signal.SIGINT, _stop_on_interrupt)
        server.run("stdio")
    except UserError as exc:
        _fail(str(exc), exc.code)
    except WorldError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        _fail(f"--results-dir {results_dir}: {exc}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        _fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)


def _stop_on_interrupt(_signum: int, _frame: object) -> None:
    """Ctrl-C stops `gpuaudit mcp` at once. Left to asyncio, SIGINT cancels the server's tasks, which then wait for
    what runs in worker threads: the stdin line the client has not sent, an audit blocked in an AWS call; the
    server would stay up until those end. Nothing is lost that a rerun does not redo: audits only read, the
    history is written in transactions."""
    try:
        _fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
    except typer.Exit:
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
