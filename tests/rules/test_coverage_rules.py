"""RULES §4 coverage proof, one test per row of the status table and per trap, through the full
pipeline (`run_audit`) against small worlds served by the embedded backend."""

from __future__ import annotations

from helpers.worlds import (
    NOW,
    HyperPodWorld,
    PClusterWorld,
    at,
    hours,
    iso_list,
    node_of,
)

from gpuaudit.model.timeutil import iso

# Window 06:00–10:00 → padded 05:00–11:00: six whole hours, all before NOW (12:30).
SINCE, UNTIL = at(6), at(10)
PADDED_HOURS = hours(5, 6, 7, 8, 9, 10)
COLLECT = "dmesg -T | grep -i nvrm"


def kernel_rows(node):
    return [r for r in node.coverage if r.source_kind == "kernel"]


# -- the status table ---------------------------------------------------------------------------
def test_live_stream_with_kernel_lines_is_measured_with_zero_xids():
    # Given a compute node whose system-messages stream holds kernel lines and a line every 10 minutes
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(12, 25))

    # When the window is audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the node is Measured through that exact stream, 0 Xids is a real zero, and the headline says so
    n = node_of(result, node.instance_id)
    assert n.xid_status == "Measured"
    (row,) = kernel_rows(n)
    assert (row.log_group, row.log_stream, row.status) == (w.group, stream, "Measured")
    assert row.kernel_lines_ever == 1
    assert row.empty_hours == []
    assert row.live_hours == len(PADDED_HOURS)
    assert n.gpu_errors == []
    assert n.verdict is None
    assert result.headline.startswith("No GPU errors in the window, on proven coverage.")


def test_live_stream_without_kernel_lines_ever_is_not_observable_ships_other_logs():
    # Given a node whose only stream is live every hour but never held a `kernel:` line
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.lines(w.group, w.stream_name(node), at(-10), at(12, 25), 600, "systemd[1]: Started Session 1.")

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), node.instance_id)

    # Then the live stream proves nothing about kernel messages
    assert n.xid_status == "Not observable"
    (row,) = kernel_rows(n)
    assert row.log_stream == stream
    assert row.status == "Not observable"
    assert row.kernel_lines_ever == 0
    assert "ships other logs" in (row.note or "")
    assert n.verdict == "NOT OBSERVABLE"


def test_empty_hours_make_the_stream_not_observable_and_each_is_listed():
    # Given a kernel stream silent from 07:00 to 09:00 (two whole hours) inside the padded window
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(7))
    w.lines(w.group, stream, at(9), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then exactly the empty hours are listed, and the node is Not observable
    n = node_of(result, node.instance_id)
    (row,) = kernel_rows(n)
    assert iso_list(row.empty_hours) == hours(7, 8)
    assert row.status == "Not observable"
    assert row.live_hours == 4
    assert n.xid_status == "Not observable"
    assert n.verdict == "NOT OBSERVABLE"
    assert any(node.instance_id in g and "2 empty hour(s) from 2026-10-01T07:00:00Z" in g
               for g in result.visibility_gaps)


def test_a_single_empty_hour_next_to_a_line_at_the_padded_end_is_still_listed():
    # Given a stream silent in 10:00–11:00 with one line at exactly 11:00:00 (the padded window's end)
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(10))
    w.stream(w.group, stream, events=[(at(11), f"{node.hostname} systemd[1]: tick")])

    # When audited over 06:00–10:00 (padded 05:00–11:00)
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), node.instance_id)

    # Then the line at the boundary does not stand in for the empty 10:00 hour
    (row,) = kernel_rows(n)
    assert iso_list(row.empty_hours) == hours(10)
    assert n.xid_status == "Not observable"


