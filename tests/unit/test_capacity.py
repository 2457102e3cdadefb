"""Capacity arithmetic (RULES §9) and reservation matching, against hand-computed answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuaudit.domain.capacity import (
    DEFAULT_RUN_HOURS,
    cluster_reservations,
    ec2_family_quota,
    extension_hours,
    holding_reservation,
    lead_time,
    run_fit,
)
from gpuaudit.model.evidence import ClusterInfo, Evidence, NodeInfo, Window
from gpuaudit.model.planned_reads import CapacityReservation

NOW = datetime(2026, 10, 5, 5, 30, tzinfo=UTC)
END = datetime(2026, 10, 6, 11, 30, tzinfo=UTC)  # Capacity Blocks end at 11:30 UTC


def block(rid: str, itype: str = "p5.48xlarge", state: str = "active", start: datetime | None = None,
          end: datetime | None = END, rtype: str = "capacity-block", available: int = 0) -> CapacityReservation:
    return CapacityReservation(reservation_id=rid, instance_type=itype, state=state, reservation_type=rtype,
                               start_date=start or datetime(2026, 10, 3, 11, 30, tzinfo=UTC), end_date=end,
                               total_instance_count=2, available_instance_count=available)


def evidence(reservations: list[CapacityReservation], nodes: list[NodeInfo] | None = None) -> Evidence:
    return Evidence(mode="preflight", cluster=ClusterInfo(name="c", kind="parallelcluster", region="us-west-2"),
                    window=Window(start=NOW - timedelta(hours=24), end=NOW, source="default-24h"), now=NOW,
                    nodes=nodes or [], capacity_reservations=reservations)


def test_run_fit_writes_out_every_value_of_section_9() -> None:
    # Given a block ending 2026-10-06 11:30 and a 48 h run starting now (2026-10-05 05:30)
    fit = run_fit(END, "p5.48xlarge", NOW, 48, NOW)
    # Then: usable until = EndDate − 30 min; run end = start + 48 h; covered = usable − start; safe = usable − 48 h
    assert fit.usable_until == datetime(2026, 10, 6, 11, 0, tzinfo=UTC)
    assert fit.run_end == datetime(2026, 10, 7, 5, 30, tzinfo=UTC)
    assert fit.hours_covered == pytest.approx(29.5)
    assert fit.latest_safe_start == datetime(2026, 10, 4, 11, 0, tzinfo=UTC)
    assert fit.start_in_past is True
    assert fit.fits is False
    assert fit.shortfall == timedelta(hours=18, minutes=30)
    text = fit.describe()
    for value in ("2026-10-06T11:30:00Z", "2026-10-06T11:00:00Z", "2026-10-05T05:30:00Z", "2026-10-07T05:30:00Z",
                  "2026-10-04T11:00:00Z", "29.50 h", "already in the past"):
        assert value in text


def test_run_fit_boundary_is_usable_until_exactly() -> None:
    exact = run_fit(END, "p5.48xlarge", NOW, 29.5, NOW)
    assert exact.fits and exact.run_end == exact.usable_until
    assert exact.latest_safe_start == NOW and exact.start_in_past is False
    over = run_fit(END, "p5.48xlarge", NOW, 29.5 + 1 / 60, NOW)
    assert not over.fits
    assert over.start_in_past is True


def test_latest_safe_start_in_the_future_is_not_in_the_past() -> None:
    fit = run_fit(END, "p5.48xlarge", NOW, 24, NOW)
    assert fit.fits and fit.latest_safe_start == datetime(2026, 10, 5, 11, 0, tzinfo=UTC)
    assert fit.start_in_past is False
    assert "already in the past" not in fit.describe()


def test_ultraserver_lead_time_is_60_minutes() -> None:
    assert lead_time("p6e-gb200.36xlarge") == timedelta(minutes=60)
    assert lead_time("u-p6e-gb200x72") == timedelta(minutes=60)
    assert lead_time("p5.48xlarge") == timedelta(minutes=30)
    assert lead_time(None) == timedelta(minutes=30)
    fit = run_fit(END, "p6e-gb200.36xlarge", NOW, 24, NOW)
    assert fit.usable_until == datetime(2026, 10, 6, 10, 30, tzinfo=UTC)
    assert "60 min lead time" in fit.describe()


def test_last_checkpoint_inside_the_lead_time() -> None:
    # 29 h run ends 10:30 on the last day; usable until 11:00.
    fit = run_fit(END, "p5.48xlarge", NOW, 29, NOW)
    assert fit.fits
    # Checkpoints every 60 min: the run's last lands at 10:30 — before usable until.
    assert fit.final_checkpoint(60) == datetime(2026, 10, 6, 10, 30, tzinfo=UTC)
    assert not fit.checkpoint_in_lead(60)
    # Every 120 min: the last needed lands at 11:30, after usable until (inside the lead time).
    assert fit.final_checkpoint(120) == datetime(2026, 10, 6, 11, 30, tzinfo=UTC)
    assert fit.checkpoint_in_lead(120)


def test_default_run_lengths() -> None:
    assert DEFAULT_RUN_HOURS == (24.0, 48.0, 72.0)


@pytest.mark.parametrize(("shortfall_h", "expected"), [
    (0, 24), (1, 24), (24, 24), (24.5, 48), (18.5, 24), (336, 336), (337, 504), (100_000, 4368)])
def test_extension_hours_rounds_to_purchasable_durations(shortfall_h: float, expected: int) -> None:
    assert extension_hours(timedelta(hours=shortfall_h)) == expected


def test_reservation_named_by_the_node_wins_over_instance_type() -> None:
    mine, other = block("cr-0000000000000000a"), block("cr-0000000000000000b")
    node = NodeInfo(instance_id="i-0123456789abcdef0", instance_type="p5.48xlarge", status="running",
                    capacity_reservation_id="cr-0000000000000000b")
    ev = evidence([mine, other], [node])
    assert cluster_reservations(ev, "p5.48xlarge", [node.instance_id]) == [other]
    assert cluster_reservations(ev, "p5.48xlarge") == [mine, other]


def test_expired_and_other_types_do_not_match() -> None:
    ev = evidence([block("cr-0000000000000000a", state="expired"), block("cr-0000000000000000b", itype="p4d.24xlarge"),
                   block("cr-0000000000000000c", state="cancelled")])
    assert cluster_reservations(ev, "p5.48xlarge") == []
    assert cluster_reservations(evidence([]), None) == []


def test_holding_reservation_consecutive_blocks_do_not_chain() -> None:
    first = block("cr-0000000000000000a")
    second = block("cr-0000000000000000b", state="scheduled", start=END, end=END + timedelta(days=1))
    assert holding_reservation([first, second], NOW) == first
    # A run planned after the first ends runs on the next one.
    assert holding_reservation([first, second], END + timedelta(hours=1)) == second
    # Nothing in force at the start: the next block to start.
    assert holding_reservation([second], NOW) == second
    unlimited = block("cr-0000000000000000c", rtype="default", end=None)
    assert holding_reservation([first, unlimited], NOW) == unlimited
    assert holding_reservation([], NOW) is None


def test_ec2_family_quota() -> None:
    assert ec2_family_quota("p5.48xlarge") == ("L-417A185B", "Running On-Demand P instances")
    assert ec2_family_quota("p6-b200.48xlarge") == ("L-417A185B", "Running On-Demand P instances")
    assert ec2_family_quota("g6e.48xlarge") == ("L-DB2E81BA", "Running On-Demand G and VT instances")
    assert ec2_family_quota("trn1.32xlarge") == ("L-2C3B7624", "Running On-Demand Trn instances")
    assert ec2_family_quota("m5.xlarge") is None
    assert ec2_family_quota(None) is None
