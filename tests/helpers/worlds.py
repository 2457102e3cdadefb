"""Small worlds, built in the test from dicts, so each test states only what matters.

Every builder produces a raw world dict (WORLD-FORMAT.md) and hands it to the product's own
`parse_world`; the audit then runs against real boto3 clients through `WorldBackend`, exactly
as `gpuaudit audit --world` does (access.aws_for). The clock is frozen at `NOW`.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpuaudit.collectors.aws import Aws
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import FORMAT, World, parse_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import NodeResult, Result
from gpuaudit.model.timeutil import iso, parse_time
from gpuaudit.pipeline import run_audit

ACCOUNT = "111122223333"
REGION = "us-west-2"
DAY = "2026-10-01"
NOW = f"{DAY}T12:30:00Z"
PCLUSTER_TAG = "parallelcluster:cluster-name"
HMA_PREFIX = "SagemakerHealthMonitoringAgent/"

# DescribeInstanceTypes shapes, only the fields the auditor reads.
INSTANCE_TYPES: dict[str, dict[str, Any]] = {
    "p5.48xlarge": {"InstanceType": "p5.48xlarge",
                    "GpuInfo": {"Gpus": [{"Name": "H100", "Manufacturer": "NVIDIA", "Count": 8}]},
                    "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 32}}},
    "g5.xlarge": {"InstanceType": "g5.xlarge",
                  "GpuInfo": {"Gpus": [{"Name": "A10G", "Manufacturer": "NVIDIA", "Count": 1}]},
                  "NetworkInfo": {"EfaSupported": False}},
    "c5.2xlarge": {"InstanceType": "c5.2xlarge", "NetworkInfo": {"EfaSupported": False}},
    "m5.xlarge": {"InstanceType": "m5.xlarge", "NetworkInfo": {"EfaSupported": False}},
}

BOOT_KERNEL_LINE = "kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.133.20"
FILLER = "systemd[1]: Started sysstat-collect.service - system activity accounting tool."


def at(hour: int, minute: int = 0, second: int = 0, *, day: str = DAY) -> str:
    """ISO-8601 UTC on the test day; hours past 23 or below 0 roll over to the next/previous day."""
    base = parse_time(f"{day}T00:00:00Z")
    return iso(base + timedelta(hours=hour, minutes=minute, seconds=second))


def hours(*hour_numbers: int, day: str = DAY) -> list[str]:
    """Hour starts as the result JSON writes them."""
    return [at(h, day=day) for h in hour_numbers]


def ms(value: str) -> int:
    return int(parse_time(value).timestamp() * 1000)


@dataclass(frozen=True)
class Node:
    instance_id: str
    hostname: str
    instance_type: str
    group: str

    @property
    def private_dns(self) -> str:
        return f"{self.hostname}.{REGION}.compute.internal"


class WorldBuilder:
    """A raw world dict plus shorthands for log groups, streams, lines and faults."""

    def __init__(self, now: str = NOW) -> None:
        self.raw: dict[str, Any] = {"format": FORMAT, "now": now, "account_id": ACCOUNT, "region": REGION}
        self._ids = itertools.count(1)

    # -- sections -----------------------------------------------------------------------------
    def section(self, service: str, key: str) -> list[Any]:
        return self.raw.setdefault(service, {}).setdefault(key, [])  # type: ignore[no-any-return]

    def lustre(self, fs_id: str, cluster: str | None = None) -> None:
        """An FSx for Lustre file system (PERSISTENT_2, SSD) tagged to `cluster` as ParallelCluster tags it."""
        self.section("fsx", "file_systems").append({
            "FileSystemId": fs_id, "FileSystemType": "LUSTRE", "StorageType": "SSD",
            "LustreConfiguration": {"DeploymentType": "PERSISTENT_2"},
            "Tags": [{"Key": PCLUSTER_TAG, "Value": cluster or self.cluster}]})

    def fsx_metric(self, fs_id: str, name: str, datapoints: list[list[Any]], server: str = "FS-0") -> None:
        """An AWS/FSx metric of one file server of `fs_id`: [time, value] datapoints."""
        self.section("cloudwatch", "metrics").append({
            "Namespace": "AWS/FSx", "MetricName": name,
            "Dimensions": [{"Name": "FileSystemId", "Value": fs_id}, {"Name": "FileServer", "Value": server}],
            "Datapoints": datapoints})

    def capacity_reservation(self, reservation_id: str, instance_type: str, end: str, *, state: str = "expired",
                             reservation_type: str = "capacity-block", count: int = 2, **extra: Any) -> None:
        """A capacity reservation of this account (DescribeCapacityReservations' fields), from 72 h before the day."""
        self.section("ec2", "capacity_reservations").append({
            "CapacityReservationId": reservation_id, "InstanceType": instance_type, "State": state,
            "ReservationType": reservation_type, "StartDate": at(-72), "EndDate": end, "TotalInstanceCount": count,
            "AvailableInstanceCount": 0, "OwnerId": ACCOUNT, **extra})

    def instance_type(self, instance_type: str) -> None:
        known = {t["InstanceType"] for t in self.section("ec2", "instance_types")}
        if instance_type in INSTANCE_TYPES and instance_type not in known:
            self.section("ec2", "instance_types").append(copy.deepcopy(INSTANCE_TYPES[instance_type]))

    def next_node(self, instance_type: str, group: str) -> Node:
        n = next(self._ids)
        return Node(instance_id=f"i-0{n:016x}", hostname=f"ip-10-0-{n // 250}-{n % 250}",
                    instance_type=instance_type, group=group)

    def fault(self, service: str, operation: str, error: str, *, times: int | None = None,
              message: str | None = None) -> None:
        fault: dict[str, Any] = {"service": service, "operation": operation, "error": error}
        if times is not None:
            fault["times"] = times
        if message is not None:
            fault["message"] = message
        self.raw.setdefault("faults", []).append(fault)

    # -- logs ---------------------------------------------------------------------------------
    def log_group(self, name: str) -> str:
        groups = self.section("logs", "groups")
        if not any(g["logGroupName"] == name for g in groups):
            groups.append({"logGroupName": name, "streams": []})
        return name

    def stream(self, group: str, name: str, *, events: Iterable[tuple[str | int, str]] = (),
               periodic: Iterable[tuple[str, str, int, str]] = ()) -> str:
        """Add (or extend) a stream: explicit [time, message] events and (from, to, every_s, message) runs."""
        self.log_group(group)
        g = next(g for g in self.section("logs", "groups") if g["logGroupName"] == group)
        s = next((s for s in g["streams"] if s["logStreamName"] == name), None)
        if s is None:
            s = {"logStreamName": name, "events": [], "periodic": []}
            g["streams"].append(s)
        s["events"].extend([t, m] for t, m in events)
        s["periodic"].extend({"from": f, "to": t, "every_s": e, "message": m} for f, t, e, m in periodic)
        return name

    def lines(self, group: str, stream: str, start: str, end: str, every_s: int = 600,
              message: str = FILLER) -> str:
        """One line every `every_s` seconds in [start, end)."""
        return self.stream(group, stream, periodic=[(start, end, every_s, message)])

    def kernel_stream(self, group: str, stream: str, start: str, end: str, every_s: int = 600,
                      host: str = "host") -> str:
        """A stream carrying kernel messages: a boot `kernel:` NVRM banner at `start`, then steady lines."""
        self.stream(group, stream, events=[(start, f"{host} {BOOT_KERNEL_LINE}")])
        return self.lines(group, stream, start, end, every_s, f"{host} {FILLER}")

    # -- running ------------------------------------------------------------------------------
    def world(self) -> World:
        return parse_world(copy.deepcopy(self.raw))

    def aws(self) -> Aws:
        """Built like access.aws_for does for a world: real boto3 clients wired to the backend."""
        world = self.world()
        return aws_for(world)

    def audit(self, cluster: str, *, mode: str = "coverage", since: str | None = None,
              until: str | None = None, instance_ids: Iterable[str] = (), onset: str | None = None) -> Result:
        return audit(self.aws(), cluster, mode=mode, since=since, until=until, instance_ids=instance_ids,
                     onset=onset)


def aws_for(world: World) -> Aws:
    backend = WorldBackend(world)
    return Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
               monotonic=backend.monotonic)


