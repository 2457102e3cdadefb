"""Boot-time lines are searched since launch (#21 item 4): "is Fabric Manager running on our P5 nodes, and which
driver do they run?"

RULES §2: on NVSwitch types, search every log source for `Started "Nvidia Fabric Manager"` before calling Fabric
Manager unconfirmed; §10 P11 reads the driver from `NVRM: loading NVIDIA UNIX … <version>`. Both are logged at
boot, often days before the window: they are searched since the node's launch (bounded), and only for nodes whose
window held none. Query semantics run through the embedded Logs Insights evaluator (never moto).
"""

from __future__ import annotations

from datetime import timedelta

from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import iso, parse_time
from tests.helpers.worlds import PClusterWorld, at, node_of

SINCE, UNTIL = at(6), at(10)
FM_STARTED = 'systemd[1]: Started "Nvidia Fabric Manager".'


def world(*, launch: str = at(-96)) -> PClusterWorld:
    """Two P5 nodes booted 4 days before the window; the first logged Fabric Manager's start at boot, the second
    only a stop line of it (not a start), so its Fabric Manager is unconfirmed."""
    w = PClusterWorld(n_compute=2, launch=launch)
    started, unconfirmed = w.compute
    for n in w.compute:
        w.healthy(n, launch, at(12, 25))  # a boot kernel banner (driver 570.133.20) at launch, then steady lines
    boot = iso(parse_time(launch) + timedelta(minutes=1))
    w.stream(w.group, w.stream_name(started), events=[(boot, f"{started.hostname} {FM_STARTED}")])
    w.stream(w.group, w.stream_name(unconfirmed), events=[
        (boot, f'{unconfirmed.hostname} systemd[1]: Stopped "Nvidia Fabric Manager".')])
    return w


def boot_queries(result: Result) -> int:
    return sum(c.count for c in result.calls if c.operation == "StartQuery")


def test_fabric_manager_started_days_before_the_window_is_observable() -> None:
    w = world()
    started, unconfirmed = w.compute
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert node_of(result, started.instance_id).signals.fabric_manager == "Observable"
    # a stop line is no start: still Not observable, with the span searched and the command to run on the node
    assert node_of(result, unconfirmed.instance_id).signals.fabric_manager == "Not observable"
    (gap,) = [g for g in result.visibility_gaps if "Fabric Manager start line" in g]
    assert unconfirmed.instance_id in gap and started.instance_id not in gap
    assert "from 2026-09-27T00:00:00Z" in gap  # the launch, 4 days back (within the 14-day bound)
    assert "systemctl status nvidia-fabricmanager" in gap


def test_the_driver_version_logged_at_boot_is_read_by_p11() -> None:
    w = world()
    result = w.audit(w.cluster, mode="preflight")
    (p11,) = [c for c in result.checks if c.id == "P11"]
    assert "570.133.20" in p11.evidence and "unreadable" not in p11.evidence


def test_the_search_is_bounded_to_the_lookback_and_skipped_when_the_window_holds_the_lines() -> None:
    # launched 30 days back: the boot lines are older than the 14-day bound, so they are not read, and the gap says
    # where the search began
    old = world(launch=at(-24 * 30))
    result = old.audit(old.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert node_of(result, old.compute[0].instance_id).signals.fabric_manager == "Not observable"
    (gap,) = [g for g in result.visibility_gaps if "Fabric Manager start line" in g]
    assert "from 2026-09-17T05:00:00Z" in gap  # 14 days before the padded window (05:00), not the launch

    # nodes that booted inside the window: their lines are in the GPU-lines read, no boot-lines query is made
    fresh = PClusterWorld(n_compute=1, launch=at(7))
    (n,) = fresh.compute
    fresh.healthy(n, at(7), at(12, 25))
    fresh.stream(fresh.group, fresh.stream_name(n), events=[(at(7, 1), f"{n.hostname} {FM_STARTED}")])
    with_lines = fresh.audit(fresh.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert node_of(with_lines, n.instance_id).signals.fabric_manager == "Observable"
    boot = [q for q in old.audit(old.cluster, mode="incident", since=SINCE, until=UNTIL).calls
            if q.operation == "StartQuery"]
    assert boot_queries(with_lines) < sum(c.count for c in boot)


def test_fabric_manager_failing_in_the_current_boot_before_the_window_is_read() -> None:
    # Given a P5 node whose only boot, 4 days before the window, logged Fabric Manager failing to start (no start)
    w = PClusterWorld(n_compute=1, launch=at(-96))
    (n,) = w.compute
    w.healthy(n, at(-96), at(12, 25))
    boot = iso(parse_time(at(-96)) + timedelta(minutes=1))
    w.stream(w.group, w.stream_name(n), events=[
        (boot, f"{n.hostname} systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, "
               "status=1/FAILURE"),
        (boot, f"{n.hostname} systemd[1]: Failed to start NVIDIA fabric manager service.")])

    # When a pre-flight audits it
    result = w.audit(w.cluster, mode="preflight")

    # Then the failure is read by the since-launch search: the node is to be rebooted and P12 fails on that line
    assert node_of(result, n.instance_id).verdict == "REBOOT"
    (p12,) = [c for c in result.checks if c.id == "P12"]
    assert p12.result == "FAIL" and "Failed to start NVIDIA fabric manager service" in p12.evidence
