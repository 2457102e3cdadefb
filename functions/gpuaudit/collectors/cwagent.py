"""Which audited node a CloudWatch agent series is of (GPU count, straggler GPU and EFA counter reads)."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.evidence import NodeInfo


class AgentNodes:
    """The nodes a series can name: by its `InstanceId` dimension, else by the agent's `host` dimension, which holds
    the node's hostname as the agent sees it (its private DNS name, or that name's first label)."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        listed = list(nodes)
        self.ids = {n.instance_id for n in listed}
        self.by_host: dict[str, str] = {}
        for n in listed:
            if n.private_dns:
                self.by_host[n.private_dns] = n.instance_id
                self.by_host[n.private_dns.split(".", 1)[0]] = n.instance_id

    def node_of(self, dims: dict[str, str]) -> str | None:
        if dims.get("InstanceId") in self.ids:
            return dims["InstanceId"]
        host = dims.get("host", "")
        return self.by_host.get(host) or self.by_host.get(host.split(".", 1)[0])
