"""RULES §2's NVSwitch table, row by row: what each type is treated as, and whether Fabric Manager is expected (an
unknown type is unverified, never inferred from the GPU name)."""

from __future__ import annotations

import pytest

from gpuaudit.domain.capability import nvswitch_class


@pytest.mark.parametrize(("instance_type", "gpus", "said", "fabric_manager"), [
    ("p4d.24xlarge", 8, "NVSwitch (600 GB/s)", True),
    ("p4de.24xlarge", 8, "NVSwitch (600 GB/s)", True),
    ("p5.48xlarge", 8, "NVSwitch (900 GB/s)", True),
    ("p5e.48xlarge", 8, "NVSwitch (900 GB/s)", True),
    ("p5en.48xlarge", 8, "NVSwitch (900 GB/s)", True),
    ("p6-b200.48xlarge", 8, "NVSwitch (1800 GB/s", True),
    ("p6-b300.48xlarge", 8, "NVSwitch (1800 GB/s", True),
    ("p6e-gb200.36xlarge", 4, "P6e domain spans the UltraServer", True),
    ("p5.4xlarge", 1, "no intra-node GPU traffic", False),
    ("g7e.48xlarge", 8, "PCIe peer to peer, no NVSwitch", False),
    ("g5.48xlarge", 8, "NVSwitch presence unverified", False),
    ("g4dn.metal", 8, "NVSwitch presence unverified", False),
    ("g6e.48xlarge", 8, "NVSwitch presence unverified", False),
    ("p9.96xlarge", 8, "unverified", False),  # not in the table: unverified, whatever its GPUs
])
def test_each_row_of_the_nvswitch_table(instance_type: str, gpus: int, said: str, fabric_manager: bool) -> None:
    wording, expected = nvswitch_class(instance_type, gpus)
    assert said in wording and expected is fabric_manager


def test_the_table_holds_when_describe_instance_types_cannot_be_read() -> None:
    # Given a ParallelCluster p5.48xlarge node whose Fabric Manager start line is in its kernel stream, in an account
    # where DescribeInstanceTypes is denied
    from tests.helpers.worlds import PClusterWorld, at, node_of

    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-10), at(12, 25))
    w.stream(w.group, stream, events=[(at(7), f'{node.hostname} systemd[1]: Started "Nvidia Fabric Manager".')])
    w.fault("ec2", "DescribeInstanceTypes", "AccessDeniedException")

    # When audited
    n = node_of(w.audit(w.cluster, mode="incident", since=at(6), until=at(10)), node.instance_id)

    # Then RULES §2: NVSwitch is in no API, the table decides by type: NVSwitch (900 GB/s), Fabric Manager expected
    # and read from the line (never "Not applicable" for want of the API's GPU count)
    assert n.nvswitch == "NVSwitch (900 GB/s)"
    assert n.signals.fabric_manager == "Observable"
