"""Control-plane liveness (#15 item 3), from RULES §0.2, §0.4, §0.5 and §4: the logs that explain a node's
disappearance — ParallelCluster's head-node `clustermgtd`, `slurm_resume`, `slurmctld`; the HyperPod cluster log
group — are binned per hour like kernel streams. A stream silent across the window is a visibility gap naming the
group, the exact stream and its last event; when it is the log that would decide the cause, the root cause is
`Not observable` naming it. Never "no events" from a dead log."""

from __future__ import annotations

from gpuaudit.model.result import Result
from tests.helpers.worlds import HyperPodWorld, PClusterWorld, at, calls

SINCE, UNTIL = at(6), at(10)  # padded window 05:00–11:00 on the test day


def _head_logs(w: PClusterWorld, *, clustermgtd_until: str, logs: tuple[str, ...] = ("clustermgtd", "slurmctld",
                                                                                       "slurm_resume")) -> None:
    w.healthy(w.head, at(-720), at(12, 25))
    for log in logs:
        w.other_log(w.head, log, at(-720), clustermgtd_until if log == "clustermgtd" else at(12, 25), every_s=300)


def _gaps(result: Result, word: str) -> list[str]:
    return [g for g in result.visibility_gaps if word in g]


def test_clustermgtd_silent_for_weeks_names_group_stream_and_last_event_and_decides_the_vanished_node() -> None:
    w = PClusterWorld(n_compute=2, launch=at(-720))
    kept, gone = w.compute
    _head_logs(w, clustermgtd_until=at(-500))  # the head node's clustermgtd stopped ~3 weeks before the window
    w.healthy(kept, at(-720), at(12, 25))
    w.healthy(gone, at(-720), at(7, 40))  # the node's lines stop inside the window ...
    w.raw["ec2"]["instances"] = [i for i in w.raw["ec2"]["instances"] if i["InstanceId"] != gone.instance_id]
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)  # ... and EC2 has forgotten it

    stream = w.stream_name(w.head, "clustermgtd")
    (gap,) = _gaps(result, "Control-plane log silent")
    assert f"`{w.group} / {stream}`" in gap and w.head.instance_id in gap
    last_line = at(-500, -5)  # the last 5-minute line before the stop
    assert f"its last event was {last_line}" in gap and "DescribeLogStreams" in gap
    assert "21 day(s) 1 h before the padded window" in gap  # 09-10T03:55 to the padded start 10-01T05:00
    assert result.headline.startswith("Root cause: Not observable")
    assert stream in result.headline and gone.instance_id in result.headline
    assert any(stream in a for a in result.actions)
    # the other control-plane streams wrote every hour: no gap for them
    assert not any(w.stream_name(w.head, "slurmctld") in g for g in result.visibility_gaps)


def test_live_control_plane_costs_no_extra_call_and_leaves_no_gap() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-720))
    _head_logs(w, clustermgtd_until=at(12, 25))
    w.healthy(w.compute[0], at(-720), at(12, 25))
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    assert not _gaps(result, "Control-plane log")
    assert calls(result, "logs", "DescribeLogStreams") == 0
    assert "clustermgtd" not in result.headline  # nothing vanished and the log is live: it decides nothing here


def test_empty_hours_of_a_control_plane_stream_are_each_listed() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-720))
    _head_logs(w, clustermgtd_until=at(12, 25), logs=("slurmctld", "slurm_resume"))
    w.other_log(w.head, "clustermgtd", at(-720), at(7), every_s=300)
    w.other_log(w.head, "clustermgtd", at(9, 30), at(12, 25), every_s=300)  # nothing from 07:00 to 09:30
    w.healthy(w.compute[0], at(-720), at(12, 25))
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    (gap,) = _gaps(result, "Control-plane log `")
    assert w.stream_name(w.head, "clustermgtd") in gap
    assert "no line in 2 hour(s)" in gap and f"{at(7)}, {at(8)}" in gap
    assert calls(result, "logs", "DescribeLogStreams") == 0  # the window's bins answered


def test_a_control_plane_stream_never_shipped_is_named_missing() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-720))
    _head_logs(w, clustermgtd_until=at(12, 25), logs=("slurmctld", "slurm_resume"))  # no clustermgtd stream at all
    w.healthy(w.compute[0], at(-720), at(12, 25))
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    (gap,) = _gaps(result, "Control-plane log missing")
    assert f"`{w.group} / {w.stream_name(w.head, 'clustermgtd')}`" in gap


def test_a_failed_lookup_is_a_named_gap_not_a_silent_claim() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-720))
    _head_logs(w, clustermgtd_until=at(-500))
    w.healthy(w.compute[0], at(-720), at(12, 25))
    w.fault("logs", "DescribeLogStreams", "AccessDeniedException")
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    assert not _gaps(result, "Control-plane log silent")
    assert any("DescribeLogStreams" in g and w.stream_name(w.head, "clustermgtd") in g and "AccessDenied" in g
               for g in result.visibility_gaps)


def test_hyperpod_cluster_log_silent_decides_a_pending_node_when_cluster_events_are_unavailable() -> None:
    w = HyperPodWorld(gpu_nodes=2, statuses=["Running", "Pending"])
    w.cluster_metrics(at(-720), at(-140))  # ClusterMetrics/slurm stopped writing six days before the window
    result = w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)
    (gap,) = _gaps(result, "Control-plane log silent")
    assert f"`{w.group} / ClusterMetrics/slurm`" in gap and "its last event was" in gap
    assert result.headline.startswith("Root cause: Not observable")
    assert "ClusterMetrics/slurm" in result.headline and w.gpu[1].instance_id in result.headline


def test_hyperpod_cluster_log_live_needs_no_lookup() -> None:
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-720), at(12, 25))
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    assert not _gaps(result, "Control-plane log")
    assert calls(result, "logs", "DescribeLogStreams") == 1  # the HMA stream listing only (RULES §4)


def test_hyperpod_cluster_log_hours_before_the_cluster_existed_are_not_expected() -> None:
    # Given a HyperPod cluster created at 07:30 (DescribeCluster CreationTime), inside the padded window 05:00–11:00,
    # whose nodes launched and cluster log wrote from then on: the hours before it existed are not expected (RULES §4)
    w = HyperPodWorld(gpu_nodes=1, launch=at(7, 30))
    w.described["CreationTime"] = at(7, 30)
    w.cluster_metrics(at(7, 40), at(12, 25))
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    # Then no control-plane gap is listed for 05:00–06:00
    assert not _gaps(result, "Control-plane log")


def test_hyperpod_cluster_log_empty_hours_after_creation_are_still_listed() -> None:
    w = HyperPodWorld(gpu_nodes=1, launch=at(6, 30))
    w.described["CreationTime"] = at(6, 30)
    w.cluster_metrics(at(6, 40), at(7, 50))
    w.cluster_metrics(at(9, 10), at(12, 25))  # nothing in 08:00
    result = w.audit(w.cluster, since=SINCE, until=UNTIL)
    (gap,) = _gaps(result, "Control-plane log `")
    assert "no line in 1 hour(s)" in gap and at(8) in gap and at(5) not in gap