def test_node_with_no_stream_is_not_observable_naming_the_groups_searched():
    # Given two candidate groups (the cluster's and a customer kernel group) with streams of another node only
    w = PClusterWorld(n_compute=2)
    silent, other = w.compute
    w.healthy(other, at(-10), at(12, 25))
    custom = w.log_group("/aws/pipeline/llm-pretrain/kernel")
    w.kernel_stream(custom, f"{other.private_dns}-{other.instance_id}", at(-10), at(12, 25))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), silent.instance_id)

    # Then the silent node has one row with no stream, and the note names every group searched
    assert n.xid_status == "Not observable"
    (row,) = n.coverage
    assert row.log_stream is None
    assert row.status == "Not observable"
    assert w.group in row.note and custom in row.note
    assert n.verdict == "NOT OBSERVABLE"


def test_node_is_measured_when_any_one_source_passes():
    # Given the cluster's system-messages stream died at 07:00, but a customer kernel pipeline stayed live
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    dead = w.healthy(node, at(-10), at(7))
    custom = w.log_group("/aws/pipeline/llm-pretrain/kernel")
    live = w.kernel_stream(custom, f"{node.private_dns}-{node.instance_id}", at(-10), at(12, 25))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), node.instance_id)

    # Then both sources are reported, the dead one too, and the node is Measured
    rows = {(r.log_group, r.log_stream): r for r in kernel_rows(n)}
    assert rows[(w.group, dead)].status == "Not observable"
    assert iso_list(rows[(w.group, dead)].empty_hours) == hours(7, 8, 9, 10)
    assert rows[(custom, live)].status == "Measured"
    assert n.xid_status == "Measured"


def test_first_and_last_event_at_both_ends_are_not_proof_of_liveness():
    # Given a kernel stream with lines before and after the window's middle, and nothing between 07:00 and 09:00
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(6, 30))
    w.lines(w.group, stream, at(9, 30), at(12, 25))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), node.instance_id)

    # Then first/last events span the padded window, yet the hourly bins decide: Not observable
    (row,) = kernel_rows(n)
    assert iso(row.first_event) == at(5)
    assert iso(row.last_event) == at(10, 50)
    assert iso_list(row.empty_hours) == hours(7, 8)
    assert row.status == "Not observable"
    assert n.xid_status == "Not observable"


def test_instance_id_liveness_trap_dead_kernel_stream_among_live_streams_of_the_node():
    # Given ParallelCluster streams of one node: slurmd and computemgtd live, system-messages dead since 07:00
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.other_log(node, "slurmd", at(-10), at(12, 25))
    w.other_log(node, "computemgtd", at(-10), at(12, 25), every_s=300)
    kernel = w.healthy(node, at(-10), at(7))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), node.instance_id)

    # Then the verdict rests on the kernel stream alone, not on the instance ID's other live streams
    assert n.xid_status == "Not observable"
    (row,) = kernel_rows(n)
    assert row.log_stream == kernel
    assert iso_list(row.empty_hours) == hours(7, 8, 9, 10)


# -- the edges of the window ----------------------------------------------------------------------
def test_current_partial_hour_without_a_line_is_an_empty_hour_listed_as_possibly_late():
    # Given now = 12:30 and a kernel stream whose last line is 11:50 (nothing yet in the 12:00 hour)
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(12))

    # When the window runs to now (padded 08:00–12:30)
    result = w.audit(w.cluster, since=at(9))

    # Then (RULES §4: the partial hour is live only if it already holds a line; every empty hour is listed) the
    # partial hour is listed empty, the gap runs to the query time (possibly late), and liveness is not proven
    (row,) = kernel_rows(node_of(result, node.instance_id))
    assert iso_list(row.empty_hours) == hours(12)
    assert row.live_hours == 4  # 08, 09, 10, 11
    assert "possibly late" in (row.note or "")
    assert row.status == "Not observable"


def test_current_partial_hour_holding_a_line_is_live():
    # Given now = 12:30 and a kernel stream with a line at 12:20
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(12, 25))

    # When the window runs to now
    (row,) = kernel_rows(node_of(w.audit(w.cluster, since=at(9)), node.instance_id))

    # Then the partial hour counts live and the node is Measured
    assert row.empty_hours == []
    assert row.live_hours == 5  # 08, 09, 10, 11, 12 (partial, holding lines)
    assert row.status == "Measured"


