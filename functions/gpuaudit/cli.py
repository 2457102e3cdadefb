"""Command line: `gpuaudit audit …` against an account or a world, `gpuaudit demo`.

Exit codes: 0 audited (whatever the findings); 2 bad input, naming what; 3 the account or
world could not be reached or read. A user error never prints a traceback.
"""

from __future__ import annotations

import math
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape as escape_markup

from gpuaudit.collectors.aws import Aws, CallFailed, assumed_session
from gpuaudit.collectors.cache import FORMAT as CACHE_FORMAT
from gpuaudit.collectors.cache import FileCache
from gpuaudit.collectors.inventory import UnknownCluster
from gpuaudit.domain.window import BadWindow
from gpuaudit.embedded.world import WorldError
from gpuaudit.history import SQLITE_FILE, SqliteHistory
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report.escape import visible
from gpuaudit.report.redact import redact
from gpuaudit.rules.judge import BadOverride, JudgeConfig, parse_overrides
from gpuaudit.settings import Settings

EXIT_OK, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 0, 2, 3
MODES = ("coverage", "incident", "preflight")
FORMATS = ("md", "json", "html")
REPORT_FORMATS = ("html", "md")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Read-only auditor for GPU training clusters on AWS.")
err = Console(stderr=True)


class UserError(Exception):
    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def _time_arg(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = parse_time(value)
    except (ValueError, OverflowError):
        raise UserError(f"{flag}: not an ISO-8601 time: {value!r} (e.g. 2026-09-27T10:00:00Z)") from None
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


def _out_path(path: Path | None) -> Path | None:
    if path is not None and (path.is_dir() or not path.parent.is_dir() or not os.access(path.parent, os.W_OK)):
        raise UserError(f"--out {path}: cannot write there (directory, or a folder that does not exist or is not "
                        "writable)")
    return path


def _aws_for(world: Path | None, region: str | None, role_arn: str | None = None,
             external_id: str | None = None) -> Aws:
    if world is not None:
        from gpuaudit.embedded.backend import WorldBackend
        from gpuaudit.embedded.world import load_world

        loaded = load_world(world)
        backend = WorldBackend(loaded)
        if region and region != loaded.region:
            raise UserError(f"--region {region} does not match the world's region {loaded.region}")
        return Aws(session=backend.session(), region=loaded.region, clock=lambda: loaded.now, sleep=lambda _s: None)
    import boto3

    session = boto3.Session(region_name=region) if region else boto3.Session()
    if not session.region_name:
        raise UserError("no region: pass --region or set AWS_REGION")
    if role_arn:  # another account of the organization: its GpuAuditReadOnlyRole (infra/cross_account.py)
        try:
            session = assumed_session(session, role_arn, external_id)
        except CallFailed as exc:
            raise UserError(f"cannot assume the audit role: {exc}", EXIT_UNREACHABLE) from None
    return Aws(session=session, region=session.region_name)


def emit(result: Result, fmt: str, out: Path | None) -> None:
    if fmt == "html":
        from gpuaudit.report.html import render_html

        text = render_html(result)
    else:
        text = result.to_json() if fmt == "json" else result.report_markdown
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
        err.print(f"wrote {out}")
    else:
        sys.stdout.write(text + "\n")


@app.command()
def audit(
    cluster: Annotated[str | None, typer.Option(
        help="Cluster name (HyperPod, ParallelCluster), or a label for --instances (optional with --instances or "
             "--filesystem: the result's cluster is then a labelled fleet)")] = None,
    region: Annotated[str | None, typer.Option(help="AWS region (default: the world's, or AWS_REGION)")] = None,
    mode: Annotated[str, typer.Option(help="coverage | incident | preflight")] = "coverage",
    since: Annotated[str | None, typer.Option(help="Window start, ISO-8601 UTC; alone it runs to now")] = None,
    until: Annotated[str | None, typer.Option(help="Window end, ISO-8601 UTC")] = None,
    last: Annotated[str | None, typer.Option(help="24h | 72h | 7d, ending now")] = None,
    world: Annotated[Path | None, typer.Option(help="Audit a world file instead of an AWS account")] = None,
    fmt: Annotated[str, typer.Option("--format", help="md | json | html")] = "md",
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout")] = None,
    instances: Annotated[str | None, typer.Option(
        help="Self-managed EC2/EKS: comma-separated instance IDs; terminated ones are audited from their log "
             "streams and CloudTrail")] = None,
    run_hours: Annotated[float | None, typer.Option(help="Preflight: planned run length in hours")] = None,
    run_start: Annotated[str | None, typer.Option(help="Preflight: planned start, ISO-8601 UTC (default now)")] = None,
    checkpoint_minutes: Annotated[float | None, typer.Option(help="Preflight: checkpoint interval")] = None,
    role_arn: Annotated[str | None, typer.Option(
        help="Audit another account: assume its read-only role (deploy infra/cross_account.py there)")] = None,
    external_id: Annotated[str | None, typer.Option(help="External ID the read-only role requires")] = None,
    cache: Annotated[Path | None, typer.Option(
        help="Incremental audits: keep proven hourly bins in this file and query only the hours that can still "
             "change")] = None,
    deadline_seconds: Annotated[float | None, typer.Option(
        help="Stop calling AWS after this many seconds and report what was read (the rest: Not checked)")] = None,
    xid_class: Annotated[list[str] | None, typer.Option(
        help="Override an Xid's class, CODE=CLASS (repeatable; also GPUAUDIT_XID_CLASS_OVERRIDES); named in the "
             "report")] = None,
    eks_cluster: Annotated[str | None, typer.Option(
        "--eks-cluster", help="Self-managed EKS: audit the nodes of this EKS cluster (read from its Kubernetes API) "
                              "and their node-health conditions")] = None,
    log_group: Annotated[list[str] | None, typer.Option(
        "--log-group", help="Also search this CloudWatch Logs group, e.g. a job's stdout where NCCL prints its "
                            "transport (repeatable, at most 50; exact name)")] = None,
    filesystem: Annotated[list[str] | None, typer.Option(
        "--filesystem", help="Also audit this FSx for Lustre file system, fs-… (repeatable, at most 50): details, "
                             "maintenance window, saturation metrics; with or without --cluster")] = None,
    history: Annotated[Path | None, typer.Option(
        "--history", help="Fleet memory: read each node's earlier audits from (and add this one to) a local history in "
                          "this directory, so an Xid recurring after a reboot days later is REPLACE (default: off; "
                          "look-back GPUAUDIT_HISTORY_DAYS, 30)")] = None,
) -> None:
    """Audit one cluster: coverage proof, node verdicts, root cause or readiness."""
    try:
        if mode not in MODES:
            raise UserError(f"--mode must be one of {', '.join(MODES)}; got {mode!r}")
        if fmt not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
        if not cluster and not (instances or "").strip(",") and not filesystem and not eks_cluster:
            raise UserError("--cluster is required unless --instances, --filesystem or --eks-cluster is given (then "
                            "the result's cluster is a labelled fleet, or the EKS cluster)")
        _positive(run_hours, "--run-hours")
        _positive(checkpoint_minutes, "--checkpoint-minutes")
        _positive(deadline_seconds, "--deadline-seconds")
        cache = _cache_path(cache)
        out = _out_path(out)
        history = _history_dir(history)
        request = AuditRequest(
            cluster=cluster, mode=mode, since=_time_arg(since, "--since"),  # type: ignore[arg-type]
            until=_time_arg(until, "--until"), last=last,  # type: ignore[arg-type]
            # the same instance named twice is one node
            instance_ids=list(dict.fromkeys(i.strip() for i in instances.split(",") if i.strip())) if instances else [],
            log_groups=list(dict.fromkeys(log_group or [])),  # the same group named twice is read once
            file_system_ids=list(dict.fromkeys(f.strip() for f in filesystem or [])),
            eks_cluster=eks_cluster,
            run_hours=run_hours, run_start=_time_arg(run_start, "--run-start"), checkpoint_minutes=checkpoint_minutes)
        settings = Settings.from_env(os.environ)
        overrides = {**settings.xid_overrides, **parse_overrides(xid_class or [])}
        if role_arn and world is not None:
            raise UserError("--role-arn applies to AWS accounts, not to --world")
        aws = _aws_for(world, region, role_arn, external_id)
        if deadline_seconds is not None:
            aws.deadline = time.monotonic() + deadline_seconds
        with err.status(f"auditing {request.cluster} ({mode})…"):
            result = run_audit(aws, request, JudgeConfig.from_request(request, overrides),
                               FileCache(cache) if cache is not None else None,
                               SqliteHistory(history) if history is not None else None, settings.history_lookback_days)
        emit(result, fmt, out)
    except UserError as exc:
        _fail(str(exc), exc.code)
    except (WorldError, BadWindow, UnknownCluster, BadOverride) as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except ValidationError as exc:
        _fail(_validation_message(exc), EXIT_BAD_INPUT)
    except CallFailed as exc:
        _fail(f"the account could not be read: {exc}", EXIT_UNREACHABLE)
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
    fmt: Annotated[str, typer.Option("--format", help="html | md")] = "html",
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout")] = None,
) -> None:
    """Render a saved result as an HTML or Markdown report."""
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
        if fmt == "html":
            emit(result, "html", out)
        else:
            emit(result.model_copy(update={"report_markdown": render(result)}), "md", out)
    except UserError as exc:
        _fail(str(exc), exc.code)
    except OSError as exc:
        _fail(f"cannot write output: {exc}", EXIT_UNREACHABLE)


