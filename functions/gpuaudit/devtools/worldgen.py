"""Generate large, realistic world files (WORLD-FORMAT.md) for scale tests and benchmarks.

`generate(WorldSpec(...))` returns a world as a dict; `dumps()` serialises it to the exact same
bytes for the same spec (the only randomness is `random.Random(seed)`).

Shapes follow the shared example worlds:

* **parallelcluster**: a head node and N compute nodes in DescribeInstances, tagged
  `parallelcluster:cluster-name`; the cluster group `/aws/parallelcluster/<cluster>-<YYYYMMDDHHMM>`
  with `<host>.<iid>.system-messages`, `.slurmd`, `.computemgtd` streams (head node: `.slurmctld`,
  `.clustermgtd`); a customer kernel group `/aws/<pipeline>/<cluster>/kernel` with one
  `<private-dns>-<iid>` stream per node.
* **hyperpod**: a DescribeCluster response with `Nodes`; the cluster group
  `/aws/sagemaker/Clusters/<name>/<id>` with `ClusterMetrics/slurm`, one
  `LifecycleConfig/<group>/<iid>` stream per node and `SagemakerHealthMonitoringAgent/<group>/<iid>`
  only for nodes with a detection; the same customer kernel group.

Liveness lines are `periodic` entries (one line every 300 s), so a 2,000-node week stays a few MB.
Every node boots with `kernel:` lines and the NVIDIA driver banner. A `silent_fraction` of compute
nodes stop shipping kernel messages at a random hour inside the window (their slurmd/computemgtd
streams keep going, the trap RULES §4 warns about). Xids arrive at `xid_rate` per node-day while a
node's kernel stream is live, with a realistic mix of codes; on HyperPod the health agent reports
the ones it acts on.

The nodes as planned and their identifiers are in worldgen_fleet.py; what EC2 describes of them (instance
types, instances with their interfaces and volumes, the network) in worldgen_ec2.py.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from gpuaudit.devtools.worldgen_ec2 import (
    GPU_TYPES,
    SG,
    SUBNET_COMPUTE,
    SUBNET_HEAD,
    VPC,
    cpu_instance_type,
    derived,
    ec2_instance,
    gpu_instance_type,
    interface_template,
)
from gpuaudit.devtools.worldgen_fleet import ACCOUNT, REGION, Ids, Node
from gpuaudit.model.timeutil import floor_hour, iso, parse_time

Kind = Literal["parallelcluster", "hyperpod"]
KINDS: tuple[str, ...] = ("parallelcluster", "hyperpod")

FORMAT = "gpu-audit-world/1"
NOW = "2026-10-01T18:26:00Z"
EVERY_S = 300
PIPELINE = "training-logs"
DRIVER = "570.133.20"
KERNEL = "6.12.95-124.187.amzn2023.x86_64"
HEAD_TYPE = "m5.2xlarge"
CONTROLLER_TYPE = "m5.2xlarge"
NODES_PER_GROUP = 512  # HyperPod worker instance groups of at most this many nodes
CAPACITY_BLOCK_MAX = 64  # instances per EC2 Capacity Block (1 to 64)

# Xid codes and their share of occurrences in a fleet (application faults dominate; RULES §6 classes).
XID_MIX: tuple[tuple[int, int], ...] = (
    (31, 30), (13, 18), (63, 12), (119, 10), (79, 8), (48, 6), (43, 6), (74, 5), (94, 5),
)
# PCI bus IDs of the eight GPUs of a p5/p5en/p4d-class host.
GPU_BUSES = ("53", "64", "75", "86", "97", "a8", "b9", "ca")
PROCS = ("python3", "torchrun", "pt_main_thread", "python")

# What the HyperPod health-monitoring agent does with each code: (reason, node condition or None).
HMA_ACTION: dict[int, tuple[str, str | None]] = {
    13: ("XidUserAppError", None), 31: ("XidUserAppError", None), 43: ("XidUserAppError", None),
    94: ("XidUserAppError", None),
    48: ("XidHardwareFailure", "NvidiaErrorTerminate"), 79: ("XidHardwareFailure", "NvidiaErrorReboot"),
    74: ("XidHardwareFailure", "NvidiaErrorReboot"), 119: ("XidHardwareFailure", "NvidiaErrorReboot"),
}




@dataclass(frozen=True)
class WorldSpec:
    kind: str = "parallelcluster"
    nodes: int = 10
    days: float = 7.0
    silent_fraction: float = 0.0
    xid_rate: float = 0.05  # Xids per node-day
    seed: int = 0
    instance_type: str = "p5.48xlarge"
    now: str = NOW
    cluster: str | None = None
    # The customer kernel group's streams named `{hostname}` (the private DNS name alone) instead of
    # `{hostname}-{instance id}`: an agent configured so, whose streams are found by host name.
    host_named: bool = False
    # Network interfaces described once per instance type (ec2.network_interface_templates) and named by each
    # instance, rather than written out per instance: a 10,000-node p5 world is 230 MB smaller (issue #50 item 4).
    compact: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1; got {self.nodes}")
        if not 0 < self.days <= 60:
            raise ValueError(f"days must be in (0, 60]; got {self.days}")
        if not 0.0 <= self.silent_fraction <= 1.0:
            raise ValueError(f"silent fraction must be in [0, 1]; got {self.silent_fraction}")
        if self.xid_rate < 0:
            raise ValueError(f"xid rate must be >= 0; got {self.xid_rate}")
        if self.instance_type not in GPU_TYPES:
            raise ValueError(f"instance type must be one of {', '.join(GPU_TYPES)}; got {self.instance_type!r}")

    @property
    def cluster_name(self) -> str:
        return self.cluster or ("bench-pcluster" if self.kind == "parallelcluster" else "bench-hp-slurm")

    @property
    def silent_count(self) -> int:
        return round(self.silent_fraction * self.nodes)




def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)




def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    if mean > 30:  # normal approximation keeps big means cheap
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _xid_text(rng: random.Random, code: int) -> str:
    bus = rng.choice(GPU_BUSES)
    pid, proc = rng.randint(2000, 400000), rng.choice(PROCS)
    head = f"NVRM: Xid (PCI:0000:{bus}:00): {code}, "
    detail = {
        13: f"pid={pid}, name={proc}, Graphics SM Warp Exception on (GPC {rng.randint(0, 7)}, TPC {rng.randint(0, 8)}, "
            f"SM {rng.randint(0, 1)}): Out Of Range Address",
        31: f"pid={pid}, name={proc}, channel 0x{rng.randint(1, 64):08x}, intr 00000000. MMU Fault: ENGINE GRAPHICS "
            f"GPC{rng.randint(0, 7)} GPCCLIENT_T1_{rng.randint(0, 3)} faulted @ 0x7f{rng.getrandbits(24):06x}_"
            f"{rng.getrandbits(32):08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        43: f"pid={pid}, name={proc}, Ch 0000000{rng.randint(1, 9)}",
        48: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in "
            f"the framebuffer at partition {rng.randint(0, 11)}, subpartition {rng.randint(0, 1)}.",
        63: f"pid='<unknown>', name=<unknown>, Row Remapper: New row (0x{rng.getrandbits(28):016x}) marked for "
            "remapping, reset gpu to activate.",
        74: f"pid={pid}, name={proc}, NVLink: fatal error detected on link {rng.randint(0, 17)}"
            "(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
        79: f"pid={pid}, name={proc}, GPU has fallen off the bus.",
        94: f"pid={pid}, name={proc}, Contained: SM (0x1). RST: No, D-RST: No",
        119: f"pid={pid}, name={proc}, Timeout after 6s of waiting for RPC "
             f"response from GPU{GPU_BUSES.index(bus)} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
    }[code]
    return head + detail


def _plan_nodes(spec: WorldSpec, rng: random.Random, ids: Ids, created: datetime,
                window_start: datetime, now: datetime) -> list[Node]:
    nodes: list[Node] = []
    pcluster = spec.kind == "parallelcluster"
    head_role = "head" if pcluster else "controller"
    nodes.append(Node(0, ids.hex("i-0", 16), "10.20.1.24", created + timedelta(minutes=5), head_role,
                       None if pcluster else "controller", HEAD_TYPE if pcluster else CONTROLLER_TYPE))
    for i in range(spec.nodes):
        ip = f"10.20.{32 + i // 250}.{4 + i % 250}"
        launch = created + timedelta(minutes=15, seconds=rng.randint(0, 12 * 3600))
        group = "compute-p5" if pcluster else f"worker-{i // NODES_PER_GROUP + 1:02d}"
        nodes.append(Node(i + 1, ids.hex("i-0", 16), ip, launch, "compute", group, spec.instance_type))
    compute = nodes[1:]
    # Silent nodes: their kernel stream stops at a random hour inside the window, leaving at least two
    # whole empty hours before `now` so the gap is real, not late delivery.
    window_hours = max(1, int((now - window_start).total_seconds() // 3600) - 2)
    for node in sorted(rng.sample(compute, spec.silent_count), key=lambda n: n.index):
        stop = floor_hour(window_start) + timedelta(hours=rng.randrange(window_hours), seconds=rng.randint(1, 3599))
        node.silent_at = max(stop, node.launch + timedelta(hours=1))
    weights = [w for _, w in XID_MIX]
    codes = [c for c, _ in XID_MIX]
    for node in compute:
        live_from = max(window_start, node.launch + timedelta(minutes=10))
        live_to = node.silent_at or now
        seconds = int((live_to - live_from).total_seconds())
        count = _poisson(rng, spec.xid_rate * seconds / 86400) if seconds > 0 else 0
        xids = []
        for _ in range(count):
            when = live_from + timedelta(seconds=rng.randrange(max(1, seconds)), milliseconds=rng.randrange(1000))
            code = rng.choices(codes, weights)[0]
            xids.append((when, code, _xid_text(rng, code)))
        node.xids = sorted(xids, key=lambda x: x[0])
    return nodes


def _boot_lines(node: Node, gpu: bool) -> list[list[Any]]:
    t = _ms(node.launch)
    h = node.host
    lines = [
        [t, f"{h} systemd[1]: Started systemd-journald.service - Journal Service."],
        [t, f"{h} kernel: Linux version {KERNEL} (mockbuild@ip-10-0-51-7) (gcc (GCC) 11.5.0) #1 SMP PREEMPT_DYNAMIC"],
        [t, f"{h} kernel: Command line: BOOT_IMAGE=(hd0,gpt1)/boot/vmlinuz-{KERNEL} root=UUID=3f2c1a0e ro "
            "console=tty0 console=ttyS0,115200n8 nvme_core.io_timeout=4294967295"],
    ]
    if gpu:
        lines += [
            [t + 41_000, f"{h} kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 508"],
            [t + 41_200, f"{h} kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64 {DRIVER} Release Build "
                         "(dvs-builder@U22-I3-AE18-23-3) Wed Apr 2 14:48:08 UTC 2025"],
            [t + 58_000, f"{h} systemd[1]: Started nvidia-fabricmanager.service - NVIDIA fabric manager service."],
            [t + 63_000,
             f"{h} kernel: efa 0000:{GPU_BUSES[0]}:00.0: Setup irq:0x{64:x} name:efa-mgmnt@pci:0000:53:00.0"],
        ]
    lines.append([t + 90_000, f"{h} systemd[1]: Started amazon-cloudwatch-agent.service - Amazon CloudWatch Agent."])
    return lines


def _periodic(start: datetime, end: datetime, message: str) -> list[dict[str, Any]]:
    if end <= start:
        return []
    return [{"from": iso(start), "to": iso(end), "every_s": EVERY_S, "message": message}]


def _kernel_stream(name: str, node: Node, now: datetime, creation: int) -> dict[str, Any]:
    """The node's syslog as shipped: boot lines, liveness every 300 s until it goes silent, Xids."""
    gpu = node.role == "compute"
    events = _boot_lines(node, gpu)
    events += [[_ms(t), f"{node.host} kernel: {text}"] for t, _code, text in node.xids or []]
    end = node.silent_at or now
    events.sort(key=lambda e: e[0])
    return {"logStreamName": name, "creationTime": creation, "events": events,
            "periodic": _periodic(node.launch + timedelta(seconds=EVERY_S), end,
                                  f"{node.host} systemd[1]: Started sysstat-collect.service - system activity "
                                  "accounting tool.")}


