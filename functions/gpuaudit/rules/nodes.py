"""One node's result: coverage (§4), its GPU errors collapsed (§6), signals, and its verdict (§7)."""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from gpuaudit.domain.capability import accelerated_by_family, is_accelerated
from gpuaudit.domain.markers import BOOT_BANNER, FABRIC_MANAGER_STARTED, NCCL_MARKER
from gpuaudit.domain.nccl import NodeFabric, TransportLine, transport_of, transports
from gpuaudit.domain.streams import HMA_PREFIX, NodeIndex, stream_node_ids
from gpuaudit.model.evidence import CapabilityProfile, Evidence, GpuLine, NodeInfo, StreamActivity
from gpuaudit.model.planned_reads import KubeNode
from gpuaudit.model.result import GpuError, NcclTransport, NodeResult, NodeSignals, Signal, Verdict
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.coverage import NodeCoverage
from gpuaudit.rules.history import PERSISTING_SIGNALS, Memory, remember
from gpuaudit.rules.hma import HmaDetection, parse_hma
from gpuaudit.rules.xid import SRAM_THRESHOLD, SramThreshold, classify
from gpuaudit.rules.xid_lines import XidLine, fallen_off_bus, is_benign, parse_xid
from gpuaudit.rules.xid_routing import NodeRouting, NodeXid, is_blackwell, route_node

# Collapsing key: the same fault repeated differs only in timestamps, PIDs and addresses.
_NOISE = re.compile(r"^\S+\s+\d+\s[\d:]+\s\S+\s|\[\s*\d+\.\d+\]\s*|pid=\S+|0x[0-9a-fA-F_]+|\b\d{3,}\b")
NCCL = re.compile(NCCL_MARKER)


@dataclass(frozen=True)
class ParsedLine:
    line: GpuLine
    xid: XidLine | None
    hma: HmaDetection | None


def parse_lines(lines: Sequence[GpuLine]) -> list[ParsedLine]:
    parsed = []
    for line in lines:
        if is_benign(line.message):
            continue
        hma = parse_hma(line.message) if line.log_stream.startswith(HMA_PREFIX) else None
        text = hma.message if hma and hma.message else line.message
        parsed.append(ParsedLine(line, parse_xid(text), hma))
    return _with_fallen_off_bus(parsed)


def _with_fallen_off_bus(parsed: list[ParsedLine]) -> list[ParsedLine]:
    """RULES §6: the Xid-less "fallen off the bus" messages, read per stream (they span several lines)."""
    streams: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, p in enumerate(parsed):
        if "NVRM" in p.line.message:
            streams[(p.line.log_group, p.line.log_stream)].append(i)
    for indexes in streams.values():
        ordered = sorted(indexes, key=lambda i: parsed[i].line.time)  # stable: shipped order within a time
        found = fallen_off_bus([(parsed[i].line.time, parsed[i].line.message) for i in ordered])
        for position, xid in found.items():
            parsed[ordered[position]] = replace(parsed[ordered[position]], xid=xid)
    return parsed


def _normalized(message: str) -> str:
    return _NOISE.sub("#", message).strip()


def collapse(node_lines: Sequence[ParsedLine], overrides: Mapping[int, str] | None,
             start: datetime, end: datetime) -> list[GpuError]:
    """One entry per (PCI bus, code, normalized message): a fleet can emit 100,000 identical Xid lines."""
    entries: dict[tuple[str | None, int | None, str], GpuError] = {}
    shipped: set[tuple[datetime, tuple[str | None, int | None, str]]] = set()
    for p in node_lines:
        if p.xid is None or not (start <= p.line.time <= end):
            continue
        if p.hma is not None and p.hma.is_dcgm_echo:
            continue  # the DCGM policy-violation line repeats the detection's own Xid
        key = (p.xid.pci, p.xid.code, _normalized(p.xid.raw))
        if (p.line.time, key) in shipped:
            continue  # the same kernel line shipped to two sources is one event, not two
        shipped.add((p.line.time, key))
        found = entries.get(key)
        if found is not None:
            entries[key] = found.model_copy(update={"count": found.count + 1, "last_time": p.line.time})
            continue
        c = classify(p.xid.code, p.xid.text, overrides)
        entries[key] = GpuError(
            time=p.line.time, last_time=p.line.time, code=p.xid.code, pci=p.xid.pci,
            gpu_instance=p.xid.gpu_instance, compute_instance=p.xid.compute_instance, class_=c.class_,
            log_group=p.line.log_group, log_stream=p.line.log_stream, message=p.xid.raw,
            meaning=c.meaning + (f" (class overridden to {c.override} by configuration)" if c.override else "")
            # RULES §6: where the line and the decode (or code and text) disagree, the row says so whatever decided
            # the node (NVLink5's register decode over the printed word, a 71 routed as 74, a 154 value's name).
            + (f" — {c.disagreement}" if c.disagreement else "")
            if c.meaning else ("unknown code: quoted verbatim, see https://docs.nvidia.com/deploy/xid-errors/"),
            source="hma" if p.hma else "kernel", hma_reason=p.hma.reason if p.hma else None)
    return sorted(entries.values(), key=lambda e: e.time)


