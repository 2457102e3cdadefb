"""What goes into the Lambda package, as plain data and functions (no CDK import).

Runtime dependencies are the project's pins in pyproject.toml ("pinned here, and only here")
minus the CLI-only ones, installed for Lambda's platform (manylinux2014_aarch64 for arm64, CPython 3.12,
wheels only). boto3/botocore are bundled at their pinned version rather than taken from the
runtime: the collectors call recent SageMaker HyperPod APIs an older runtime botocore lacks.
"""

from __future__ import annotations

import compileall
import shutil
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ROOT / "functions"
PACKAGES = ("gpuaudit", "handlers")
# Never shipped to Lambda: the embedded backend and its worlds, the CLI (with `gpuaudit mcp`'s local backend) and the
# dev tools folder (glob patterns, relative to functions/). tests/infra imports the handlers from the package alone.
DEV_ONLY = ("embedded", "worlds", "devtools", "cli", "__main__.py", "launcher.py", "local_backend.py")
EXCLUDE = ["gpuaudit.egg-info", "**/__pycache__", "**/*.pyc", *(f"gpuaudit/{name}" for name in DEV_ONLY)]
CLI_ONLY = {"typer", "rich"}
EXTRAS = {"aws-lambda-powertools": "tracer"}  # Powertools' Tracer needs the X-Ray SDK
# arm64 (Graviton): about 20 % cheaper per GB-s than x86_64; every runtime dependency ships aarch64 wheels.
ARCHITECTURE = "arm64"
PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"


def _name(requirement: str) -> str:
    for sep in ("==", ">=", "<=", "~=", "[", " ", ";"):
        requirement = requirement.split(sep, 1)[0]
    return requirement.strip().lower()


def runtime_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    out = []
    for dep in deps:
        name = _name(dep)
        if name in CLI_ONLY:
            continue
        out.append(f"{name}[{EXTRAS[name]}]{dep[len(name):]}" if name in EXTRAS else dep)
    return out


def pinned_version(package: str, requirements: Sequence[str]) -> str:
    for requirement in requirements:
        if _name(requirement) == package and "==" in requirement:
            return requirement.split("==", 1)[1].strip()
    raise LookupError(f"{package} is not pinned in pyproject.toml")


def pip_command(output_dir: str, requirements: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", output_dir,
            "--platform", PLATFORM, "--python-version", PYTHON_VERSION, "--implementation", "cp",
            "--only-binary=:all:", *requirements]


def compile_bytecode(output_dir: str | Path, version: tuple[int, int] = sys.version_info[:2]) -> bool:
    """Precompiled modules shorten cold starts, but only files written by the runtime's own Python version are
    used (`__pycache__/*.cpython-312.pyc`): compile when the deploying interpreter is that version, else skip."""
    if f"{version[0]}.{version[1]}" != PYTHON_VERSION:
        return False
    return bool(compileall.compile_dir(str(output_dir), quiet=1, workers=0))


def copy_packages(output_dir: str | Path, source: Path = FUNCTIONS) -> None:
    """gpuaudit and handlers into the package, without what EXCLUDE keeps out of Lambda."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *DEV_ONLY)
    for package in PACKAGES:
        shutil.copytree(source / package, Path(output_dir) / package, ignore=ignore, dirs_exist_ok=True)