def _simple_stream(name: str, creation: int, first: list[list[Any]], start: datetime, end: datetime,
                   message: str) -> dict[str, Any]:
    return {"logStreamName": name, "creationTime": creation, "events": first,
            "periodic": _periodic(start, end, message)}




def generate(spec: WorldSpec) -> dict[str, Any]:
    """A world for `spec`, as the JSON-ready dict a world file holds."""
    rng = random.Random(spec.seed)
    ids = Ids(rng)
    now = parse_time(spec.now)
    window_start = now - timedelta(days=spec.days)
    created = floor_hour(window_start - timedelta(days=2))
    nodes = _plan_nodes(spec, rng, ids, created, window_start, now)
    gpu = GPU_TYPES[spec.instance_type]
    world: dict[str, Any] = {"format": FORMAT, "now": spec.now, "account_id": ACCOUNT, "region": REGION}
    if spec.kind == "parallelcluster":
        _parallelcluster(world, spec, nodes, ids, created, now)
        types = [cpu_instance_type(HEAD_TYPE), gpu_instance_type(gpu)]
    else:
        _hyperpod(world, spec, nodes, ids, created, now)
        types = [cpu_instance_type(CONTROLLER_TYPE), gpu_instance_type(gpu)]
    world.setdefault("ec2", {})["instance_types"] = types
    world["ec2"]["subnets"] = [
        {"SubnetId": s, "VpcId": VPC, "AvailabilityZone": "us-west-2b", "AvailabilityZoneId": "usw2-az2",
         "CidrBlock": c, "AvailableIpAddressCount": a, "State": "available"}
        for s, c, a in ((SUBNET_HEAD, "10.20.1.0/24", 240), (SUBNET_COMPUTE, "10.20.32.0/19", 8000))]
    world["ec2"]["security_groups"] = [
        {"GroupId": SG, "GroupName": f"{spec.cluster_name}-sg", "VpcId": VPC,
         "Description": "cluster nodes (EFA needs all traffic to and from itself)",
         "IpPermissions": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}]}],
         "IpPermissionsEgress": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}],
                                  "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]}]
    return world


