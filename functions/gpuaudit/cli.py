"""Command line: `gpuaudit audit …` against an account or a world, `gpuaudit history`, `gpuaudit report`.

Exit codes: 0 audited (whatever the findings, unless a gate below is asked for); 2 bad input, naming what;
3 the account or world could not be reached or read (credentials, region, endpoints); 4 a gate failed
(`--fail-on VERDICT`, `--fail-if-not-ready`); 130 interrupted (Ctrl-C). A user error never prints a traceback.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from datetime import date, datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape as escape_markup

from gpuaudit import __version__
from gpuaudit.access import (
    EXIT_BAD_INPUT,
    EXIT_GATE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    UserError,
    aws_for,
    did_you_mean,
)
from gpuaudit.collectors.aws import Aws, CallFailed
from gpuaudit.collectors.cache import FORMAT as CACHE_FORMAT
from gpuaudit.collectors.cache import FileCache
from gpuaudit.collectors.inventory import UnknownCluster
from gpuaudit.domain.window import BadWindow, is_duration, parse_duration
from gpuaudit.embedded.world import WorldError
from gpuaudit.eventbus import RememberingHistory
from gpuaudit.history import SQLITE_FILE, SqliteHistory
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.history import HistoryRead
from gpuaudit.model.result import SCHEMA, NodeResult, Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.outputs import BadOutput, Keep, Output, plan, print_table, render, report_file
from gpuaudit.pipeline import run_audit
from gpuaudit.report.escape import visible
from gpuaudit.report.order import EXCEPTIONS, VERDICT_SEVERITY
from gpuaudit.report.records import FINDINGS_SCHEMA
from gpuaudit.report.redact import redact
from gpuaudit.rules.context import BadOverride, parse_overrides
from gpuaudit.rules.judge import JudgeConfig
from gpuaudit.settings import Settings

MODES = ("coverage", "incident", "preflight")
FORMATS = ("md", "json", "html")
REPORT_FORMATS = ("html", "md", "table", "ndjson", "csv")
SCOPE, WINDOW, OUTPUT, GATES, ACCESS, PREFLIGHT, ADVANCED = (
    "Scope", "Window", "Output", "Filters and CI gates", "AWS access", "Preflight", "Advanced")
DEVELOPER = "Developer tools"

AUDIT_EXAMPLES = """Examples:

  gpuaudit audit --cluster my-hyperpod --last 2h                     # summary table on a terminal

  gpuaudit audit --cluster my-hyperpod --profile prod --region us-west-2 --mode incident --since 6h

  gpuaudit audit --cluster my-hyperpod --mode preflight --run-hours 72 --fail-if-not-ready

  gpuaudit audit --cluster my-hyperpod --only-exceptions --fail-on REPLACE,NOT_OBSERVABLE   # CI gate: exit 4

  gpuaudit audit --cluster my-hyperpod --out-dir out/            # report.md, result.json, report.html, findings.*

  gpuaudit audit --cluster my-hyperpod --format ndjson | jq -c 'select(.verdict == "REPLACE")'

  gpuaudit audit --world functions/gpuaudit/worlds/hyperpod-xid31-app-error.world.json --cluster research-hp-slurm --out report.md

Exit codes: 0 audited; 2 bad input; 3 account unreachable or credentials; 4 a --fail-on/--fail-if-not-ready gate;
130 interrupted."""

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="rich", help="Read-only auditor for GPU training clusters on AWS.")
err = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"gpuaudit {__version__} (result schema {SCHEMA}, findings schema {FINDINGS_SCHEMA})\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and the result/findings schema versions, then exit")] = False) -> None:
    """Read-only auditor for GPU training clusters on AWS: log coverage proof, node verdicts, readiness."""


DATE_PREFIX = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")


def _time_arg(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    calendar = DATE_PREFIX.match(value.strip())
    if calendar is not None:
        try:
            date(*(int(part) for part in calendar.groups()))
        except ValueError:
            raise UserError(f"{flag}: {calendar.group(0)} is not a date") from None
    try:
        parsed = parse_time(value)
    except (ValueError, OverflowError):
        lengths = " or a length" if flag == "--since" else ""
        example = ", or 2h for two hours ago" if lengths else ""
        raise UserError(f"{flag}: not an ISO-8601 time{lengths}: {value!r} (e.g. 2026-09-27T10:00:00Z{example})") from None
    if not 1970 <= parsed.year <= 2100:
        raise UserError(f"{flag}: {value!r} is outside the years 1970-2100")
    return parsed


def _positive(value: float | None, flag: str) -> float | None:
    """A finite number above zero, or None when the flag was not given."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UserError(f"{flag} must be a finite number above 0; got {value}")
    return value


