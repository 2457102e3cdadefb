"""Capacity (RULES §10 P1–P3): reserved capacity outlasts the run, extension possible, a failed node can be replaced."""

from __future__ import annotations

from datetime import datetime

from gpuaudit.domain.capacity import (
    RunFit,
    ec2_family_quota,
    extension_hours,
    run_fit,
)
from gpuaudit.model.planned_reads import ExtensionOffering
from gpuaudit.model.result import Check
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.capacity import holding_for
from gpuaudit.rules.context import Context, GpuGroup, Holding
from gpuaudit.rules.preflight.common import Part, combine

PLAN_IN_FORCE = ("Active", "Scheduled", "Pending")  # DescribeTrainingPlan Status values that still hold capacity


def _no_reservation(ctx: Context, grp: GpuGroup) -> str:
    read = len(ctx.ev.capacity_reservations or [])
    plan = "; the group has no TrainingPlanArn" if ctx.hyperpod else ""
    return (f"{grp.label}: No capacity reservation found — {read} reservation(s) read with "
            f"DescribeCapacityReservations, none live for {grp.instance_type} or named by the nodes{plan}. "
            "Nothing reserved ends the run, and nothing reserves the capacity either")


def _run_start(ctx: Context, h: Holding) -> datetime:
    """A block that starts after the planned start: nodes cannot launch before its StartDate."""
    return max(ctx.plan.start, h.start) if h.start else ctx.plan.start


def _fits(ctx: Context, h: Holding, hours: float) -> RunFit:
    end = h.end or ctx.plan.start  # callers handle an unlimited reservation before asking
    return run_fit(end, h.instance_type, _run_start(ctx, h), hours, ctx.ev.now)


def _fit_text(fit: RunFit) -> str:
    if fit.fits:
        return fit.describe() + " → fits"
    return fit.describe() + (f" → does NOT fit: run end {iso(fit.run_end)} is "
                             f"{fit.shortfall.total_seconds() / 3600:.2f} h after usable until {iso(fit.usable_until)}")


def p1_part(ctx: Context, grp: GpuGroup) -> Part:
    h, unread = holding_for(ctx, grp)
    if unread:
        return Part("Not checked", f"{grp.label}: {unread.text}", "Re-run with read access: " + unread.call)
    if h is None:
        return Part("UNVERIFIED", _no_reservation(ctx, grp),
                    f"Confirm how {grp.instance_type} capacity is held (Capacity Block, ODCR or training plan): "
                    f"`aws ec2 describe-capacity-reservations --filters Name=instance-type,Values={grp.instance_type}`")
    if h.plan is not None and (h.state or "") not in PLAN_IN_FORCE:
        return Part("FAIL", f"{grp.label} on {h.text}: the training plan is not Active, Scheduled or Pending",
                    f"Buy or extend a training plan for {grp.instance_type} before the run")
    if h.end is None:
        return Part("PASS", f"{grp.label} on {h.text}: no end date (EndDateType unlimited)")
    head = f"{grp.label} on {h.text}"
    late_start = h.start if h.start and h.start > ctx.plan.start else None
    if late_start:
        head += (f"; the reservation starts {iso(late_start)}, after the planned start {iso(ctx.plan.start)}: nodes "
                 "cannot launch before then, so the run is evaluated from that start")
    fits = [_fits(ctx, h, hours) for hours in ctx.plan.lengths]
    text = head + ": " + "; ".join(_fit_text(f) for f in fits)
    resource = h.resource.strip("`")
    if not ctx.plan.given:
        return Part("Needs input", text, "Give the planned run length: `--run-hours N` (and `--run-start`, "
                                         "`--checkpoint-minutes`) so the fit can be decided")
    fit = fits[0]
    if not fit.fits:
        safe = (f"the latest safe start {iso(fit.latest_safe_start)} is already in the past" if fit.start_in_past
                else f"start by {iso(fit.latest_safe_start)}")
        return Part("FAIL", text,
                    f"Extend {resource} by at least {extension_hours(fit.shortfall)} h before the run (see P2), or "
                    f"shorten the run to ≤ {max(fit.hours_covered, 0):.2f} h ({safe}); either way checkpoint before "
                    f"{iso(fit.usable_until)}")
    cp = ctx.plan.checkpoint_minutes
    if cp and fit.checkpoint_in_lead(cp):
        return Part("RISK", text + f"; with a checkpoint every {cp:g} min the run's last checkpoint lands at "
                                   f"{iso(fit.final_checkpoint(cp))}, inside the lead time (after usable until "
                                   f"{iso(fit.usable_until)}): the instances are already terminated",
                    f"Schedule a final checkpoint before {iso(fit.usable_until)} or shorten the interval")
    if cp is None:
        text += "; checkpoint interval not given (`--checkpoint-minutes`): the last checkpoint was not placed"
    else:
        text += (f"; last checkpoint {iso(fit.final_checkpoint(cp))} lands before usable until "
                 f"{iso(fit.usable_until)}")
    if late_start:
        return Part("RISK", text, f"Plan the start at or after {iso(late_start)} (when {resource} starts)")
    return Part("PASS", text)