def node_xids(node_lines: Sequence[ParsedLine], end: datetime) -> list[NodeXid]:
    out = []
    for p in node_lines:
        if p.xid is None or p.line.time > end or (p.hma is not None and p.hma.is_dcgm_echo):
            continue
        out.append(NodeXid(time=p.line.time, code=p.xid.code, pci=p.xid.pci, gpu_instance=p.xid.gpu_instance,
                           compute_instance=p.xid.compute_instance, text=p.xid.text,
                           hma_reason=p.hma.reason if p.hma else None,
                           hma_recommendation=(p.hma.recommendation or p.hma.repair_action) if p.hma else None))
    return out


def signals(lines: Sequence[ParsedLine], fabric_manager_expected: bool) -> NodeSignals:
    """NCCL and Fabric Manager from the node's lines; EFA counters and GPU activity need metrics this
    audit does not read yet, so they stay Not observable (a gap, never a clean result)."""
    fm: Signal
    nccl: Signal = "Observable" if any(NCCL.search(p.line.message) for p in lines) else "Not observable"
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


DIRECT_CHECK = "`dmesg -T | grep -i nvrm`, `journalctl -k | grep -i xid`"


@dataclass(frozen=True)
class AgentStreams:
    """The evidence's health-agent signs of life by node, indexed once per audit (a scan of every stream per node
    was quadratic: 60 s of a 10,000-node judge). Each list keeps the evidence's order."""

    live: dict[str, list[StreamActivity]]  # the node's own HMA streams with lines in the padded window
    detections: dict[str, list[GpuLine]]  # detection lines of the node's own HMA stream
    kube: dict[str, KubeNode]  # by instance ID and by name, the first listed

    @classmethod
    def of(cls, evidence: Evidence) -> AgentStreams:
        live: dict[str, list[StreamActivity]] = {}
        for a in evidence.stream_activity:
            if a.log_group == evidence.hma_log_group and a.log_stream.startswith(HMA_PREFIX) and a.lines > 0:
                live.setdefault(a.log_stream.rsplit("/", 1)[-1], []).append(a)
        detections: dict[str, list[GpuLine]] = {}
        for g in evidence.gpu_lines:
            if g.log_stream.startswith(HMA_PREFIX):
                detections.setdefault(g.log_stream.rsplit("/", 1)[-1], []).append(g)
        kube: dict[str, KubeNode] = {}
        for k in evidence.kube_nodes or []:
            for key in (k.instance_id, k.name):
                if key:
                    kube.setdefault(key, k)
        return cls(live, detections, kube)


