"""Pre-flight checks P1–P16 (RULES §10): is the cluster ready for a long run?

One module per check group: capacity (P1–P3), recovery (P4–P6), fabric (P7, P12, P14–P16),
storage_use (P8, P9), operations (P10, P11, P13); what they share is in common.

Pure: no AWS, no clock — the planned start is `config.run_start`, else the audit's `now`. The core
(P1–P6) runs first and writes the readiness verdict; P7–P16 can only add to it (a FAIL only where
§10 allows one: P7, P11, P12, P16), never undo a core FAIL. Every check names the resources behind
it and gives one operator action; what could not be read is `Not checked` with the call that settles it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from gpuaudit.domain.capacity import DEFAULT_RUN_HOURS
from gpuaudit.model.evidence import Evidence
from gpuaudit.model.result import Check, Readiness
from gpuaudit.rules.context import Context, Plan, gpu_groups
from gpuaudit.rules.preflight.capacity import p1, p2, p3
from gpuaudit.rules.preflight.common import CORE, EXTRA_MAY_FAIL, TITLES, make_check
from gpuaudit.rules.preflight.fabric import p7, p12, p14, p15, p16
from gpuaudit.rules.preflight.operations import p10, p11, p13
from gpuaudit.rules.preflight.recovery import p4, p5, p6
from gpuaudit.rules.preflight.storage_use import p8, p9

if TYPE_CHECKING:
    from gpuaudit.rules.context import JudgeConfig, Judged


__all__ = ["CHECKS", "TITLES", "assess", "make_check", "plan_for", "readiness"]

# -- the assessment -------------------------------------------------------------------------------------
CHECKS: dict[str, Callable[[Context], Check]] = {
    "P1": p1, "P2": p2, "P3": p3, "P4": p4, "P5": p5, "P6": p6, "P7": p7, "P8": p8, "P9": p9, "P10": p10,
    "P11": p11, "P12": p12, "P13": p13, "P14": p14, "P15": p15, "P16": p16,
}


# Checks about the accelerated compute capacity: without any such group or node there is nothing to judge.
NEEDS_GROUPS = {"P1", "P2", "P3", "P5", "P7", "P9", "P10", "P12", "P14", "P15"}


def _run(cid: str, ctx: Context) -> Check:
    """An exception is never the output of an audit (RULES §0.3): a check that cannot finish is Not checked."""
    if cid in NEEDS_GROUPS and not ctx.groups:
        prefix = ctx.plan.text() + ". " if cid == "P1" else ""
        return make_check(cid, "UNVERIFIED", f"{prefix}no accelerated compute group or running GPU compute node found "
                                             f"in cluster `{ctx.ev.cluster.name}`: nothing to check this against",
                          "Re-run the pre-flight once the compute nodes are up (or name them with `--instances`)")
    try:
        check = CHECKS[cid](ctx)
    except Exception as exc:  # noqa: BLE001
        return make_check(cid, "Not checked", f"the check could not be evaluated ({type(exc).__name__}: {exc})",
                          "Report this as a gpuaudit defect")
    if cid not in CORE and cid not in EXTRA_MAY_FAIL and check.result == "FAIL":
        check = check.model_copy(update={"result": "RISK"})  # §10: P7–P16 can only add RISK here
    return check


def readiness(checks: Iterable[Check]) -> Readiness:
    """`No` on any FAIL; `Yes with risks` on anything short of PASS (a check not made is not a pass)."""
    results = {c.result for c in checks}
    if "FAIL" in results:
        return "No"
    if results - {"PASS"}:
        return "Yes with risks"
    return "Yes"


def plan_for(ev: Evidence, config: JudgeConfig) -> Plan:
    start = config.run_start or ev.now
    if config.run_hours is not None:
        return Plan(start, (float(config.run_hours),), True, config.checkpoint_minutes)
    return Plan(start, DEFAULT_RUN_HOURS, False, config.checkpoint_minutes)


def assess(j: Judged, config: JudgeConfig) -> tuple[list[Check], Readiness | None]:
    ctx = Context(j, plan_for(j.evidence, config), tuple(gpu_groups(j.evidence)))
    core = [_run(cid, ctx) for cid in CORE]
    ready = readiness(core)  # written from the core first
    extra = [_run(cid, ctx) for cid in TITLES if cid not in CORE]
    if ready != "No":  # P7–P16 can add to the verdict, never undo a core FAIL
        ready = readiness(core + extra)
    return core + extra, ready