def p1(ctx: Context) -> Check:
    return combine("P1", [p1_part(ctx, g) for g in ctx.groups], ctx.plan.text() + ". ")


def _offering_text(o: ExtensionOffering) -> str:
    span = f"{iso(o.start_date) if o.start_date else '—'} → {iso(o.end_date) if o.end_date else '—'}"
    return f"`{o.offering_id}` ({o.duration_hours} h, {span}, {o.instance_count}× {o.instance_type})"


def p2_part(ctx: Context, grp: GpuGroup) -> Part:
    h, unread = holding_for(ctx, grp)
    if unread:
        return Part("Not checked", f"{grp.label}: {unread.text}", "Re-run with read access: " + unread.call)
    if h is None:
        return Part("PASS", f"{grp.label}: nothing to extend — no Capacity Block or training plan holds "
                            f"{grp.instance_type} (see P1)")
    if h.end is None:
        return Part("PASS", f"{grp.label} on {h.text}: no end date, no extension needed")
    fits = [_fits(ctx, h, hours) for hours in ctx.plan.lengths]
    short = [f for f in fits if not f.fits]
    lapsed = h.plan is not None and (h.state or "") not in PLAN_IN_FORCE  # P1 fails on it whatever the run length
    if short and not ctx.plan.given and not lapsed and (
            h.plan is not None or (h.reservation is not None and h.reservation.reservation_type != "capacity-block")):
        # RULES §1: whether an ODCR or a training plan must be extended depends on the run length, not yet given
        # (a Capacity Block's offerings are read below and may settle it without one).
        need = ", ".join(f"{f.run_hours:g} h" for f in short)
        return Part("Needs input", f"{grp.label} on {h.text}: runs that would outlast it: {need}",
                    "Give the planned run length (`--run-hours N`) to decide whether an extension is needed")
    if h.plan is not None:
        if not short and not lapsed:
            return Part("PASS", f"{grp.label} on {h.text}: the run fits, no extension needed")
        call = "`aws sagemaker search-training-plan-offerings` (then `extend-training-plan`)"
        why = "the training plan is not Active, Scheduled or Pending" if lapsed else "the run does not fit"
        return Part("Not checked", f"{grp.label} on {h.text}: {why} and training plan extension "
                                   f"offerings are not read by this audit — {call}",
                    f"Look for an extension of training plan {h.resource}: {call}")
    if h.reservation is None:
        return Part("UNVERIFIED", f"{grp.label} on {h.text}: no reservation detail", None)
    cr = h.reservation.reservation_id
    ext = next((e for e in ctx.ev.capacity_extensions or [] if e.reservation_id == cr), None)
    if h.reservation.reservation_type != "capacity-block":
        if not short:
            return Part("PASS", f"{grp.label} on {h.text}: the run fits, no extension needed")
        return Part("RISK", f"{grp.label} on {h.text}: an ODCR ends before the run; ODCRs are not extended by "
                            "Capacity Block offerings", f"Modify {cr}'s end date (`aws ec2 modify-capacity-reservation "
                                                        f"--capacity-reservation-id {cr} --end-date …`)")
    asked = ctx.ev.planned("extension-offerings")
    ask = next((a for a in asked.offerings if a.reservation_id == cr), None) if asked else None
    hours = ext.requested_hours if ext else ask.duration_hours if ask else 24
    call = (f"`aws ec2 describe-capacity-block-extension-offerings --capacity-reservation-id {cr} "
            f"--capacity-block-extension-duration-hours {hours}`")
    if ext is None and asked is not None and ask is None:
        return Part("Not checked", f"{grp.label} on {h.text}: the read plan did not ask for extension offerings of "
                                   f"`{cr}` — {call}", f"Read them: {call}")
    if ext is None or ext.offerings is None:
        return Part("Not checked", f"{grp.label} on {h.text}: extension offerings not read — {call}",
                    f"Re-run with read access: {call}")
    offers = ext.offerings
    listed = (f"{len(offers)} extension offering(s) returned for a {ext.requested_hours} h request (prices not "
              "quoted): "
              + ", ".join(_offering_text(o) for o in offers)) if offers else \
        f"no extension offering for {ext.requested_hours} h (DescribeCapacityBlockExtensionOfferings)"
    head = f"{grp.label} on {h.text}: {listed}"
    if not ctx.plan.given:
        if offers:
            return Part("PASS", head + "; extension possible")
        need = ", ".join(f"{f.run_hours:g} h" for f in short) or "none of 24/48/72 h"
        return Part("Needs input", head + f"; runs that would need one: {need}",
                    "Give the planned run length (`--run-hours N`) to decide whether an extension is needed")
    fit = fits[0]
    if fit.fits:
        return Part("PASS", head + f"; not needed: the {fit.run_hours:g} h run fits")
    extended = [(o, run_fit(o.end_date, h.instance_type, fit.start, fit.run_hours, ctx.ev.now))
                for o in offers if o.end_date]
    covering = [(o, f) for o, f in extended if f.fits]
    if covering:
        o, ext_fit = covering[0]
        return Part("PASS", head + f"; extension possible: with `{o.offering_id}` usable until becomes "
                                   f"{iso(ext_fit.usable_until)}, after run end {iso(ext_fit.run_end)}",
                    f"Purchase extension `{o.offering_id}` for {cr} before the run (`aws ec2 "
                    f"purchase-capacity-block-extension --capacity-block-extension-offering-id {o.offering_id} "
                    f"--capacity-reservation-id {cr}`; price not quoted here)")
    if offers:
        return Part("RISK", head + f"; no offering reaches run end {iso(fit.run_end)} + lead time",
                    f"Buy the longest extension of {cr} and a follow-on Capacity Block, or shorten the run")
    return Part("FAIL", head + f"; P1 fails (run end {iso(fit.run_end)} after usable until {iso(fit.usable_until)}) "
                               "and no extension is offered",
                f"Buy a new Capacity Block starting by {iso(fit.usable_until)}, or shorten the run to ≤ "
                f"{max(fit.hours_covered, 0):.2f} h and checkpoint before {iso(fit.usable_until)}")