def test_current_partial_hour_with_a_line_counts_as_live():
    # Given the same stream with one more line at 12:10, inside the current hour
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(12))
    w.stream(w.group, stream, events=[(at(12, 10), f"{node.hostname} systemd[1]: tick")])

    # When audited to now
    (row,) = kernel_rows(node_of(w.audit(w.cluster, since=at(9)), node.instance_id))

    # Then the 12:00 hour is live
    assert row.live_hours == 5
    assert iso(row.last_event) == at(12, 10)
    assert row.status == "Measured"


def test_padded_window_never_goes_past_now():
    # Given a window that would pad to 13:30 (and an --until in the future), with now = 12:30
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(12, 25))

    for until in (None, at(14)):
        # When audited
        result = w.audit(w.cluster, since=at(11), until=until)

        # Then the padded window ends at now, and the future hour 13:00 is not demanded of the stream
        assert iso(result.window.padded_end) == NOW
        (row,) = kernel_rows(node_of(result, node.instance_id))
        assert row.empty_hours == []
        assert row.status == "Measured"


def test_node_launched_mid_window_is_not_blamed_for_hours_before_launch():
    # Given a node launched at 08:20, whose stream starts then, inside a 05:00–11:00 padded window
    w = PClusterWorld(n_compute=1)
    late = w.add_instance(launch=at(8, 20))
    w.healthy(w.compute[0], at(-10), at(12, 25))
    w.healthy(late, at(8, 20), at(12, 25))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), late.instance_id)

    # Then only the hours since its launch hour are expected, and they are all live
    (row,) = kernel_rows(n)
    assert row.empty_hours == []
    assert row.live_hours == 3  # 08, 09, 10
    assert n.xid_status == "Measured"


def test_node_launched_mid_window_still_blamed_for_empty_hours_after_launch():
    # Given a node launched at 08:20 whose stream went silent at 09:00
    w = PClusterWorld(n_compute=0)
    late = w.add_instance(launch=at(8, 20))
    w.healthy(late, at(8, 20), at(9))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), late.instance_id)

    # Then exactly the hours after launch with no line are listed, none before launch
    (row,) = kernel_rows(n)
    assert iso_list(row.empty_hours) == hours(9, 10)


def test_gap_running_to_the_query_time_is_noted_as_possibly_late():
    # Given a window ending at 11:00 (padded to 12:00, half an hour before now) and a stream silent since 11:00
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(11))

    # When audited
    (row,) = kernel_rows(node_of(w.audit(w.cluster, since=at(8), until=at(11)), node.instance_id))

    # Then the gap is listed and said to be possibly late, not lost
    assert iso_list(row.empty_hours) == hours(11)
    assert "possibly late" in (row.note or "")
    assert row.status == "Not observable"


def test_gap_running_into_the_current_partial_hour_is_noted_as_possibly_late():
    # Given a window running to now (12:30) and a stream silent since 11:00
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(11))

    # When audited
    (row,) = kernel_rows(node_of(w.audit(w.cluster, since=at(9)), node.instance_id))

    # Then the whole hour 11:00 and the partial hour (no line yet) are empty, and the gap may be late delivery
    assert iso_list(row.empty_hours) == hours(11, 12)
    assert "possibly late" in (row.note or "")


def test_gap_in_the_middle_or_long_before_the_query_is_not_called_late():
    # Given a gap in the middle of a window, and another audit whose window ended long before now
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-20), at(7))
    w.lines(w.group, stream, at(9), at(12, 25))
    w2 = PClusterWorld(n_compute=1)
    w2.healthy(w2.compute[0], at(-20), at(3))

    # When audited over 06:00–10:00, and over 00:00–04:00 (padded end 05:00, 7.5 h before now)
    middle = kernel_rows(node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), node.instance_id))[0]
    old = kernel_rows(node_of(w2.audit(w2.cluster, since=at(0), until=at(4)), w2.compute[0].instance_id))[0]

    # Then neither gap is excused as late delivery
    assert iso_list(middle.empty_hours) == hours(7, 8)
    assert "possibly late" not in (middle.note or "")
    assert iso_list(old.empty_hours) == hours(3, 4)
    assert "possibly late" not in (old.note or "")