def agent_live(instance_id: str, evidence: Evidence, start: datetime, end: datetime,
               agents: AgentStreams | None = None) -> str | None:
    """Was the node's own health-agent stream live in the window (RULES §4: a node's own HMA stream with a line
    inside the padded window is live; §7 precedence)? Said with the stream it rests on; None when not shown.
    Read from the per-stream summary over the padded window, else a detection line of the node inside the window,
    else an EKS node-health condition of the node that changed inside the window. `agents`: the evidence's index
    (AgentStreams.of), built once by a caller asking for every node."""
    agents = agents or AgentStreams.of(evidence)
    for a in agents.live.get(instance_id, []):
        last = f", last {iso(a.last_event)}" if a.last_event else ""
        return (f"the node's own health-agent stream {a.log_group} / {a.log_stream} was live in the window "
                f"({a.lines} line(s) in the padded window{last})")
    seen = [g for g in agents.detections.get(instance_id, []) if start <= g.time <= end]
    if seen:
        return (f"the node's own health-agent stream {seen[-1].log_group} / {seen[-1].log_stream} was live in the "
                f"window (a detection at {iso(seen[-1].time)})")
    kube = agents.kube.get(instance_id)
    changed = [c for c in (kube.conditions if kube else []) if c.last_transition and start <= c.last_transition <= end]
    if kube is not None and changed:
        return (f"the EKS node {kube.name}'s health conditions were live in the window ({changed[-1].type} changed at "
                f"{iso(changed[-1].last_transition or end)})")
    return None


def kernel_gap(coverage: NodeCoverage) -> str | None:
    """The node's kernel-log coverage when none of it is Measured (None when a kernel source proves it)."""
    kernel = [r for r in coverage.rows if r.source_kind == "kernel" and r.log_group.startswith("/")]
    if any(r.status == "Measured" for r in kernel):
        return None
    if not kernel:
        return "no kernel-log source names this node (HyperPod does not ship the kernel log)"
    return "; ".join(f"{r.log_group} / {r.log_stream or 'no stream'}: {r.status}" for r in kernel)


def verdict_for(routing: NodeRouting | None, coverage: NodeCoverage, accelerated: bool,
                live: str | None = None) -> tuple[Verdict | None, str | None]:
    """The node's one verdict (RULES §7) with its precedence: a hardware bar met on what was read wins over a
    coverage gap; LEAVE ALONE on what was read stands when the node's own health-agent stream was live (`live`),
    with the kernel-coverage gap stated and the direct check named; with nothing from the node live, NOT OBSERVABLE,
    still stating the application reading (the hand-off to its owner is in the actions)."""
    blind = coverage.xid_status == "Not observable" and accelerated
    if routing is not None and routing.verdict == "LEAVE ALONE":
        gap = kernel_gap(coverage) if accelerated else None
        if blind and live is None:
            # LEAVE ALONE claims there is no hardware-class Xid: on unproven coverage that was never read.
            return "NOT OBSERVABLE", (f"{routing.verdict_evidence} — but coverage could not be proven and nothing from "
                                      "the node was live in the window, so a hardware-class Xid cannot be ruled out: "
                                      f"check the node directly ({DIRECT_CHECK}) before leaving it alone")
        if gap is not None:
            agent = f"; {live}" if live else ""
            return "LEAVE ALONE", (f"{routing.verdict_evidence}{agent}; kernel-log coverage not proven ({gap}): a "
                                   "hardware-class Xid the agent does not report cannot be ruled out — check the node "
                                   f"directly ({DIRECT_CHECK})")
    if routing is not None and routing.verdict is not None:
        return routing.verdict, routing.verdict_evidence
    if routing is not None and routing.hypothesis:
        # A held verdict (rule 48 split UNVERIFIED): watch the node, run the deciding check before acting.
        return "MONITOR", (f"Hypothesis (to validate): {routing.verdict_evidence} Deciding check: "
                           f"{routing.deciding_check}")
    if routing is not None and routing.cause_code is not None:
        return "MONITOR", routing.verdict_evidence
    if blind:
        where = "; ".join(f"{r.log_group} / {r.log_stream or 'no stream'}: {r.status}" for r in coverage.rows)
        return "NOT OBSERVABLE", (f"GPU error coverage could not be proven ({where}); check the node directly "
                                  f"({DIRECT_CHECK}) and fix log shipping")
    return None, None


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