def audit(aws: Aws, cluster: str, *, mode: str = "coverage", since: str | None = None, until: str | None = None,
          instance_ids: Iterable[str] = (), onset: str | None = None) -> Result:
    request = AuditRequest(cluster=cluster, mode=mode,  # type: ignore[arg-type]
                           since=parse_time(since) if since else None, until=parse_time(until) if until else None,
                           instance_ids=list(instance_ids), onset=parse_time(onset) if onset else None)
    return run_audit(aws, request)


class PClusterWorld(WorldBuilder):
    """A ParallelCluster 3 cluster: a head node, N GPU compute nodes, and the cluster's log group
    `/aws/parallelcluster/<cluster>-<12-digit timestamp>` (created empty: tests add the streams)."""

    def __init__(self, cluster: str = "llm-pretrain", n_compute: int = 2, *, compute_type: str = "p5.48xlarge",
                 launch: str = at(-48), now: str = NOW, stamp: str = "202609010000") -> None:
        super().__init__(now)
        self.cluster = cluster
        self.group = self.log_group(f"/aws/parallelcluster/{cluster}-{stamp}")
        self.head = self.add_instance(node_type="HeadNode", instance_type="c5.2xlarge", launch=launch)
        self.compute = [self.add_instance(instance_type=compute_type, launch=launch) for _ in range(n_compute)]

    def add_instance(self, *, node_type: str = "Compute", instance_type: str = "p5.48xlarge",
                     launch: str = at(-48), state: str = "running", cluster: str | None = None,
                     queue: str = "gpu") -> Node:
        node = self.next_node(instance_type, queue if node_type == "Compute" else "head")
        tags = [{"Key": PCLUSTER_TAG, "Value": cluster or self.cluster},
                {"Key": "parallelcluster:node-type", "Value": node_type}]
        if node_type == "Compute":
            tags.append({"Key": "parallelcluster:queue-name", "Value": queue})
        self.section("ec2", "instances").append({
            "InstanceId": node.instance_id, "InstanceType": instance_type, "LaunchTime": launch,
            "State": {"Code": 16, "Name": state}, "PrivateDnsName": node.private_dns,
            "PrivateIpAddress": "10.0.0.1", "SubnetId": "subnet-0123456789abcdef0", "Tags": tags,
            "NetworkInterfaces": [{"InterfaceType": "efa", "OwnerId": ACCOUNT}] if node_type == "Compute" else []})
        self.instance_type(instance_type)
        return node

    def stream_name(self, node: Node, log: str = "system-messages") -> str:
        return f"{node.hostname}.{node.instance_id}.{log}"

    def healthy(self, node: Node, start: str, end: str, every_s: int = 600, log: str = "system-messages") -> str:
        """The node's system-messages stream: a boot kernel line at `start`, then a line every `every_s`."""
        return self.kernel_stream(self.group, self.stream_name(node, log), start, end, every_s, node.hostname)

    def other_log(self, node: Node, log: str, start: str, end: str, every_s: int = 600) -> str:
        """A non-kernel stream of the node (slurmd, computemgtd, cloud-init…): lines without `kernel:`."""
        return self.lines(self.group, self.stream_name(node, log), start, end, every_s, f"{log}: still alive")


