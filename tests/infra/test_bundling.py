"""Lambda packaging without Docker: pinned runtime dependencies for Lambda's platform, the two
packages without the embedded backend; skipped entirely with `bundle=false`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from cdk_synth import Synthesized

from infra.bundling import LocalPipBundling
from infra.config import bundling_enabled
from infra.packaging import compile_bytecode, pinned_version, runtime_requirements

ROOT = Path(__file__).resolve().parents[2]


def test_runtime_requirements_are_the_pins_minus_the_cli() -> None:
    requirements = runtime_requirements()
    names = {r.split("==")[0] for r in requirements}
    assert names == {"boto3", "botocore", "pydantic", "aws-lambda-powertools[tracer]", "mcp"}
    assert all("==" in r for r in requirements)
    assert pinned_version("aws-lambda-powertools", requirements) in (ROOT / "pyproject.toml").read_text()


def test_local_bundling_installs_for_lambdas_platform_and_copies_the_packages(tmp_path: Path) -> None:
    commands: list[list[str]] = []

    def run(command: list[str], **_: Any) -> None:
        commands.append(command)

    assert LocalPipBundling(["pydantic==2.14.3"], run=run).try_bundle(str(tmp_path))
    (pip,) = commands
    assert pip[1:4] == ["-m", "pip", "install"] and pip[-1] == "pydantic==2.14.3"
    for flag, value in {"--target": str(tmp_path), "--platform": "manylinux2014_aarch64", "--python-version": "3.12",
                        "--implementation": "cp"}.items():
        assert pip[pip.index(flag) + 1] == value
    assert "--only-binary=:all:" in pip
    shipped = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py")}
    assert {"handlers/plan.py", "handlers/payload.py", "gpuaudit/pipeline.py", "gpuaudit/writes/sinks.py",
            "gpuaudit/agent/server.py", "gpuaudit/agent/glossary.py", "gpuaudit/agent/deployed.py",
            "handlers/mcp_endpoint.py"} <= shipped
    assert not [p for p in shipped if p.startswith(("gpuaudit/embedded/", "gpuaudit/cli/", "gpuaudit/devtools/",
                                                     "gpuaudit/__main__.py", "gpuaudit/agent/local_backend.py"))]
    assert (tmp_path / "gpuaudit/data/xid_catalog.json").exists()
    assert (tmp_path / "gpuaudit/data/VERDICTS.md").exists()  # the MCP explain tool's glossary


def test_bundling_is_skippable_by_context() -> None:
    assert bundling_enabled({}) and bundling_enabled({"bundle": "true"})
    assert not bundling_enabled({"bundle": False}) and not bundling_enabled({"bundle": "false"})


def test_the_shipped_package_imports_every_handler_without_the_embedded_backend(synth: Synthesized) -> None:
    """Import the handlers from the staged Lambda asset alone (not from the source tree)."""
    (asset,) = [p for p in synth.outdir.iterdir() if p.name.startswith("asset.") and (p / "handlers").is_dir()]
    probe = (
        "import sys\n"
        f"sys.path[:] = [{str(asset)!r}] + [p for p in sys.path if p and not p.rstrip('/').endswith('functions')]\n"
        "sys.modules['gpuaudit.embedded'] = None  # importing it would raise\n"
        "sys.modules['gpuaudit.cli'] = None  # the MCP endpoint serves without the CLI\n"
        "import handlers.plan, handlers.inventory, handlers.collect_logs, handlers.finish, handlers.verdict, gpuaudit\n"
        "import handlers.mcp_endpoint  # the MCP endpoint: the server, without the CLI or the local backend\n"
        f"assert gpuaudit.__file__.startswith({str(asset)!r}), gpuaudit.__file__\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_bytecode_is_compiled_only_for_the_runtimes_python(tmp_path: Path) -> None:
    """#14 item 4: a .pyc of another Python version would be ignored by the 3.12 runtime: only a 3.12 build
    compiles, and what it writes is the runtime's own cache file."""
    (tmp_path / "mod.py").write_text("X = 1\n", encoding="utf-8")
    assert not compile_bytecode(tmp_path, (3, 11)) and not list(tmp_path.rglob("*.pyc"))
    # told it runs the runtime's version, it compiles (with this interpreter: its own cache tag here)
    assert compile_bytecode(tmp_path, (3, 12)) and list(tmp_path.rglob(f"mod.{sys.implementation.cache_tag}.pyc"))