@app.command("history")
def history_command(
    cluster: Annotated[str | None, typer.Option(help="Cluster name, as the audits named it")] = None,
    node: Annotated[str | None, typer.Option(help="One node, i-…: its timeline only")] = None,
    history: Annotated[Path | None, typer.Option(
        "--history", help="The directory `gpuaudit audit --history DIR` keeps its history in")] = None,
    days: Annotated[int, typer.Option(help="Look-back in days, ending at the cluster's latest recorded audit")] = 30,
    fmt: Annotated[str, typer.Option("--format", help="md | json | html")] = "md",
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout")] = None,
) -> None:
    """A node's timeline across audits: verdicts, hardware-class Xids, reboots, coverage (fleet memory)."""
    from datetime import timedelta

    from gpuaudit.history import HistoryUnreadable
    from gpuaudit.model.evidence import InstanceId
    from gpuaudit.report import history as history_report

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
        until = max(s.through for s in everything.spans)
        since = until - timedelta(days=days)
        read = everything.model_copy(update={"since": since, "until": until,
                                             "spans": [s for s in everything.spans if s.through >= since]})
        text = {"md": history_report.render_markdown, "json": history_report.render_json,
                "html": history_report.render_html}[fmt](read, cluster)
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
    err.print(f"[bold red]gpuaudit:[/] {escape_markup(visible(redact(message)))}", highlight=False)
    raise typer.Exit(code)


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Option(help="Where to write results and reports")] = Path("out/demo"),
) -> None:
    """Run the shipped demo worlds end to end: audit, report, findings table, alert topic."""
    from gpuaudit.devtools.demo import run_demo

    try:
        run_demo(out_dir, Console())
    except (WorldError, OSError) as exc:
        _fail(str(exc), EXIT_UNREACHABLE)


