"""Which nodes a stream names: by instance ID, else by private DNS name. The index looks up a stream's tokens
instead of matching every node's name against every stream (10,000 nodes × 40,000 streams at fleet scale); this
checks it against the plain scan, on names built to sit on every boundary the scan knows."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit.domain.streams import NodeIndex, stream_node_ids
from gpuaudit.model.evidence import NodeInfo

HOSTS = ["ip-10-0-0-2", "ip-10-0-0-21", "ip-10-0-0-2x", "node_7", "gpu-a", "a"]
DOMAINS = ["ec2.internal", "us-west-2.compute.internal", "cluster.local"]
NODES = [NodeInfo(instance_id=f"i-0{n:016x}", instance_type="p5.48xlarge", status="running",
                  private_dns=f"{host}.{domain}")
         for n, (host, domain) in enumerate((h, d) for h in HOSTS for d in DOMAINS)]
INDEX = NodeIndex(NODES)


def scanned(stream: str) -> list[str]:
    """The plain scan: every node's DNS name, bounded by no word character or hyphen before it and no word character
    after it (a full DNS name ends in its domain, so a `-` after it only joins a suffix)."""
    return [n.instance_id for n in NODES
            if re.search(rf"(?<![\w-]){re.escape(n.private_dns or '')}(?!\w)", stream)]


PIECES = [*HOSTS, *DOMAINS, *(f"{h}.{d}" for h in HOSTS for d in DOMAINS), ".", "-", "_", "/", " ", "x", "é",
          "messages", "i-0000000000000000z"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=6))
def test_the_indexed_lookup_names_the_nodes_the_scan_names(pieces: list[str]) -> None:
    stream = "".join(pieces)
    assert stream_node_ids(stream, INDEX) == scanned(stream)


def test_a_name_is_matched_whole_and_in_node_order() -> None:
    assert stream_node_ids("ip-10-0-0-2.ec2.internal/messages", INDEX) == scanned("ip-10-0-0-2.ec2.internal/messages")
    assert len(stream_node_ids("ip-10-0-0-2.ec2.internal/messages", INDEX)) == 1
    assert stream_node_ids("xip-10-0-0-2.ec2.internal", INDEX) == []  # a longer host, not this one
    # a full DNS name then `-`: a suffix joined to this node's name (Container Insights `<DNS>-dataplane…`), never
    # another node's name, which would end in its own domain
    assert stream_node_ids("ip-10-0-0-2.ec2.internal-y", INDEX) == scanned("ip-10-0-0-2.ec2.internal-y")
    assert len(scanned("ip-10-0-0-2.ec2.internal-y")) == 1
    both = "ip-10-0-0-21.ec2.internal and ip-10-0-0-2.ec2.internal"
    assert stream_node_ids(both, INDEX) == scanned(both) and len(scanned(both)) == 2


def test_a_container_insights_stream_names_its_node_by_full_dns_name_before_a_hyphen_suffix() -> None:
    # Given nodes named by full DNS name and one by a bare host label
    nodes = [NodeInfo(instance_id="i-07d2c4e91b3a5f860", instance_type="p4d.24xlarge", status="running",
                      private_dns="ip-10-40-12-31.us-west-2.compute.internal"),
             NodeInfo(instance_id="i-0e41b7a3c95d2f018", instance_type="p4d.24xlarge", status="running",
                      private_dns="ip-10-40-12-7")]
    # Then Container Insights' dataplane and host streams name the first (`<DNS>-dataplane…`, `<DNS>.host…`)
    assert stream_node_ids("ip-10-40-12-31.us-west-2.compute.internal-dataplane.systemd.kubelet.service",
                           nodes) == ["i-07d2c4e91b3a5f860"]
    assert stream_node_ids("ip-10-40-12-31.us-west-2.compute.internal.host.messages", nodes) == ["i-07d2c4e91b3a5f860"]
    # And a bare host label stays bounded by a hyphen: ip-10-40-12-7 is not ip-10-40-12-7-…
    assert stream_node_ids("ip-10-40-12-7-kubelet", nodes) == []
    assert stream_node_ids("ip-10-40-12-7.kubelet", nodes) == ["i-0e41b7a3c95d2f018"]
