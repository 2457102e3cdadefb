"""Lambda code without Docker.

`bundle=true` (deploy): a local bundling step pip-installs the runtime dependencies pinned in
pyproject.toml (the CLI-only ones left out) for Lambda's platform — manylinux2014_x86_64,
CPython 3.12, wheels only — into the asset, then copies gpuaudit and handlers. boto3/botocore are
bundled at their pinned version rather than taken from the runtime: the collectors call recent
SageMaker HyperPod APIs that an older runtime botocore does not know.

`bundle=false` (tests, offline CI synth): the `functions` folder as-is; the Powertools layer
then supplies Powertools, pydantic and the X-Ray SDK, and the runtime supplies boto3.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from infra.config import ROOT

FUNCTIONS = ROOT / "functions"
PACKAGES = ("gpuaudit", "handlers")
# Never shipped to Lambda: the embedded backend and its worlds, the CLI.
EXCLUDE = ["gpuaudit.egg-info", "**/__pycache__", "gpuaudit/embedded", "gpuaudit/worlds", "gpuaudit/cli.py",
           "gpuaudit/demo.py", "gpuaudit/__main__.py"]
CLI_ONLY = {"typer", "rich"}
EXTRAS = {"aws-lambda-powertools": "tracer"}  # Tracer needs the X-Ray SDK
PLATFORM = "manylinux2014_x86_64"
PYTHON_VERSION = "3.12"


def _name(requirement: str) -> str:
    for sep in ("==", ">=", "<=", "~=", "[", " ", ";"):
        requirement = requirement.split(sep, 1)[0]
    return requirement.strip().lower()


def runtime_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's pinned dependencies minus the CLI-only ones ("pinned here, and only here")."""
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    out = []
    for dep in deps:
        name = _name(dep)
        if name in CLI_ONLY:
            continue
        out.append(dep.replace(name, f"{name}[{EXTRAS[name]}]", 1) if name in EXTRAS else dep)
    return out


def pip_command(output_dir: str, requirements: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", output_dir,
            "--platform", PLATFORM, "--python-version", PYTHON_VERSION, "--implementation", "cp",
            "--only-binary=:all:", *requirements]


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    """Bundles on this machine (no Docker): pip for Lambda's platform, then the two packages."""

    def __init__(self, requirements: Sequence[str], source: Path = FUNCTIONS,
                 run: Callable[..., Any] = subprocess.run) -> None:
        self.requirements, self.source, self.run = list(requirements), source, run

    def try_bundle(self, output_dir: str, *_args: Any, **_options: Any) -> bool:
        self.run(pip_command(output_dir, self.requirements), check=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "embedded", "worlds", "cli.py", "demo.py",
                                        "__main__.py")
        for package in PACKAGES:
            shutil.copytree(self.source / package, Path(output_dir) / package, ignore=ignore, dirs_exist_ok=True)
        return True


def function_code(bundle: bool) -> lambda_.Code:
    if not bundle:
        return lambda_.Code.from_asset(str(FUNCTIONS), exclude=EXCLUDE)
    return lambda_.Code.from_asset(str(FUNCTIONS), exclude=EXCLUDE, bundling=BundlingOptions(
        # Docker is only the fallback CDK requires a name for; the local step always bundles.
        image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}"),
        local=LocalPipBundling(runtime_requirements())))