@dataclass(frozen=True)
class MemorySignal:
    """A non-Xid memory signal of RULES §6 as nvidia-smi or the driver prints it, and the verdicts it carries."""

    marker: str  # the words as printed (nvidia-smi's field name, or the driver's phrase)
    verdict: Verdict
    persisting: Verdict  # the verdict when it is seen again after a reboot
    flag: bool = True  # an nvidia-smi `Field : Yes` line; False: a phrase matched as it stands
    # What must follow the marker on the same line when the field is not `marker : Yes` itself (a section header
    # with its field after it, e.g. `Remapped Rows … Pending : Yes`); a regex, matched after the marker.
    then: str | None = None
    hardware: bool = True  # False: a trend to watch (MONITOR), not a hardware verdict (RULES §7)

    @functools.cached_property  # built once per signal, not once per line (10,000 nodes × 9 signals × their lines)
    def pattern(self) -> re.Pattern[str]:
        # nvidia-smi -q pads its fields (`SRAM Threshold Exceeded           : Yes`): any spacing around the colon.
        tail = rf"\b.*?{self.then}" if self.then else (r"\s*:\s*Yes\b" if self.flag else "")
        return re.compile(re.escape(self.marker) + tail, re.IGNORECASE)

    def seen_in(self, message: str) -> bool:
        return self.pattern.search(message) is not None


MEMORY_SIGNALS: tuple[MemorySignal, ...] = (
    MemorySignal("infoROM is corrupted", "REBOOT", "REPLACE", flag=False),
    MemorySignal("Remapping Failure Occurred", "REPLACE", "REPLACE"),
    MemorySignal("SRAM Threshold Exceeded", "REPLACE", "REPLACE"),
    MemorySignal("Unrepairable Memory", "REPLACE", "REPLACE"),
    MemorySignal("Pending Page Blacklist", "REBOOT", "REBOOT"),
    MemorySignal("Channel Repair Pending", "REBOOT", "REBOOT"),
    MemorySignal("TPC Repair Pending", "REBOOT", "REBOOT"),
    # The Remapped Rows section's own `Pending` field (not `Pending Page Blacklist`): a remap awaiting the reset that
    # activates it (RULES §6, §7 "a pending row remap").
    MemorySignal("Remapped Rows", "REBOOT", "REBOOT", then=r"\bPending\s*:\s*Yes\b"),
    # Bank remap availability drifting from Max toward Low/None: any bank counted at Partial, Low or None is an early
    # warning (MONITOR), never a hardware verdict (docs/decisions.md).
    MemorySignal("Bank Remap Availability", "MONITOR", "MONITOR",
                 then=r"\b(?:Partial|Low|None)\s*:\s*0*[1-9]", hardware=False),
)
# Any memory signal's marker, as its own pattern matches it (same case folding): a line none is in can hold no signal,
# so the nine patterns are tried only on the few lines that hold a marker (10,000 nodes × 9 × 2 scans before). An
# ASCII line is asked with substrings of its lower case (the markers are ASCII, and the regex engine folds an ASCII
# letter only to its own other case); any other line with the pattern, which also folds `ſ`, `K`, `İ` to ASCII.
ANY_MEMORY_MARKER = re.compile("|".join(re.escape(s.marker) for s in MEMORY_SIGNALS), re.IGNORECASE)
_MARKERS_LOWER = tuple(s.marker.lower() for s in MEMORY_SIGNALS)


def may_hold_memory_signal(message: str) -> bool:
    if message.isascii():
        lowered = message.lower()
        return any(marker in lowered for marker in _MARKERS_LOWER)
    return ANY_MEMORY_MARKER.search(message) is not None


def _may_hold_memory_signal(lines: Sequence[ParsedLine]) -> list[ParsedLine]:
    return [p for p in lines if may_hold_memory_signal(p.line.message)]


STRENGTH = {None: 0, "LEAVE ALONE": 1, "MONITOR": 2, "NOT OBSERVABLE": 2, "REBOOT": 3, "REPLACE": 4}


def sram_threshold(lines: Sequence[ParsedLine], end: datetime) -> SramThreshold | None:
    """The newest `SRAM Threshold Exceeded : Yes|No` reading among the node's lines up to `end` (rule 48)."""
    readings = [(p.line, m) for p in lines if p.line.time <= end and (m := SRAM_THRESHOLD.search(p.line.message))]
    if not readings:
        return None
    line, match = max(readings, key=lambda r: r[0].time)
    return SramThreshold(exceeded=match["value"].lower() == "yes", time=line.time,
                         where=f"{line.log_group} / {line.log_stream}")