def p2(ctx: Context) -> Check:
    return combine("P2", [p2_part(ctx, g) for g in ctx.groups])


def _quota_for(ctx: Context, grp: GpuGroup) -> tuple[str, str]:
    """(how the quota is named in the evidence, the call that reads it)."""
    if ctx.hyperpod:
        name = f"ml.{grp.instance_type} for cluster usage"
        return name, f"`aws service-quotas list-service-quotas --service-code sagemaker` ({name})"
    code, name = ec2_family_quota(grp.instance_type) or ("", "On-Demand instances of this family")
    return name, f"`aws service-quotas get-service-quota --service-code ec2 --quota-code {code or '<code>'}`"


def p3_part(ctx: Context, grp: GpuGroup) -> Part:
    h, unread = holding_for(ctx, grp)
    if unread:
        return Part("Not checked", f"{grp.label}: {unread.text}", "Re-run with read access: " + unread.call)
    spare_action = (f"Hold a spare {grp.instance_type} before the run: one more instance in the Capacity Block or "
                    "training plan than the cluster uses")
    if h is not None and h.plan is not None:
        p = h.plan
        spare = p.available_spare_instance_count if p.available_spare_instance_count is not None \
            else p.available_instance_count
        counts = (f"AvailableSpareInstanceCount {p.available_spare_instance_count}, AvailableInstanceCount "
                  f"{p.available_instance_count}, InUseInstanceCount {p.in_use_instance_count}, "
                  f"UnhealthyInstanceCount {p.unhealthy_instance_count}, TotalInstanceCount {p.total_instance_count}")
        if spare is None:
            return Part("UNVERIFIED", f"{grp.label} on {h.text}: the plan returned no spare count ({counts})",
                        spare_action)
        if spare > 0:
            return Part("PASS", f"{grp.label} on {h.text}: {spare} spare ({counts})")
        return Part("RISK", f"{grp.label} on {h.text}: no spare ({counts}); a failed node cannot be replaced "
                            "inside the plan", spare_action)
    if h is not None and h.reservation is not None:
        r = h.reservation
        counts = f"AvailableInstanceCount {r.available_instance_count} of TotalInstanceCount {r.total_instance_count}"
        if r.available_instance_count is None:
            return Part("UNVERIFIED", f"{grp.label} on {h.text}: {counts}", spare_action)
        if r.available_instance_count > 0:
            return Part("PASS", f"{grp.label} on {h.text}: {counts} — a replacement fits in the reservation")
        return Part("RISK", f"{grp.label} on {h.text}: {counts} — no spare: a failed node cannot be replaced "
                            "inside the reservation", spare_action)
    name, call = _quota_for(ctx, grp)
    quotas = ctx.ev.service_quotas
    quota = next((q for q in quotas or [] if q.quota_name == name), None)
    if quota is not None and quota.absent:
        # The read happened and the quota is not in it: a finding about the account, not a missing read.
        return Part("UNVERIFIED", f"{grp.label}: no reservation or training plan holds the capacity, and the quota "
                                  f"`{name}` is not among the quotas read — {call}: no headroom for a replacement "
                                  "is proven", spare_action)
    asked = ctx.ev.planned("quotas")
    if quota is None and asked is not None and all(a.quota_name != name for a in asked.quotas):
        # Judged against what was asked: a quota the plan never asked for is not a permission problem.
        return Part("Not checked", f"{grp.label}: no reservation or training plan holds the capacity, and the read "
                                   f"plan did not ask for the quota `{name}` (it asked for "
                                   f"{', '.join(f'`{a.quota_name}`' for a in asked.quotas) or 'none'}) — {call}",
                    f"Read it: {call}")
    if quota is None or quota.value is None:
        why = f" ({quota.error})" if quota and quota.error else ""
        return Part("Not checked", f"{grp.label}: no reservation or training plan holds the capacity, and the "
                                   f"quota `{name}` was not read{why} — {call}", f"Re-run with read access: {call}")
    where = f"Service Quota `{name}` ({quota.service_code} {quota.quota_code or ''}) = {quota.value:g}"
    if ctx.hyperpod and quota.value <= grp.size:
        return Part("RISK", f"{grp.label}: only a {where}, and the cluster already runs {grp.size}: no headroom for "
                            "a replacement even by quota", spare_action)
    why = ("HyperPod can enforce less than the listed quota, and a quota reserves nothing" if ctx.hyperpod else
           "a quota reserves nothing: On-Demand launches can still fail with InsufficientInstanceCapacity")
    unit = "" if ctx.hyperpod else " vCPUs across the Region"
    return Part("UNVERIFIED", f"{grp.label}: no reservation or training plan holds the capacity; only a {where}"
                              f"{unit}. A quota alone is not proof of spare capacity ({why})", spare_action)


def p3(ctx: Context) -> Check:
    return combine("P3", [p3_part(ctx, g) for g in ctx.groups])


