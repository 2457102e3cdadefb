"""Lambda code without Docker (packaging.py says what goes in).

`bundle=true` (deploy): a local bundling step pip-installs the runtime dependencies for Lambda's
platform into the asset and copies gpuaudit and handlers.
`bundle=false` (tests, offline CI synth): the `functions` folder as-is (minus EXCLUDE); the
Powertools layer then supplies Powertools, pydantic and the X-Ray SDK, the runtime boto3.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from infra.packaging import (
    EXCLUDE,
    FUNCTIONS,
    PYTHON_VERSION,
    compile_bytecode,
    copy_packages,
    pip_command,
    runtime_requirements,
)


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    """Bundles on this machine: pip for Lambda's platform, then the two packages."""

    def __init__(self, requirements: Sequence[str], source: Path = FUNCTIONS,
                 run: Callable[..., Any] = subprocess.run) -> None:
        self.requirements, self.source, self.run = list(requirements), source, run

    def try_bundle(self, output_dir: str, *_args: Any, **_options: Any) -> bool:
        self.run(pip_command(output_dir, self.requirements), check=True)
        copy_packages(output_dir, self.source)
        compile_bytecode(output_dir)
        return True


def function_code(bundle: bool) -> lambda_.Code:
    if not bundle:
        return lambda_.Code.from_asset(str(FUNCTIONS), exclude=EXCLUDE)
    return lambda_.Code.from_asset(str(FUNCTIONS), exclude=EXCLUDE, bundling=BundlingOptions(
        # CDK requires an image; it is only the fallback, the local step always bundles.
        image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{PYTHON_VERSION}"),
        local=LocalPipBundling(runtime_requirements())))
