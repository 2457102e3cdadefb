"""ParallelCluster bootstrap failures and protected mode (#15 item 4), from RULES §7 and §8 ('Frequent non-GPU
causes'): when the head node's clustermgtd says nodes failed to bootstrap, that is the stated cause — a
configuration or lifecycle failure, with the queue named in the headline — and past the threshold the queue stops
launching (protected mode). A node is never replaced for it; LEAVE ALONE only on proven coverage."""

from __future__ import annotations

from gpuaudit.model.result import Result
from tests.helpers.worlds import Node, PClusterWorld, at, node_of

SINCE, UNTIL = at(6), at(10)
LOG = "2026-10-01 07:{m:02d}:09,414 - [slurm_plugin.clustermgtd:{fn}] - {lvl} - {text}"


def _ip(node: Node) -> str:
    return node.hostname.removeprefix("ip-").replace("-", ".")


def _world(*, protected: bool, failed_covered: bool = True) -> tuple[PClusterWorld, Node, Node]:
    w = PClusterWorld(n_compute=2, launch=at(-96))
    failed, fine = w.compute
    if failed_covered:
        w.healthy(failed, at(-96), at(12, 25))
    w.healthy(fine, at(-96), at(12, 25))
    w.other_log(w.head, "slurmctld", at(-96), at(12, 25))
    w.other_log(w.head, "slurm_resume", at(-96), at(12, 25))
    stream = w.other_log(w.head, "clustermgtd", at(-96), at(12, 25), every_s=300)
    lines = [
        ("_handle_bootstrap_failure_nodes", "WARNING", "Node bootstrap error: Node gpu-st-p5-1("
         f"{_ip(failed)}) is in power up state without valid backing instance, node state: DOWN+CLOUD"),
        ("_handle_bootstrap_failure_nodes", "WARNING",
         f"Found the following bootstrap failure nodes: (x1) ['gpu-st-p5-1({_ip(failed)})']"),
        ("_handle_protected_mode_process", "INFO", "Partitions bootstrap failure count: {'gpu': {'p5': 10}}, cluster "
         "will be set into protected mode if protected failure count reaches threshold 10"),
    ]
    if protected:
        lines += [("_enter_protected_mode", "INFO", "Placing bootstrap failure partitions to INACTIVE: ['gpu']"),
                  ("_enter_protected_mode", "WARNING", "Setting cluster into protected mode due to failures "
                   "detected in node provisioning. Please investigate the issue and then use 'pcluster "
                   "update-compute-fleet --status START_REQUESTED' command to re-enable the fleet.")]
    w.stream(w.group, stream, events=[(at(7, i), LOG.format(m=i, fn=fn, lvl=lvl, text=text))
                                      for i, (fn, lvl, text) in enumerate(lines)])
    return w, failed, fine


def _incident(w: PClusterWorld) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL)


def test_clustermgtd_bootstrap_failure_and_protected_mode_are_the_stated_cause_with_the_queue() -> None:
    w, failed, fine = _world(protected=True)
    result = _incident(w)
    assert result.headline.startswith("Root cause (Proven): ParallelCluster node bootstrap failure on queue `gpu`")
    assert "protected mode" in result.headline and "`gpu` set INACTIVE" in result.headline
    assert "bootstrap failure count `gpu` 10 of threshold 10" in result.headline
    assert w.stream_name(w.head, "clustermgtd") in result.headline  # the evidence named by its exact stream
    n = node_of(result, failed.instance_id)
    assert n.verdict == "LEAVE ALONE" and "bootstrap failure node" in (n.verdict_evidence or "")
    assert node_of(result, fine.instance_id).verdict is None  # the other node is not named by clustermgtd
    assert any("START_REQUESTED" in a and w.cluster in a for a in result.actions)
    assert not any(a.startswith("Replace ") for a in result.actions)


def test_bootstrap_failure_before_the_threshold_names_the_queue_without_claiming_protected_mode() -> None:
    w, _, _ = _world(protected=False)
    result = _incident(w)
    assert "bootstrap failure on queue `gpu`" in result.headline
    assert "protected mode" not in result.headline
    assert not any("START_REQUESTED" in a for a in result.actions)


def test_a_bootstrap_failure_node_without_proven_coverage_is_never_replace_nor_leave_alone() -> None:
    w, failed, _ = _world(protected=True, failed_covered=False)
    result = _incident(w)
    n = node_of(result, failed.instance_id)
    assert n.verdict not in ("REPLACE", "LEAVE ALONE")
    assert "bootstrap failure node" in (n.verdict_evidence or "")


def test_only_clustermgtd_states_it_a_compute_stream_mentioning_bootstrap_does_not() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-96))
    (node,) = w.compute
    w.healthy(node, at(-96), at(12, 25))
    for log in ("clustermgtd", "slurmctld", "slurm_resume"):
        w.other_log(w.head, log, at(-96), at(12, 25))
    w.stream(w.group, w.stream_name(node, "cloud-init-output"),
             events=[(at(7), "Found the following bootstrap failure nodes: (x1) ['gpu-st-p5-1(10.9.9.9)']")])
    result = _incident(w)
    assert "bootstrap failure on queue" not in result.headline


def test_the_older_count_format_names_its_queue() -> None:
    w = PClusterWorld(n_compute=1, launch=at(-96))
    w.healthy(w.compute[0], at(-96), at(12, 25))
    stream = w.other_log(w.head, "clustermgtd", at(-96), at(12, 25))
    w.stream(w.group, stream, events=[(at(7), "[slurm_plugin.clustermgtd:_handle_protected_mode_process] - INFO - "
                                              "Partitions bootstrap failure count: {'queue1': 2}, cluster will be set "
                                              "into protected mode if protected failure count reach threshold 10")])
    result = _incident(w)
    assert "bootstrap failure on queue `queue1`" in result.headline
    assert "`queue1` 2 of threshold 10" in result.headline