def _cache_path(path: Path | None) -> Path | None:
    """--cache names a file of its own format (or a new file): never a directory, a world or anything else."""
    if path is None:
        return None
    if path.is_dir():
        raise UserError(f"--cache {path}: is a directory; give a file path")
    if path.exists():
        try:
            with path.open("rb") as f:
                head = f.read(4096).decode("utf-8", "replace")
        except OSError as exc:
            raise UserError(f"--cache {path}: cannot be read: {exc.strerror}") from None
        if f'"format":"{CACHE_FORMAT}"' not in head.replace(" ", "") and head.strip():
            raise UserError(f"--cache {path}: exists and is not a gpuaudit cache ({CACHE_FORMAT}); refusing to "
                            "overwrite it")
    return path


def _history_dir(path: Path | None, must_exist: bool = False) -> Path | None:
    """--history DIR: a directory for the local history (created when absent, unless reading it)."""
    if path is None:
        return None
    if path.exists() and not path.is_dir():
        raise UserError(f"--history {path}: is not a directory (the history is kept as {SQLITE_FILE} inside it)")
    if not path.exists():
        if must_exist:
            raise UserError(f"--history {path}: no such directory (no audit has written a history there)")
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise UserError(f"--history {path}: cannot create the directory: {exc.strerror}") from None
    if not os.access(path, os.R_OK | (0 if must_exist else os.W_OK)):
        raise UserError(f"--history {path}: not readable/writable")
    return path


def _out_path(path: Path | None, flag: str = "--out") -> Path | None:
    if path is not None and (path.is_dir() or not path.parent.is_dir() or not os.access(path.parent, os.W_OK)):
        raise UserError(f"{flag} {path}: cannot write there (directory, or a folder that does not exist or is not "
                        "writable)")
    return path


def _out_dir(path: Path | None) -> Path | None:
    """--out-dir DIR: created when absent (its parent must exist), never a file."""
    if path is None:
        return None
    if path.exists() and not path.is_dir():
        raise UserError(f"--out-dir {path}: is a file; give a directory")
    if not path.exists():
        try:
            path.mkdir()
        except OSError as exc:
            raise UserError(f"--out-dir {path}: cannot create the directory: {exc.strerror}") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"--out-dir {path}: not writable")
    return path


def emit(result: Result, fmt: str, out: Path | None) -> None:
    """One output of `report`: a file (said on stderr) or stdout."""
    text = render(result, fmt)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        err.print(f"wrote {escape_markup(visible(str(out)))}", soft_wrap=True, highlight=False)
    else:
        sys.stdout.write(text)


def _verdicts(value: str | None, flag: str) -> set[str]:
    """A comma-separated verdict list, as typed: REPLACE,REBOOT; NOT_OBSERVABLE or not-observable for the spaced ones."""
    if value is None:
        return set()
    chosen: set[str] = set()
    for word in (w.strip() for w in value.split(",")):
        if not word:
            continue
        verdict = re.sub(r"[_\-\s]+", " ", word).upper()
        if verdict not in VERDICT_SEVERITY:
            named = ", ".join(v.replace(" ", "_") for v in VERDICT_SEVERITY)
            raise UserError(f"{flag}: {word!r} is not a verdict; use {named}")
        chosen.add(verdict)
    if not chosen:
        raise UserError(f"{flag}: name at least one verdict")
    return chosen


