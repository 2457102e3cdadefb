"""The HTML report in a real browser: headless Chromium renders each shared world's report without a
console message, and the screenshot shows the heatmap's silent hours within its first two screens (in incident
mode the root cause and the branch table come first, right after the verdict: RULES §11).

Needs `/usr/bin/chromium` (Debian: `apt-get install -y chromium`); skipped without it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers.worlds import aws_for
from PIL import Image

from gpuaudit.devtools.demo import demo_name, demo_request, demo_worlds
from gpuaudit.embedded.world import load_world
from gpuaudit.pipeline import run_audit
from gpuaudit.report.html import render_html

CHROMIUM = Path("/usr/bin/chromium")
WIDTH, HEIGHT = 1400, 2000
# The dark stripe of the empty-hour hatching (report/html.py `pat-empty`); nothing else on the page
# uses it, so its pixels are the legend swatch (~50) plus the silent hours drawn on screen.
HATCH_STRIPE = (0x3D, 0x26, 0x00)
# Chromium logs every console message, whatever its level, as `CONSOLE(<line>)` (older builds) or
# `CONSOLE:<line>]` (newer ones, level not shown). The report has no script, so any message at all
# (a CSP violation, a blocked load, an error) is a failure.
CONSOLE = re.compile(r"CONSOLE[(:]\d+")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless browser check needs /usr/bin/chromium (Debian: apt-get install -y chromium)")


def render(entry: dict[str, str], folder: Path) -> tuple[Path, bool]:
    """The report page, and whether its result has any empty kernel hour to show."""
    result = run_audit(aws_for(load_world(entry["path"])), demo_request(entry))
    page = folder / "report.html"
    page.write_text(render_html(result), encoding="utf-8")
    return page, any(r.empty_hours for n in result.nodes for r in n.coverage)


def screenshot(page: Path, folder: Path) -> tuple[Path, str]:
    png = folder / "report.png"
    run = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={folder / 'profile'}", "--enable-logging=stderr", "--v=0", f"--screenshot={png}",
         f"--window-size={WIDTH},{HEIGHT}", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, f"chromium exited {run.returncode}: {run.stderr[-2000:]}"
    return png, run.stderr


def pixels(png: Path) -> tuple[int, int, list[bytes]]:
    """The screenshot's rows of RGB pixels (3 bytes each), decoded by Pillow (a pure-Python PNG decoder spent ~4 s
    of each test undoing the PNG row filters)."""
    with Image.open(png) as image:
        assert image.format == "PNG", f"not a PNG: {image.format}"
        width, height = image.size
        data = image.convert("RGB").tobytes()
    stride = width * 3
    return width, height, [data[y * stride:(y + 1) * stride] for y in range(height)]


def exact_pixels(rows: list[bytes], colour: tuple[int, int, int]) -> int:
    """Pixels of exactly this colour: occurrences of its 3 bytes that start on a pixel boundary (bytes.find, not a
    slice per pixel: the colours counted are a few thousand of 2.8 million pixels)."""
    target, count = bytes(colour), 0
    for row in rows:
        i = row.find(target)
        while i != -1:
            aligned = i % 3 == 0
            count += aligned
            i = row.find(target, i + (3 if aligned else 1))
    return count


@pytest.mark.parametrize("entry", demo_worlds(), ids=demo_name)
def test_report_renders_in_chromium_without_console_messages(entry, tmp_path):
    # Given a shared world's HTML report
    page, has_empty_hours = render(entry, tmp_path)
    # When headless Chromium opens it from disk and takes a screenshot
    png, stderr = screenshot(page, tmp_path)
    # Then the screenshot exists and is a real page, and the browser logged no console message
    assert png.exists() and png.stat().st_size > 20_000, "screenshot missing or near-empty"
    width, height, rows = pixels(png)
    assert (width, height) == (WIDTH, HEIGHT)
    assert len({row[i:i + 3] for row in rows[::10] for i in range(0, len(row), 30)}) > 20, "a blank page"
    console = [line for line in stderr.splitlines() if CONSOLE.search(line)]
    assert not console, "browser console messages:\n" + "\n".join(console)
    # Worlds with silent hours (the pcluster ones) show them hatched on screen; the others show the legend only.
    hatched = exact_pixels(rows, HATCH_STRIPE)
    if has_empty_hours:
        assert hatched > 600, f"only {hatched} hatch pixels: the silent hours are not visible"
    else:
        assert hatched < 300, f"{hatched} hatch pixels, but this world has no empty hour (legend only)"


def test_a_fleet_size_report_renders_its_verdict_groups_and_silent_strip_without_console_messages(tmp_path):
    """Past 100 nodes (RULES §11): nodes in one `<details>` per verdict and the group strip with its counts, no
    script (the CSP stays), and the silent hours still on screen."""
    from helpers.worlds import PClusterWorld, at

    w = PClusterWorld(n_compute=110)
    for i, n in enumerate(w.compute):
        w.healthy(n, at(-2), at(7) if i < 2 else at(13))
    result = w.audit(w.cluster, since=at(6), until=at(10))
    page = tmp_path / "report.html"
    page.write_text(render_html(result), encoding="utf-8")
    assert '<details class="verdict"' in page.read_text(encoding="utf-8")
    png, stderr = screenshot(page, tmp_path)
    _, _, rows = pixels(png)
    assert not [line for line in stderr.splitlines() if CONSOLE.search(line)]
    assert exact_pixels(rows, HATCH_STRIPE) > 600