def memory_signal_routing(lines: Sequence[ParsedLine], reboots: Sequence[datetime],
                          routing: NodeRouting | None) -> NodeRouting | None:
    """The strongest non-Xid memory signal, when it asks for more than the Xids do; persisting across a
    reboot (seen before and after one) escalates as §6 says."""
    best: NodeRouting | None = None
    lines = _may_hold_memory_signal(lines)
    for signal in MEMORY_SIGNALS if lines else ():
        found = [p.line for p in lines if signal.seen_in(p.line.message)]
        if not found:
            continue
        seen = sorted(line.time for line in found)
        persists = any(seen[0] < r < seen[-1] for r in reboots)
        chosen = signal.persisting if persists else signal.verdict
        where = found[0]
        candidate = NodeRouting(
            verdict=chosen,
            verdict_evidence=(f"`{where.message.strip()[:200]}` at {iso(seen[0])} in {where.log_group} / "
                              f"{where.log_stream}" + (f", again after a reboot at {iso(seen[-1])}" if persists else "")
                              + f" → {chosen} (non-Xid memory signal `{signal.marker}`, RULES §6)"),
            hardware=signal.hardware)
        if best is None or STRENGTH[candidate.verdict] > STRENGTH[best.verdict]:
            best = candidate
    if best is None or (routing is not None and STRENGTH[routing.verdict] >= STRENGTH[best.verdict]):
        return routing
    return best


# The health agent's own word (RULES §7): a detection that asks to replace or reboot the node is that verdict.
HMA_REPLACE = ("NvidiaErrorTerminate",)
HMA_REBOOT = ("NvidiaErrorReboot",)
# A failed deep health check, as HyperPod writes it in `DeepHealthCheckResults/…` (and lifecycle logs quote it).
FAULTY_INSTANCE = re.compile(r"Encountered FaultyInstance\.?\s*Replace the Instance", re.IGNORECASE)


def hma_asks(d: HmaDetection) -> Verdict | None:
    """REPLACE or REBOOT when the agent's detection asks for it (its condition, repair action, recommendation or
    message); an application-caused detection (XidUserAppError) asks for neither."""
    if d.reason == "XidUserAppError" or d.is_dcgm_echo:
        return None
    said = " ".join(x for x in (d.repair_action, d.recommendation, d.message) if x).lower()
    if d.condition in HMA_REPLACE or "replace" in said:
        return "REPLACE"
    if d.condition in HMA_REBOOT or "reboot" in said:
        return "REBOOT"
    return None


@dataclass(frozen=True)
class ServiceWord:
    """What one of the service's own log lines asks for the node (RULES §7 precedence: the service's word counts
    as read), in the service's words."""

    verdict: Verdict
    said: str  # what the service wrote, named as it writes it
    source: str  # whose word: the health agent, the deep health check


def service_says(p: ParsedLine) -> ServiceWord | None:
    """The one reader of the service's own word in a log line: an HMA detection asking for a node action, or a
    deep health check reporting a faulty instance (in its results stream or quoted by a lifecycle log)."""
    if p.hma is not None:
        asked = hma_asks(p.hma)
        if asked is None:
            return None
        said = f"HealthMonitoringAgentDetectionEvent: {p.hma.words}" + (f": {p.hma.message[:200]}" if p.hma.message
                                                                          else "")
        return ServiceWord(asked, said, "the health agent's own recommendation")
    if FAULTY_INSTANCE.search(p.line.message):
        return ServiceWord("REPLACE", f"deep health check failed: `{p.line.message.strip()[:240]}`",
                           "a failed deep health check")
    return None


def service_routing(lines: Sequence[ParsedLine], end: datetime, routing: NodeRouting | None) -> NodeRouting | None:
    """The strongest line of the service's own word that asks for a node action, when it asks for more than the
    Xids do: an HMA detection whose condition is NvidiaErrorTerminate or whose recommendation says "Please Replace
    the Faulty Node", or a failed deep health check, is a REPLACE even when no Xid line carries it."""
    best: NodeRouting | None = None
    for p in lines:
        if p.line.time > end or (word := service_says(p)) is None:
            continue
        if best is not None and STRENGTH[best.verdict] >= STRENGTH[word.verdict]:
            continue
        best = NodeRouting(
            verdict=word.verdict, hardware=True,
            verdict_evidence=(f"{word.said} at {iso(p.line.time)} in {p.line.log_group} / {p.line.log_stream} → "
                              f"{word.verdict} ({word.source}, RULES §7)"))
    if best is None or (routing is not None and STRENGTH[routing.verdict] >= STRENGTH[best.verdict]):
        return routing
    return best


