"""tests/benchmarks/env_size.py at a small fleet's configuration (issue #47 item 7), beside the other syntheses of
this folder (one synthesis process per worker): it finishes and prints each Lambda's environment bytes against
Lambda's 4 KB limit. tests/benchmarks/test_benchmarks_small.py runs the other scripts of tests/benchmarks/."""

from __future__ import annotations

import re

import pytest
from cdk_synth import LAMBDA_ENV_LIMIT


def test_env_size_prints_every_function_within_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import env_size

    env_size.main(["3", "1", "10"])
    title, *rows = capsys.readouterr().out.strip().splitlines()
    assert (
        title == f"3 clusters, 1 member roles, 10 instances: environment bytes per function (limit {LAMBDA_ENV_LIMIT})"
    )
    sizes = {handler: int(size) for handler, size in (row.split() for row in rows)}
    assert {"handlers.plan.handler", "handlers.inventory.handler", "handlers.collect_logs.handler",
            "handlers.finish.handler", "handlers.verdict.handler"} <= set(sizes)
    assert all(re.fullmatch(r"handlers\.\w+\.handler", h) for h in sizes)
    assert all(0 < size <= LAMBDA_ENV_LIMIT for size in sizes.values()), sizes
