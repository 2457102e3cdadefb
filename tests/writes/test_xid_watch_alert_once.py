"""The hourly audit after a watch-started incident audit does not page the same change again (issue #51 item 3).

RULES §7's verdict asks for an action once; fleet memory keeps it open across audits, whatever their mode, until an
audit shows it done. The latest state the alert compares with is kept per mode (a coverage audit and an incident
audit compare with their own last one), so without reading the open actions the hourly coverage audit after the
Xid watch's incident audit would say "new verdict REBOOT" a second time for the node on-call was already paged
for. The deployed sinks run over both history stores (tests/writes/test_alert_actions.py's Deployed)."""

from __future__ import annotations

from helpers.worlds import at, aws_for, node_of
from test_alert_actions import Deployed
from test_alert_actions import deployed as deployed  # the fixture
from test_fleet_memory import Fleet, xid_line

from gpuaudit.model.evidence import AuditRequest, Mode
from gpuaudit.model.history import HistoryStore
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit


def audit(fleet: Fleet, mode: Mode, end_hour: int, store: HistoryStore | None) -> Result:
    raw = fleet.w.raw
    raw["now"] = at(end_hour, 30)
    request = AuditRequest(cluster=fleet.w.cluster, mode=mode, since=parse_time(at(end_hour - 4)),
                           until=parse_time(at(end_hour)))
    return run_audit(aws_for(fleet.w.world()), request, history=store)


def test_the_hourly_audit_after_the_watch_audit_does_not_alert_the_same_reboot_again(deployed: Deployed) -> None:
    # Given an Xid 79 at 09:00 on a ParallelCluster node, and no reboot after it
    f = Fleet()
    iid = f.node.instance_id
    f.add(9, xid_line(f.node.hostname))

    # When the watch's incident audit (its window ending at the alarm, 10:00 here) and then the hourly coverage
    # audit to 11:00 run
    deployed.audit(lambda end, store: audit(f, "incident", end, store), 10)
    hourly = deployed.audit(lambda end, store: audit(f, "coverage", end, store), 11)

    # Then the REBOOT is paged once, by the incident audit; the hourly one holds the same verdict and says nothing
    watch_said, hourly_said = deployed.said
    assert any(c.startswith(f"{iid}: new verdict REBOOT") for c in watch_said.changes)
    assert node_of(hourly, iid).verdict == "REBOOT"
    assert not any("new verdict" in c for c in hourly_said.changes)
    assert len(deployed.messages()) == 1


def test_a_reboot_no_earlier_audit_asked_for_is_still_paged_by_the_hourly_audit(deployed: Deployed) -> None:
    f = Fleet()
    iid = f.node.instance_id
    f.add(9, xid_line(f.node.hostname))
    deployed.audit(lambda end, store: audit(f, "coverage", end, store), 11)
    (said,) = deployed.said
    assert any(c.startswith(f"{iid}: new verdict REBOOT") for c in said.changes)