def test_gap_reaching_now_but_begun_hours_ago_is_lost_not_late():
    # Given a stream silent since 07:00, audited to now (12:30): the gap reaches the query but is 5.5 h old
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.healthy(node, at(-10), at(7))

    # When audited
    (row,) = kernel_rows(node_of(w.audit(w.cluster, since=at(8)), node.instance_id))

    # Then the hours are listed, the current partial hour with no line among them, and the gap is not excused as late
    assert iso_list(row.empty_hours) == hours(7, 8, 9, 10, 11, 12)
    assert "possibly late" not in (row.note or "")


# -- HyperPod health-monitoring agent -------------------------------------------------------------
def hma_rows(node):
    return [r for r in node.coverage if r.source_kind == "hma"]


def test_gpu_node_without_hma_stream_and_live_cluster_group_has_no_hma_detections():
    # Given a HyperPod GPU node with no HMA stream, and ClusterMetrics/slurm live in every hour
    w = HyperPodWorld(gpu_nodes=1)
    gpu = w.gpu[0]
    w.cluster_metrics(at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then absence of an HMA stream reads as "No HMA detections", with the live stream as proof
    n = node_of(result, gpu.instance_id)
    assert n.xid_status == "No HMA detections"
    (row,) = hma_rows(n)
    assert row.log_group == w.group
    assert row.log_stream is None
    assert row.status == "No HMA detections"
    assert "ClusterMetrics/slurm" in row.note
    assert w.hma_stream_name(gpu) in row.note


def test_cluster_group_without_a_live_stream_makes_hma_not_observable():
    # Given the cluster log group's only stream stopped at 07:00
    w = HyperPodWorld(gpu_nodes=1)
    gpu = w.gpu[0]
    w.cluster_metrics(at(-10), at(7))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then HMA absence proves nothing: Not observable, and the operator is told what to confirm
    n = node_of(result, gpu.instance_id)
    assert n.xid_status == "Not observable"
    (row,) = hma_rows(n)
    assert row.status == "Not observable"
    assert "sagemaker-health-monitoring-agent.service" in row.note
    assert n.verdict == "NOT OBSERVABLE"


def test_cluster_group_with_no_stream_at_all_makes_hma_not_observable():
    # Given the cluster log group exists but holds nothing
    w = HyperPodWorld(gpu_nodes=1)
    gpu = w.gpu[0]

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), gpu.instance_id)

    # Then Not observable with the agent check as the action
    assert n.xid_status == "Not observable"
    (row,) = hma_rows(n)
    assert "sagemaker-health-monitoring-agent.service" in row.note


def test_pending_gpu_node_without_hma_stream_is_not_observable_not_clean():
    # Given a HyperPod GPU node still Pending (the agent has never run on it) beside a Running one, no HMA stream for
    # either, and ClusterMetrics/slurm live in every hour
    w = HyperPodWorld(gpu_nodes=2, statuses=["Running", "Pending"])
    running, pending = w.gpu
    w.cluster_metrics(at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then only the Running node reads "No HMA detections"; the Pending node's missing stream proves nothing
    assert node_of(result, running.instance_id).xid_status == "No HMA detections"
    n = node_of(result, pending.instance_id)
    assert n.xid_status == "Not observable"
    (row,) = hma_rows(n)
    assert row.status == "Not observable" and "Pending" in (row.note or "")


def test_node_with_hma_stream_is_measured_and_the_stream_named_exactly():
    # Given one GPU node with an HMA detection stream, one without, and a live cluster group
    w = HyperPodWorld(gpu_nodes=2)
    flagged, quiet = w.gpu
    w.cluster_metrics(at(-10), at(12, 25))
    w.hma_detection(flagged, at(7, 3))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then the flagged node is Measured through SagemakerHealthMonitoringAgent/<group>/<instance-id>
    n = node_of(result, flagged.instance_id)
    assert n.xid_status == "Measured"
    (row,) = hma_rows(n)
    assert row.log_stream == f"SagemakerHealthMonitoringAgent/gpu-workers/{flagged.instance_id}"
    assert row.log_group == f"/aws/sagemaker/Clusters/{w.cluster}/{w.cluster_id}"
    assert row.status == "Measured"
    assert [e.code for e in n.gpu_errors] == [31]
    # and the other GPU node still reads No HMA detections
    assert node_of(result, quiet.instance_id).xid_status == "No HMA detections"


def test_controller_without_gpu_gets_no_hma_row():
    # Given a live cluster group; the controller is an m5 (no GPU)
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-10), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then HMA status is not claimed for the controller
    assert hma_rows(node_of(result, w.controller.instance_id)) == []
    assert hma_rows(node_of(result, w.gpu[0].instance_id)) != []