world_app = typer.Typer(no_args_is_help=True, help="Generate world files (frozen accounts) for scale tests.")
app.add_typer(world_app, name="world")


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


@app.command()
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



@app.command("bench-history")
def bench_history(
    nodes: Annotated[int, typer.Option(help="GPU nodes audited every hour")] = 2000,
    days: Annotated[int, typer.Option(help="Days of hourly audits stored before the measured read")] = 30,
    lookback_days: Annotated[int, typer.Option(help="How far back the measured audit reads")] = 30,
    xid_rate: Annotated[float, typer.Option(help="Hardware-class Xids per node-day")] = 0.05,
    silent_rate: Annotated[float, typer.Option(help="Kernel-stream silences per node-day")] = 0.01,
    seed: Annotated[int, typer.Option(help="Generator seed")] = 0,
    moto: Annotated[bool, typer.Option(help="Also put the spans in the findings table in moto and read them back "
                                            "(checks the DynamoDB figures; slow)")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
) -> None:
    """Fleet memory benchmark: what one audit's history read costs (items, requests, wall, memory)."""
    import json as _json

    from gpuaudit.devtools.history_bench import HistoryBenchConfig, render_history_table, run_history_bench

    if fmt not in ("table", "json"):
        _fail(f"--format must be table or json; got {fmt!r}", EXIT_BAD_INPUT)
    config = HistoryBenchConfig(nodes=nodes, days=days, lookback_days=lookback_days, xid_rate=xid_rate,
                                silent_rate=silent_rate, seed=seed, moto=moto)
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
