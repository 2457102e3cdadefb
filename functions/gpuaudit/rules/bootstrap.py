"""ParallelCluster bootstrap failures and protected mode (#15 item 4; RULES §7 LEAVE ALONE, §8 non-GPU causes):
when the head node's clustermgtd says nodes failed to bootstrap, that is the stated cause — a configuration or
lifecycle failure of the queue it names, never hardware — and past the threshold the queue stops launching
(protected mode). The lines, as clustermgtd writes them:

  Found the following bootstrap failure nodes: (x2) ['gpu-st-ml-1(10.0.10.222)', 'gpu-st-ml-2(10.0.10.102)']
  Node bootstrap error: Node gpu-st-ml-2(10.0.10.102) is currently in replacement and no backing instance, …
  Partitions bootstrap failure count: {'gpu': {'ml': 6}}, cluster will be set into protected mode if protected
      failure count reaches threshold 10          (older releases: {'queue1': 2})
  Placing bootstrap failure partitions to INACTIVE: ['gpu']
  Setting cluster into protected mode due to failures detected in node provisioning …
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gpuaudit.domain.streams import pcluster_control_log
from gpuaudit.model.evidence import Evidence, GpuLine
from gpuaudit.model.timeutil import iso

# A Slurm node of ParallelCluster 3: `<queue>-st|dy-<compute resource>-<n>`, with `(<ip>)` in these lines.
SLURM_NODE = re.compile(r"(?<![\w-])(?P<queue>[A-Za-z0-9_-]+?)-(?:st|dy)-[A-Za-z0-9_-]+-\d+(?:\((?P<ip>[0-9.]+)\))?")
FAILED_NODES = "Found the following bootstrap failure nodes"
NODE_ERROR = "Node bootstrap error"
FAILURE_COUNT = re.compile(r"Partitions bootstrap failure count: (?P<counts>\{.*?\}\}?),.*?threshold (?P<limit>\d+)")
INACTIVE = re.compile(r"Placing bootstrap failure partitions to INACTIVE: \[(?P<queues>[^\]]*)\]")
PROTECTED = ("Setting cluster into protected mode", "Cluster is in protected mode",
             "compute fleet status from RUNNING to PROTECTED")
QUOTED = re.compile(r"'([^']+)'")


@dataclass
class BootstrapFailure:
    """What the clustermgtd lines of the window say, per queue."""

    where: str  # `<group> / <stream>` of the first line
    first: datetime
    last: datetime
    queues: list[str] = field(default_factory=list)
    failed_nodes: list[str] = field(default_factory=list)  # Slurm names with their IPs, as logged
    failed_ips: set[str] = field(default_factory=set)
    reason: str | None = None  # the first `Node bootstrap error` line's text
    counts: dict[str, int] = field(default_factory=dict)  # queue → bootstrap failure count
    threshold: int | None = None
    protected_queues: list[str] = field(default_factory=list)
    protected: bool = False

    def summary(self) -> str:
        queues = ", ".join(f"`{q}`" for q in self.queues) or "a queue the lines do not name"
        parts = [f"ParallelCluster node bootstrap failure on queue {queues} (clustermgtd, {iso(self.first)} to "
                 f"{iso(self.last)}, `{self.where}`)"]
        if self.failed_nodes:
            parts.append(f"nodes that failed to bootstrap: {', '.join(self.failed_nodes[:10])}"
                         + (f" (+{len(self.failed_nodes) - 10} more)" if len(self.failed_nodes) > 10 else ""))
        if self.counts:
            limit = f" of threshold {self.threshold}" if self.threshold is not None else ""
            parts.append("bootstrap failure count " + ", ".join(f"`{q}` {n}{limit}" for q, n in self.counts.items()))
        if self.protected:
            stopped = ", ".join(f"`{q}`" for q in self.protected_queues) or queues
            parts.append(f"the cluster entered protected mode: queue {stopped} set INACTIVE and stops launching nodes")
        if self.reason:
            parts.append(f"clustermgtd's reason: {self.reason[:200]}")
        return "; ".join(parts)


def bootstrap_failure(evidence: Evidence, lines: Iterable[GpuLine]) -> BootstrapFailure | None:
    """The bootstrap story of the clustermgtd lines read for the window; None when they say nothing of it."""
    if evidence.cluster.kind != "parallelcluster":
        return None
    found: BootstrapFailure | None = None
    for line in sorted(lines, key=lambda g: g.time):
        if pcluster_control_log(line.log_group, line.log_stream, evidence.cluster.name) != "clustermgtd":
            continue
        text = line.message
        if "bootstrap" not in text and not any(p in text for p in PROTECTED):
            continue
        if found is None:
            found = BootstrapFailure(where=f"{line.log_group} / {line.log_stream}", first=line.time, last=line.time)
        found.last = line.time
        _read(found, text)
    return found if found is not None and (found.failed_nodes or found.counts or found.protected) else None


def _read(found: BootstrapFailure, text: str) -> None:
    if FAILED_NODES in text or NODE_ERROR in text:
        for node in SLURM_NODE.finditer(text.split(FAILED_NODES, 1)[-1].split(NODE_ERROR, 1)[-1]):
            _add(found.queues, node["queue"])
            _add(found.failed_nodes, node.group(0))
            if node["ip"]:
                found.failed_ips.add(node["ip"])
        if NODE_ERROR in text and found.reason is None:
            found.reason = text[text.index(NODE_ERROR):]
    if (counted := FAILURE_COUNT.search(text)) is not None:
        found.threshold = int(counted["limit"])
        for queue, count in _queue_counts(counted["counts"]).items():
            _add(found.queues, queue)
            found.counts[queue] = count
    if (inactive := INACTIVE.search(text)) is not None:
        found.protected = True
        for queue in QUOTED.findall(inactive["queues"]):
            _add(found.queues, queue)
            _add(found.protected_queues, queue)
    if any(p in text for p in PROTECTED):
        found.protected = True


def _queue_counts(counts: str) -> dict[str, int]:
    """`{'gpu': {'ml': 6, 'big': 2}}` (queue → compute resource → count) or `{'queue1': 2}` → {queue: total}."""
    out: dict[str, int] = {}
    depth, queue = 0, None
    for token in re.finditer(r"\{|\}|'([^']+)'\s*:\s*(\d+)?", counts):
        if token.group(0) == "{":
            depth += 1
        elif token.group(0) == "}":
            depth -= 1
        elif depth == 1:
            queue = token.group(1)
            out[queue] = int(token.group(2)) if token.group(2) else 0
        elif depth == 2 and queue is not None and token.group(2):
            out[queue] += int(token.group(2))
    return out


def _add(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)


def host_ip(private_dns: str | None) -> str | None:
    """`ip-10-0-10-222.<region>.compute.internal` → `10.0.10.222` (the IP clustermgtd prints beside a node)."""
    m = re.match(r"ip-(\d+)-(\d+)-(\d+)-(\d+)(?:\.|$)", private_dns or "")
    return ".".join(m.groups()) if m else None
