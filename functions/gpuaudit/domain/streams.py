"""Which log streams belong to which node (RULES §3): by instance ID or private DNS name.

Matching is by token boundary, so `ip-10-20-38-23` never matches `ip-10-20-38-230`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from gpuaudit.domain.markers import HYPERPOD_STATUS_STREAMS
from gpuaudit.domain.nccl import line_host
from gpuaudit.model.evidence import NodeInfo

INSTANCE_ID = re.compile(r"(?<![0-9a-z])i-[0-9a-f]{8,17}(?![0-9a-z])")
# ParallelCluster 3: `<hostname>.<instance-id>.<log name>` in /aws/parallelcluster/<cluster>-<timestamp>
PCLUSTER_STREAM = re.compile(r"^(?P<host>[^.]+)\.(?P<iid>i-[0-9a-f]{8,17})\.(?P<log>.+)$")
HMA_PREFIX = "SagemakerHealthMonitoringAgent/"
# ParallelCluster head-node logs that explain a node's launch, bootstrap and termination (RULES §8 non-GPU causes),
# in the order they decide: clustermgtd (bootstrap failures, protected mode, unhealthy-node terminations),
# slurm_resume (launch errors such as InsufficientInstanceCapacity), slurmctld (the scheduler's view of nodes).
PCLUSTER_CONTROL_LOGS = ("clustermgtd", "slurm_resume", "slurmctld")
HYPERPOD_CLUSTER_LOG = "HyperPod cluster log"  # the control-plane log of HyperPod: its cluster log group as a whole
# HyperPod cluster log group: `<instance group>/<instance-id>`, with the HMA or lifecycle-script prefix or none
HYPERPOD_NODE_STREAM = re.compile(
    r"^(?:SagemakerHealthMonitoringAgent/|LifecycleConfig/)?(?P<group>[^/]+)/(?P<iid>i-[0-9a-f]{8,17})$")


class NodeIndex:
    """The audited nodes, indexed once: a 2,000-node cluster has ~10,000 streams to attribute."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        listed = list(nodes)
        self.ids = {n.instance_id for n in listed}
        self.dns = [(n.instance_id, n.private_dns) for n in listed if n.private_dns]
        self.hosts: dict[str, list[str]] = {}
        # by a DNS name's first label: the nodes a stream can name by host are those whose first label is a token
        # of the stream, so a name is matched against a few nodes, not all (10,000 × 40,000 at fleet scale)
        self.by_label: dict[str, list[int]] = {}
        for at, (iid, dns) in enumerate(self.dns):
            self.hosts.setdefault(dns.split(".", 1)[0], []).append(iid)
            self.by_label.setdefault(dns.split(".", 1)[0], []).append(at)
        # each stream's answer, once: the judge asks of the same streams from several rules (~7 times per stream)
        self.named: dict[str, list[str]] = {}


_TOKEN = re.compile(r"[\w-]+")  # what `_names_host` bounds a name by: a host's first label is one of these


def stream_node_ids(stream: str, nodes: Iterable[NodeInfo] | NodeIndex) -> list[str]:
    """IDs of the nodes a stream names (usually zero or one): by instance ID, else by private DNS name."""
    index = nodes if isinstance(nodes, NodeIndex) else NodeIndex(nodes)
    known = index.named.get(stream)
    if known is None:
        known = index.named[stream] = _named_by(stream, index)
    return list(known)  # a copy: callers may extend it


def _named_by(stream: str, index: NodeIndex) -> list[str]:
    matched = sorted(i for i in set(INSTANCE_ID.findall(stream)) if i in index.ids)
    if matched:
        return matched
    candidates = sorted({at for token in _TOKEN.findall(stream) for at in index.by_label.get(token, ())})
    return [index.dns[at][0] for at in candidates if _names_host(stream, index.dns[at][1])]


def status_line_node_ids(stream: str, message: str, nodes: NodeIndex) -> list[str]:
    """A HyperPod status stream whose name names no node (`DeepHealthCheckResults/<log_stream_id>`): the nodes its
    line names by instance ID, the instance the deep health check reports on (RULES §5.3)."""
    if not stream.startswith(HYPERPOD_STATUS_STREAMS):
        return []
    return sorted(i for i in set(INSTANCE_ID.findall(message)) if i in nodes.ids)


# A kernel line's own host, as syslog writes it before the program name (`Oct  1 10:05:00 ip-10-1-0-2 kernel: …`).
SYSLOG_HOST = re.compile(r"(?:^|\s)(?P<host>[A-Za-z0-9][\w-]*)(?:\.[\w.-]+)? kernel: ")


def message_host(message: str) -> str | None:
    """The host (first DNS label) a kernel line's syslog prefix names, or None."""
    m = SYSLOG_HOST.search(message)
    return m["host"] if m else None


def message_node_ids(message: str, nodes: NodeIndex) -> list[str]:
    """The node a kernel line names itself, for a line whose stream names none (RULES §5.1: "node from the stream
    or message"): the instance IDs of the nodes it names, else the node its syslog host prefix names."""
    named = sorted(i for i in set(INSTANCE_ID.findall(message)) if i in nodes.ids)
    if named:
        return named
    host = message_host(message)
    return sorted(nodes.hosts.get(host, [])) if host else []


def nccl_host_node_ids(message: str, nodes: NodeIndex) -> list[str]:
    """IDs of the nodes an NCCL line's own `<hostname>:<pid>:<tid>` prefix names: a job's stdout stream may name
    neither the instance nor its host, but every NCCL line names its host."""
    host = line_host(message)
    if host is None:
        return []
    return sorted(nodes.hosts.get(host, []))


def _names_host(stream: str, dns: str) -> bool:
    # A full DNS name ends in its domain: nothing after it extends it into another node's name, so a `-` may join it
    # to a suffix (Container Insights' dataplane streams, `<node DNS>-dataplane.systemd.kubelet.service`). A bare host
    # label keeps the hyphen as a boundary, so `ip-10-0-0-1` never matches `ip-10-0-0-1-…`.
    after = r"(?!\w)" if "." in dns else r"(?![\w-])"
    return re.search(rf"(?<![\w-]){re.escape(dns)}{after}", stream) is not None


@functools.lru_cache(maxsize=4096)  # a pure function of its two names, asked once per stream line at fleet size
def is_pcluster_group(group: str, cluster: str) -> bool:
    return re.fullmatch(rf"/aws/parallelcluster/{re.escape(cluster)}-\d{{12}}", group) is not None


def is_hma_group(group: str, cluster: str) -> bool:
    return group.startswith(f"/aws/sagemaker/Clusters/{cluster}/")


def pcluster_control_log(group: str, stream: str, cluster: str) -> str | None:
    """The control-plane log a ParallelCluster stream carries (`clustermgtd`, …), or None for any other stream."""
    if not is_pcluster_group(group, cluster):
        return None
    match = PCLUSTER_STREAM.match(stream)
    return match["log"] if match and match["log"] in PCLUSTER_CONTROL_LOGS else None