def _stream_last_heard_at_11_58(now: str) -> tuple[PClusterWorld, str]:
    """A stream logging every ten minutes whose last line is 11:58 (nothing yet in the 12:00 hour), audited at `now`."""
    w = PClusterWorld(n_compute=1, now=now)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(11, 50))
    w.stream(w.group, stream, events=[(at(11, 58), f"{node.hostname} systemd[1]: tick")])
    return w, node.instance_id


def test_a_current_hour_younger_than_the_grace_without_a_line_is_neither_live_nor_empty():
    # Given an hourly audit five minutes past the hour, of a stream whose last line is 11:58
    w, iid = _stream_last_heard_at_11_58(at(12, 5))

    # When audited to now
    (row,) = kernel_rows(node_of(w.audit(w.cluster, since=at(9)), iid))

    # Then five minutes of the hour are too soon to call it empty: not listed, not counted live, the node Measured
    assert row.empty_hours == []
    assert row.live_hours == 4  # 08, 09, 10, 11
    assert row.status == "Measured"


def test_a_current_hour_past_the_grace_without_a_line_is_listed_empty():
    # Given the same stream audited at 12:20: twenty minutes of the hour passed with no line
    w, iid = _stream_last_heard_at_11_58(at(12, 20))

    (row,) = kernel_rows(node_of(w.audit(w.cluster, since=at(9)), iid))

    # Then the hour is listed empty, possibly late (RULES §4: live only if it already holds a line)
    assert iso_list(row.empty_hours) == hours(12)
    assert "possibly late" in (row.note or "")
    assert row.status == "Not observable"


def test_node_whose_own_hma_stream_wrote_in_the_padded_window_is_measured_when_the_cluster_group_has_a_gap():
    # Given a cluster log group whose ClusterMetrics stream stopped before the window (HMA absence proves nothing
    # there), and one GPU node whose own HMA stream wrote a detection inside the window
    w = HyperPodWorld(gpu_nodes=2)
    flagged, quiet = w.gpu
    w.cluster_metrics(at(-10), at(4))
    w.hma_detection(flagged, at(8, 3))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then RULES §4: a node's own HMA stream with a line inside the padded window is live (the agent ran on that
    # node then), so that node's detections are Measured through the stream, named exactly
    n = node_of(result, flagged.instance_id)
    (row,) = hma_rows(n)
    assert (row.log_stream, row.status) == (f"SagemakerHealthMonitoringAgent/gpu-workers/{flagged.instance_id}",
                                           "Measured")
    assert n.xid_status == "Measured"
    assert [e.code for e in n.gpu_errors] == [31]
    # while the node without a stream is still Not observable: the cluster group's gap leaves its absence unproven
    other = node_of(result, quiet.instance_id)
    assert other.xid_status == "Not observable"
    assert "sagemaker-health-monitoring-agent.service" in (hma_rows(other)[0].note or "")


