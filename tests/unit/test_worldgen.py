"""The world generator (gpuaudit.devtools.worldgen): deterministic for a seed, loadable, and its knobs
(silent fraction, Xid rate) show up exactly in what an audit of the world says."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.collectors.aws import Aws
from gpuaudit.devtools import worldgen
from gpuaudit.domain.streams import PCLUSTER_STREAM, is_hma_group, is_pcluster_group
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import World, load_world, parse_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Result
from gpuaudit.pipeline import run_audit

XID_LINE = re.compile(r"NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): (\d+), pid=")
BANNER = "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64 570.133.20"


def spec(**overrides: Any) -> worldgen.WorldSpec:
    base: dict[str, Any] = {"kind": "parallelcluster", "nodes": 8, "days": 2.0, "seed": 7, "xid_rate": 0.5}
    return worldgen.WorldSpec(**{**base, **overrides})


def messages(raw: dict[str, Any]) -> list[str]:
    return [e[1] for g in raw["logs"]["groups"] for s in g["streams"] for e in s.get("events", [])] + \
        [p["message"] for g in raw["logs"]["groups"] for s in g["streams"] for p in s.get("periodic", [])]


def audit(raw: dict[str, Any], s: worldgen.WorldSpec) -> Result:
    world: World = parse_world(json.loads(worldgen.dumps(raw)))
    backend = WorldBackend(world)
    aws = Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
              monotonic=backend.monotonic)
    return run_audit(aws, AuditRequest(cluster=s.cluster_name, since=world.now - timedelta(days=s.days)))


# -- determinism ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", worldgen.KINDS)
def test_same_seed_gives_the_same_bytes_and_another_seed_does_not(kind: str) -> None:
    # Given one spec generated twice and once with another seed
    first = worldgen.dumps(worldgen.generate(spec(kind=kind, silent_fraction=0.25)))
    again = worldgen.dumps(worldgen.generate(spec(kind=kind, silent_fraction=0.25)))
    other = worldgen.dumps(worldgen.generate(spec(kind=kind, silent_fraction=0.25, seed=8)))
    # Then the same seed is byte-identical, another seed is not
    assert first == again
    assert first != other


def test_written_file_is_byte_identical_for_the_same_seed(tmp_path: Path) -> None:
    a, b = tmp_path / "a.world.json", tmp_path / "b.world.json"
    worldgen.write(worldgen.generate(spec()), str(a))
    worldgen.write(worldgen.generate(spec()), str(b))
    assert a.read_bytes() == b.read_bytes()


# -- loads, with the shapes the auditor looks for -----------------------------------------------
@pytest.mark.parametrize("kind", worldgen.KINDS)
def test_generated_world_loads_with_parse_world(kind: str) -> None:
    raw = worldgen.generate(spec(kind=kind, nodes=12))
    world = parse_world(raw)
    assert world.now.isoformat().startswith(worldgen.NOW[:19])
    assert len(world.log_groups) == 2
    kernel = world.log_groups[f"/aws/{worldgen.PIPELINE}/{spec(kind=kind).cluster_name}/kernel"]
    assert len(kernel.streams) == 13  # every node, head node / controller included
    assert all(s.count > 0 for s in kernel.streams.values())


def test_parallelcluster_shape_head_node_compute_nodes_and_streams() -> None:
    s = spec(nodes=6)
    raw = worldgen.generate(s)
    instances = raw["ec2"]["instances"]
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in instances]
    assert all(t["parallelcluster:cluster-name"] == s.cluster_name for t in tags)
    assert Counter(t["parallelcluster:node-type"] for t in tags) == {"HeadNode": 1, "Compute": 6}
    compute = [i for i, t in zip(instances, tags, strict=True) if t["parallelcluster:node-type"] == "Compute"]
    assert {i["InstanceType"] for i in compute} == {"p5.48xlarge"}
    # each p5 with 32 EFA interfaces, as DescribeInstances serves them (the world names one template per type)
    served = WorldBackend(parse_world(raw)).session().client("ec2").describe_instances()["Reservations"]
    interfaces = {i["InstanceId"]: i["NetworkInterfaces"] for r in served for i in r["Instances"]}
    assert all(sum(n["InterfaceType"] in ("efa", "efa-only") for n in interfaces[i["InstanceId"]]) == 32
               for i in compute)
    group = next(g for g in raw["logs"]["groups"] if is_pcluster_group(g["logGroupName"], s.cluster_name))
    assert re.fullmatch(rf"/aws/parallelcluster/{s.cluster_name}-\d{{12}}", group["logGroupName"])
    logs = Counter(PCLUSTER_STREAM.match(st["logStreamName"])["log"] for st in group["streams"])  # type: ignore[index]
    assert logs == {"system-messages": 7, "slurmd": 6, "computemgtd": 6, "slurmctld": 1, "clustermgtd": 1}
    assert all(p["every_s"] == 300 for st in group["streams"] for p in st.get("periodic", []))


def test_instance_type_profile_is_p5_with_8_h100_and_32_efa() -> None:
    raw = worldgen.generate(spec())
    p5 = next(t for t in raw["ec2"]["instance_types"] if t["InstanceType"] == "p5.48xlarge")
    assert p5["GpuInfo"]["Gpus"][0]["Name"] == "H100" and p5["GpuInfo"]["Gpus"][0]["Count"] == 8
    assert p5["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"] == 32


def test_hyperpod_shape_nodes_cluster_group_and_hma_only_for_detections() -> None:
    s = spec(kind="hyperpod", nodes=10, xid_rate=2.0)
    raw = worldgen.generate(s)
    cluster = raw["sagemaker"]["clusters"][0]
    assert cluster["ClusterName"] == s.cluster_name and len(cluster["Nodes"]) == 11
    group = next(g for g in raw["logs"]["groups"] if is_hma_group(g["logGroupName"], s.cluster_name))
    names = [st["logStreamName"] for st in group["streams"]]
    assert "ClusterMetrics/slurm" in names
    assert sum(n.startswith("LifecycleConfig/") for n in names) == 11
    hma = [st for st in group["streams"] if st["logStreamName"].startswith("SagemakerHealthMonitoringAgent/")]
    assert 0 < len(hma) <= 10
    for st in hma:
        for _, line in st["events"]:
            event = json.loads(line)
            assert event["HealthMonitoringAgentDetectionEvent"] == "HealthEvent"


def test_every_node_boots_with_kernel_lines_and_every_gpu_node_with_the_driver_banner() -> None:
    s = spec(nodes=9)
    raw = worldgen.generate(s)
    kernel = next(g for g in raw["logs"]["groups"] if g["logGroupName"].endswith("/kernel"))
    for stream in kernel["streams"]:
        assert any(" kernel: " in e[1] for e in stream["events"])
    assert sum(BANNER in m for st in kernel["streams"] for _, m in st["events"]) == 9


# -- the knobs ------------------------------------------------------------------------------------
def test_xid_rate_zero_gives_no_xid_lines() -> None:
    for kind in worldgen.KINDS:
        raw = worldgen.generate(spec(kind=kind, nodes=20, xid_rate=0.0))
        assert not [m for m in messages(raw) if "Xid" in m]
        assert worldgen.describe(raw)["xid_lines"] == 0


def test_xid_lines_use_the_kernel_format_and_the_code_mix() -> None:
    raw = worldgen.generate(spec(nodes=40, days=3.0, xid_rate=2.0))
    codes = [int(m.group(1)) for line in messages(raw) if (m := XID_LINE.search(line))]
    assert len(codes) > 100
    assert set(codes) <= {c for c, _ in worldgen.XID_MIX}
    assert {31, 13, 79, 48, 63, 119} <= set(codes)


@pytest.mark.parametrize(("nodes", "fraction", "silent"), [(20, 0.25, 5), (12, 0.0, 0), (10, 1.0, 10)])
def test_silent_fraction_gives_that_many_not_observable_nodes(nodes: int, fraction: float, silent: int) -> None:
    # Given a ParallelCluster world where a fraction of nodes stop shipping kernel messages in the window
    s = spec(nodes=nodes, silent_fraction=fraction, xid_rate=0.0)
    assert s.silent_count == silent
    # When audited over the generated window
    result = audit(worldgen.generate(s), s)
    # Then exactly those nodes are Not observable, each with empty hours on its kernel streams
    statuses = Counter(n.xid_status for n in result.nodes)
    assert statuses["Not observable"] == silent
    assert statuses["Measured"] == nodes + 1 - silent  # the head node is never silenced
    for node in result.nodes:
        if node.xid_status == "Not observable":
            assert all(row.empty_hours for row in node.coverage)


def test_silent_hyperpod_nodes_lose_kernel_coverage() -> None:
    # HyperPod: HMA can still speak for a node, so count the kernel-source rows instead
    s = spec(kind="hyperpod", nodes=16, silent_fraction=0.25, xid_rate=0.0)
    result = audit(worldgen.generate(s), s)
    dead = [n for n in result.nodes
            if not any(r.status == "Measured" for r in n.coverage if r.source_kind == "kernel")]
    assert len(dead) == 4
    assert all(n.xid_status == "No HMA detections" for n in dead)


def test_bad_specs_are_refused() -> None:
    for bad in ({"kind": "slurm"}, {"nodes": 0}, {"silent_fraction": 1.5}, {"xid_rate": -1.0},
                {"instance_type": "p3.2xlarge"}, {"days": 0}):
        with pytest.raises(ValueError):
            spec(**bad)


# -- CLI ------------------------------------------------------------------------------------------
def test_cli_world_generate_writes_a_loadable_world(tmp_path: Path) -> None:
    out = tmp_path / "gen.world.json"
    result = CliRunner().invoke(app, ["world", "generate", "--kind", "hyperpod", "--nodes", "4", "--days", "1",
                                      "--silent-fraction", "0.5", "--xid-rate", "1", "--seed", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    world = load_world(out)
    assert len(world.data["sagemaker"]["clusters"][0]["Nodes"]) == 5
    again = tmp_path / "again.world.json"
    CliRunner().invoke(app, ["world", "generate", "--kind", "hyperpod", "--nodes", "4", "--days", "1",
                             "--silent-fraction", "0.5", "--xid-rate", "1", "--seed", "3", "--out", str(again)])
    assert out.read_bytes() == again.read_bytes()


def test_cli_world_generate_bad_kind_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["world", "generate", "--kind", "eks", "--nodes", "4",
                                      "--out", str(tmp_path / "x.json")])
    assert result.exit_code == 2