class HyperPodWorld(WorldBuilder):
    """A HyperPod Slurm cluster: a controller group and one GPU group, and the cluster log group
    `/aws/sagemaker/Clusters/<name>/<id>` (created empty: tests add ClusterMetrics or HMA streams)."""

    def __init__(self, cluster: str = "hp-slurm", gpu_nodes: int = 1, *, cluster_id: str = "k3m9x2pq7wla",
                 gpu_type: str = "ml.g5.xlarge", launch: str = at(-48), now: str = NOW,
                 provisioning_mode: str | None = None, statuses: Iterable[str] = ()) -> None:
        super().__init__(now)
        self.cluster = cluster
        self.cluster_id = cluster_id
        self.group = self.log_group(f"/aws/sagemaker/Clusters/{cluster}/{cluster_id}")
        described: dict[str, Any] = {
            "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{cluster_id}",
            "ClusterName": cluster, "ClusterStatus": "InService", "CreationTime": at(-72),
            "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}}, "NodeRecovery": "Automatic",
            "InstanceGroups": [
                {"InstanceGroupName": "controller", "InstanceType": "ml.m5.xlarge", "CurrentCount": 1,
                 "TargetCount": 1, "SlurmConfig": {"NodeType": "Controller"}},
                {"InstanceGroupName": "gpu-workers", "InstanceType": gpu_type, "CurrentCount": gpu_nodes,
                 "TargetCount": gpu_nodes, "SlurmConfig": {"NodeType": "Compute"}}],
            "Nodes": []}
        if provisioning_mode:
            described["NodeProvisioningMode"] = provisioning_mode
        self.section("sagemaker", "clusters").append(described)
        self.described = described
        self.controller = self.add_node("controller", "ml.m5.xlarge", launch=launch)
        status_list = list(statuses)
        self.gpu = [self.add_node("gpu-workers", gpu_type, launch=launch,
                                  status=status_list[i] if i < len(status_list) else "Running")
                    for i in range(gpu_nodes)]

    def add_node(self, group: str, instance_type: str, *, launch: str = at(-48), status: str = "Running") -> Node:
        node = self.next_node(instance_type, group)
        self.described["Nodes"].append({
            "InstanceGroupName": group, "InstanceId": node.instance_id, "InstanceType": instance_type,
            "InstanceStatus": {"Status": status, "Message": "" if status == "Running" else f"node is {status}"},
            "LaunchTime": launch, "PrivateDnsHostname": node.private_dns})
        self.instance_type(instance_type.removeprefix("ml."))
        return node

    def cluster_metrics(self, start: str, end: str, every_s: int = 300) -> str:
        return self.lines(self.group, "ClusterMetrics/slurm", start, end, every_s,
                          '{"level":"INFO","msg":"","cluster_node_count":2}')

    def hma_stream_name(self, node: Node) -> str:
        return f"{HMA_PREFIX}{node.group}/{node.instance_id}"

    def hma_detection(self, node: Node, time: str, code: int | None = 31, reason: str | None = "XidUserAppError", *,
                      condition: str | None = None, recommendation: str | None = None,
                      message: str | None = None) -> str:
        """One detection as the agent writes it (`NPD caught event`, details, the HealthMonitoringAgentDetectionEvent
        key); `message` replaces the NVRM Xid line, `code=None` with no message gives a detection without one."""
        details: dict[str, Any] = {"severity": "warn"}
        if reason is not None:
            details["reason"] = reason
        if condition is not None:
            details["condition"] = condition
        if recommendation is not None:
            details["recommendation"] = recommendation
        text = message if message is not None else (
            f"NVRM: Xid (PCI:0000:00:1e): {code}, pid=14760, name=python, channel 0x00000008" if code is not None
            else None)
        if text is not None:
            details["message"] = text
        line = json.dumps({"level": "info", "msg": "NPD caught event: %v", "details: ": details,
                           "HealthMonitoringAgentDetectionEvent": "HealthEvent"}, separators=(",", ":"))
        return self.stream(self.group, self.hma_stream_name(node), events=[(time, line)])