def _customer_kernel_group(spec: WorldSpec, nodes: list[Node], created: datetime, now: datetime) -> dict[str, Any]:
    name = f"/aws/{PIPELINE}/{spec.cluster_name}/kernel"
    streams = [_kernel_stream(n.dns if spec.host_named else f"{n.dns}-{n.instance_id}", n, now, _ms(n.launch) + 95_000)
               for n in nodes]
    return {"logGroupName": name, "creationTime": _ms(created), "retentionInDays": 30, "metricFilterCount": 2,
            "logGroupClass": "STANDARD", "streams": streams}


def _parallelcluster(world: dict[str, Any], spec: WorldSpec, nodes: list[Node], ids: Ids, created: datetime,
                     now: datetime) -> None:
    # EC2 Capacity Blocks hold 1 to 64 instances: a larger fleet runs in several blocks of one end date.
    first = ids.hex("cr-0", 16)
    compute = [n for n in nodes if n.role == "compute"]
    blocks = [first] + [f"cr-0{derived('cr', f'{first}/{k}', 16)}"
                        for k in range(1, -(-len(compute) // CAPACITY_BLOCK_MAX))]
    block_of = {n.instance_id: blocks[k // CAPACITY_BLOCK_MAX] for k, n in enumerate(compute)}
    world["ec2"] = {
        "instances": [ec2_instance(n, spec.cluster_name, block_of.get(n.instance_id), spec.compact) for n in nodes],
        "capacity_reservations": [{
            "CapacityReservationId": reservation, "OwnerId": ACCOUNT, "InstanceType": spec.instance_type,
            "InstancePlatform": "Linux/UNIX", "AvailabilityZone": "us-west-2b", "AvailabilityZoneId": "usw2-az2",
            "Tenancy": "default", "EndDateType": "limited", "InstanceMatchCriteria": "targeted",
            "ReservationType": "capacity-block",
            "TotalInstanceCount": min(CAPACITY_BLOCK_MAX, len(compute) - k * CAPACITY_BLOCK_MAX),
            "AvailableInstanceCount": 0,
            "State": "active", "StartDate": iso(created),
            "EndDate": iso(floor_hour(now) + timedelta(days=5, minutes=30)),
            "CreateDate": iso(created - timedelta(days=1))} for k, reservation in enumerate(blocks)],
    }
    if spec.compact:
        world["ec2"]["network_interface_templates"] = [interface_template(t, spec.cluster_name)
                                                       for t in sorted({n.instance_type for n in nodes})]
    group = f"/aws/parallelcluster/{spec.cluster_name}-{created:%Y%m%d%H%M}"
    streams = []
    for n in nodes:
        base = f"{n.host}.{n.instance_id}"
        creation = _ms(n.launch) + 120_000
        streams.append(_kernel_stream(f"{base}.system-messages", n, now, creation))
        start = n.launch + timedelta(seconds=180)
        if n.role == "head":
            streams.append(_simple_stream(
                f"{base}.slurmctld", creation, [[_ms(start), "slurmctld: slurmctld version 24.11.5 started on cluster "
                                                             f"{spec.cluster_name}"]],
                start + timedelta(seconds=EVERY_S), now, "slurmctld: debug:  sched: Running job scheduler"))
            streams.append(_simple_stream(
                f"{base}.clustermgtd", creation,
                [[_ms(start), "[slurm_plugin.clustermgtd:main] - INFO - ClusterManager "
                                                               "Startup"]],
                start + timedelta(seconds=EVERY_S), now,
                "[slurm_plugin.clustermgtd:manage_cluster] - INFO - Following nodes are currently in replacement: "
                "(x0) []"))
            continue
        streams.append(_simple_stream(
            f"{base}.slurmd", creation, [[_ms(start), "slurmd: slurmd version 24.11.5 started"]],
            start + timedelta(seconds=EVERY_S), now,
            "slurmd: debug:  _handle_node_reg_resp: slurmctld sent back 0 TRES."))
        streams.append(_simple_stream(
            f"{base}.computemgtd", creation,
            [[_ms(start), "[slurm_plugin.computemgtd:main] - INFO - ComputeMgtd Startup"]],
            start + timedelta(seconds=EVERY_S), now,
            "[slurm_plugin.computemgtd:_run_computemgtd] - INFO - Checking for status of the cluster"))
    world["logs"] = {"groups": [
        {"logGroupName": group, "creationTime": _ms(created), "retentionInDays": 14, "metricFilterCount": 16,
         "logGroupClass": "STANDARD", "streams": streams},
        _customer_kernel_group(spec, nodes, created, now),
    ]}


def _hma_lines(when: datetime, code: int, text: str) -> list[list[Any]]:
    reason, condition = HMA_ACTION[code]
    ts = iso(when + timedelta(seconds=1))
    uptime = f"[{when.timestamp() % 900000:.6f}]"
    details: dict[str, Any] = {"severity": "warn", "timestamp": iso(when), "reason": reason,
                               "message": f"{uptime} {text}"}
    if condition:
        details["nodeCondition"] = condition
    npd = {"level": "info", "ts": ts, "msg": "NPD caught event: %v", "details: ": details,
           "HealthMonitoringAgentDetectionEvent": "HealthEvent"}
    dcgm = {"level": "info", "ts": ts, "msg": "DCGM Policy Violation found ", "condition: ": "XID Error",
            "data: ": {"ErrNum": code}, "HealthMonitoringAgentDetectionEvent": "HealthEvent"}
    t = _ms(when) + 1000
    return [[t, json.dumps(npd, separators=(",", ":"))], [t + 5000, json.dumps(dcgm, separators=(",", ":"))]]


def _hyperpod(world: dict[str, Any], spec: WorldSpec, nodes: list[Node], ids: Ids,
              created: datetime, now: datetime) -> None:
    name = spec.cluster_name
    cluster_id = ids.alnum(12)
    groups: dict[str, list[Node]] = {}
    for n in nodes:
        groups.setdefault(n.group or "controller", []).append(n)
    instance_groups = []
    for gname, members in groups.items():
        controller = gname == "controller"
        instance_groups.append({
            "CurrentCount": len(members), "TargetCount": len(members), "InstanceGroupName": gname,
            "InstanceType": "ml." + members[0].instance_type,
            "LifeCycleConfig": {"SourceS3Uri": f"s3://sagemaker-{name}-lifecycle/scripts/", "OnCreate": "on_create.sh"},
            "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/sagemaker-{name}-exec",
            "ThreadsPerCore": 1 if controller else 2,
            "Status": "InService", "TrainingPlanStatus": "NotApplicable", "ImageVersionStatus": "UpToDate",
            "OnStartDeepHealthChecks": [] if controller else ["InstanceStress", "InstanceConnectivity"],
            "SlurmConfig": {"NodeType": "Controller"} if controller else {"NodeType": "Compute",
                                                                           "PartitionNames": ["gpu"]}})
    cluster_nodes = [{
        "InstanceGroupName": n.group, "InstanceId": n.instance_id,
        "InstanceStatus": {"Status": "Running", "Message": ""}, "InstanceType": "ml." + n.instance_type,
        "LaunchTime": iso(n.launch), "LastSoftwareUpdateTime": iso(n.launch), "ThreadsPerCore": 2,
        "PrivatePrimaryIp": n.ip, "PrivateDnsHostname": n.dns,
        "Placement": {"AvailabilityZone": "us-west-2b", "AvailabilityZoneId": "usw2-az2"},
        "ImageVersionStatus": "UpToDate"} for n in nodes]
    world["sagemaker"] = {"clusters": [{
        "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{cluster_id}", "ClusterName": name,
        "ClusterStatus": "InService", "CreationTime": iso(created), "InstanceGroups": instance_groups,
        "VpcConfig": {"SecurityGroupIds": [SG], "Subnets": [SUBNET_COMPUTE]},
        "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}}, "NodeRecovery": "Automatic",
        "Nodes": cluster_nodes}]}
    world["ec2"] = {}
    compute = [n for n in nodes if n.role == "compute"]
    gpus = len(compute) * GPU_TYPES[spec.instance_type].gpu_count
    metrics = {"level": "INFO", "msg": "", "cluster_node_count": len(compute), "cluster_idle_node_count": 0,
               "cluster_failed_node_count": 0, "cluster_gpu_count": gpus, "cluster_idle_gpu_count": 0,
               "cluster_running_task_count": 1, "cluster_pending_task_count": 0, "ClusterId": cluster_id}
    streams: list[dict[str, Any]] = [_simple_stream(
        "ClusterMetrics/slurm", _ms(created) + 60_000, [], created + timedelta(minutes=10), now,
        json.dumps(metrics, separators=(",", ":")))]
    for n in nodes:
        t = _ms(n.launch) + 60_000
        streams.append({"logStreamName": f"LifecycleConfig/{n.group}/{n.instance_id}", "creationTime": t,
                        "events": [[t, "[lifecycle] Running on_create.sh"],
                                   [t + 45_000, "[lifecycle] lifecycle_script.py: mounting /fsx (FSx for Lustre)"],
                                   [t + 170_000, "[lifecycle] lifecycle_script.py: Completed on_create.sh"]]})
    for n in compute:
        detections = [x for x in n.xids or [] if x[1] in HMA_ACTION]
        if detections:
            events = [line for when, code, text in detections for line in _hma_lines(when, code, text)]
            streams.append({"logStreamName": f"SagemakerHealthMonitoringAgent/{n.group}/{n.instance_id}",
                            "creationTime": events[0][0], "events": events})
    world["logs"] = {"groups": [
        {"logGroupName": f"/aws/sagemaker/Clusters/{name}/{cluster_id}", "creationTime": _ms(created),
         "metricFilterCount": 0, "logGroupClass": "STANDARD", "streams": streams},
        _customer_kernel_group(spec, nodes, created, now),
    ]}


def dumps(world: dict[str, Any]) -> str:
    """Compact, deterministic JSON (same world, same bytes)."""
    return json.dumps(world, separators=(",", ":"), ensure_ascii=False)


def write(world: dict[str, Any], path: str) -> int:
    text = dumps(world) + "\n"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return len(text.encode("utf-8"))


def describe(world: dict[str, Any]) -> dict[str, int]:
    """Counts for a human: nodes, groups, streams, explicit events, periodic lines, Xid lines."""
    groups = world.get("logs", {}).get("groups", [])
    streams = [s for g in groups for s in g.get("streams", [])]
    periodic = 0
    for s in streams:
        for p in s.get("periodic", []):
            span = (parse_time(p["to"]) - parse_time(p["from"])).total_seconds()
            periodic += max(0, math.ceil(span / p["every_s"]))
    events = [e for s in streams for e in s.get("events", [])]
    hyperpod = world.get("sagemaker", {}).get("clusters", [])
    nodes = len(hyperpod[0]["Nodes"]) if hyperpod else len(world.get("ec2", {}).get("instances", []))
    return {"nodes": nodes, "log_groups": len(groups), "streams": len(streams), "events": len(events),
            "periodic_lines": periodic, "xid_lines": sum(1 for e in events if "NVRM: Xid" in e[1])}
