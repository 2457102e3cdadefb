"""RULES §8 D layer 2 (issue #53 item 15): Fabric Manager absent, failed or restarting on an NVSwitch type → REBOOT,
REPLACE if it recurs; "failed" and "restarting" are read, "absent" needs the node's boot read with no start line
after it, and where the boot itself was not read Fabric Manager is only "not confirmed" (§2), never absent."""

from __future__ import annotations

from helpers.worlds import PClusterWorld, at

SINCE, UNTIL = at(9), at(11)
BANNER = "kernel: Linux version 6.12.95-124.187.amzn2023.x86_64"
DRIVER = "kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.133.20"
STARTED = "systemd[1]: Started nvidia-fabricmanager.service - NVIDIA fabric manager service."
FAILED = ("systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, status=1/FAILURE",
          "systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.",
          "systemd[1]: Failed to start nvidia-fabricmanager.service - NVIDIA fabric manager service.")


def p5_node(events: list[tuple[str, str]], *, compute_type: str = "p5.48xlarge", launch: str = at(-48),
            log: str = "system-messages") -> tuple[PClusterWorld, str]:
    """One compute node whose syslog stream (live from launch to 13:00) carries `events` beside its steady lines."""
    w = PClusterWorld("train", n_compute=1, compute_type=compute_type, launch=launch)
    gpu = w.compute[0]
    stream = w.healthy(gpu, launch, at(13), log=log)
    w.stream(w.group, stream, events=[(t, f"{gpu.hostname} {m}") for t, m in events])
    return w, gpu.instance_id


def audit(w: PClusterWorld, iid: str):
    result = w.audit("train", mode="incident", since=SINCE, until=UNTIL)
    return next(n for n in result.nodes if n.instance_id == iid), {b.branch: b for b in result.branches}


def boot(t: str) -> list[tuple[str, str]]:
    return [(t, BANNER), (t, DRIVER)]


def test_failed_to_start_on_an_nvswitch_type_is_reboot_and_branch_d_is_assessed() -> None:
    w, iid = p5_node([(at(10, 5), line) for line in FAILED])
    node, branches = audit(w, iid)
    assert node.verdict == "REBOOT"
    assert "Fabric Manager failed" in (node.verdict_evidence or "")
    assert "Failed to start nvidia-fabricmanager" in (node.verdict_evidence or "")
    assert node.signals.fabric_manager == "Observable"  # what it did was read
    assert any(e.code is None and "Fabric Manager" in (e.meaning or "") for e in node.gpu_errors)
    d = branches["D"]
    assert d.status not in ("Not assessed", "Ruled out")
    assert iid in d.evidence and "Failed to start" in d.evidence


def test_failing_again_after_a_reboot_is_replace() -> None:
    w, iid = p5_node([(at(9, 10), FAILED[2]), *boot(at(9, 40)), (at(9, 41), FAILED[0]), (at(9, 41), FAILED[2])])
    node, _ = audit(w, iid)
    assert node.verdict == "REPLACE"
    assert "recurs after a reboot" in (node.verdict_evidence or "")


def test_a_failure_the_reboot_cleared_is_not_a_reboot_again() -> None:
    w, iid = p5_node([(at(9, 10), FAILED[2]), *boot(at(9, 40)), (at(9, 41), STARTED)])
    node, _ = audit(w, iid)
    assert node.verdict == "MONITOR"
    assert "cleared by that reboot" in (node.verdict_evidence or "")


def test_restarting_in_one_boot_is_reboot() -> None:
    w, iid = p5_node([*boot(at(9, 30)), (at(9, 31), STARTED),
                      (at(10, 2), "systemd[1]: nvidia-fabricmanager.service: Scheduled restart job, restart counter "
                                  "is at 1."), (at(10, 2), STARTED)])
    node, branches = audit(w, iid)
    assert node.verdict == "REBOOT"
    assert "restarting" in (node.verdict_evidence or "")
    assert branches["D"].status != "Not assessed"


def test_repeated_starts_in_one_boot_are_restarting() -> None:
    w, iid = p5_node([*boot(at(9, 30)), (at(9, 31), STARTED), (at(10, 12), STARTED)])
    node, _ = audit(w, iid)
    assert node.verdict == "REBOOT"
    assert "restarting" in (node.verdict_evidence or "")


def test_absent_needs_the_boot_read_with_no_start_line_after_it() -> None:
    # Fabric Manager started at launch in this syslog stream; the node rebooted inside the window, the stream is live
    # every hour, and no start line follows the new boot
    w, iid = p5_node([(at(-48, 1), STARTED), *boot(at(9, 30))])
    node, _ = audit(w, iid)
    assert node.verdict == "REBOOT"
    assert "absent" in (node.verdict_evidence or "")


