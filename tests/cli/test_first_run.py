"""Issue #49 item 7: the first run reads whole. The demo's recap never splits an ID or a path (plain lines, at 80
columns as in a pipe); below ~120 columns the terminal's node table drops GROUP, TYPE and LAST SEEN as `kubectl get`
does without `-o wide`, never the node ID; files and pipes keep every column; `make demo` installs only what it
runs."""

from __future__ import annotations

import io
import re
import tomllib
from pathlib import Path

import pytest
from helpers.worlds import at, blind_and_signalled
from rich.console import Console

from gpuaudit.devtools.demo import DemoRun, recap
from gpuaudit.outputs import print_table, render
from gpuaudit.report.terminal import NARROW_DROPS, WIDE_COLUMNS

ROOT = Path(__file__).resolve().parents[2]


def printed(lines: list, width: int) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, no_color=True, color_system=None, highlight=False)
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [80, 160])
def test_the_recap_never_splits_an_id_or_a_path(width: int) -> None:
    html = Path("/tmp/a-rather-long-output-directory-name/for-the-demo/hyperpod-xid31-app-error.report.html")
    run = DemoRun("hyperpod-xid31-app-error", "Which node should I replace, and is it safe?",
                  "REPLACE i-0e58b081006f7e3df (Xid 79 recurring on PCI 0000:53:00 after a reboot); " * 3,
                  "[gpuaudit] research-hp-slurm: 1 REPLACE, 2 NOT OBSERVABLE (coverage)", html, True)
    out = printed(recap([run], html.parent), width)
    words = out.split()
    assert str(html) in words and "i-0e58b081006f7e3df" in words and "research-hp-slurm:" in words
    assert f"{html.parent}/<scenario>.result.json," in words
    assert "report:" in out and "alert:" in out  # each value on its own labelled line


def node_header(text: str) -> list[str]:
    (header,) = [line for line in text.splitlines() if line.strip().startswith("VERDICT")]
    return re.split(r"\s{2,}", header.strip())


def test_a_narrow_terminal_drops_the_wide_columns_never_the_node_id() -> None:
    w = blind_and_signalled((79,))
    result = w.audit(w.cluster, since=at(6), until=at(10))
    buffer = io.StringIO()
    print_table(Console(file=buffer, width=WIDE_COLUMNS - 1, no_color=True, color_system=None), result)
    narrow = buffer.getvalue()
    assert node_header(narrow) == ["VERDICT", "NODE", "XID", "COVERAGE"]
    assert not set(NARROW_DROPS) & set(node_header(narrow))
    assert all(n.instance_id in narrow.split() for n in w.compute)

    buffer = io.StringIO()
    print_table(Console(file=buffer, width=WIDE_COLUMNS, no_color=True, color_system=None), result)
    assert node_header(buffer.getvalue()) == ["VERDICT", "NODE", "GROUP", "TYPE", "XID", "LAST SEEN", "COVERAGE"]
    # a file or a pipe keeps every column, whatever its width
    assert "GROUP" in node_header(render(result, "table", width=80))


def test_make_demo_installs_the_runtime_and_the_embedded_backend_only() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    demo_install = re.search(r"^\$\(DEMO_STAMP\):.*?(?=^\S)", makefile, re.MULTILINE | re.DOTALL)
    assert demo_install is not None and "'.[embedded]'" in demo_install[0]
    assert not any(dev in extras["embedded"][0] for dev in ("stepfunctions", "awslambda"))
    assert re.search(r"^demo: \$\(DEMO_STAMP\)$", makefile, re.MULTILINE)
    assert re.search(r"^test: \$\(STAMP\)", makefile, re.MULTILINE)  # the suite installs the rest
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pipx install ." in readme


def test_the_demo_without_the_embedded_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    # `pipx install .` installs the runtime only: the demo's missing moto is a message naming the extra, no traceback
    import sys

    from typer.testing import CliRunner

    from gpuaudit.cli import app

    monkeypatch.setitem(sys.modules, "moto", None)  # import moto raises ImportError, as where it is not installed
    done = CliRunner().invoke(app, ["demo", "--out-dir", str(tmp_path)])
    assert done.exit_code == 2 and "Traceback" not in done.output
    assert "pipx install '.[embedded]'" in " ".join(done.stderr.split())