def _node_filter(verdicts: set[str], only_exceptions: bool) -> tuple[Keep | None, str | None]:
    """The rows --verdict / --only-exceptions keep (both given: a node must pass both), and how to say so."""
    if not verdicts and not only_exceptions:
        return None, None

    def keep(node: NodeResult) -> bool:
        exception = node.verdict in EXCEPTIONS or (node.verdict is None and node.xid_status != "Measured")
        return (not verdicts or node.verdict in verdicts) and (not only_exceptions or exception)

    said = [f"--verdict {','.join(v for v in VERDICT_SEVERITY if v in verdicts)}"] if verdicts else []
    return keep, " ".join([*said, *(["--only-exceptions"] if only_exceptions else [])])


def _gate(result: Result, fail_on: set[str], if_not_ready: bool) -> str | None:
    """Why a gate fails this result, or None. Judged on the whole result, whatever the filters show."""
    reasons = []
    hit = {v: sum(n.verdict == v for n in result.nodes) for v in VERDICT_SEVERITY if v in fail_on}
    if any(hit.values()):
        reasons.append("--fail-on: " + ", ".join(f"{c} node(s) {v}" for v, c in hit.items() if c))
    if if_not_ready and result.ready not in ("Yes", "Yes with risks"):
        reasons.append(f"--fail-if-not-ready: ready is {result.ready or 'unknown'}")
    return "; ".join(reasons) or None


def _write(outputs: list[Output], result: Result, keep: Keep | None, filtered: str | None, stdout: Console,
           quiet: bool, history: HistoryRead | None = None) -> None:
    full = report_file(outputs)
    for o in outputs:
        if o.path is not None:
            o.path.write_text(render(result, o.fmt, keep=keep, filtered=filtered, full_report=full, history=history),
                              encoding="utf-8")
            if not quiet:
                err.print(f"wrote {escape_markup(visible(str(o.path)))} ({o.fmt})", soft_wrap=True, highlight=False)
        elif o.fmt == "table" and stdout.is_terminal:
            print_table(stdout, result, keep=keep, filtered=filtered, full_report=full)
        else:
            sys.stdout.write(render(result, o.fmt, keep=keep, filtered=filtered, full_report=full, history=history))
            sys.stdout.flush()


