"""Rules are pure (ARCHITECTURE.md): no boto3, no wall clock, no I/O inside the judgement."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

RULES = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "rules"


def test_rules_import_without_boto3_or_botocore() -> None:
    code = ("import sys, pkgutil, importlib, gpuaudit.rules as r\n"
            "for m in pkgutil.iter_modules(r.__path__): importlib.import_module('gpuaudit.rules.' + m.name)\n"
            "import gpuaudit.report.markdown\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('boto3', 'botocore')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_rules_never_read_the_wall_clock_or_files() -> None:
    forbidden = re.compile(r"datetime\.now\(|datetime\.utcnow\(|time\.time\(|\bopen\("
                           r"|^\s*(import|from) (boto3|botocore)")
    offenders = [f"{p.name}:{i}" for p in RULES.glob("*.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1) if forbidden.search(line)]
    assert offenders == []
