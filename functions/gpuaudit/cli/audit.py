"""`gpuaudit audit`: one audit of an account or a world, its outputs, and the CI gates on its result."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape as escape_markup

from gpuaudit.access import (
    EXIT_BAD_INPUT,
    EXIT_GATE,
    EXIT_INTERRUPTED,
    EXIT_UNREACHABLE,
    UserError,
    aws_for,
    did_you_mean,
)
from gpuaudit.cli.flags import (
    ACCESS,
    ADVANCED,
    GATES,
    MODES,
    OUTPUT,
    PREFLIGHT,
    SCOPE,
    WINDOW,
    _cache_path,
    _coverage_statuses,
    _history_dir,
    _out_dir,
    _out_path,
    _positive,
    _time_arg,
    _validation_message,
    _verdicts,
)
from gpuaudit.cli.stderr import _fail, err
from gpuaudit.collectors.aws import DEFAULT_DEADLINE_S, Aws, CallFailed
from gpuaudit.collectors.cache import FileCache
from gpuaudit.collectors.inventory import UnknownCluster
from gpuaudit.domain.window import BadWindow, is_duration, parse_duration
from gpuaudit.embedded.world import WorldError
from gpuaudit.files import same_file, write_atomically
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.history import HistoryRead
from gpuaudit.model.result import NodeResult, Result
from gpuaudit.outputs import (
    BadOutput,
    Keep,
    Output,
    ids_stem,
    plan,
    print_table,
    render,
    report_file,
    write_ids_files,
)
from gpuaudit.pipeline import run_audit
from gpuaudit.report.escape import visible
from gpuaudit.report.order import EXCEPTIONS, VERDICT_SEVERITY, coverage_matches
from gpuaudit.rules.context import BadOverride, parse_overrides
from gpuaudit.rules.judge import JudgeConfig
from gpuaudit.settings import BadSetting, Settings
from gpuaudit.writes.eventbus import RememberingHistory
from gpuaudit.writes.history import SQLITE_FILE, SqliteHistory

AUDIT_EXAMPLES = """Examples:

  gpuaudit audit --cluster my-hyperpod --last 2h                     # summary table on a terminal

  gpuaudit audit --cluster my-hyperpod --profile prod --region us-west-2 --mode incident --since 6h

  gpuaudit audit --cluster my-hyperpod --mode preflight --run-hours 72 --fail-if-not-ready

  gpuaudit audit --cluster my-hyperpod --only-exceptions --fail-on REPLACE,NOT_OBSERVABLE   # CI gate: exit 4

  gpuaudit audit --cluster my-hyperpod --out-dir out/            # report.md, result.json, report.html, findings.*

  gpuaudit audit --cluster my-hyperpod --format ndjson | jq -c 'select(.verdict == "REPLACE")'

  gpuaudit audit --world functions/gpuaudit/worlds/hyperpod-xid31-app-error.world.json \\
      --cluster research-hp-slurm --out report.md

