"""What a reader scrolls through at fleet size (issue #37 item 3): the rendered reports of one audit of a generated
cluster — Markdown lines and bytes, the longest Markdown line, HTML bytes and the HTML page's height in headless
Chromium — and the JSON result's size (it keeps every node, row and line).

    PYTHONPATH=functions .venv/bin/python -m tests.benchmarks.report_size [--nodes 2000] [--days 7] [--mode coverage]
        [--result saved.result.json]  # render a saved result instead of auditing a generated world

The page height is measured on a copy of the page whose Content-Security-Policy allows one inline script that writes
`document.documentElement.scrollHeight` into the title (the report itself carries no script); Chromium's
`--dump-dom` prints it. Without /usr/bin/chromium the height is reported as not measured.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "tests")]  # as a script or a module, from any folder

from helpers.worlds import aws_for  # noqa: E402

from gpuaudit.devtools.worldgen import WorldSpec, generate, write  # noqa: E402
from gpuaudit.embedded.world import load_world  # noqa: E402
from gpuaudit.model.evidence import AuditRequest  # noqa: E402
from gpuaudit.model.result import Result  # noqa: E402
from gpuaudit.pipeline import run_audit  # noqa: E402
from gpuaudit.report.html import render_html  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
MEASURE = ("<script>document.title = 'height=' + document.documentElement.scrollHeight</script>")


def page_height(html: str, folder: Path, width: int = 1400) -> int | None:
    """The rendered page's height in CSS pixels at `width`, or None without Chromium."""
    if not CHROMIUM.exists():
        return None
    probe = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html, count=1)
    probe = probe.replace("</body>", MEASURE + "</body>", 1)
    page = folder / "probe.html"
    page.write_text(probe, encoding="utf-8")
    run = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", f"--user-data-dir={folder / 'profile'}",
         f"--window-size={width},1000", "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=600, check=False)
    found = re.search(r"<title>height=(\d+)</title>", run.stdout)
    return int(found[1]) if found else None


def audited(nodes: int, days: float, mode: str, folder: Path) -> Result:
    world_file = folder / "world.json"
    write(generate(WorldSpec(kind="parallelcluster", nodes=nodes, days=days, silent_fraction=0.01, xid_rate=0.05,
                             seed=0)), str(world_file))
    world = load_world(world_file)
    since = world.now - timedelta(days=days)
    return run_audit(aws_for(world), AuditRequest(cluster="bench-pcluster", mode=mode,  # type: ignore[arg-type]
                                                  since=since, until=world.now))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--mode", default="coverage", choices=("coverage", "incident"))
    parser.add_argument("--result", type=Path, help="a saved result (JSON) to render instead of auditing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        result = (Result.model_validate_json(args.result.read_text()) if args.result
                  else audited(args.nodes, args.days, args.mode, folder))
        audit_s = time.perf_counter() - started
        started = time.perf_counter()
        html = render_html(result)
        render_s = time.perf_counter() - started
        markdown = result.report_markdown
        height = page_height(html, folder)
    source = str(args.result) if args.result else f"{args.nodes:,} nodes x {args.days:g} days, {args.mode}"
    print(f"report sizes: {source} ({len(result.nodes):,} nodes in the result; audit {audit_s:.1f} s, "
          f"HTML render {render_s:.2f} s)")
    print(f"  markdown lines        {len(markdown.splitlines()):>10,}")
    print(f"  markdown bytes        {len(markdown.encode()):>10,}")
    print(f"  longest markdown line {max(map(len, markdown.splitlines())):>10,}")
    print(f"  html bytes            {len(html.encode()):>10,}")
    print(f"  html page height px   {height if height is not None else 'not measured (no chromium)':>10}")
    print(f"  json result bytes     {len(result.model_dump_json(by_alias=True).encode()):>10,}")


if __name__ == "__main__":
    main()