def test_a_stream_that_never_carried_fabric_manager_cannot_show_it_absent() -> None:
    # the same reboot in a stream with no Fabric Manager line ever: whether it ships them is unknown → not confirmed
    w, iid = p5_node(boot(at(9, 30)))
    node, _ = audit(w, iid)
    assert node.verdict is None
    assert node.signals.fabric_manager == "Not observable"


def test_a_boot_only_the_look_back_saw_is_not_confirmed_never_absent() -> None:
    # booted two days before the window: the banner is read since launch, but not the stream around it
    w, iid = p5_node([])
    node, branches = audit(w, iid)
    assert node.verdict is None
    assert node.signals.fabric_manager == "Not observable"
    assert "Fabric Manager" not in (node.verdict_evidence or "")


def test_a_kernel_only_stream_cannot_show_fabric_manager_absent() -> None:
    # dmesg ships the kernel's lines alone: the boot banner is there, systemd's start line never would be
    w, iid = p5_node([(at(-48, 1), STARTED), *boot(at(9, 30))], log="dmesg")
    node, _ = audit(w, iid)
    assert node.verdict is None


def test_started_after_the_boot_with_the_benign_pidfile_warning_is_clean() -> None:
    w, iid = p5_node([*boot(at(9, 30)), (at(9, 31), "systemd[1]: /usr/lib/systemd/system/nvidia-fabricmanager.service"
                                                     ":12: PIDFile= references a path below legacy directory "
                                                     "/var/run/, updating /var/run/nvidia-fabricmanager/nv-fabric"
                                                     "manager.pid → /run/nvidia-fabricmanager/nv-fabricmanager.pid"),
                      (at(9, 31), STARTED)])
    node, branches = audit(w, iid)
    assert node.verdict is None
    assert node.signals.fabric_manager == "Observable"
    assert branches["D"].status != "Contributing"


def test_no_fabric_manager_verdict_where_the_type_expects_none() -> None:
    # g5.12xlarge: multi-GPU PCIe, no Fabric Manager expected (RULES §2 table)
    w, iid = p5_node([(at(10, 5), FAILED[2])], compute_type="g5.12xlarge")
    node, _ = audit(w, iid)
    assert node.verdict is None
    assert node.signals.fabric_manager == "Not applicable"


def test_a_failure_before_the_hang_proves_branch_d() -> None:
    w, iid = p5_node([(at(9, 50), FAILED[2]),
                      (at(10, 20), "python3[4242]: [rank3]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective "
                                   "operation timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE) ran for 600000 ms")])
    _, branches = audit(w, iid)
    d = branches["D"]
    assert (d.status, d.label) == ("Root cause", "Proven")


def test_one_start_shipped_to_two_log_groups_is_one_start_not_a_restart() -> None:
    # Given the node's journal shipped both to the cluster's syslog stream and to a customer kernel group: the boot's
    # banner and its one Fabric Manager start appear in each
    w, iid = p5_node([*boot(at(9, 30)), (at(9, 31), STARTED)])
    gpu = w.compute[0]
    other = w.stream("/aws/training-logs/train/journal", f"{gpu.hostname}-{iid}",
                     events=[(t, f"{gpu.hostname} {m}") for t, m in [*boot(at(9, 30)), (at(9, 31), STARTED)]])
    assert other
    node, _ = audit(w, iid)
    # Then Fabric Manager started once in that boot: no restart, no verdict from it
    assert "restarting" not in (node.verdict_evidence or "")
    assert node.verdict != "REBOOT"


def test_systemd_and_the_daemon_telling_one_start_is_one_start_not_a_restart() -> None:
    # Given one boot whose syslog stream carries systemd's start line of the unit and, a second later, the daemon's
    # own `Started "Nvidia Fabric Manager"` (two writers, one start)
    w, iid = p5_node([*boot(at(9, 30)), (at(9, 31), STARTED),
                      (at(9, 31, 1), 'nv-fabricmanager[4112]: Started "Nvidia Fabric Manager"')])
    node, _ = audit(w, iid)
    # Then Fabric Manager started once in that boot: no restart, no verdict from it
    assert "restarting" not in (node.verdict_evidence or "")
    assert node.verdict != "REBOOT"


def test_the_daemon_starting_twice_in_one_boot_is_still_a_restart() -> None:
    # Given one boot whose stream carries the daemon's own start line twice, minutes apart
    w, iid = p5_node([*boot(at(9, 30)), (at(9, 31), 'nv-fabricmanager[4112]: Started "Nvidia Fabric Manager"'),
                      (at(9, 40), 'nv-fabricmanager[5120]: Started "Nvidia Fabric Manager"')])
    node, _ = audit(w, iid)
    # Then that is a restart: REBOOT
    assert node.verdict == "REBOOT" and "restarting" in (node.verdict_evidence or "")