Exit codes: 0 audited; 2 bad input; 3 account unreachable or credentials; 4 a --fail-on/--fail-if-not-ready gate;
130 interrupted."""


def _node_filter(verdicts: set[str], only_exceptions: bool,
                 coverage: set[str] | frozenset[str] = frozenset()) -> tuple[Keep | None, str | None]:
    """The rows --verdict / --only-exceptions / --coverage keep (several given: a node must pass each), and how to
    say so."""
    if not verdicts and not only_exceptions and not coverage:
        return None, None

    def keep(node: NodeResult) -> bool:
        exception = node.verdict in EXCEPTIONS or (node.verdict is None and node.xid_status != "Measured")
        return (not verdicts or node.verdict in verdicts) and (not only_exceptions or exception) and coverage_matches(
            node, coverage)

    said = [f"--verdict {','.join(v for v in VERDICT_SEVERITY if v in verdicts)}"] if verdicts else []
    said += [f"--coverage {','.join(sorted(coverage))}"] if coverage else []
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


def _settings() -> Settings:
    """The settings from the environment; a bad one is bad input naming its variable (never a traceback later,
    as 10^14 look-back days once were)."""
    try:
        return Settings.from_env(os.environ)
    except ValidationError as exc:
        said = "; ".join(f"environment variable {'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got "
                         f"{str(e.get('input'))[:40]!r})" for e in exc.errors())
        raise UserError(f"bad input: {said}") from None
    except BadSetting as exc:  # a variable that does not parse (JSON, an override): named by its message
        raise UserError(f"bad input: {exc}") from None


def _not_an_input(outputs: list[Output], out_dir: Path | None, inputs: dict[str, Path | None]) -> None:
    """An output naming one of the run's inputs would overwrite what the audit reads (a world, the cache, the
    history): refused before anything is read."""
    for o in outputs:
        for flag, given in inputs.items():
            if o.path is not None and given is not None and same_file(o.path, given):
                named = "--out-dir" if out_dir is not None and o.path.parent == out_dir else "--out"
                raise UserError(f"{named} {visible(str(o.path))}: is the {flag} input of this run; refusing to "
                                "overwrite it (write the output elsewhere)")


def _write(outputs: list[Output], result: Result, keep: Keep | None, filtered: str | None, stdout: Console,
           quiet: bool, history: HistoryRead | None = None) -> None:
    full = report_file(outputs)
    result, ids_written = write_ids_files(result, ids_stem(outputs, result.audit_id))
    beside_a_file = any(o.path is not None for o in outputs)
    for path, count in ids_written:
        # said as every file written is; beside nothing but stdout (a temporary file), only to a person watching
        if not quiet and (beside_a_file or err.is_terminal):
            err.print(f"wrote {escape_markup(visible(str(path)))} ({count:,} node IDs a grouped command reads)",
                      soft_wrap=True, highlight=False)
    for o in outputs:
        if o.path is not None:
            write_atomically(o.path, render(result, o.fmt, keep=keep, filtered=filtered, full_report=full,
                                            history=history))
            if not quiet:
                err.print(f"wrote {escape_markup(visible(str(o.path)))} ({o.fmt})", soft_wrap=True, highlight=False)
        elif o.fmt == "table" and stdout.is_terminal:
            print_table(stdout, result, keep=keep, filtered=filtered, full_report=full)
        else:
            sys.stdout.write(render(result, o.fmt, keep=keep, filtered=filtered, full_report=full, history=history))
            sys.stdout.flush()


def audit(
    cluster: Annotated[
        str | None,
        typer.Option(
            help="Cluster name (HyperPod, ParallelCluster), or a label for --instances (optional with --instances or "
            "--filesystem: the result's cluster is then a labelled fleet)",
            rich_help_panel=SCOPE,
        ),
    ] = None,
    mode: Annotated[str, typer.Option(help="coverage | incident | preflight", rich_help_panel=SCOPE)] = "coverage",
    instances: Annotated[
        str | None,
        typer.Option(
            help="Self-managed EC2/EKS: comma-separated instance IDs; terminated ones are audited from their log "
            "streams and CloudTrail",
            rich_help_panel=SCOPE,
        ),
    ] = None,
    eks_cluster: Annotated[
        str | None,
        typer.Option(
            "--eks-cluster",
            help="Self-managed EKS: audit the nodes of this EKS cluster (read from its Kubernetes API) "
            "and their node-health conditions",
            rich_help_panel=SCOPE,
        ),
    ] = None,
    filesystem: Annotated[
        list[str] | None,
        typer.Option(
            "--filesystem",
            help="Also audit this FSx for Lustre file system, fs-… (repeatable, at most 50): details, "
            "maintenance window, saturation metrics; with or without --cluster",
            rich_help_panel=SCOPE,
        ),
    ] = None,
    log_group: Annotated[
        list[str] | None,
        typer.Option(
            "--log-group",
            help="Also search this CloudWatch Logs group, e.g. a job's stdout where NCCL prints its "
            "transport (repeatable, at most 50; exact name)",
            rich_help_panel=SCOPE,
        ),
    ] = None,
    world: Annotated[
        Path | None, typer.Option(help="Audit a world file (a frozen account) instead of AWS", rich_help_panel=SCOPE)
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Window start: ISO-8601 UTC, or a length back from now (30m, 2h, 2d); alone it runs to now",
            rich_help_panel=WINDOW,
        ),
    ] = None,
    until: Annotated[str | None, typer.Option(help="Window end, ISO-8601 UTC", rich_help_panel=WINDOW)] = None,
    last: Annotated[
        str | None,
        typer.Option(help="A length ending now: 30m, 2h, 6h, 24h, 2d, 7d … (at most 90d)", rich_help_panel=WINDOW),
    ] = None,
    onset: Annotated[
        str | None,
        typer.Option(
            help="Incident: when the failure began, ISO-8601 UTC, inside the window (default: the first failure signal "
            "read); a cause is Proven only before it",
            rich_help_panel=WINDOW,
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="table | md | json | html | ndjson | csv | events (the EventBridge entries the deployed "
            "auditor would send, against --history; default: table on a terminal, md otherwise; or "
            "--out's extension)",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    out: Annotated[
        str | None,
        typer.Option(
            help="Write here (format from the extension: .md .json .html .ndjson .csv .txt .events.ndjson); - is "
            "stdout",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out-dir",
            help="Write every format in one run: report.md, result.json, report.html, findings.ndjson, "
            "findings.csv, findings.events.ndjson",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress and no 'wrote' lines on stderr", rich_help_panel=OUTPUT)
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Each AWS call and phase on stderr", rich_help_panel=OUTPUT)
    ] = False,
    no_color: Annotated[
        bool, typer.Option("--no-color", help="No colour (also NO_COLOR=1)", rich_help_panel=OUTPUT)
    ] = False,
    verdict: Annotated[
        str | None,
        typer.Option(
            help="Show only nodes with these verdicts, e.g. REPLACE,REBOOT (table and finding records)",
            rich_help_panel=GATES,
        ),
    ] = None,
    only_exceptions: Annotated[
        bool,
        typer.Option(
            "--only-exceptions", help="Show only nodes that need something: not LEAVE ALONE", rich_help_panel=GATES
        ),
    ] = False,
    coverage: Annotated[
        str | None,
        typer.Option(
            help="Show only nodes whose GPU error evidence is MEASURED, NOT_OBSERVABLE, NO_HMA_DETECTIONS, or GAP (any "
            "empty hour) (table and finding records)",
            rich_help_panel=GATES,
        ),
    ] = None,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            help="Exit 4 when any node has one of these verdicts, e.g. REPLACE,NOT_OBSERVABLE",
            rich_help_panel=GATES,
        ),
    ] = None,
    fail_if_not_ready: Annotated[
        bool,
        typer.Option(
            "--fail-if-not-ready", help="Preflight: exit 4 unless ready is Yes or Yes with risks", rich_help_panel=GATES
        ),
    ] = False,
    profile: Annotated[
        str | None,
        typer.Option(help="AWS profile (default: AWS_PROFILE, then the default chain)", rich_help_panel=ACCESS),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option(
            help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's; a world's own)",
            rich_help_panel=ACCESS,
        ),
    ] = None,
    role_arn: Annotated[
        str | None,
        typer.Option(
            help="Audit another account: assume its read-only role (deploy infra/cross_account.py there)",
            rich_help_panel=ACCESS,
        ),
    ] = None,
    external_id: Annotated[
        str | None, typer.Option(help="External ID the read-only role requires", rich_help_panel=ACCESS)
    ] = None,
    run_hours: Annotated[
        float | None, typer.Option(help="Planned run length in hours", rich_help_panel=PREFLIGHT)
    ] = None,
    run_start: Annotated[
        str | None, typer.Option(help="Planned start, ISO-8601 UTC (default now)", rich_help_panel=PREFLIGHT)
    ] = None,
    checkpoint_minutes: Annotated[
        float | None, typer.Option(help="Checkpoint interval", rich_help_panel=PREFLIGHT)
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            help="Incremental audits: keep proven hourly bins in this file and query only the hours that can still "
            "change",
            rich_help_panel=ADVANCED,
        ),
    ] = None,
    history: Annotated[
        Path | None,
        typer.Option(
            "--history",
            help="Fleet memory: read each node's earlier audits from (and add this one to) a local history in "
            "this directory, so an Xid recurring after a reboot days later is REPLACE (default: off; "
            "look-back GPUAUDIT_HISTORY_DAYS, 30)",
            rich_help_panel=ADVANCED,
        ),
    ] = None,
    deadline_seconds: Annotated[
        float | None,
        typer.Option(
            help="Stop calling AWS after this many seconds and report what was read (the rest: Not checked); "
            "default 900",
            rich_help_panel=ADVANCED,
        ),
    ] = None,
    xid_class: Annotated[
        list[str] | None,
        typer.Option(
            help="Override an Xid's class, CODE=CLASS (repeatable; also GPUAUDIT_XID_CLASS_OVERRIDES); named in the "
            "report",
            rich_help_panel=ADVANCED,
        ),
    ] = None,
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
        keep, filtered = _node_filter(_verdicts(verdict, "--verdict"), only_exceptions,
                                      _coverage_statuses(coverage, "--coverage"))
        fail_verdicts = _verdicts(fail_on, "--fail-on")
        _positive(run_hours, "--run-hours")
        _positive(checkpoint_minutes, "--checkpoint-minutes")
        _positive(deadline_seconds, "--deadline-seconds")
        cache = _cache_path(cache)
        for o in outputs:
            _out_path(o.path, "--out-dir" if out_dir is not None and o.path is not None
                      and o.path.parent == out_dir else "--out")
        history = _history_dir(history)
        _not_an_input(outputs, out_dir, {"--world": world, "--cache": cache,
                                         "--history": history / SQLITE_FILE if history is not None else None})
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
        settings = _settings()
        overrides = {**settings.xid_overrides, **parse_overrides(xid_class or [])}
        if role_arn and world is not None:
            raise UserError("--role-arn applies to AWS accounts, not to --world")
        aws = aws_for(world, region, role_arn, external_id, profile)
        aws.deadline = time.monotonic() + (deadline_seconds if deadline_seconds is not None else DEFAULT_DEADLINE_S)
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