def test_node_whose_own_hma_stream_wrote_only_before_the_padded_window_stays_not_observable_on_a_gap():
    # Given the same gap, and a node whose HMA stream's only detection is days before the window
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-10), at(4))
    w.hma_detection(w.gpu[0], at(-30))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), w.gpu[0].instance_id)

    # Then nothing shows the agent ran on the node in the window: Not observable
    assert n.xid_status == "Not observable"
    assert hma_rows(n)[0].status == "Not observable"


def test_stream_without_kernel_lines_that_went_silent_lists_its_empty_hours():
    # Given a node whose only stream never held a `kernel:` line and stopped writing at 07:00
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.other_log(node, "slurmd", at(-10), at(7))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then RULES §4 "every empty hour is listed" holds for this row too: (a) is no, whatever (b) says
    n = node_of(result, node.instance_id)
    (row,) = kernel_rows(n)
    assert (row.log_stream, row.status, row.kernel_lines_ever) == (stream, "Not observable", 0)
    assert iso_list(row.empty_hours) == hours(7, 8, 9, 10)
    assert row.live_hours == 2  # 05, 06
    assert n.xid_status == "Not observable"
    # and the report does not call the stream live across the window
    line = next(ln for ln in result.report_markdown.splitlines() if stream in ln and ln.startswith("|"))
    assert "| yes |" not in line and "4 empty hour(s)" in line


def _coverage_line(result, instance_id, stream_or_group):
    return next(ln for ln in result.report_markdown.splitlines()
                if ln.startswith(f"| `{instance_id}`") and f"`{stream_or_group}`" in ln)


def test_the_report_never_calls_a_row_live_when_liveness_was_not_tested():
    # Given one GPU node with no stream at all, and one whose only stream (no `kernel:` line ever) has a hole inside
    # the window that its per-stream summary alone cannot place (lines at 05–06 and 09–10, none at 07–08)
    w = PClusterWorld(n_compute=2)
    blind, holed = w.compute
    stream = w.other_log(holed, "slurmd", at(-10), at(7))
    w.other_log(holed, "slurmd", at(9), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then both are Not observable (RULES §4 table), and the report's "Live across window" cell claims liveness for
    # neither: no stream was tested for the first, and which hours of the second were empty was not read
    for node in (blind, holed):
        assert node_of(result, node.instance_id).xid_status == "Not observable"
    assert "| yes |" not in _coverage_line(result, blind.instance_id, "(none)")
    assert "| yes |" not in _coverage_line(result, holed.instance_id, stream)
    assert "not proven" in _coverage_line(result, holed.instance_id, stream)


def test_a_node_whose_stream_wrote_only_before_the_window_is_not_said_to_have_no_stream():
    # Given a node whose only stream (no `kernel:` line ever) last wrote a day before the window
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    w.other_log(node, "slurmd", at(-40), at(-20))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), node.instance_id)

    # Then it is Not observable; RULES §4: the window read found nothing and (b), the control, found nothing either,
    # so the result says the query may be suspect, names the ranges read, and the check on the node, never claiming
    # that no stream names the node (a stream that wrote only outside both ranges is not seen by either)
    assert n.xid_status == "Not observable"
    (row,) = kernel_rows(n)
    note = row.note or ""
    assert "no stream names this node" not in note
    assert w.group in note and "suspect" in note and COLLECT in note
    assert "2026-10-01T05:00:00Z" in note  # the padded window's start: the range the window read covered


def test_hma_not_observable_asks_to_confirm_the_agent_runs_in_the_actions():
    # Given a HyperPod cluster log group whose only other stream stopped before the window, and no HMA stream
    w = HyperPodWorld(gpu_nodes=1)
    gpu = w.gpu[0]
    w.cluster_metrics(at(-10), at(4))

    # When audited
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)

    # Then RULES §4: HMA status is Not observable, and the action on that node is to confirm the agent runs there
    assert node_of(result, gpu.instance_id).xid_status == "Not observable"
    (action,) = [a for a in result.actions if gpu.instance_id in a]
    assert "sagemaker-health-monitoring-agent.service" in action
    assert "sagemaker-health-monitoring-agent.service" in result.report_markdown.split("## Recommended operator")[1]