@app.command(epilog=AUDIT_EXAMPLES)
def audit(
    cluster: Annotated[str | None, typer.Option(
        help="Cluster name (HyperPod, ParallelCluster), or a label for --instances (optional with --instances or "
             "--filesystem: the result's cluster is then a labelled fleet)", rich_help_panel=SCOPE)] = None,
    mode: Annotated[str, typer.Option(help="coverage | incident | preflight", rich_help_panel=SCOPE)] = "coverage",
    instances: Annotated[str | None, typer.Option(
        help="Self-managed EC2/EKS: comma-separated instance IDs; terminated ones are audited from their log "
             "streams and CloudTrail", rich_help_panel=SCOPE)] = None,
    eks_cluster: Annotated[str | None, typer.Option(
        "--eks-cluster", help="Self-managed EKS: audit the nodes of this EKS cluster (read from its Kubernetes API) "
                              "and their node-health conditions", rich_help_panel=SCOPE)] = None,
    filesystem: Annotated[list[str] | None, typer.Option(
        "--filesystem", help="Also audit this FSx for Lustre file system, fs-… (repeatable, at most 50): details, "
                             "maintenance window, saturation metrics; with or without --cluster",
        rich_help_panel=SCOPE)] = None,
    log_group: Annotated[list[str] | None, typer.Option(
        "--log-group", help="Also search this CloudWatch Logs group, e.g. a job's stdout where NCCL prints its "
                            "transport (repeatable, at most 50; exact name)", rich_help_panel=SCOPE)] = None,
    world: Annotated[Path | None, typer.Option(help="Audit a world file (a frozen account) instead of AWS",
                                               rich_help_panel=SCOPE)] = None,
    since: Annotated[str | None, typer.Option(
        help="Window start: ISO-8601 UTC, or a length back from now (30m, 2h, 2d); alone it runs to now",
        rich_help_panel=WINDOW)] = None,
    until: Annotated[str | None, typer.Option(help="Window end, ISO-8601 UTC", rich_help_panel=WINDOW)] = None,
    last: Annotated[str | None, typer.Option(
        help="A length ending now: 30m, 2h, 6h, 24h, 2d, 7d … (at most 90d)", rich_help_panel=WINDOW)] = None,
    onset: Annotated[str | None, typer.Option(
        help="Incident: when the failure began, ISO-8601 UTC, inside the window (default: the first failure signal "
             "read); a cause is Proven only before it", rich_help_panel=WINDOW)] = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", help="table | md | json | html | ndjson | csv | events (the EventBridge entries the deployed "
                         "auditor would send, against --history; default: table on a terminal, md otherwise; or "
                         "--out's extension)", rich_help_panel=OUTPUT)] = None,
    out: Annotated[str | None, typer.Option(
        help="Write here (format from the extension: .md .json .html .ndjson .csv .txt .events.ndjson); - is "
             "stdout",
        rich_help_panel=OUTPUT)] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out-dir", help="Write every format in one run: report.md, result.json, report.html, findings.ndjson, "
                          "findings.csv, findings.events.ndjson", rich_help_panel=OUTPUT)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no 'wrote' lines on stderr",
                                        rich_help_panel=OUTPUT)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Each AWS call and phase on stderr",
                                          rich_help_panel=OUTPUT)] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="No colour (also NO_COLOR=1)",
                                           rich_help_panel=OUTPUT)] = False,
    verdict: Annotated[str | None, typer.Option(
        help="Show only nodes with these verdicts, e.g. REPLACE,REBOOT (table and finding records)",
        rich_help_panel=GATES)] = None,
    only_exceptions: Annotated[bool, typer.Option(
        "--only-exceptions", help="Show only nodes that need something: not LEAVE ALONE", rich_help_panel=GATES)] = False,
    fail_on: Annotated[str | None, typer.Option(
        "--fail-on", help="Exit 4 when any node has one of these verdicts, e.g. REPLACE,NOT_OBSERVABLE",
        rich_help_panel=GATES)] = None,
    fail_if_not_ready: Annotated[bool, typer.Option(
        "--fail-if-not-ready", help="Preflight: exit 4 unless ready is Yes or Yes with risks",
        rich_help_panel=GATES)] = False,
    profile: Annotated[str | None, typer.Option(
        help="AWS profile (default: AWS_PROFILE, then the default chain)", rich_help_panel=ACCESS)] = None,
    region: Annotated[str | None, typer.Option(
        help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's; a world's own)",
        rich_help_panel=ACCESS)] = None,
    role_arn: Annotated[str | None, typer.Option(
        help="Audit another account: assume its read-only role (deploy infra/cross_account.py there)",
        rich_help_panel=ACCESS)] = None,
    external_id: Annotated[str | None, typer.Option(help="External ID the read-only role requires",
                                                    rich_help_panel=ACCESS)] = None,
    run_hours: Annotated[float | None, typer.Option(help="Planned run length in hours",
                                                    rich_help_panel=PREFLIGHT)] = None,
    run_start: Annotated[str | None, typer.Option(help="Planned start, ISO-8601 UTC (default now)",
                                                  rich_help_panel=PREFLIGHT)] = None,
    checkpoint_minutes: Annotated[float | None, typer.Option(help="Checkpoint interval",
                                                             rich_help_panel=PREFLIGHT)] = None,
    cache: Annotated[Path | None, typer.Option(
        help="Incremental audits: keep proven hourly bins in this file and query only the hours that can still "
             "change", rich_help_panel=ADVANCED)] = None,
    history: Annotated[Path | None, typer.Option(
        "--history", help="Fleet memory: read each node's earlier audits from (and add this one to) a local history in "
                          "this directory, so an Xid recurring after a reboot days later is REPLACE (default: off; "
                          "look-back GPUAUDIT_HISTORY_DAYS, 30)", rich_help_panel=ADVANCED)] = None,
    deadline_seconds: Annotated[float | None, typer.Option(
        help="Stop calling AWS after this many seconds and report what was read (the rest: Not checked)",
        rich_help_panel=ADVANCED)] = None,
    xid_class: Annotated[list[str] | None, typer.Option(
        help="Override an Xid's class, CODE=CLASS (repeatable; also GPUAUDIT_XID_CLASS_OVERRIDES); named in the "
             "report", rich_help_panel=ADVANCED)] = None,
) -> None:
    """Audit one cluster: coverage proof, node verdicts, root cause or readiness."""
    from gpuaudit.collectors.session import next_step
    from gpuaudit.console import AuditProgress

    aws: Aws | None = None
    stdout = Console(no_color=True if no_color else None, highlight=False, soft_wrap=True)
    try:
        if mode not in MODES:
            raise UserError(f"--mode must be one of {', '.join(MODES)}; got {mode!r}")
        outputs = plan(fmt, out, _out_dir(out_dir), stdout.is_terminal)
        if not cluster and not (instances or "").strip(",") and not filesystem and not eks_cluster:
            raise UserError("--cluster is required unless --instances, --filesystem or --eks-cluster is given (then "
                            "the result's cluster is a labelled fleet, or the EKS cluster)")
        if fail_if_not_ready and mode != "preflight":
            raise UserError("--fail-if-not-ready applies to --mode preflight (readiness is judged there)")
        keep, filtered = _node_filter(_verdicts(verdict, "--verdict"), only_exceptions)
        fail_verdicts = _verdicts(fail_on, "--fail-on")
        _positive(run_hours, "--run-hours")
        _positive(checkpoint_minutes, "--checkpoint-minutes")
        _positive(deadline_seconds, "--deadline-seconds")
        cache = _cache_path(cache)
        for o in outputs:
            _out_path(o.path, "--out-dir" if out_dir is not None and o.path is not None
                      and o.path.parent == out_dir else "--out")
        history = _history_dir(history)
        if last is not None:
            parse_duration(last, "--last")
        relative_since = since is not None and is_duration(since)
        if relative_since and until is not None:
            raise UserError("--since 2h counts back from now and cannot take --until; give --since and --until as "
                            "ISO-8601 times, or --last alone")
        if relative_since and last is not None:
            raise UserError("--since and --last both set a length ending now; give one")
        request = AuditRequest(
            cluster=cluster, mode=mode,  # type: ignore[arg-type]
            since=None if relative_since else _time_arg(since, "--since"),
            until=_time_arg(until, "--until"), last=since if relative_since else last,
            # the same instance named twice is one node
            instance_ids=list(dict.fromkeys(i.strip() for i in instances.split(",") if i.strip())) if instances else [],
            log_groups=list(dict.fromkeys(log_group or [])),  # the same group named twice is read once
            file_system_ids=list(dict.fromkeys(f.strip() for f in filesystem or [])),
            eks_cluster=eks_cluster,
            run_hours=run_hours, run_start=_time_arg(run_start, "--run-start"), checkpoint_minutes=checkpoint_minutes,
            onset=_time_arg(onset, "--onset"))
        settings = Settings.from_env(os.environ)
        overrides = {**settings.xid_overrides, **parse_overrides(xid_class or [])}
        if role_arn and world is not None:
            raise UserError("--role-arn applies to AWS accounts, not to --world")
        aws = aws_for(world, region, role_arn, external_id, profile)
        if deadline_seconds is not None:
            aws.deadline = time.monotonic() + deadline_seconds
        progress = AuditProgress(err, show=err.is_terminal and not quiet, verbose=verbose)
        aws.watcher = progress
        # What the audit reads of the local history is the previous state of `--format events`.
        remembered = RememberingHistory(SqliteHistory(history)) if history is not None else None
        with progress:
            try:
                result = run_audit(aws, request, JudgeConfig.from_request(request, overrides),
                                   FileCache(cache) if cache is not None else None,
                                   remembered,
                                   settings.history_lookback_days, progress)
            except UnknownCluster as exc:
                raise UserError(str(exc) + (did_you_mean(aws, request.cluster) if not request.instance_ids
                                            and not request.eks_cluster else "")) from None
            progress.phase("rendering")
        _write(outputs, result, keep, filtered, stdout, quiet, remembered.read_before if remembered else None)
        failed = _gate(result, fail_verdicts, fail_if_not_ready)
        if failed:
            _fail(f"gate failed — {failed}", EXIT_GATE)
    except KeyboardInterrupt:
        _fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
    except UserError as exc:
        _fail(str(exc), exc.code)
    except BadOutput as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except (WorldError, BadWindow, UnknownCluster, BadOverride) as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except ValidationError as exc:
        _fail(_validation_message(exc), EXIT_BAD_INPUT)
    except CallFailed as exc:
        hint = next_step(exc.code, profile or os.environ.get("AWS_PROFILE"))
        _fail(f"the account could not be read: {exc}" + (f"; {hint}" if hint else ""), EXIT_UNREACHABLE)
    except OSError as exc:
        _fail(f"cannot write output: {exc}", EXIT_BAD_INPUT)