def service_rows(lines: Sequence[ParsedLine], start: datetime, end: datetime) -> list[GpuError]:
    """Lines of the service's own word asking for a node action without an Xid line are GPU error rows too (no
    code), named as the service writes them, so the verdict they decide shows the line it rests on."""
    rows = []
    for p in lines:
        if p.xid is not None or not (start <= p.line.time <= end) or (word := service_says(p)) is None:
            continue
        rows.append(GpuError(time=p.line.time, last_time=p.line.time, code=None, class_="hardware",
                             log_group=p.line.log_group, log_stream=p.line.log_stream, message=p.line.message,
                             count=1, source="hma" if p.hma else "kernel", hma_reason=p.hma.reason if p.hma else None,
                             meaning=word.said if p.hma else f"{word.source} (RULES §7)"))
    return rows


# RULES §7: HyperPod's own verdict as the EKS node labels state it (the AWS label names, and the values that ask for
# a node action): node health, and a failed deep health check.
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HEALTH_LABELS = (HEALTH_LABEL, DEEP_HEALTH_LABEL, "sagemaker.amazonaws.com/fault-type",
                 "sagemaker.amazonaws.com/fault-reason")
LABEL_VERDICT: dict[tuple[str, str], Verdict] = {(HEALTH_LABEL, "UnschedulablePendingReplacement"): "REPLACE",
                                                 (HEALTH_LABEL, "UnschedulablePendingReboot"): "REBOOT",
                                                 (DEEP_HEALTH_LABEL, "Failed"): "REPLACE"}


def kube_node_of(node: NodeInfo, evidence: Evidence) -> KubeNode | None:
    return next((k for k in evidence.kube_nodes or [] if node.instance_id in (k.instance_id, k.name)), None)


def kube_text(k: KubeNode) -> str:
    """The node's own health word: labels, taints, conditions not in their healthy state, as the API writes them."""
    labels = [f"{name}={k.labels[name]}" for name in HEALTH_LABELS if name in k.labels]
    # Ready, AcceleratedHardwareReady, KernelReady…: True is healthy; MemoryPressure, DiskPressure…: True is not.
    unhealthy = [f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "") + (
        f" since {iso(c.last_transition)}" if c.last_transition else "") for c in k.conditions
                 if (c.status != "True") == c.type.endswith("Ready")]
    parts = [f"node {k.name}", *labels, *(f"taint {t}" for t in k.taints), *(f"condition {c}" for c in unhealthy)]
    return "; ".join(parts)


def labels_asking(k: KubeNode | None) -> list[tuple[str, Verdict]]:
    """The node's labels that ask for a node action, as `name=value`, strongest first."""
    asked = [(f"{name}={value}", verdict) for (name, value), verdict in LABEL_VERDICT.items()
             if k is not None and k.labels.get(name) == value]
    return sorted(asked, key=lambda a: -STRENGTH[a[1]])


def kube_routing(k: KubeNode | None, routing: NodeRouting | None) -> NodeRouting | None:
    """A label that asks for REPLACE or REBOOT is that verdict (RULES §7) when it asks for more than the logs."""
    asked = labels_asking(k)
    if k is None or not asked or (routing is not None and STRENGTH[routing.verdict] >= STRENGTH[asked[0][1]]):
        return routing
    label, verdict = asked[0]
    return NodeRouting(verdict=verdict, hardware=True,
                       verdict_evidence=f"Kubernetes {k.name}: label {label} → {verdict} (HyperPod's own verdict on "
                                        "the EKS node, RULES §7)")