def test_cluster_group_silent_through_the_current_hour_past_the_grace_does_not_prove_hma_absence():
    # Given a window running to now (12:30) and a cluster log group whose ClusterMetrics stream last wrote at 11:55:
    # the current hour, half an hour old, holds no line
    w = HyperPodWorld(gpu_nodes=1)
    gpu = w.gpu[0]
    w.cluster_metrics(at(-10), at(11, 56))

    # When audited
    n = node_of(w.audit(w.cluster, since=at(6)), gpu.instance_id)

    # Then RULES §4: the partial hour counts as live only if it already holds a line, as for a kernel stream; the
    # group is not live in every hour, so HMA absence proves nothing: Not observable, the hour named
    assert n.xid_status == "Not observable"
    (row,) = hma_rows(n)
    assert row.status == "Not observable" and "2026-10-01T12:00:00Z" in (row.note or "")


def test_cluster_group_with_a_line_in_the_current_hour_still_proves_hma_absence():
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-10), at(12, 25))
    assert node_of(w.audit(w.cluster, since=at(6)), w.gpu[0].instance_id).xid_status == "No HMA detections"


def test_the_report_names_every_empty_hour_of_a_long_gap():
    # Given a window 00:00–10:00 (padded 23:00–11:00) and a kernel stream silent from 01:00 to 09:00, live again after
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(1))
    w.lines(w.group, stream, at(9), at(12, 25))

    # When audited
    result = w.audit(w.cluster, since=at(0), until=UNTIL)

    # Then RULES §4 "every empty hour is listed": the JSON lists the eight, and the report's row names the gap's
    # bounds so no hour of it is left unsaid (not the first six and a count)
    (row,) = kernel_rows(node_of(result, node.instance_id))
    assert iso_list(row.empty_hours) == hours(1, 2, 3, 4, 5, 6, 7, 8)
    line = _coverage_line(result, node.instance_id, stream)
    assert "8 empty hour(s)" in line and "2026-10-01T01h" in line and "2026-10-01T08h" in line
    assert "more)" not in line


def test_a_node_launched_after_the_padded_window_is_not_measured_on_no_hour():
    # Given a window 06:00–10:00 (padded to 11:00) and a node launched at 11:40, its kernel stream live since
    w = PClusterWorld(n_compute=1)
    late = w.add_instance(launch=at(11, 40))
    w.healthy(w.compute[0], at(-10), at(12, 25))
    stream = w.healthy(late, at(11, 40), at(12, 25))

    # When audited
    n = node_of(w.audit(w.cluster, since=SINCE, until=UNTIL), late.instance_id)

    # Then no hour of the window was proven live for it: RULES §4's Measured (a real zero in the window) does not
    # hold on no hour read (fail closed), and the row says why
    (row,) = kernel_rows(n)
    assert row.log_stream == stream and row.live_hours == 0
    assert row.status == "Not observable" and n.xid_status == "Not observable"
    assert "launched 2026-10-01T11:40:00Z, after the padded window ends" in (row.note or "")


def test_cluster_group_hours_before_the_node_launched_do_not_count_against_hma_absence():
    # Given a HyperPod cluster created inside the padded window: its GPU node launched at 06:31 and ClusterMetrics
    # writes from 06:40 on, so the padding hour 05:00 (before either existed) holds no line
    w = HyperPodWorld(gpu_nodes=1, launch=at(6, 31))
    gpu = w.gpu[0]
    w.cluster_metrics(at(6, 40), at(12, 25))

    # When audited from 06:00
    n = node_of(w.audit(w.cluster, since=at(6)), gpu.instance_id)

    # Then the node is held to the hours since its launch (decision 3), as its kernel streams are: the group was live
    # in each of them, so the absence of its HMA stream reads "No HMA detections", the launch hour named
    (row,) = hma_rows(n)
    assert row.status == "No HMA detections" and "from the node's launch hour 2026-10-01T06:00:00Z" in (row.note or "")
