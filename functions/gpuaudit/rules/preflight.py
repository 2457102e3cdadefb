"""Pre-flight checks P1–P16 (RULES §10). Placeholder until the pre-flight issue lands: every
check is reported `Not checked`, so nothing reads as ready that was not examined."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuaudit.model.result import Check

if TYPE_CHECKING:
    from gpuaudit.rules.judge import JudgeConfig, Judged

TITLES = {
    "P1": "Reserved capacity outlasts the run", "P2": "Extension possible", "P3": "A failed node can be replaced",
    "P4": "Automatic recovery on", "P5": "New nodes tested before work", "P6": "GPU faults will be visible",
    "P7": "EFA at full width", "P8": "Storage headroom", "P9": "Reserved GPUs used", "P10": "Capacity end alarmed",
    "P11": "Software meets instance minimums", "P12": "NCCL used EFA and NVLink last run",
    "P13": "Cluster management healthy", "P14": "Network headroom for one replacement",
    "P15": "EFA SG outbound rule", "P16": "Compute nodes can bootstrap",
}


def assess(j: Judged, config: JudgeConfig) -> tuple[list[Check], str | None]:
    checks = [Check(id=cid, title=title, result="Not checked",
                    evidence="pre-flight checks are not evaluated by this version of gpuaudit", action=None)
              for cid, title in TITLES.items()]
    return checks, "Yes with risks"