FLAGS = {"log_groups": "--log-group", "instance_ids": "--instances", "file_system_ids": "--filesystem"}  # request fields whose flag is named otherwise


def _validation_message(exc: ValidationError) -> str:
    def flag(loc: tuple[int | str, ...]) -> str:
        head = FLAGS.get(str(loc[0]), "--" + str(loc[0]).replace("_", "-")) if loc else "--?"
        return head + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])

    return "bad input: " + "; ".join(f"{flag(e['loc'])}: {e['msg']} (got {e.get('input')!r})" for e in exc.errors())


@app.command()
def report(
    result_file: Annotated[Path, typer.Argument(metavar="RESULT.json", help="A result written by `audit --format json`")],
    fmt: Annotated[str, typer.Option("--format", help="html | md | table | ndjson | csv")] = "html",
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout")] = None,
) -> None:
    """Render a saved result as an HTML or Markdown report, the terminal summary, or finding records."""
    from pydantic import ValidationError

    from gpuaudit.report.markdown import render

    try:
        if fmt not in REPORT_FORMATS:
            raise UserError(f"--format must be one of {', '.join(REPORT_FORMATS)}; got {fmt!r}")
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
        if fmt == "md":
            emit(result.model_copy(update={"report_markdown": render(result)}), "md", out)
        elif fmt == "table" and out is None and Console().is_terminal:
            print_table(Console(highlight=False, soft_wrap=True), result)
        else:
            emit(result, fmt, out)
    except UserError as exc:
        _fail(str(exc), exc.code)
    except OSError as exc:
        _fail(f"cannot write output: {exc}", EXIT_UNREACHABLE)


