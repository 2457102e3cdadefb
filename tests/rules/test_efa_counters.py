"""Branch D layer 3, EFA counters (issue #53), written from RULES §8 D and §4:

"EFA counters (`efa_retrans_pkts`, `efa_retrans_timeout_events`, `efa_impaired_remote_conn_events`,
`efa_unresponsive_remote_events`, `efa_rx_dropped`, `efa_rdma_read_wr_err`, `efa_rdma_write_wr_err`; HyperPod
`node_amazonefa_*`): a rise at or before the hang supports D; a rise after it is an effect." — "D is Proven only with
a layer 1–3 signal on the affected nodes before the hang"; "Confidence is High only when the root-cause signal is on
the affected node, precedes the failure, and nothing competes." §4: EFA counters are Observable, Not observable or
Not applicable per node; a missing signal is a gap, never a clean result; HyperPod's live in the observability add-on.

The operator's case: a ParallelCluster job on two p5.48xlarge nodes hangs at 08:00 (stated onset); the CloudWatch
agent publishes `efa_*` counters (namespace CWAgent, deltas, per EFA `device` and `port`), one node named by `host`,
the other by an appended InstanceId. Kernel logs are live and clean. A rise is measured against the counter's own
rate before the window (docs/decisions.md: above 3× its mean per 5 minutes and above its largest 5 minutes).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuaudit import pipeline
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Branch, Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.report.html import render_html
from tests.helpers.worlds import HyperPodWorld, Node, PClusterWorld, at, node_of

SINCE, UNTIL, HANG = at(6), at(10), at(8)
TIMEOUTS = "efa_retrans_timeout_events"
RETRANS = "efa_retrans_pkts"
Count = Callable[[Node, int], float]  # (node, minute since 00:00) → count in the 5 minutes from then


def _world(metric: str, count: Count, *, first_minute: int = 0) -> PClusterWorld:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    for k, n in enumerate(w.compute):
        who = {"Name": "host", "Value": n.hostname} if k == 0 else {"Name": "InstanceId", "Value": n.instance_id}
        for device in ("rdmap16s27", "rdmap32s27"):
            w.section("cloudwatch", "metrics").append({
                "Namespace": "CWAgent", "MetricName": metric,
                "Dimensions": [who, {"Name": "device", "Value": device}, {"Name": "port", "Value": "1"},
                               {"Name": "eniId", "Value": f"eni-0{k}{device[-4:]}"}],
                # one datapoint per 5 minutes; the count is split over the node's two devices
                "Datapoints": [[at(m // 60, m % 60), count(n, m) / 2] for m in range(first_minute, 10 * 60 + 30, 5)]})
    return w


def _on_first(w: PClusterWorld, from_minute: int, value: float, usual: float = 0.0) -> Count:
    target = w.compute[0].instance_id
    return lambda n, m: value if n.instance_id == target and m >= from_minute else usual


def _run(w: PClusterWorld | HyperPodWorld, onset: str | None = HANG) -> Result:
    return w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL, onset=onset)


def _d(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "D")


def test_timeouts_rising_before_the_hang_on_a_node_prove_d_naming_the_node_counter_and_time() -> None:
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 7 * 60 + 30, 40.0))  # from 07:30, half an hour before the hang
    result = _run(w)
    d = _d(result)
    assert (d.status, d.label) == ("Root cause", "Proven")
    assert w.compute[0].instance_id in d.evidence and TIMEOUTS in d.evidence and at(7, 30) in d.evidence
    assert w.compute[1].instance_id in d.evidence and "no rise" in d.evidence  # the quiet peer, read and said
    node = node_of(result, w.compute[0].instance_id)
    assert node.signals.efa_counters == "Observable"
    assert node.signals.efa_counters_detail is not None and "rose" in node.signals.efa_counters_detail
    assert node_of(result, w.compute[1].instance_id).signals.efa_counters == "Observable"  # named by InstanceId
    assert result.headline.startswith("Root cause (Proven): branch D")


def test_a_rise_only_after_the_hang_is_its_effect_never_a_cause() -> None:
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 8 * 60 + 30, 40.0))  # from 08:30: after the hang
    d = _d(_run(w))
    assert d.label != "Proven" and d.status != "Root cause"
    assert "only after the hang" in d.evidence and "effect" in d.evidence and at(8, 30) in d.evidence


def test_a_rise_before_the_hang_on_a_node_with_its_own_hardware_verdict_is_a_hypothesis() -> None:
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 7 * 60 + 30, 40.0))
    node = w.compute[0]
    w.stream(w.group, w.stream_name(node), events=[(at(7, 20), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): "
                                                                "79, pid=0, GPU has fallen off the bus.")])
    result = _run(w)
    d = _d(result)
    assert node_of(result, node.instance_id).verdict in ("REPLACE", "REBOOT")
    assert d.status != "Root cause" and d.label == "Hypothesis (to validate)"
    assert TIMEOUTS in d.evidence and "competes" in d.evidence and d.confirming_measurement


def test_a_rise_with_no_hang_read_is_a_hypothesis_not_placed_before_the_failure() -> None:
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 7 * 60 + 30, 40.0))
    d = _d(_run(w, onset=None))
    assert d.status != "Root cause" and d.label == "Hypothesis (to validate)"
    assert TIMEOUTS in d.evidence and "not placed before the failure" in d.evidence


@pytest.mark.parametrize(("window_value", "rises"), [(150.0, False), (400.0, True)])
def test_a_busy_counter_rises_only_well_above_its_own_baseline(window_value: float, rises: bool) -> None:
    # retransmissions run at 100 per 5 minutes all night; from 07:00 one node shows `window_value`
    w = PClusterWorld(n_compute=2)
    w = _world(RETRANS, _on_first(w, 7 * 60, window_value, usual=100.0))
    result = _run(w)
    d = _d(result)
    detail = node_of(result, w.compute[0].instance_id).signals.efa_counters_detail or ""
    assert (d.status == "Root cause") is rises
    assert ("rose" in detail) is rises and ("no rise" in detail) is not rises


def test_counters_with_no_baseline_before_the_window_are_not_judged_a_rise() -> None:
    # the agent began publishing at 07:00, inside the window: nothing to measure a rise against
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 7 * 60 + 30, 40.0), first_minute=7 * 60)
    result = _run(w)
    d = _d(result)
    assert d.status != "Root cause" and "no baseline before the window" in d.evidence
    assert "no baseline" in (node_of(result, w.compute[0].instance_id).signals.efa_counters_detail or "")


def test_efa_nodes_without_any_series_are_not_observable_and_a_gap() -> None:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    result = _run(w)
    node = node_of(result, w.compute[0].instance_id)
    assert node.signals.efa_counters == "Not observable" and "efa" in (node.signals.efa_counters_detail or "")
    assert any("EFA counters" in g and w.compute[0].instance_id in g for g in result.visibility_gaps)
    assert "layer 3, EFA counters — Not observable" in _d(result).evidence
    # a type without EFA (the c5 head node) has no EFA counter to miss
    assert node_of(result, w.head.instance_id).signals.efa_counters == "Not applicable"


def test_counters_not_read_are_a_gap_never_a_clean_layer() -> None:
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 7 * 60 + 30, 40.0))
    w.fault("cloudwatch", "GetMetricData", "AccessDenied")
    result = _run(w)
    assert any("CWAgent EFA counters not read" in g for g in result.visibility_gaps)
    assert node_of(result, w.compute[0].instance_id).signals.efa_counters == "Not observable"
    d = _d(result)
    assert d.status != "Root cause" and "EFA counters — Not observable" in d.evidence


def test_hyperpod_efa_counters_are_not_observable_naming_the_observability_add_on() -> None:
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    result = _run(w)
    gpu = node_of(result, w.gpu[0].instance_id)
    assert gpu.signals.efa_counters == "Not observable"
    assert "node_amazonefa_" in (gpu.signals.efa_counters_detail or "")
    assert "observability add-on" in (gpu.signals.efa_counters_detail or "")
    assert any("node_amazonefa_" in g and "observability add-on" in g for g in result.visibility_gaps)
    assert "observability add-on" in _d(result).evidence


def test_one_series_per_node_and_counter_summed_over_devices_with_a_rollup_never_counted_twice() -> None:
    # the agent also publishes a rolled-up series per host (aggregation_dimensions) beside the per-device ones
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 7 * 60 + 30, 40.0))
    node = w.compute[0]
    w.section("cloudwatch", "metrics").append({
        "Namespace": "CWAgent", "MetricName": TIMEOUTS, "Dimensions": [{"Name": "host", "Value": node.hostname}],
        "Datapoints": [[at(m // 60, m % 60), 40.0 if m >= 7 * 60 + 30 else 0.0] for m in range(0, 10 * 60 + 30, 5)]})
    ev = pipeline.collect(w.aws(), AuditRequest(cluster=w.cluster, mode="incident", since=parse_time(SINCE),
                                                until=parse_time(UNTIL), onset=parse_time(HANG)))
    mine = [s for s in ev.efa_counters or [] if s.instance_id == node.instance_id]
    assert len(mine) == 1 and mine[0].devices == 2
    # only the non-zero periods are kept; the zero ones are counted as reported
    assert mine[0].values and set(mine[0].values) == {40.0} and mine[0].times[0] == parse_time(at(7, 30))
    assert mine[0].periods_before_window >= 6 * 12
    d = _d(_run(w))
    assert "40 in the 5 min" in d.evidence and "80 in the 5 min" not in d.evidence


def test_the_html_report_shows_what_the_counters_said_per_node() -> None:
    w = PClusterWorld(n_compute=2)
    w = _world(TIMEOUTS, _on_first(w, 7 * 60 + 30, 40.0))
    page = render_html(_run(w))
    # the node's own cell (branch D words it "rose at or before the hang")
    assert f"Observable<br>rose: {w.compute[0].instance_id}: `{TIMEOUTS}`" in page
