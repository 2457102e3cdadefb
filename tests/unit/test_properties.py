"""Property tests over generated evidence (hypothesis): the product's promises hold for any input."""

from __future__ import annotations

import re
from datetime import timedelta
from functools import cache

from helpers.worlds import PClusterWorld, at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaudit.domain.window import padded
from gpuaudit.model.evidence import AuditRequest, Evidence, Gap, GpuLine, StreamActivity
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import collect
from gpuaudit.report.markdown import finalize
from gpuaudit.rules.judge import JudgeConfig, judge

APPLICATION_XIDS = (11, 13, 25, 31, 32, 94, 137)
HARDWARE_HEADLINE = re.compile(r"(?i)(?<!no )(?<!not a )hardware (error|fault|failure)")
BARE_12_DIGITS = re.compile(r"(?<![\w-])\d{12}(?!\w)")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def base_evidence(mode: str) -> Evidence:
    """Three measured GPU nodes, collected once; properties vary the evidence, not the world."""
    w = PClusterWorld("prop", n_compute=3)
    for n in w.compute:
        w.healthy(n, at(-48), at(13))
    aws = w.aws()
    return collect(aws, AuditRequest(cluster="prop", mode=mode, since=parse_time(at(8)),  # type: ignore[arg-type]
                                     until=parse_time(at(11))))


def run(evidence: Evidence):
    return finalize(judge(evidence, JudgeConfig(), generated_at=evidence.now), evidence)


def stream_of(evidence: Evidence, index: int) -> tuple[str, str]:
    k = sorted(evidence.kernel_streams, key=lambda k: k.log_stream)[index]
    return k.log_group, k.log_stream


def xid_line(evidence: Evidence, node_index: int, code: int, minute: int, pci: str, hma_reason: str | None) -> GpuLine:
    """An Xid on a node's kernel stream, as a kernel line or inside a health-agent detection with `hma_reason`."""
    group, stream = stream_of(evidence, node_index)
    text = f"NVRM: Xid (PCI:{pci}): {code}, pid=77, name=python3, channel 0x10"
    message = (f'{{"level":"info","msg":"NPD caught event","details: ":{{"reason":"{hma_reason}",'
               f'"message":"{text}"}}}}') if hma_reason else f"host kernel: {text}"
    return GpuLine(time=parse_time(at(8)) + timedelta(minutes=minute), log_group=group, log_stream=stream,
                   message=message)


app_xid = st.tuples(st.integers(0, 2), st.sampled_from(APPLICATION_XIDS), st.integers(0, 179),
                    st.sampled_from(["0000:53:00", "0000:64:00", "0000:00:1e"]), st.booleans())


@SETTINGS
@given(st.lists(app_xid, min_size=1, max_size=12), st.sampled_from(["coverage", "incident"]))
def test_application_class_evidence_never_yields_hardware_action(xids, mode) -> None:
    evidence = base_evidence(mode)
    lines = [xid_line(evidence, node_index, code, minute, pci, "XidUserAppError" if hma_style else None)
             for node_index, code, minute, pci, hma_style in xids]
    result = run(evidence.model_copy(update={"gpu_lines": sorted(lines, key=lambda g: g.time)}))
    assert all(n.verdict not in ("REPLACE", "REBOOT") for n in result.nodes)
    assert not HARDWARE_HEADLINE.search(result.headline)
    assert all(not (b.branch == "A" and b.status == "Root cause") for b in result.branches)


@SETTINGS
@given(st.sets(st.integers(0, 5), max_size=6))
def test_no_measured_without_a_line_in_every_hour(silent_hours) -> None:
    evidence = base_evidence("coverage")
    pad = padded(evidence.window, evidence.now)
    target = stream_of(evidence, 0)
    hours = pad.hours
    counts = {h: 12 for i, h in enumerate(hours) if i not in silent_hours}
    activity = [StreamActivity(log_group=a.log_group, log_stream=a.log_stream, lines=sum(counts.values()),
                               live_hours=len(counts), first_event=a.first_event, last_event=a.last_event,
                               hour_counts=counts) if (a.log_group, a.log_stream) == target else a
                for a in evidence.stream_activity]
    result = run(evidence.model_copy(update={"stream_activity": activity}))
    row = next(r for n in result.nodes for r in n.coverage if (r.log_group, r.log_stream) == target)
    silent = {hours[i] for i in silent_hours if i < len(hours)}
    assert (row.status == "Measured") == (not silent)
    assert set(row.empty_hours) == silent