@app.command()
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
    for e in entries:
        sys.stdout.write(f"{e.term} ({e.section}): {e.meaning}\n")


@app.command("history")
def history_command(
    cluster: Annotated[str | None, typer.Option(help="Cluster name, as the audits named it")] = None,
    node: Annotated[str | None, typer.Option(help="One node, i-…: its timeline only")] = None,
    history: Annotated[Path | None, typer.Option(
        "--history", help="The directory `gpuaudit audit --history DIR` keeps its history in")] = None,
    days: Annotated[int, typer.Option(help="Look-back in days, ending at the cluster's latest recorded audit")] = 30,
    fmt: Annotated[str, typer.Option("--format", help="md | json | html")] = "md",
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout")] = None,
    verdict: Annotated[str | None, typer.Option(
        help="Only nodes that an audit gave one of these verdicts, or with one open, e.g. REBOOT,NOT_OBSERVABLE")] = None,
    open_only: Annotated[bool, typer.Option(
        "--open", help="Only nodes with an action still open (REPLACE, REBOOT or NOT OBSERVABLE not shown done)")] = False,
    changed: Annotated[bool, typer.Option(
        "--changed", help="Only nodes whose verdict changed in the look-back (or whose action was done)")] = False,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Also list and draw the steady nodes (nothing open, no change), and every timeline")] = False,
) -> None:
    """Each node across audits, worst first, leading with the actions still open: verdicts, hardware-class Xids,
    reboots, coverage (fleet memory)."""

    from gpuaudit.history import HistoryUnreadable, render_history
    from gpuaudit.model.evidence import InstanceId

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
        store = SqliteHistory(directory)
        try:
            everything = store.read(cluster, [node] if node else None, parse_time("1970-01-01T00:00:00Z"),
                                    parse_time("2100-01-01T00:00:00Z"))
        except HistoryUnreadable as exc:
            raise UserError(f"--history {history}: {exc}", EXIT_UNREACHABLE) from None
        if not everything.spans:
            flag = f"--node {node}" if node else f"--cluster {cluster}"
            raise UserError(f"{flag}: no audit of it is recorded in --history {history}")
        text = render_history(everything, cluster, fmt, days, verdicts=verdicts, open_only=open_only,
                              changed=changed, show_all=show_all or bool(node))
        if out is not None:
            out.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
            err.print(f"wrote {out}")
        else:
            sys.stdout.write(text.rstrip("\n") + "\n")
    except UserError as exc:
        _fail(str(exc), exc.code)
    except OSError as exc:
        _fail(f"cannot write output: {exc}", EXIT_BAD_INPUT)


