"""Pre-flight checks P1–P16 (RULES §10): each check's PASS and its FAIL/RISK boundary, the 24/48/72 h
default, readiness, and one end-to-end run of the `hyperpod-preflight-risks` world.

Node results come from the real judge over hand-built Evidence, so coverage (P6) is the product's own proof.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.collectors.aws import Aws
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import load_world, parse_world
from gpuaudit.model.evidence import (
    AuditRequest,
    CapabilityProfile,
    ClusterInfo,
    ControlStream,
    Evidence,
    GpuLine,
    InstanceGroup,
    KernelStream,
    NodeInfo,
    StreamActivity,
    Window,
)
from gpuaudit.model.planned_reads import (
    AlarmInfo,
    CapacityReservation,
    EventRuleInfo,
    ExtensionOffering,
    ExtensionOfferings,
    FileSystemInfo,
    GpuActivity,
    InstanceNetwork,
    MetricPeak,
    Route,
    RouteTableInfo,
    SecurityGroupInfo,
    ServiceQuotaInfo,
    SgRule,
    SubnetInfo,
    TrainingPlanInfo,
)
from gpuaudit.model.result import Check, Result
from gpuaudit.pipeline import run_audit
from gpuaudit.rules import preflight
from gpuaudit.rules.judge import JudgeConfig, judge

NOW = datetime(2026, 10, 5, 5, 30, tzinfo=UTC)
FAR_END = datetime(2026, 10, 15, 11, 30, tzinfo=UTC)
NEAR_END = datetime(2026, 10, 6, 11, 30, tzinfo=UTC)  # 30 h after NOW: usable until 2026-10-06T11:00Z
CR = "cr-0a5b5c5d5e5f50001"
SG = "sg-0e5f6a7b8c9d01234"
SUBNET = "subnet-0a2b4c6d8e0f13579"
VPC = "vpc-0a1b2c3d4e5f67890"
FS = "fs-0b7c6d5e4f3a21098"
HMA_GROUP = "/aws/sagemaker/Clusters/train-hp/q7w2e9r4t1y6"
KERNEL_GROUP = "/aws/custom/pc-b200/kernel"
CTRL, GPU1, GPU2 = "i-0c1d2e3f405162738", "i-0a9b8c7d6e5f40312", "i-0f1e2d3c4b5a69788"
HEAD = "i-0badc0ffee0ddf00d"
PC_GROUP = "/aws/parallelcluster/pc-b200-202609010000"
CLUSTERMGTD = f"ip-10-0-0-9.{HEAD}.clustermgtd"
WORLD = Path(__file__).resolve().parents[2] / "functions/gpuaudit/worlds/hyperpod-preflight-risks.world.json"

P5 = CapabilityProfile(instance_type="p5.48xlarge", gpu_count=8, gpu_name="NVIDIA H100", efa_supported=True,
                       max_efa_interfaces=32, nvswitch="NVSwitch (900 GB/s)", fabric_manager_expected=True)
B200 = CapabilityProfile(instance_type="p6-b200.48xlarge", gpu_count=8, gpu_name="NVIDIA B200", efa_supported=True,
                         max_efa_interfaces=8, nvswitch="NVSwitch (1800 GB/s)", fabric_manager_expected=True)
M5 = CapabilityProfile(instance_type="m5.xlarge", gpu_count=0, efa_supported=False, nvswitch="no GPU")
T3 = CapabilityProfile(instance_type="t3.medium", gpu_count=0, efa_supported=False, nvswitch="no GPU")


def sg(egress_self: bool = True, egress_open: bool = False, ingress_self: bool = True) -> SecurityGroupInfo:
    ingress = [SgRule(protocol="-1", group_ids=[SG])] if ingress_self else [SgRule(protocol="tcp", from_port=22,
                                                                                    to_port=22, cidrs=["10.0.0.0/8"])]
    egress = ([SgRule(protocol="-1", group_ids=[SG])] if egress_self else []) + \
        ([SgRule(protocol="-1", cidrs=["0.0.0.0/0"])] if egress_open else [])
    return SecurityGroupInfo(group_id=SG, group_name="efa-sg", vpc_id=VPC, ingress=ingress, egress=egress)


def reservation(end: datetime = FAR_END, available: int = 1, itype: str = "p5.48xlarge", rtype: str = "capacity-block",
                rid: str = CR) -> CapacityReservation:
    return CapacityReservation(reservation_id=rid, instance_type=itype, state="active", reservation_type=rtype,
                               start_date=datetime(2026, 10, 3, 11, 30, tzinfo=UTC), end_date=end,
                               total_instance_count=3, available_instance_count=available)


def offering(end: datetime) -> ExtensionOffering:
    return ExtensionOffering(offering_id="cbe-0a1b2c3d4e5f60789", instance_type="p5.48xlarge", instance_count=2,
                             start_date=NEAR_END, end_date=end,
                             duration_hours=int((end - NEAR_END).total_seconds() // 3600))


def common(**update: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        mode="preflight", window=Window(start=NOW - timedelta(hours=24), end=NOW, source="default-24h"), now=NOW,
        capacity_reservations=[reservation()],
        capacity_extensions=[ExtensionOfferings(reservation_id=CR, requested_hours=24, offerings=[])],
        training_plans=[], security_groups=[sg()],
        subnets=[SubnetInfo(subnet_id=SUBNET, vpc_id=VPC, availability_zone="us-west-2a", available_ips=412)],
        alarms_in_alarm=[], event_rules=[EventRuleInfo(
            name="cb-expiry", state="ENABLED",
            event_pattern='{"source":["aws.ec2"],"detail-type":["Capacity Block Expiration Warning"]}')],
        service_quotas=[ServiceQuotaInfo(service_code="vpc", quota_code="L-DF5E4CA3",
                                         quota_name="Network interfaces per Region", value=5000.0)],
        file_systems=[FileSystemInfo(file_system_id=FS, file_system_type="LUSTRE", deployment_type="PERSISTENT_2",
                                     storage_type="SSD")],
        fsx_metrics=[MetricPeak(file_system_id=FS, metric="NetworkThroughputUtilization",
                                dimensions={"FileSystemId": FS, "FileServer": "FS0000"}, statistic="Maximum",
                                peak=54.0, minutes_at_or_above_90=0, datapoints=120)],
        cluster_file_system_ids=[FS])
    base.update(update)
    return base


def hyperpod(node_recovery: str | None = "Automatic", checks: list[str] | None = None, plan_arn: str | None = None,
             **update: Any) -> Evidence:
    groups = [InstanceGroup(name="controller", instance_type="m5.xlarge", current_count=1, target_count=1,
                            node_role="controller"),
              InstanceGroup(name="gpu-p5", instance_type="p5.48xlarge", current_count=2, target_count=2,
                            on_start_deep_health_checks=["InstanceStress", "InstanceConnectivity"]
                            if checks is None else checks, training_plan_arn=plan_arn, node_role="compute")]
    cluster = ClusterInfo(name="train-hp", kind="hyperpod-slurm", region="us-west-2", cluster_id="q7w2e9r4t1y6",
                          node_recovery=node_recovery, instance_groups=groups, security_group_ids=[SG],
                          subnet_ids=[SUBNET])
    nodes = [NodeInfo(instance_id=CTRL, instance_group="controller", instance_type="m5.xlarge", status="Running",
                      role="controller"),
             *(NodeInfo(instance_id=i, instance_group="gpu-p5", instance_type="p5.48xlarge", status="Running")
               for i in (GPU1, GPU2))]
    base = common(
        cluster=cluster, nodes=nodes, profiles={"p5.48xlarge": P5, "m5.xlarge": M5}, hma_log_group=HMA_GROUP,
        hma_streams=[], stream_activity=[StreamActivity(log_group=HMA_GROUP, log_stream="ClusterMetrics/slurm",
                                                        lines=600, live_hours=48)])
    base.update(update)
    return Evidence(**base)


def gpu_line(iid: str, message: str, minutes_ago: int = 60) -> GpuLine:
    return GpuLine(time=NOW - timedelta(minutes=minutes_ago), log_group=KERNEL_GROUP, log_stream=f"{iid}.kernel",
                   message=message)


def driver_line(iid: str, version: str = "570.133.20") -> GpuLine:
    return gpu_line(iid, f"Oct 5 04:30:00 ip-10-0-0-1 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  "
                         f"{version}  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar 18 2025", 300)


def pcluster(**update: Any) -> Evidence:
    """A healthy ParallelCluster on p6-b200 Capacity Block capacity: every check it can pass, passes."""
    ids = (GPU1, GPU2)
    nodes = [NodeInfo(instance_id=HEAD, instance_type="t3.medium", status="running", role="head"),
             *(NodeInfo(instance_id=i, instance_group="train", instance_type="p6-b200.48xlarge", status="running",
                        efa_attached=8, capacity_reservation_id=CR) for i in ids)]
    nets = [InstanceNetwork(instance_id=i, subnet_id=SUBNET, vpc_id=VPC, security_group_ids=[SG], interfaces=8,
                            efa_interfaces=8, private_ips=8) for i in ids]
    lines = [line for i in ids for line in (
        driver_line(i), gpu_line(i, "node: NCCL INFO NET/OFI Selected Provider is efa, fabric is efa-direct"),
        gpu_line(i, "node: NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"),
        gpu_line(i, 'systemd[1]: Started "Nvidia Fabric Manager".', 290))]
    base = common(
        cluster=ClusterInfo(name="pc-b200", kind="parallelcluster", region="us-west-2", subnet_ids=[SUBNET],
                            instance_groups=[InstanceGroup(name="train", node_role="compute")]),
        nodes=nodes, profiles={"p6-b200.48xlarge": B200, "t3.medium": T3},
        kernel_streams=[KernelStream(log_group=KERNEL_GROUP, log_stream=f"{i}.kernel", kernel_lines=900) for i in ids],
        stream_activity=[*(StreamActivity(log_group=KERNEL_GROUP, log_stream=f"{i}.kernel", lines=3000, live_hours=48)
                           for i in ids),
                         StreamActivity(log_group=PC_GROUP, log_stream=CLUSTERMGTD, lines=1440, live_hours=26)],
        gpu_lines=lines, instance_network=nets,
        capacity_reservations=[reservation(itype="p6-b200.48xlarge")],
        route_tables=[RouteTableInfo(route_table_id="rtb-0123456789abcdef0", vpc_id=VPC, subnet_ids=[SUBNET],
                                     routes=[Route(destination="10.0.0.0/16", target="local"),
                                             Route(destination="0.0.0.0/0", target="nat-0123456789abcdef0")])],
        gpu_activity=[GpuActivity(instance_id=i, metric="GPUPowerUtilization", gpus=8, start=NOW - timedelta(hours=72),
                                  end=NOW, hours_observed=72, idle_hours=4) for i in ids])
    base.update(update)
    return Evidence(**base)


def audit(ev: Evidence, **config: Any) -> Result:
    return judge(ev, JudgeConfig(**config), generated_at=NOW)


def checks(ev: Evidence, **config: Any) -> dict[str, Check]:
    config.setdefault("run_hours", 48)
    return {c.id: c for c in audit(ev, **config).checks}


def result(ev: Evidence, cid: str, **config: Any) -> Check:
    return checks(ev, **config)[cid]


# -- shape and readiness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("builder", [hyperpod, pcluster])
def test_every_check_appears_with_a_result_evidence_and_title(builder: Any) -> None:
    out = audit(builder(), run_hours=48)
    assert [c.id for c in out.checks] == [f"P{i}" for i in range(1, 17)]
    for c in out.checks:
        assert c.title == preflight.TITLES[c.id]
        assert c.result in ("PASS", "RISK", "FAIL", "UNVERIFIED", "Needs input", "Not checked")
        assert c.evidence
        if c.result in ("FAIL", "RISK", "UNVERIFIED", "Needs input", "Not checked"):
            assert c.action, c.id


def test_healthy_pcluster_passes_everything_it_can() -> None:
    got = checks(pcluster())
    not_pass = {cid: c.result for cid, c in got.items() if c.result != "PASS"}
    # P5: ParallelCluster has no on-start deep health check setting to read.
    assert not_pass == {"P5": "UNVERIFIED"}, {cid: got[cid].evidence for cid in not_pass}


def test_readiness() -> None:
    def c(result: str) -> Check:
        return Check(id="P1", title="t", result=result, evidence="e")  # type: ignore[arg-type]
    assert preflight.readiness([c("PASS"), c("PASS")]) == "Yes"
    assert preflight.readiness([c("PASS"), c("RISK")]) == "Yes with risks"
    assert preflight.readiness([c("PASS"), c("UNVERIFIED")]) == "Yes with risks"
    assert preflight.readiness([c("PASS"), c("Needs input")]) == "Yes with risks"
    assert preflight.readiness([c("PASS"), c("Not checked")]) == "Yes with risks"
    assert preflight.readiness([c("RISK"), c("FAIL")]) == "No"


def test_core_fail_is_never_undone_and_extras_only_add_risk(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a P13 that (wrongly) returned FAIL: §10 lets only P7, P11, P12, P16 FAIL among P7–P16.
    monkeypatch.setitem(preflight.CHECKS, "P13", lambda ctx: preflight.make_check("P13", "FAIL", "x", "y"))
    out = audit(pcluster(), run_hours=48)
    assert {c.id: c.result for c in out.checks}["P13"] == "RISK"
    assert out.ready == "Yes with risks"
    # A core FAIL stays No whatever P7–P16 say.
    out = audit(hyperpod(node_recovery="None"), run_hours=48)
    assert out.ready == "No"


def test_a_check_that_raises_is_not_checked_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: Any) -> Check:
        raise KeyError("missing")
    monkeypatch.setitem(preflight.CHECKS, "P8", boom)
    c = result(pcluster(), "P8")
    assert c.result == "Not checked" and "KeyError" in c.evidence


# -- P1 / P2: capacity outlasts the run, extension ----------------------------------------------------------
def test_p1_pass_when_the_block_outlasts_the_run() -> None:
    c = result(hyperpod(), "P1")
    assert c.result == "PASS"
    assert CR in c.evidence and "2026-10-15T11:30:00Z" in c.evidence and "→ fits" in c.evidence


def test_p1_fail_writes_out_every_date() -> None:
    # Given a Capacity Block ending 30 h from now and a 48 h run starting now
    out = audit(hyperpod(capacity_reservations=[reservation(end=NEAR_END, available=0)]), run_hours=48)
    c = {x.id: x for x in out.checks}["P1"]
    assert c.result == "FAIL" and out.ready == "No"
    for value in (CR, "EndDate 2026-10-06T11:30:00Z", "30 min lead time", "usable until 2026-10-06T11:00:00Z",
                  "start 2026-10-05T05:30:00Z", "run end 2026-10-07T05:30:00Z", "29.50 h covered",
                  "latest safe start 2026-10-04T11:00:00Z", "already in the past"):
        assert value in c.evidence, value
    assert "Extend cr-0a5b5c5d5e5f50001 by at least 24 h" in (c.action or "")


def test_p1_boundary_run_ending_exactly_at_usable_until_passes() -> None:
    ev = hyperpod(capacity_reservations=[reservation(end=NEAR_END)])
    assert result(ev, "P1", run_hours=29.5).result == "PASS"
    assert result(ev, "P1", run_hours=29.5 + 1 / 60).result == "FAIL"


def test_p1_run_start_is_taken_from_config() -> None:
    ev = hyperpod(capacity_reservations=[reservation(end=NEAR_END)])
    early = result(ev, "P1", run_hours=48, run_start=datetime(2026, 10, 4, 11, 0, tzinfo=UTC))
    assert early.result == "PASS" and "start 2026-10-04T11:00:00Z" in early.evidence


def test_p1_default_run_lengths_24_48_72_need_input() -> None:
    ev = hyperpod(capacity_reservations=[reservation(end=NEAR_END)])
    c = result(ev, "P1", run_hours=None)
    assert c.result == "Needs input"
    assert "evaluated at 24, 48, 72 h" in c.evidence
    for fragment in ("24 h run:", "48 h run:", "72 h run:", "run end 2026-10-06T05:30:00Z",
                     "run end 2026-10-07T05:30:00Z", "run end 2026-10-08T05:30:00Z"):
        assert fragment in c.evidence, fragment
    assert c.evidence.count("→ fits") == 1 and c.evidence.count("does NOT fit") == 2
    assert "--run-hours" in (c.action or "")
    assert audit(ev).ready == "Yes with risks"  # Needs input never reads as Yes


def test_p1_checkpoint_inside_the_lead_time_is_a_risk() -> None:
    ev = hyperpod(capacity_reservations=[reservation(end=NEAR_END)])
    risk = result(ev, "P1", run_hours=29, checkpoint_minutes=120)
    assert risk.result == "RISK" and "2026-10-06T11:30:00Z, inside the lead time" in risk.evidence
    assert result(ev, "P1", run_hours=29, checkpoint_minutes=60).result == "PASS"


def test_p1_no_reservation_is_said_explicitly() -> None:
    c = result(hyperpod(capacity_reservations=[]), "P1")
    assert c.result == "UNVERIFIED"
    assert "No capacity reservation found" in c.evidence
    assert result(hyperpod(capacity_reservations=[reservation(itype="p4d.24xlarge")]), "P1").result == "UNVERIFIED"


def test_p1_not_checked_names_the_call() -> None:
    c = result(hyperpod(capacity_reservations=None), "P1")
    assert c.result == "Not checked" and "describe-capacity-reservations" in c.evidence


def test_p1_training_plan_end_and_status() -> None:
    arn = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5-plan"
    plan = TrainingPlanInfo(arn=arn, name="p5-plan", status="Active", start_time=NOW - timedelta(days=1),
                            end_time=NEAR_END, available_spare_instance_count=1, unhealthy_instance_count=0)
    ev = hyperpod(plan_arn=arn, training_plans=[plan], capacity_reservations=[])
    c = result(ev, "P1")
    assert c.result == "FAIL" and "training plan `p5-plan`" in c.evidence
    assert result(ev, "P1", run_hours=24).result == "PASS"
    expired = hyperpod(plan_arn=arn, training_plans=[plan.model_copy(update={"status": "Expired"})])
    assert result(expired, "P1", run_hours=24).result == "FAIL"
    unread = hyperpod(plan_arn=arn, training_plans=[])
    c = result(unread, "P1")
    assert c.result == "Not checked" and "describe-training-plan --training-plan-name p5-plan" in c.evidence


def test_p1_ultraserver_lead_time_is_60_minutes() -> None:
    gb = CapabilityProfile(instance_type="p6e-gb200.36xlarge", gpu_count=4, efa_supported=True, max_efa_interfaces=4,
                           nvswitch="NVSwitch", fabric_manager_expected=True)
    ev = pcluster(
        nodes=[NodeInfo(instance_id=GPU1, instance_group="train", instance_type="p6e-gb200.36xlarge",
                        status="running", efa_attached=4)],
        profiles={"p6e-gb200.36xlarge": gb},
        stream_activity=[a for a in pcluster().stream_activity if a.log_stream != CLUSTERMGTD],  # no head node here
        capacity_reservations=[reservation(end=NEAR_END, itype="p6e-gb200.36xlarge")])
    c = result(ev, "P1", run_hours=29.25)
    assert "60 min lead time" in c.evidence and "usable until 2026-10-06T10:30:00Z" in c.evidence
    assert c.result == "FAIL"  # run end 10:45 would fit a 30 min lead time (11:00), not 60 min (10:30)


def test_p2_fail_when_p1_fails_and_no_offering() -> None:
    c = result(hyperpod(capacity_reservations=[reservation(end=NEAR_END)]), "P2")
    assert c.result == "FAIL" and "no extension offering" in c.evidence and CR in c.evidence


def test_p2_with_an_offering_is_not_fail_and_quotes_no_price() -> None:
    ext = ExtensionOfferings(reservation_id=CR, requested_hours=24,
                             offerings=[offering(NEAR_END + timedelta(hours=24))])
    c = result(hyperpod(capacity_reservations=[reservation(end=NEAR_END)], capacity_extensions=[ext]), "P2")
    assert c.result == "PASS"
    assert "cbe-0a1b2c3d4e5f60789" in c.evidence and "usable until becomes 2026-10-07T11:00:00Z" in c.evidence
    assert "prices not quoted" in c.evidence and not re.search(r"\$|USD", c.evidence + (c.action or ""))


def test_p2_offering_too_short_is_a_risk() -> None:
    ext = ExtensionOfferings(reservation_id=CR, requested_hours=24,
                             offerings=[offering(NEAR_END + timedelta(hours=12))])
    c = result(hyperpod(capacity_reservations=[reservation(end=NEAR_END)], capacity_extensions=[ext]), "P2")
    assert c.result == "RISK"


def test_p2_pass_when_not_needed_and_not_checked_when_unread() -> None:
    assert result(hyperpod(), "P2").result == "PASS"
    unread = hyperpod(capacity_reservations=[reservation(end=NEAR_END)],
                      capacity_extensions=[ExtensionOfferings(reservation_id=CR, requested_hours=24)])
    c = result(unread, "P2")
    assert c.result == "Not checked" and "describe-capacity-block-extension-offerings" in c.evidence


def test_p2_without_run_length() -> None:
    ev = hyperpod(capacity_reservations=[reservation(end=NEAR_END)])
    assert result(ev, "P2", run_hours=None).result == "Needs input"
    ext = ExtensionOfferings(reservation_id=CR, requested_hours=48,
                             offerings=[offering(NEAR_END + timedelta(hours=48))])
    assert result(ev.model_copy(update={"capacity_extensions": [ext]}), "P2", run_hours=None).result == "PASS"


def test_p2_without_run_length_an_odcr_or_a_training_plan_ending_inside_72_h_needs_input() -> None:
    """RULES §1: run length unknown → evaluate 24, 48 and 72 h and mark run-length-dependent checks `Needs input`.
    Whether an On-Demand Capacity Reservation or a training plan must be extended depends on the run length: with
    one ending 30 h from now, a 24 h run fits and a 48 h run does not, so P2 is `Needs input`, not a RISK."""
    odcr = hyperpod(capacity_reservations=[reservation(end=NEAR_END, rtype="default")])
    c = result(odcr, "P2", run_hours=None)
    assert c.result == "Needs input" and "48 h" in c.evidence and "--run-hours" in (c.action or "")
    assert result(odcr, "P2", run_hours=48).result == "RISK"  # a given run that does not fit stays a RISK
    assert result(odcr, "P2", run_hours=24).result == "PASS"
    arn = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5-plan"
    plan = TrainingPlanInfo(arn=arn, name="p5-plan", status="Active", start_time=NOW - timedelta(days=1),
                            end_time=NEAR_END, available_spare_instance_count=1, unhealthy_instance_count=0)
    planned = hyperpod(plan_arn=arn, training_plans=[plan], capacity_reservations=[])
    assert result(planned, "P2", run_hours=None).result == "Needs input"
    assert result(planned, "P2", run_hours=24).result == "PASS"


def test_p2_is_never_a_pass_when_p1_fails_on_a_training_plan_no_longer_active() -> None:
    """RULES §10 P2: FAIL when P1 fails and no offering exists. A plan that is Expired fails P1 whatever the run
    length; its extension offerings are not read, so P2 cannot say no extension is needed."""
    arn = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5-plan"
    plan = TrainingPlanInfo(arn=arn, name="p5-plan", status="Expired", start_time=NOW - timedelta(days=1),
                            end_time=NEAR_END, available_spare_instance_count=1, unhealthy_instance_count=0)
    ev = hyperpod(plan_arn=arn, training_plans=[plan], capacity_reservations=[])
    assert result(ev, "P1", run_hours=24).result == "FAIL"
    c = result(ev, "P2", run_hours=24)
    assert c.result in ("FAIL", "Not checked") and "search-training-plan-offerings" in c.evidence


# -- P3: a failed node can be replaced --------------------------------------------------------------------
def test_p3_spare_in_the_block_passes_none_is_a_risk() -> None:
    assert result(hyperpod(capacity_reservations=[reservation(available=1)]), "P3").result == "PASS"
    c = result(hyperpod(capacity_reservations=[reservation(available=0)]), "P3")
    assert c.result == "RISK" and "AvailableInstanceCount 0" in c.evidence


def test_p3_only_a_service_quota_is_unverified_never_pass() -> None:
    quotas = [ServiceQuotaInfo(service_code="sagemaker", quota_code="L-0123ABCD",
                               quota_name="ml.p5.48xlarge for cluster usage", value=8.0)]
    c = result(hyperpod(capacity_reservations=[], service_quotas=quotas), "P3")
    assert c.result == "UNVERIFIED" and "not proof" in c.evidence
    ec2 = [ServiceQuotaInfo(service_code="ec2", quota_code="L-417A185B", quota_name="Running On-Demand P instances",
                            value=1536.0)]
    assert result(pcluster(capacity_reservations=[], service_quotas=ec2), "P3").result == "UNVERIFIED"
    # A quota at or below what the cluster already runs proves there is no headroom.
    full = [quotas[0].model_copy(update={"value": 2.0})]
    assert result(hyperpod(capacity_reservations=[], service_quotas=full), "P3").result == "RISK"
    missing = result(hyperpod(capacity_reservations=[], service_quotas=[]), "P3")
    assert missing.result == "Not checked" and "list-service-quotas" in missing.evidence


def test_p3_training_plan_spare() -> None:
    arn = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5-plan"
    plan = TrainingPlanInfo(arn=arn, name="p5-plan", status="Active", end_time=FAR_END,
                            available_spare_instance_count=0, unhealthy_instance_count=1)
    c = result(hyperpod(plan_arn=arn, training_plans=[plan]), "P3")
    assert c.result == "RISK" and "UnhealthyInstanceCount 1" in c.evidence
    spare = plan.model_copy(update={"available_spare_instance_count": 1})
    assert result(hyperpod(plan_arn=arn, training_plans=[spare]), "P3").result == "PASS"


# -- P4, P5, P6 ---------------------------------------------------------------------------------------------------
def test_p4_node_recovery_none_fails_and_ready_is_no() -> None:
    out = audit(hyperpod(node_recovery="None"), run_hours=48)
    c = {x.id: x for x in out.checks}["P4"]
    assert c.result == "FAIL" and "`NodeRecovery` = None" in c.evidence and out.ready == "No"
    assert "--node-recovery Automatic" in (c.action or "")
    assert result(hyperpod(node_recovery="Automatic"), "P4").result == "PASS"
    assert result(hyperpod(node_recovery=None), "P4").result == "UNVERIFIED"


def test_p5_empty_deep_health_checks_on_a_gpu_group_is_a_risk() -> None:
    c = result(hyperpod(checks=[]), "P5")
    assert c.result == "RISK" and "`gpu-p5`" in c.evidence and "`OnStartDeepHealthChecks` is empty" in c.evidence
    assert result(hyperpod(), "P5").result == "PASS"
    assert result(hyperpod(checks=["InstanceStress"]), "P5").result == "PASS"


def test_p6_not_observable_node_fails_naming_node_group_and_stream() -> None:
    # Given the HyperPod cluster log group with no live stream: HMA absence proves nothing.
    c = result(hyperpod(stream_activity=[]), "P6")
    assert c.result == "FAIL"
    assert GPU1 in c.evidence and "group gpu-p5" in c.evidence and HMA_GROUP in c.evidence
    ok = result(hyperpod(), "P6")
    assert ok.result == "PASS" and "No HMA detections" in ok.evidence
    # ParallelCluster: one node's kernel stream empty in some hours → that node is Not observable.
    ev = pcluster()
    ev.stream_activity[1] = ev.stream_activity[1].model_copy(update={"live_hours": 3})
    c = result(ev, "P6")
    assert c.result == "FAIL" and GPU2 in c.evidence and f"{GPU2}.kernel" in c.evidence and GPU1 not in c.evidence


# -- P7–P12 --------------------------------------------------------------------------------------------------------
def test_p7_missing_self_rule_fails_full_width_passes() -> None:
    assert result(pcluster(), "P7").result == "PASS"
    c = result(pcluster(security_groups=[sg(ingress_self=False)]), "P7")
    assert c.result == "FAIL" and SG in c.evidence and "authorize-security-group-ingress" in (c.action or "")
    c = result(pcluster(security_groups=[sg(egress_self=False)]), "P7")
    assert c.result == "FAIL" and "no outbound rule" in c.evidence


def test_p7_fewer_efa_interfaces_than_supported_is_a_risk() -> None:
    ev = pcluster()
    ev.nodes[1] = ev.nodes[1].model_copy(update={"efa_attached": 7})
    c = result(ev, "P7")
    assert c.result == "RISK" and f"`{GPU1}` 7 of 8" in c.evidence


def test_p7_an_efa_attachment_not_read_is_never_a_pass() -> None:
    """RULES §10 P7 (EFA attached vs max) and §0: PASS only on evidence read. A node whose attached EFA interfaces
    were not read (DescribeInstances did not describe it) leaves the width UNVERIFIED, naming the node."""
    ev = pcluster()
    ev.nodes[1] = ev.nodes[1].model_copy(update={"efa_attached": None})
    c = result(ev, "P7")
    assert c.result == "UNVERIFIED" and GPU1 in c.evidence, c.evidence
    assert "None of" not in c.evidence


def test_p7_hyperpod_attachment_is_not_observable() -> None:
    c = result(hyperpod(), "P7")
    assert c.result == "UNVERIFIED" and "service account" in c.evidence
    assert result(hyperpod(security_groups=None), "P7").result == "Not checked"


def test_p8_saturation_boundary() -> None:
    assert result(pcluster(), "P8").result == "PASS"
    peak = common()["fsx_metrics"][0]
    four = pcluster(fsx_metrics=[peak.model_copy(update={"peak": 97.0, "minutes_at_or_above_90": 4})])
    assert result(four, "P8").result == "PASS"
    five = pcluster(fsx_metrics=[peak.model_copy(update={"peak": 97.0, "minutes_at_or_above_90": 5})])
    c = result(five, "P8")
    assert c.result == "RISK" and "Maximum 97 %" in c.evidence and FS in c.evidence
    assert result(pcluster(fsx_metrics=None), "P8").result == "Not checked"
    assert result(pcluster(fsx_metrics=[peak.model_copy(update={"datapoints": 0})]), "P8").result == "UNVERIFIED"


def test_p9_idle_majority_boundary_and_hyperpod() -> None:
    assert result(pcluster(), "P9").result == "PASS"
    half = [GpuActivity(instance_id=i, metric="GPUPowerUtilization", gpus=8, start=NOW - timedelta(hours=72),
                        end=NOW, hours_observed=72, idle_hours=36) for i in (GPU1, GPU2)]
    assert result(pcluster(gpu_activity=half), "P9").result == "PASS"
    most = [a.model_copy(update={"idle_hours": 37}) for a in half]
    c = result(pcluster(gpu_activity=most), "P9")
    assert c.result == "RISK" and "74 of 144 node-hours" in c.evidence
    blind = [a.model_copy(update={"hours_observed": 0, "idle_hours": 0}) for a in half]
    assert result(pcluster(gpu_activity=blind), "P9").result == "UNVERIFIED"
    c = result(hyperpod(), "P9")
    assert c.result == "UNVERIFIED" and "observability add-on" in (c.action or "")


def test_p10_capacity_end_alarm() -> None:
    assert result(hyperpod(), "P10").result == "PASS"
    c = result(hyperpod(event_rules=[EventRuleInfo(name="health", state="ENABLED",
                                                   event_pattern='{"source":["aws.health"]}')]), "P10")
    assert c.result == "RISK" and "Capacity Block Expiration Warning" in c.evidence
    assert result(hyperpod(event_rules=None), "P10").result == "Not checked"


def test_p11_driver_minimums() -> None:
    c = result(pcluster(), "P11")
    assert c.result == "PASS" and "driver 570.133.20 (R570)" in c.evidence
    old = pcluster(gpu_lines=[driver_line(GPU1, "565.57.01"), driver_line(GPU2)])
    c = result(old, "P11")
    assert c.result == "FAIL" and GPU1 in c.evidence and "below the minimum R570" in c.evidence
    c = result(pcluster(gpu_lines=[driver_line(GPU1)]), "P11")
    assert c.result == "UNVERIFIED" and GPU2 in c.evidence and "unreadable" in c.evidence
    # A type without a published minimum: a comparison, not pass/fail.
    c = result(hyperpod(gpu_lines=[driver_line(GPU1, "550.127.08"), driver_line(GPU2, "550.127.08")]), "P11")
    assert c.result == "UNVERIFIED" and "R550" in c.evidence and "not pass/fail" in c.evidence


def test_p12_nccl_transport() -> None:
    c = result(pcluster(), "P12")
    assert c.result == "PASS" and "NET/OFI Selected Provider is efa" in c.evidence
    socket = pcluster(gpu_lines=[*pcluster().gpu_lines,
                                 gpu_line(GPU1, "node: NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0")])
    c = result(socket, "P12")
    assert c.result == "FAIL" and GPU1 in c.evidence and "NET/Socket" in c.evidence
    fm = pcluster(gpu_lines=[*pcluster().gpu_lines,
                             gpu_line(GPU2,
                                      "systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.")])
    assert result(fm, "P12").result == "FAIL"
    c = result(hyperpod(), "P12")
    assert c.result == "UNVERIFIED" and "NCCL_DEBUG=INFO" in (c.action or "")


def test_p12_reads_fabric_manager_as_branch_d_layer_2_does() -> None:
    """RULES §10 P12: FAIL on a Fabric Manager failure; §8 D layer 2 says what one is: "failed" and "restarting" are
    read (systemd `Failed to start`, `status=…/FAILURE`, repeated starts in one boot). A unit that stopped cleanly
    (`status=0/SUCCESS`) has not failed; one systemd keeps restarting has."""
    def with_line(message: str) -> Evidence:
        return pcluster(gpu_lines=[*pcluster().gpu_lines, gpu_line(GPU2, message, 200)])
    clean = with_line("systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, status=0/SUCCESS")
    assert result(clean, "P12").result == "PASS"
    restarting = with_line("systemd[1]: nvidia-fabricmanager.service: Scheduled restart job, restart counter is at 3.")
    c = result(restarting, "P12")
    assert c.result == "FAIL" and GPU2 in c.evidence and "restarting" in c.evidence


# -- P13–P16 ---------------------------------------------------------------------------------------------------------
def alarm(name: str, **dims: str) -> AlarmInfo:
    return AlarmInfo(name=name, state_since=NOW - timedelta(hours=3), namespace="ParallelCluster",
                     metric="ClustermgtdHeartbeat", dimensions=dims)


def test_p13_only_alarms_about_this_cluster_count() -> None:
    unrelated = [alarm("llm-pretrain-b200-HeadNode-ClustermgtdHeartbeat", ClusterName="llm-pretrain-b200"),
                 alarm("pc-b200x-HeadNode-Health"), alarm("billing-alarm")]
    assert result(pcluster(alarms_in_alarm=unrelated), "P13").result == "PASS"
    by_name = result(pcluster(alarms_in_alarm=[alarm("pc-b200-HeadNode-ClustermgtdHeartbeat")]), "P13")
    assert by_name.result == "RISK" and "since 2026-10-05T02:30:00Z (3.0 h)" in by_name.evidence
    assert result(pcluster(alarms_in_alarm=[alarm("heartbeat", ClusterName="pc-b200")]), "P13").result == "RISK"
    assert result(pcluster(alarms_in_alarm=[alarm(f"cpu-{HEAD}")]), "P13").result == "RISK"
    assert result(pcluster(alarms_in_alarm=None), "P13").result == "Not checked"


def test_p14_free_ips_boundary_for_one_p5_replacement() -> None:
    def with_ips(n: int) -> Evidence:
        return hyperpod(subnets=[SubnetInfo(subnet_id=SUBNET, vpc_id=VPC, availability_zone="us-west-2a",
                                            available_ips=n)])
    assert result(with_ips(32), "P14").result == "PASS"
    c = result(with_ips(31), "P14")
    assert c.result == "RISK" and SUBNET in c.evidence and "32 IPs (HyperPod P5 on Slurm)" in c.evidence
    low = [ServiceQuotaInfo(service_code="vpc", quota_code="L-DF5E4CA3", quota_name="Network interfaces per Region",
                            value=96.0)]
    assert result(hyperpod(service_quotas=low), "P14").result == "RISK"  # 2×32 + 1 + 32 = 97 needed
    assert result(hyperpod(service_quotas=[low[0].model_copy(update={"value": 97.0})]), "P14").result == "PASS"
    assert result(hyperpod(subnets=None), "P14").result == "Not checked"


@pytest.mark.parametrize(("kind", "itype", "need"), [
    ("hyperpod-slurm", "p5e.48xlarge", 32), ("hyperpod-slurm", "p5en.48xlarge", 32),
    ("hyperpod-eks", "p5.48xlarge", 81), ("hyperpod-eks", "p5en.48xlarge", 81)])
def test_p14_every_hyperpod_p5_type_needs_the_hyperpod_p5_ips_on_its_orchestrator(kind: str, itype: str,
                                                                                  need: int) -> None:
    """RULES §8 (frequent non-GPU causes), used by P14: IPs per node "HyperPod P5: 32 on Slurm, 81 on EKS"; §2 lists
    p5.48xlarge, p5e.48xlarge and p5en.48xlarge as the one P5 row. One free IP short of that is a RISK."""
    base = hyperpod()
    groups = [g.model_copy(update={"instance_type": itype}) if g.name == "gpu-p5" else g
              for g in base.cluster.instance_groups]
    cluster = base.cluster.model_copy(update={"kind": kind, "instance_groups": groups})
    nodes = [n.model_copy(update={"instance_type": itype}) if n.instance_group == "gpu-p5" else n for n in base.nodes]
    profile = P5.model_copy(update={"instance_type": itype, "max_efa_interfaces": 16 if itype == "p5en.48xlarge"
                                    else 32})

    def with_ips(n: int) -> Evidence:
        subnet = SubnetInfo(subnet_id=SUBNET, vpc_id=VPC, availability_zone="us-west-2a", available_ips=n)
        return base.model_copy(update={"cluster": cluster, "nodes": nodes, "subnets": [subnet],
                                       "profiles": {itype: profile, "m5.xlarge": M5}})
    c = result(with_ips(need - 1), "P14")
    assert c.result == "RISK" and f"{need} IPs (HyperPod P5" in c.evidence, c.evidence
    assert result(with_ips(need), "P14").result == "PASS"


def test_p15_outbound_open_instead_of_self_rule_is_a_risk() -> None:
    c = result(hyperpod(security_groups=[sg(egress_self=False, egress_open=True)]), "P15")
    assert c.result == "RISK" and SG in c.evidence and "0.0.0.0/0" in c.evidence
    assert result(hyperpod(security_groups=[sg(egress_self=True, egress_open=True)]), "P15").result == "PASS"
    assert result(pcluster(), "P15").result == "PASS"


def test_p16_public_subnet_without_nat_fails_bootstrap_lines_are_a_risk() -> None:
    assert result(pcluster(), "P16").result == "PASS"
    public = [RouteTableInfo(route_table_id="rtb-0fedcba9876543210", vpc_id=VPC, subnet_ids=[SUBNET],
                             routes=[Route(destination="0.0.0.0/0", target="igw-0123456789abcdef0")])]
    c = result(pcluster(route_tables=public), "P16")
    assert c.result == "FAIL" and "igw-0123456789abcdef0" in c.evidence and SUBNET in c.evidence
    with_public_ip = [n.model_copy(update={"public_ip": True,
                                           "interfaces": 1}) for n in pcluster().instance_network or []]
    assert result(pcluster(route_tables=public, instance_network=with_public_ip), "P16").result == "PASS"
    lines = [*pcluster().gpu_lines, gpu_line(HEAD, "clustermgtd - WARNING - Found the following bootstrap failure "
                                                   "nodes: (x2) ['train-st-p6-1']")]
    assert result(pcluster(gpu_lines=lines), "P16").result == "RISK"
    assert result(pcluster(route_tables=None), "P16").result == "Not checked"


def test_p16_no_bootstrap_failure_is_a_pass_only_where_the_log_that_records_them_was_read() -> None:
    """RULES §10 P16: RISK on recent bootstrap failures / protected mode, which ParallelCluster's head-node
    `clustermgtd` records (HyperPod: the cluster log group's `LifecycleConfig/…` streams); §0.2/§0.3: PASS only on
    evidence read. With the clustermgtd stream live across the window and no failure line, P16 passes; with it
    silent (its last line before the window), "no bootstrap failure line" rests on nothing: UNVERIFIED, naming it."""
    assert result(pcluster(), "P16").result == "PASS"  # its clustermgtd stream is live across the window
    kernel_only = [a for a in pcluster().stream_activity if a.log_stream != CLUSTERMGTD]
    silent = pcluster(stream_activity=kernel_only, control_streams=[ControlStream(
        log_group=PC_GROUP, log_stream=CLUSTERMGTD, role="clustermgtd", instance_id=HEAD,
        last_event=NOW - timedelta(days=20))])
    c = result(silent, "P16")
    assert c.result == "UNVERIFIED" and CLUSTERMGTD in c.evidence and PC_GROUP in c.evidence, c.evidence
    nowhere = result(pcluster(stream_activity=kernel_only), "P16")  # no clustermgtd stream placed at all
    assert nowhere.result == "UNVERIFIED" and "clustermgtd" in nowhere.evidence


# -- end to end: the world through the collectors, the judge and the report --------------------------------------------
def world_aws(raw: dict[str, Any] | None = None) -> Aws:
    world = load_world(WORLD) if raw is None else parse_world(raw)
    backend = WorldBackend(world)
    return Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
               monotonic=backend.monotonic)


def test_world_hyperpod_preflight_risks_end_to_end() -> None:
    out = run_audit(world_aws(), AuditRequest(cluster="train-hp-p5", mode="preflight", run_hours=48))
    got = {c.id: c.result for c in out.checks}
    assert out.ready == "No"
    assert got == {"P1": "FAIL", "P2": "PASS", "P3": "RISK", "P4": "FAIL", "P5": "RISK", "P6": "PASS",
                   "P7": "UNVERIFIED", "P8": "PASS", "P9": "UNVERIFIED", "P10": "RISK", "P11": "UNVERIFIED",
                   "P12": "UNVERIFIED", "P13": "PASS", "P14": "PASS", "P15": "RISK", "P16": "PASS"}
    report = out.report_markdown
    assert "## Ready: No" in report and "| P1 | Reserved capacity outlasts the run | **FAIL**" in report
    for value in ("cr-0a5b5c5d5e5f50001", "usable until 2026-10-06T11:00:00Z", "run end 2026-10-07T05:30:00Z",
                  "latest safe start 2026-10-04T11:00:00Z", "cbe-0a1b2c3d4e5f60789", "sg-0e5f6a7b8c9d01234",
                  "fs-0b7c6d5e4f3a21098", "subnet-0a2b4c6d8e0f13579"):
        assert value in report, value
    assert "2468.13" not in report and "111122223333" not in report  # no price, no account ID
    assert "fs-0d1c2b3a495867f70" not in {c.evidence for c in out.checks}  # another team's file system
    assert "other-cluster" not in next(c.evidence for c in out.checks if c.id == "P13")


def test_world_default_run_lengths() -> None:
    out = run_audit(world_aws(), AuditRequest(cluster="train-hp-p5", mode="preflight"))
    p1 = next(c for c in out.checks if c.id == "P1")
    assert p1.result == "Needs input" and all(f"{h} h run:" in p1.evidence for h in (24, 48, 72))
    assert out.ready == "No"  # P4 still fails


def test_world_failed_calls_are_not_checked_with_a_gap() -> None:
    raw = json.loads(WORLD.read_text(encoding="utf-8"))
    raw["faults"] = [{"service": "ec2", "operation": "DescribeSecurityGroups", "error": "UnauthorizedOperation",
                      "message": "You are not authorized"},
                     {"service": "events", "operation": "ListRules", "error": "AccessDeniedException",
                      "message": "denied"}]
    out = run_audit(world_aws(raw), AuditRequest(cluster="train-hp-p5", mode="preflight", run_hours=48))
    got = {c.id: c for c in out.checks}
    assert got["P7"].result == "Not checked" and "describe-security-groups" in got["P7"].evidence
    assert got["P15"].result == "Not checked"
    assert got["P10"].result == "Not checked" and "list-rules" in got["P10"].evidence
    assert any("DescribeSecurityGroups failed" in g for g in out.visibility_gaps)
    assert any("ListRules failed" in g for g in out.visibility_gaps)
