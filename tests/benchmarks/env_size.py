"""The Lambda environment per function at a large fleet's configuration (issue #33 item 5), as Lambda measures it
against its 4 KB limit (the variables map as JSON, UTF-8 bytes; CloudFormation-generated names at their length).

    PYTHONPATH=functions .venv/bin/python -m tests.benchmarks.env_size [clusters member_roles instances]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))

from cdk_synth import LAMBDA_ENV_LIMIT, environment_bytes, scale_config, synthesize  # noqa: E402


def main(argv: list[str]) -> None:
    clusters, roles, instances = (int(a) for a in (argv or ["200", "50", "500"]))
    synth = synthesize(config=scale_config(clusters=clusters, member_roles=roles, instances=instances))
    print(f"{clusters} clusters, {roles} member roles, {instances} instances: environment bytes per function "
          f"(limit {LAMBDA_ENV_LIMIT})")
    for function in sorted(synth.resources("AWS::Lambda::Function").values(),
                           key=lambda f: f["Properties"]["Handler"]):
        print(f"  {function['Properties']['Handler']:32} {environment_bytes(function):6d}")


if __name__ == "__main__":
    main(sys.argv[1:])