def _fail(message: str, code: int) -> None:
    # one line however long: a CI log keeps the message whole (the terminal wraps it, Rich does not)
    err.print(f"[bold red]gpuaudit:[/] {escape_markup(visible(redact(message)))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command()
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
        build_server(backend).run("stdio")
    except UserError as exc:
        _fail(str(exc), exc.code)
    except WorldError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        _fail(f"--results-dir {results_dir}: {exc}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        _fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Option(help="Where to write results and reports")] = Path("out/demo"),
    verbose: Annotated[bool, typer.Option("--verbose", help="Also print each full report and alert")] = False,
) -> None:
    """Run the shipped demo worlds end to end: audit, report, findings table, alert topic; end with a recap."""
    from gpuaudit.devtools.demo import run_demo

    try:
        run_demo(out_dir, Console(), verbose)
    except (WorldError, OSError) as exc:
        _fail(str(exc), EXIT_UNREACHABLE)


world_app = typer.Typer(no_args_is_help=True, help="Generate world files (frozen accounts) for scale tests.")
app.add_typer(world_app, name="world", rich_help_panel=DEVELOPER)


@world_app.command("generate")
def world_generate(
    kind: Annotated[str, typer.Option(help="parallelcluster | hyperpod")],
    nodes: Annotated[int, typer.Option(help="GPU (compute) nodes; a head node / controller is added")],
    out: Annotated[Path, typer.Option(help="World file to write")],
    days: Annotated[float, typer.Option(help="Days of logs before `now` (the audit window to test)")] = 7.0,
    silent_fraction: Annotated[float, typer.Option(help="Share of nodes whose kernel stream stops in the window")] = 0.0,
    xid_rate: Annotated[float, typer.Option(help="Xids per node-day")] = 0.05,
    seed: Annotated[int, typer.Option(help="Same seed, same bytes")] = 0,
    instance_type: Annotated[str, typer.Option(help="p5.48xlarge | p5en.48xlarge | p4d.24xlarge")] = "p5.48xlarge",
    host_named: Annotated[bool, typer.Option(help="Name the customer kernel group's streams by host alone")] = False,
) -> None:
    """Generate a large, realistic world: nodes, log groups and streams, silent streams, Xids."""
    from gpuaudit.devtools import worldgen

    try:
        spec = worldgen.WorldSpec(kind=kind, nodes=nodes, days=days, silent_fraction=silent_fraction,
                                  xid_rate=xid_rate, seed=seed, instance_type=instance_type, host_named=host_named)
        world = worldgen.generate(spec)
        size = worldgen.write(world, str(out))
    except ValueError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        _fail(f"cannot write {out}: {exc}", EXIT_UNREACHABLE)
    shape = worldgen.describe(world)
    err.print(f"wrote {out} ({size / 1e6:.1f} MB): cluster {spec.cluster_name}, {shape['nodes']} nodes, "
              f"{shape['log_groups']} log groups, {shape['streams']} streams, "
              f"{shape['events'] + shape['periodic_lines']:,} log lines, {shape['xid_lines']} Xid lines", highlight=False)


@app.command(rich_help_panel=DEVELOPER)
def bench(
    nodes: Annotated[int, typer.Option(help="GPU nodes in the generated world")],
    days: Annotated[float, typer.Option(help="Audit window: the last D days")] = 7.0,
    kind: Annotated[str, typer.Option(help="parallelcluster | hyperpod")] = "parallelcluster",
    seed: Annotated[int, typer.Option(help="World seed")] = 0,
    silent_fraction: Annotated[float, typer.Option(help="Share of nodes whose kernel stream goes silent")] = 0.01,
    xid_rate: Annotated[float, typer.Option(help="Xids per node-day")] = 0.05,
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    keep: Annotated[Path | None, typer.Option(help="Keep the world and evidence files in this folder")] = None,
    naive_sample: Annotated[int | None, typer.Option(
        help="Run the naive strategy on this many nodes and extrapolate (for 10,000-node runs)")] = None,
    host_named: Annotated[bool, typer.Option(help="Name the customer kernel group's streams by host alone")] = False,
) -> None:
    """Scale benchmark: our coverage audit against two Logs Insights queries per node per source."""
    import json as _json

    from gpuaudit.devtools.bench import BenchConfig, render_table, run_bench

    if fmt not in ("table", "json"):
        _fail(f"--format must be table or json; got {fmt!r}", EXIT_BAD_INPUT)
    try:
        config = BenchConfig(nodes=nodes, days=days, kind=kind, seed=seed, silent_fraction=silent_fraction,
                             xid_rate=xid_rate, naive_sample=naive_sample, host_named=host_named)
        config.spec()
    except ValueError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    try:
        figures = run_bench(config, keep_dir=keep, progress=None if fmt == "json" else err.print)
    except RuntimeError as exc:
        _fail(str(exc), EXIT_UNREACHABLE)
    if fmt == "json":
        sys.stdout.write(_json.dumps(figures, indent=2) + "\n")
    else:
        render_table(figures, Console(width=max(Console().width, 120)))


@app.command("bench-history", rich_help_panel=DEVELOPER)
def bench_history(
    nodes: Annotated[int, typer.Option(help="GPU nodes audited every hour")] = 2000,
    days: Annotated[int, typer.Option(help="Days of hourly audits stored before the measured read")] = 30,
    lookback_days: Annotated[int, typer.Option(help="How far back the measured audit reads")] = 30,
    xid_rate: Annotated[float, typer.Option(help="Hardware-class Xids per node-day")] = 0.05,
    silent_rate: Annotated[float, typer.Option(help="Kernel-stream silences per node-day")] = 0.01,
    unrebooted: Annotated[float, typer.Option(help="Share of the REBOOTs never done (their action stays open)")] = 0.05,
    seed: Annotated[int, typer.Option(help="Generator seed")] = 0,
    moto: Annotated[bool, typer.Option(help="Also put the spans in the findings table in moto and read them back "
                                            "(checks the DynamoDB figures; slow)")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
) -> None:
    """Fleet memory benchmark: what one audit's history read costs (items, requests, wall, memory), and what
    `gpuaudit history` shows of it (Markdown lines, HTML size and height)."""
    import json as _json

    from gpuaudit.devtools.history_bench import HistoryBenchConfig, render_history_table, run_history_bench

    if fmt not in ("table", "json"):
        _fail(f"--format must be table or json; got {fmt!r}", EXIT_BAD_INPUT)
    config = HistoryBenchConfig(nodes=nodes, days=days, lookback_days=lookback_days, xid_rate=xid_rate,
                                silent_rate=silent_rate, unrebooted=unrebooted, seed=seed, moto=moto)
    try:
        config.check()
    except ValueError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    figures = run_history_bench(config)
    if fmt == "json":
        sys.stdout.write(_json.dumps(figures, indent=2, default=str) + "\n")
    else:
        render_history_table(figures, Console(width=max(Console().width, 120)))

def main() -> None:
    app()
