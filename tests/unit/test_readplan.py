"""The read plan (domain/readplan.py): which control-plane sources each mode reads and exactly what it asks,
decided from the Evidence so far; recorded in Evidence; executed call for call; judged by P2/P3.

Expectations come from RULES (§5 timeline sources, §8 branches, §10 P1–P16), not from what the code prints.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuaudit.domain import readplan
from gpuaudit.domain.timing import TIMELINE_MARGIN
from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.planned_reads import PlannedRead, QuotaAsk
from gpuaudit.pipeline import collect
from tests.unit.test_preflight import CR, NOW, WORLD, hyperpod, pcluster, reservation, result, world_aws

PREFLIGHT = AuditRequest(cluster="c", mode="preflight", run_hours=48)


def sequence(ev: Evidence, request: AuditRequest = PREFLIGHT) -> list[str]:
    """The sources in the order the collectors would execute them (each planned read recorded, none run)."""
    ev = ev.model_copy(update={"read_plan": []})
    while (read := readplan.next_read(ev, request)) is not None:
        ev.read_plan.append(read)
    return [r.source for r in ev.read_plan]


def test_each_mode_reads_what_its_rules_need_in_one_order() -> None:
    hp, pc = hyperpod(), pcluster()
    # coverage: only HyperPod's own event timeline; nothing else decides coverage (RULES §2–§4)
    assert sequence(hp.model_copy(update={"mode": "coverage"})) == ["cluster-events"]
    # … and on EC2 the GPUs each node has in CloudWatch, in every mode: fewer than the type is a verdict (RULES §6, §7)
    assert sequence(pc.model_copy(update={"mode": "coverage"})) == ["gpu-count"]
    # incident: the timeline sources (RULES §5) and the branches' evidence (RULES §8 B, C, E)
    # and the incident questions beside them (#21): a replacement's capacity and IPs, the EFA security group of
    # a hang, idle reserved GPUs, a straggler GPU's CWAgent series, the EFA counters of branch D layer 3 — the
    # training plan read on HyperPod, the EC2-only sources not
    assert sequence(pc.model_copy(update={"mode": "incident"})) == [
        "capacity-reservations", "cloudtrail", "health", "instance-status", "fsx",
        "instance-network", "training-plans", "security-groups", "subnets", "gpu-activity", "gpu-peers",
        "efa-counters", "gpu-count"]
    assert sequence(hp.model_copy(update={"mode": "incident"})) == [
        "cluster-events", "capacity-reservations", "cloudtrail", "health", "instance-status", "fsx",
        "training-plans", "security-groups", "subnets"]
    # pre-flight on HyperPod: no EC2-only source (the nodes are not the account's EC2 instances)
    hp_reads = sequence(hp)
    assert hp_reads[:2] == ["cluster-events", "capacity-reservations"]
    assert not set(hp_reads) & readplan.EC2_ONLY
    assert set(sequence(pc)) == {"capacity-reservations", *readplan.PREFLIGHT_SOURCES, "gpu-count"}


def test_cloudtrail_is_asked_by_event_name_over_the_lookback() -> None:
    ev = pcluster(mode="incident")
    read = readplan.plan("cloudtrail", ev, AuditRequest(cluster="c", mode="incident"))
    # by event name, never by instance ID: a replace gives the node a new ID (RULES §5.7)
    assert {"BatchReplaceClusterNodes", "TerminateInstances", "RunInstances", "UpdateFileSystem"} <= set(read.names)
    assert read.start == ev.window.start - timedelta(hours=6) and read.end == ev.now


def test_quotas_asked_only_for_capacity_nothing_holds() -> None:
    eni = readplan.ENI_QUOTA
    # a Capacity Block holds the p6-b200 capacity: only the ENI quota (P14) is asked
    assert readplan.quota_asks(pcluster(), NOW) == [eni]
    # nothing holds it: the EC2 family quota of P instances (P3)
    asks = readplan.quota_asks(pcluster(capacity_reservations=[]), NOW)
    assert asks[0] == eni and [a.service_code for a in asks[1:]] == ["ec2"] and asks[1].quota_code
    # HyperPod: the per-type cluster quota has no fixed code, asked by name
    hp = readplan.quota_asks(hyperpod(capacity_reservations=[]), NOW)
    assert hp[1:] == [QuotaAsk(service_code="sagemaker", quota_code=None,
                               quota_name="ml.p5.48xlarge for cluster usage")]
    # a training plan holds the group: no instance quota asked
    plan = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5-plan"
    assert readplan.quota_asks(hyperpod(capacity_reservations=[], plan_arn=plan), NOW) == [eni]


def test_offerings_asked_for_each_block_for_the_shortfall() -> None:
    # the block ends 30 h after now (usable until 11:00 next day): a 48 h run falls short by about a day
    near = datetime(2026, 10, 6, 11, 30, tzinfo=UTC)
    asks = readplan.offering_asks(pcluster(capacity_reservations=[reservation(end=near,
                                                                               itype="p6-b200.48xlarge")]), NOW, 48)
    assert [(a.reservation_id, a.instance_type) for a in asks] == [(CR, "p6-b200.48xlarge")]
    assert asks[0].duration_hours >= 24 and asks[0].duration_hours % 24 == 0
    # reservations not read: nothing can be asked (P2 then says what was not read)
    assert readplan.offering_asks(pcluster(capacity_reservations=None), NOW, 48) == []
    # an ODCR is not extended by Capacity Block offerings
    odcr = reservation(end=near, itype="p6-b200.48xlarge", rtype="default")
    assert readplan.offering_asks(pcluster(capacity_reservations=[odcr]), NOW, 48) == []


def _without_reservations() -> dict[str, Any]:
    raw = json.loads(WORLD.read_text(encoding="utf-8"))
    raw["ec2"]["capacity_reservations"] = []  # nothing holds the p5 capacity: the cluster quota is asked by name
    return raw


@pytest.mark.parametrize("raw", [None, _without_reservations()], ids=["block", "no-reservation"])
def test_the_world_run_records_the_plan_and_makes_exactly_the_calls_it_asks(raw: dict[str, Any] | None) -> None:
    ev = collect(world_aws(raw), AuditRequest(cluster="train-hp-p5", mode="preflight", run_hours=48))
    assert [r.source for r in ev.read_plan] == sequence(ev, AuditRequest(cluster="train-hp-p5", mode="preflight",
                                                                          run_hours=48))
    calls = Counter({(c.service, c.operation): c.count for c in ev.calls})
    quotas = ev.planned("quotas")
    offerings = ev.planned("extension-offerings")
    assert quotas is not None and offerings is not None
    assert calls["service-quotas", "GetServiceQuota"] == sum(1 for a in quotas.quotas if a.quota_code)
    assert calls["service-quotas", "ListServiceQuotas"] == (1 if any(a.quota_code is None for a in quotas.quotas)
                                                             else 0)
    assert sorted(q.quota_name for q in ev.service_quotas or []) == sorted(a.quota_name for a in quotas.quotas)
    assert calls["ec2", "DescribeCapacityBlockExtensionOfferings"] == len(offerings.offerings)
    assert len(offerings.offerings) == (0 if raw else 1) and len(quotas.quotas) == (2 if raw else 1)
    assert [e.reservation_id for e in ev.capacity_extensions or []] == [a.reservation_id for a in offerings.offerings]


def test_p3_judges_what_was_asked() -> None:
    """A quota the plan never asked for is named as such, not as a failed read (and never a PASS)."""
    only_eni = [PlannedRead(source="quotas", reason="test", quotas=[readplan.ENI_QUOTA])]
    c = result(hyperpod(capacity_reservations=[], service_quotas=[], read_plan=only_eni), "P3")
    assert c.result == "Not checked" and "did not ask for the quota `ml.p5.48xlarge for cluster usage`" in c.evidence
    asked = [PlannedRead(source="quotas", reason="test", quotas=readplan.quota_asks(
        hyperpod(capacity_reservations=[]), NOW))]
    c = result(hyperpod(capacity_reservations=[], service_quotas=[], read_plan=asked), "P3")
    assert c.result == "Not checked" and "was not read" in c.evidence


@pytest.mark.parametrize("asked", [[], None])
def test_p2_judges_what_was_asked(asked: list[str] | None) -> None:
    near = datetime(2026, 10, 6, 11, 30, tzinfo=UTC)
    plan = [PlannedRead(source="extension-offerings", reason="test")] if asked is not None else []
    ev = pcluster(capacity_reservations=[reservation(end=near, itype="p6-b200.48xlarge")], capacity_extensions=[],
                  read_plan=plan)
    c = result(ev, "P2", run_hours=72)
    assert c.result == "Not checked"
    said = "did not ask for extension offerings of" in c.evidence
    assert said is (asked is not None)


def test_efa_counters_are_read_from_a_baseline_before_the_window_to_past_its_end() -> None:
    # RULES §8 D layer 3: a rise is judged against the counter's own rate before the window, and a rise after the
    # hang is still read (it is said as an effect)
    ev = pcluster().model_copy(update={"mode": "incident"})
    read = readplan.plan("efa-counters", ev, AuditRequest(cluster="c", mode="incident"))
    assert read.start is not None and read.end is not None
    assert read.start <= ev.window.start - readplan.EFA_BASELINE
    assert read.end == min(ev.window.end + TIMELINE_MARGIN, ev.now)
    assert set(read.names) == {"efa_retrans_pkts", "efa_retrans_timeout_events", "efa_impaired_remote_conn_events",
                               "efa_unresponsive_remote_events", "efa_rx_dropped", "efa_rdma_read_wr_err",
                               "efa_rdma_write_wr_err"}
