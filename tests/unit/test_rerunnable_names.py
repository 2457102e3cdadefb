"""Names a reader can re-run (issue #21 item 7): capability and group counts carry the API's own field names."""

from __future__ import annotations

from helpers.worlds import HyperPodWorld, PClusterWorld, at, node_of


def test_efa_capability_names_the_describe_instance_types_fields() -> None:
    w = PClusterWorld("names", n_compute=1)  # p5.48xlarge: EfaSupported, MaximumEfaInterfaces 32
    w.healthy(w.compute[0], at(-2), at(13))
    n = node_of(w.audit("names", since=at(8), until=at(11)), w.compute[0].instance_id)
    assert "MaximumEfaInterfaces 32" in (n.efa or "")


def test_group_counts_name_current_count_and_target_count() -> None:
    w = HyperPodWorld(gpu_nodes=2)
    w.cluster_metrics(at(0), at(12, 30))
    state = "\n".join(w.audit("hp-slurm", mode="incident", since=at(6)).cluster_state)
    assert "group `gpu-workers` (g5.xlarge, compute): CurrentCount 2, TargetCount 2" in state
