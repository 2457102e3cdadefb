"""Developer tools on the command line: the demo, the world generator and the benchmarks (devtools/)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpuaudit.access import EXIT_BAD_INPUT, EXIT_UNREACHABLE
from gpuaudit.cli.stderr import _fail, err
from gpuaudit.embedded.world import WorldError


def demo(
    out_dir: Annotated[Path, typer.Option(help="Where to write results and reports")] = Path("out/demo"),
    verbose: Annotated[bool, typer.Option("--verbose", help="Also print each full report and alert")] = False,
) -> None:
    """Run the shipped demo worlds end to end: audit, report, findings table, alert topic; end with a recap."""
    from gpuaudit.devtools.demo import run_demo

    try:
        import moto  # noqa: F401  (the embedded account's table and topic)
    except ImportError:
        _fail("gpuaudit demo needs the embedded account (moto), an extra: `pipx install '.[embedded]'` or "
              "`pip install '.[embedded]'` from the checkout (`make demo` installs it in .venv)", EXIT_BAD_INPUT)
    try:
        run_demo(out_dir, Console(), verbose)
    except (WorldError, OSError) as exc:
        _fail(str(exc), EXIT_UNREACHABLE)


world_app = typer.Typer(no_args_is_help=True, help="Generate world files (frozen accounts) for scale tests.")


@world_app.command("generate")
def world_generate(
    kind: Annotated[str, typer.Option(help="parallelcluster | hyperpod")],
    nodes: Annotated[int, typer.Option(help="GPU (compute) nodes; a head node / controller is added")],
    out: Annotated[Path, typer.Option(help="World file to write")],
    days: Annotated[float, typer.Option(help="Days of logs before `now` (the audit window to test)")] = 7.0,
    silent_fraction: Annotated[float,
                               typer.Option(help="Share of nodes whose kernel stream stops in the window")] = 0.0,
    xid_rate: Annotated[float, typer.Option(help="Xids per node-day")] = 0.05,
    seed: Annotated[int, typer.Option(help="Same seed, same bytes")] = 0,
    instance_type: Annotated[str, typer.Option(help="p5.48xlarge | p5en.48xlarge | p4d.24xlarge")] = "p5.48xlarge",
    host_named: Annotated[bool, typer.Option(help="Name the customer kernel group's streams by host alone")] = False,
    per_instance_interfaces: Annotated[bool, typer.Option(
        help="Write each instance's network interfaces out, not one template per instance type "
             "(docs/WORLD-FORMAT.md)")] = False,
) -> None:
    """Generate a large, realistic world: nodes, log groups and streams, silent streams, Xids."""
    from gpuaudit.devtools import worldgen

    try:
        spec = worldgen.WorldSpec(kind=kind, nodes=nodes, days=days, silent_fraction=silent_fraction,
                                  xid_rate=xid_rate, seed=seed, instance_type=instance_type, host_named=host_named,
                                  compact=not per_instance_interfaces)
        world = worldgen.generate(spec)
        size = worldgen.write(world, str(out))
    except ValueError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        _fail(f"cannot write {out}: {exc}", EXIT_UNREACHABLE)
    shape = worldgen.describe(world)
    err.print(f"wrote {out} ({size / 1e6:.1f} MB): cluster {spec.cluster_name}, {shape['nodes']} nodes, "
              f"{shape['log_groups']} log groups, {shape['streams']} streams, "
              f"{shape['events'] + shape['periodic_lines']:,} log lines, {shape['xid_lines']} Xid lines",
              highlight=False)


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
