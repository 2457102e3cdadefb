"""The failure's onset (#35 item 10), from RULES §0.5: "before the failure" is measured from the onset the
operator states; without one, from the first failure signal read on the affected nodes (an NCCL timeout, a node
status change). The impact window's start is a search bound, not the onset, and is never called one. A cause is
Proven only before the onset. Bad onset input — unparseable, or outside the window — is refused (exit 2) naming it.

The world: one p5 node of a ParallelCluster cluster mounting an FSx for Lustre file system whose file server's
network throughput sat at 97 % from 08:50 for 40 minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.model.result import Branch, Result
from gpuaudit.report.html import render_html
from tests.helpers.worlds import PClusterWorld, at, cli_audit, one_node_world

FS = "fs-0aa11bb22cc33dd44"
SINCE, UNTIL = at(8), at(11)
JOB_GROUP = "/aws/batch/job"
TIMEOUT = ("[rank0]:[E1001 09:30:00.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE) ran for 600012 milliseconds before timing out.")


def world(*, nccl_timeout: str | None = None, xid_at: str | None = None) -> PClusterWorld:
    w = one_node_world(xid_at)
    w.lustre(FS)
    w.fsx_metric(FS, "NetworkThroughputUtilization", [[at(8, 50 + i), 97.0] for i in range(40)])
    if nccl_timeout is not None:  # the job's stdout in a group whose name holds the cluster's (found by substring)
        w.stream(f"/aws/batch/{w.cluster}-jobs", "train/run-7", events=[(nccl_timeout, TIMEOUT)])
    return w


def branch(result: Result, letter: str) -> Branch:
    return next(b for b in result.branches if b.branch == letter)


def incident(w: PClusterWorld, onset: str | None = None) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL, onset=onset)


def test_without_an_onset_or_a_failure_signal_nothing_is_proven_and_the_window_start_is_not_called_the_onset() -> None:
    result = incident(world())
    c = branch(result, "C")
    assert c.status != "Root cause" and c.label == "Hypothesis (to validate)"
    assert "no onset stated (--onset) and no failure signal read" in c.evidence
    assert result.window.onset is None
    report = result.report_markdown + result.model_dump_json()
    assert "slowdown began" not in report
    assert "Failure onset: not known" in result.report_markdown


def test_a_stated_onset_after_the_saturation_proves_it() -> None:
    result = incident(world(), onset=at(9, 15))
    c = branch(result, "C")
    assert (c.status, c.label) == ("Root cause", "Proven")
    assert f"before the onset {at(9, 15)}, stated by the operator (--onset)" in c.evidence
    assert result.window.onset is not None and result.window.onset_source == "stated by the operator (--onset)"
    assert f"Failure onset: {at(9, 15)}" in result.report_markdown
    assert f"Failure onset: {at(9, 15)}" in render_html(result)


def test_a_stated_onset_before_the_saturation_keeps_it_a_hypothesis() -> None:
    c = branch(incident(world(), onset=at(8, 30)), "C")
    assert c.status != "Root cause"
    assert f"began {at(8, 50)}, after the onset {at(8, 30)}" in c.evidence


def test_without_a_stated_onset_the_first_nccl_timeout_read_is_the_onset() -> None:
    result = incident(world(nccl_timeout=at(9, 30)))
    assert result.window.onset is not None and result.window.onset.isoformat().startswith("2026-10-01T09:30")
    assert "first NCCL timeout line" in (result.window.onset_source or "")
    c = branch(result, "C")
    assert (c.status, c.label) == ("Root cause", "Proven")
    assert f"before the onset {at(9, 30)}, first NCCL timeout line" in c.evidence


def test_a_hardware_signal_after_the_onset_is_not_proven() -> None:
    result = incident(world(xid_at=at(10)), onset=at(9, 15))
    a = branch(result, "A")
    assert a.status != "Root cause" and a.label == "Hypothesis (to validate)"
    assert f"after the onset {at(9, 15)}" in a.evidence


def test_a_hardware_signal_before_the_onset_is_proven() -> None:
    a = branch(incident(world(xid_at=at(9)), onset=at(9, 15)), "A")
    assert (a.status, a.label) == ("Root cause", "Proven")


@pytest.mark.parametrize(("onset", "named"), [
    ("yesterday-ish", "--onset: not an ISO-8601 time"),
    (at(7), "outside the impact window"),  # before --since
    (at(11, 30), "outside the impact window"),  # after --until
])
def test_bad_onset_input_is_refused_naming_it(tmp_path: Path, onset: str, named: str) -> None:
    code, out = cli_audit(world().raw, tmp_path, "--cluster", "llm-pretrain", "--mode", "incident", "--since", SINCE,
                          "--until", UNTIL, "--onset", onset)
    assert code == 2
    assert named in out and "onset" in out


def test_an_onset_outside_the_default_window_is_refused(tmp_path: Path) -> None:
    code, out = cli_audit(world().raw, tmp_path, "--cluster", "llm-pretrain", "--mode", "incident",
                          "--onset", at(-30))  # the default incident window is the last 24 h
    assert code == 2 and "--onset" in out and "outside the impact window" in out


def test_the_cli_onset_reaches_the_result(tmp_path: Path) -> None:
    code, out = cli_audit(world().raw, tmp_path, "--cluster", "llm-pretrain", "--mode", "incident", "--since", SINCE,
                          "--until", UNTIL, "--onset", at(9, 15))
    assert code == 0
    result = Result.model_validate_json(out)
    assert branch(result, "C").status == "Root cause"
    assert result.window.onset is not None


def _impaired(w: PClusterWorld, since: str | None) -> PClusterWorld:
    """The node's EC2 system status check read impaired (DescribeInstanceStatus), failing since `since` when given."""
    detail = {"Name": "reachability", "Status": "failed", **({"ImpairedSince": since} if since else {})}
    w.section("ec2", "instance_status").append(
        {"InstanceId": w.compute[0].instance_id, "InstanceState": {"Code": 16, "Name": "running"},
         "SystemStatus": {"Status": "impaired", "Details": [detail]},
         "InstanceStatus": {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]}})
    return w


def test_a_status_check_turning_impaired_on_the_node_is_a_node_status_change_and_the_onset() -> None:
    # RULES §0.5: a node status change is a failure signal; a failed EC2 status check is one, dated by ImpairedSince
    result = incident(_impaired(world(xid_at=at(9)), since=at(9, 20)))
    assert result.window.onset is not None and result.window.onset.isoformat().startswith("2026-10-01T09:20")
    assert "DescribeInstanceStatus" in (result.window.onset_source or "")
    assert "Failure onset: not known" not in result.report_markdown
    a = branch(result, "A")
    assert (a.status, a.label) == ("Root cause", "Proven")  # the Xid 79 at 09:00 precedes the onset


def test_a_status_check_read_impaired_with_no_date_gives_no_onset() -> None:
    # fail closed: a check with no ImpairedSince says nothing of when the node changed, so the onset stays unknown
    result = incident(_impaired(world(xid_at=at(9)), since=None))
    assert result.window.onset is None
    assert "Failure onset: not known" in result.report_markdown