@SETTINGS
@given(st.lists(st.from_regex(r"\d{12}", fullmatch=True), min_size=1, max_size=3))
def test_no_account_id_in_report_or_alert(accounts) -> None:
    evidence = base_evidence("incident")
    group, stream = stream_of(evidence, 1)
    lines = [GpuLine(time=parse_time(at(9)), log_group=group, log_stream=stream,
                     message=f"host kernel: NVRM: Xid (PCI:0000:53:00): 79, arn:aws:iam::{a}:role/x owner {a}")
             for a in accounts]
    result = run(evidence.model_copy(update={"gpu_lines": lines}))
    assert not BARE_12_DIGITS.search(result.report_markdown)
    for a in accounts:
        assert not re.search(rf"(?<![\w-]){a}(?!\w)", result.report_markdown)


GAP_KINDS = ("denied", "throttled", "unavailable", "expired-credentials", "unreachable", "deadline", "timed-out",
             "query-failed", "truncated")
random_gap = st.builds(
    lambda kind, op, node_list: Gap(kind=kind, service=op[0], operation=op[1], error_code="Injected",
                                    error_message="injected", unseen="random gap",
                                    scope="node-list" if node_list else None),
    st.sampled_from(GAP_KINDS),
    st.sampled_from([("logs", "StartQuery"), ("sagemaker", "ListClusterNodes"), ("ec2", "DescribeInstances"),
                     ("ec2", "DescribeCapacityReservations"), ("cloudtrail", "LookupEvents")]),
    st.booleans())
any_xid = st.tuples(st.integers(0, 2), st.integers(1, 160), st.integers(0, 179), st.booleans())


@SETTINGS
@given(mode=st.sampled_from(["coverage", "incident", "preflight"]), gaps=st.lists(random_gap, max_size=4),
       dropped=st.sets(st.integers(0, 2), max_size=3), xids=st.lists(any_xid, max_size=6),
       no_capacity=st.booleans(), no_trail=st.booleans(), failed_node=st.sampled_from([None, 0, 1, 2]))
def test_random_evidence_with_random_gaps_never_breaks_an_invariant(mode, gaps, dropped, xids, no_capacity, no_trail,
                                                                   failed_node) -> None:
    evidence = base_evidence(mode)
    lost = {stream_of(evidence, i) for i in dropped}
    lines = [xid_line(evidence, node_index, code, minute, "0000:53:00", "XidHardwareFailure" if hma_style else None)
             for node_index, code, minute, hma_style in xids]
    nodes = [n.model_copy(update={"status": "Failure"}) if failed_node is not None and n.instance_id ==
             sorted(x.instance_id for x in evidence.nodes if x.role == "compute")[failed_node] else n
             for n in evidence.nodes]
    changed = evidence.model_copy(update={
        "gaps": [*evidence.gaps, *gaps], "nodes": nodes,
        "stream_activity": [a for a in evidence.stream_activity if (a.log_group, a.log_stream) not in lost],
        "kernel_streams": [k for k in evidence.kernel_streams if (k.log_group, k.log_stream) not in lost],
        "gpu_lines": sorted(lines, key=lambda g: g.time),
        "capacity_reservations": None if no_capacity else evidence.capacity_reservations,
        "cloudtrail": None if no_trail else evidence.cloudtrail,
        "cloudtrail_complete": False if no_trail else evidence.cloudtrail_complete})
    result = run(changed)
    assert not result.invariants_broken, result.self_check