def kube_rows(k: KubeNode | None, evidence: Evidence) -> list[GpuError]:
    """A label asking for REPLACE/REBOOT is a row of the GPU errors table (no code), so the verdict shows it."""
    if k is None:
        return []
    changed = [c.last_transition for c in k.conditions if c.last_transition]
    return [GpuError(time=max(changed) if changed else evidence.now, code=None, class_="hardware",
                     log_group=f"kubernetes {evidence.cluster.eks_cluster}", log_stream=f"node/{k.name}",
                     message=label, source="hma",
                     meaning="node label set by HyperPod on the EKS node (RULES §7)")
            for label, _verdict in labels_asking(k)]


def kube_disagreement(k: KubeNode | None, verdict: Verdict | None) -> str | None:
    """The label and the logs tell different stories: said, never silently resolved."""
    if k is None:
        return None
    label = k.labels.get(HEALTH_LABEL)
    asked = labels_asking(k)
    labelled = asked[0][1] if asked else None
    if verdict in ("REPLACE", "REBOOT") and labelled is None:
        return (f"the EKS node {k.name} is labelled {HEALTH_LABEL}={label or '(absent)'}: the node's own health "
                "status does not ask for it — the sources disagree")
    if labelled is not None and verdict not in (labelled, "REPLACE"):
        return f"the EKS node {k.name} is labelled {asked[0][0]} while the logs give {verdict or 'no verdict'}"
    return None


def deciding_rows(lines: Sequence[ParsedLine], routing: NodeRouting | None, rows: list[GpuError],
                  overrides: Mapping[int, str] | None, window_start: datetime) -> list[GpuError]:
    """The Xid a verdict rests on can precede the window (the GPU lines are read from 30 min before it): its row
    joins the table, said to be before the window, so the verdict always shows the line it rests on."""
    code = routing.cause_code if routing is not None else None
    if code is None or any(e.code == code for e in rows):
        return []
    earlier = [p for p in lines if p.xid is not None and p.xid.code == code and p.line.time < window_start]
    if not earlier:
        return []
    found = collapse(earlier, overrides, min(p.line.time for p in earlier), window_start - timedelta(microseconds=1))
    return [e.model_copy(update={"meaning": f"{e.meaning} — before the window: the Xid the verdict rests on"})
            for e in found]


def memory_signal_rows(lines: Sequence[ParsedLine], start: datetime, end: datetime) -> list[GpuError]:
    """Non-Xid memory signals in the window are rows of the GPU errors table too (no code): a verdict they
    decide must show the line it rests on beside the Xids."""
    rows = []
    lines = _may_hold_memory_signal(lines)
    for signal in MEMORY_SIGNALS if lines else ():
        seen = [p.line for p in lines if signal.seen_in(p.line.message) and start <= p.line.time <= end]
        if seen:
            first = seen[0]
            rows.append(GpuError(time=first.time, last_time=seen[-1].time, code=None,
                                 class_="hardware" if signal.hardware else "informational",
                                 log_group=first.log_group, log_stream=first.log_stream, message=first.message,
                                 count=len(seen), meaning=f"non-Xid memory signal `{signal.marker}` (RULES §6)"))
    return rows


def reboot_times(node: NodeInfo, evidence: Evidence, lines: Sequence[ParsedLine]) -> list[datetime]:
    """When the node booted again: a kernel banner in its own stream, or a reboot call naming it."""
    times = [p.line.time for p in lines if BOOT_BANNER.search(p.line.message)]
    times += [e.time for e in evidence.cloudtrail or []
              if e.event_name == "BatchRebootClusterNodes" and not e.error_code
              and node.instance_id in str(e.request_parameters or {})]
    return sorted(times)


def deciding_xid(routing: NodeRouting | None, verdict: Verdict | None) -> int | None:
    """The Xid the node's verdict rests on: the routing's cause when the verdict is the routing's (or the MONITOR a
    held or unmet routing shows as, `verdict_for`); None when a coverage gap or no Xid decided it."""
    if routing is None or routing.cause_code is None or verdict in (None, "NOT OBSERVABLE"):
        return None
    return routing.cause_code if verdict in (routing.verdict, "MONITOR") else None