# -- reading results ----------------------------------------------------------------------------
def one_node_world(xid79_at: str | None = None) -> PClusterWorld:
    """One ParallelCluster GPU node whose kernel stream is live from two days before the window to past it, with an
    Xid 79 ("fallen off the bus") line at `xid79_at` when given: the node the onset tests judge causes on."""
    w = PClusterWorld(n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-48), at(12, 25))
    if xid79_at is not None:
        w.stream(w.group, stream, events=[(xid79_at, f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, "
                                                     "pid=0, GPU has fallen off the bus.")])
    return w


def blind_and_signalled(codes: tuple[int, ...] = (79, 31)) -> PClusterWorld:
    """RULES §7, one node per verdict: node 0 has no log stream at all (NOT OBSERVABLE); each next node logs one Xid
    of `codes` on a live stream (79: REBOOT; 31, an application Xid: LEAVE ALONE)."""
    w = PClusterWorld(n_compute=1 + len(codes))
    for node, code in zip(w.compute[1:], codes, strict=True):
        stream = w.healthy(node, at(-2), at(13))
        w.stream(w.group, stream, events=[(at(9), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, "
                                                  "pid=2211, name=python3")])
    return w


def cli_audit(raw: dict[str, Any], tmp_path: Path, *args: str) -> tuple[int, str]:
    """`gpuaudit audit --world <raw> --format json ARGS`: the exit code and the output (never a traceback)."""
    from typer.testing import CliRunner

    from gpuaudit.cli import app

    path = tmp_path / "w.world.json"
    path.write_text(json.dumps(raw))
    out = CliRunner().invoke(app, ["audit", "--world", str(path), "--format", "json", *args])
    assert "Traceback" not in out.output
    return out.exit_code, out.output


def node_of(result: Result, instance_id: str) -> NodeResult:
    found = [n for n in result.nodes if n.instance_id == instance_id]
    assert found, f"{instance_id} not in result nodes {[n.instance_id for n in result.nodes]}"
    return found[0]


def calls(result: Result, service: str, operation: str) -> int:
    return sum(c.count for c in result.calls if c.service == service and c.operation == operation)


def iso_list(values: Iterable[datetime]) -> list[str]:
    return [iso(v) for v in values]
