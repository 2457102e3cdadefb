"""What the node's lines and type show of its fabric (RULES §2, §8 D): the NCCL and Fabric Manager signals, the
transports its NCCL used, and its EFA attachment against what the type supports."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpuaudit.domain.markers import FABRIC_MANAGER_STARTED, NCCL_MARKER
from gpuaudit.domain.nccl import NodeFabric, TransportLine, transport_of, transports
from gpuaudit.model.evidence import CapabilityProfile, NodeInfo
from gpuaudit.model.result import NcclTransport, NodeSignals, Signal
from gpuaudit.rules.node_lines import ParsedLine

NCCL = re.compile(NCCL_MARKER)


def signals(lines: Sequence[ParsedLine], fabric_manager_expected: bool, accelerated: bool = True) -> NodeSignals:
    """NCCL and Fabric Manager from the node's lines; EFA counters and GPU activity need metrics this
    audit does not read yet, so they stay Not observable (a gap, never a clean result). A node without a GPU or
    Trainium device has no NCCL to miss: Not applicable unless a line shows one (RULES §4)."""
    fm: Signal
    nccl: Signal = ("Observable" if any(NCCL.search(p.line.message) for p in lines) else
                    "Not observable" if accelerated else "Not applicable")
    if not fabric_manager_expected:
        fm = "Not applicable"
    else:
        fm = "Observable" if any(s in p.line.message for p in lines for s in FABRIC_MANAGER_STARTED) else \
            "Not observable"
    return NodeSignals(nccl=nccl, fabric_manager=fm)


def node_fabric(profile: CapabilityProfile | None) -> NodeFabric:
    """What the node's type calls for, from its capability profile (None where the type was not read)."""
    if profile is None:
        return NodeFabric(efa_capable=None, nvswitch=None)
    nvswitch = (True if profile.nvswitch.startswith("NVSwitch (") else
                None if "unverified" in profile.nvswitch else False)
    return NodeFabric(efa_capable=profile.efa_supported, nvswitch=nvswitch)


def nccl_transports(lines: Sequence[ParsedLine], profile: CapabilityProfile | None) -> list[NcclTransport]:
    """RULES §8 D layer 1: the transport(s) the node's NCCL used, each with its first line, group and stream."""
    found = []
    for p in lines:
        named = transport_of(p.line.message)
        if named is not None:
            found.append(TransportLine(named[0], named[1], p.line.time, p.line.log_group, p.line.log_stream,
                                       p.line.message))
    return [NcclTransport(transport=u.transport, marker=u.marker, assessment=u.assessment, why=u.why,
                          time=u.first.time, log_group=u.first.log_group, log_stream=u.first.log_stream,
                          message=u.first.message, count=u.count)
            for u in transports(found, node_fabric(profile))]


def efa_text(node: NodeInfo, profile: CapabilityProfile | None, hyperpod: bool = False) -> str:
    """`<attached> of <max>` (RULES §2); HyperPod attachment lives in a service account: Not observable."""
    if profile is None:
        return "unknown (type not read)" if node.instance_type else "unknown (instance no longer described)"
    # The API field names, so a reader can re-run `aws ec2 describe-instance-types` and find the same numbers.
    if not profile.efa_supported:
        return "not supported by the type (EfaSupported false)"
    if node.efa_attached is None:
        why = ("HyperPod instances live in a service account" if hyperpod
               else "the instance's interfaces were not described (no longer returned by DescribeInstances)")
        return f"Not observable ({why}) of MaximumEfaInterfaces {profile.max_efa_interfaces}"
    return f"{node.efa_attached} of MaximumEfaInterfaces {profile.max_efa_interfaces}"