def with_reboots_between(rows: Sequence[GpuError], reboots: Sequence[datetime]) -> list[GpuError]:
    """Each row collapsed from several occurrences names the reboots between its first and last one."""
    return [row.model_copy(update={"reboots_between": between}) if row.last_time is not None and (
        between := [r for r in reboots if row.time < r < row.last_time]) else row for row in rows]


def reboots_by_node(evidence: Evidence) -> dict[str, list[datetime]]:
    """Every node's reboots as `reboot_times` sees them (the history records them for later audits)."""
    index = NodeIndex(evidence.nodes)
    banners: dict[str, list[ParsedLine]] = defaultdict(list)
    for line in evidence.gpu_lines:
        if BOOT_BANNER.search(line.message):
            for iid in stream_node_ids(line.log_stream, index):
                banners[iid].append(ParsedLine(line, None, None))
    return {n.instance_id: reboot_times(n, evidence, banners.get(n.instance_id, [])) for n in evidence.nodes}


def _signal_times(lines: Sequence[ParsedLine], end: datetime) -> dict[str, list[datetime]]:
    return {marker: times for marker in PERSISTING_SIGNALS
            if (times := sorted(p.line.time for p in lines if marker in p.line.message and p.line.time <= end))}


def assess_node(node: NodeInfo, evidence: Evidence, coverage: NodeCoverage, lines: Sequence[ParsedLine],
                overrides: Mapping[int, str] | None, window_start: datetime, window_end: datetime,
                service_action: str | None, memory: Memory | None = None,
                agents: AgentStreams | None = None) -> tuple[NodeResult, NodeRouting | None]:
    accelerated = is_accelerated(node, evidence)
    profile = evidence.profiles.get(node.instance_type or "")
    kube = kube_node_of(node, evidence)
    gpu_errors = sorted([*collapse(lines, overrides, window_start, window_end),
                         *memory_signal_rows(lines, window_start, window_end),
                         *service_rows(lines, window_start, window_end), *kube_rows(kube, evidence)],
                        key=lambda e: e.time)
    xids = node_xids(lines, window_end)
    reboots = reboot_times(node, evidence, lines)
    routing = route_node(xids, node_running=node.status in ("Running", "running"), overrides=overrides,
                         reboot_times=reboots, blackwell=is_blackwell(node.instance_type, profile.gpu_name if profile
                                                                      else None),
                         sram_threshold=sram_threshold(lines, window_end)) if xids else None
    routing = memory_signal_routing(lines, reboots, routing)
    routing = service_routing(lines, window_end, routing)
    routing = kube_routing(kube, routing)
    remembered = remember(node, memory or Memory("off"), routing, xids, _signal_times(lines, window_end), reboots,
                          overrides, accelerated)
    routing = remembered.routing
    history_rows = remembered.rows if not any(e.class_ == "hardware" for e in gpu_errors) else []
    gpu_errors = with_reboots_between(sorted([*gpu_errors, *history_rows,
                                              *deciding_rows(lines, routing, gpu_errors, overrides, window_start)],
                                             key=lambda e: e.time), reboots)
    verdict, evidence_text = verdict_for(routing, coverage, accelerated,
                                         agent_live(node.instance_id, evidence, window_start, window_end, agents))
    if (disagreement := kube_disagreement(kube, verdict)) is not None:
        evidence_text = f"{evidence_text}; {disagreement}" if evidence_text else disagreement
    efa = efa_text(node, profile, evidence.cluster.kind.startswith("hyperpod"))
    return NodeResult(
        instance_id=node.instance_id, instance_group=node.instance_group, instance_type=node.instance_type,
        status=node.status, role=node.role, discovered_by=node.discovered_by,
        gpu_count=profile.gpu_count if profile else (0 if accelerated_by_family(node.instance_type) is False else None),
        verdict=verdict,
        verdict_evidence=evidence_text, deciding_xid=deciding_xid(routing, verdict),
        xid_status=coverage.xid_status, coverage=coverage.rows,
        gpu_errors=gpu_errors,
        signals=signals(lines, profile.fabric_manager_expected if profile else False),
        nccl_transports=nccl_transports(lines, profile),
        efa=efa, nvswitch=profile.nvswitch if profile else "unverified (type unknown)",
        service_action=service_action, kubernetes=kube_text(kube) if kube else None,
        history=remembered.note), routing
