"""Plan: real-shaped triggers become audits; a malformed one is refused with a clear message."""

from __future__ import annotations

from typing import Any

import pytest
from handlers import plan
from handlers.runtime import InvalidEvent
from lambda_harness import (
    PCLUSTER_WORLD,
    Account,
    LambdaContext,
    capacity_block_warning,
    deploy_configuration,
    hyperpod_cluster_event,
    hyperpod_node_health_event,
    hyperpod_state_change,
    scheduled_event,
    world_account,
)


def run(event: Any) -> dict[str, Any]:
    return plan.handler(event, LambdaContext())  # type: ignore[no-any-return]


def test_schedule_audits_every_configured_cluster_over_the_day_ending_at_the_last_whole_hour(account: Account) -> None:
    out = run(scheduled_event("2026-10-01T18:17:04Z"))
    assert out["trigger"] == "schedule"
    (target,) = out["targets"]
    assert target["request"] | {"instance_ids": []} == {
        "cluster": "research-hp-slurm", "mode": "coverage", "since": "2026-09-30T18:00:00Z",
        "until": "2026-10-01T18:00:00Z", "last": None, "instance_ids": [], "file_system_ids": [], "log_groups": [],
        "eks_cluster": None, "run_hours": None, "run_start": None,
        "checkpoint_minutes": None, "onset": None}
    assert target["window_source"] == "schedule"


def test_a_redelivered_trigger_plans_the_same_window(account: Account) -> None:
    assert run(scheduled_event("2026-10-01T18:17:04Z")) == run(scheduled_event("2026-10-01T18:17:04Z"))


@pytest.mark.parametrize("event", [
    hyperpod_cluster_event("research-hp-slurm", "2026-10-01T16:42:31Z"),
    hyperpod_node_health_event("research-hp-slurm", "2026-10-01T16:42:31Z"),
], ids=["cluster-event", "node-health-event"])
def test_a_hyperpod_event_starts_an_incident_audit_of_its_cluster_around_the_event(account: Account,
                                                                                   event: dict[str, Any]) -> None:
    (target,) = run(event)["targets"]
    assert (target["trigger"], target["window_source"]) == ("hyperpod-event", "event")
    assert target["request"]["cluster"] == "research-hp-slurm" and target["request"]["mode"] == "incident"
    assert (target["request"]["since"], target["request"]["until"]) == ("2026-09-30T16:42:00Z", "2026-10-01T16:42:00Z")


def test_informational_and_unaudited_cluster_events_start_nothing(account: Account) -> None:
    info = run(hyperpod_cluster_event("research-hp-slurm", "2026-10-01T16:42:31Z", level="Info"))
    other = run(hyperpod_cluster_event("someone-elses-cluster", "2026-10-01T16:42:31Z"))
    assert info["targets"] == [] and "Info" in info["skipped"][0]
    assert other["targets"] == [] and "not in the audited set" in other["skipped"][0]


@pytest.mark.parametrize(("status", "audited"), [("Failed", True), ("RollingBack", True), ("InService", False),
                                                 ("Updating", False)])
def test_only_a_failed_cluster_state_change_starts_an_incident_audit(account: Account, status: str,
                                                                    audited: bool) -> None:
    out = run(hyperpod_state_change("research-hp-slurm", "2026-10-01T16:42:31Z", status))
    assert bool(out["targets"]) is audited


@pytest.mark.parametrize("detail_type", ["Capacity Block Expiration Warning",
                                         "Capacity Block Reservation Expiration Warning"])
def test_a_capacity_block_warning_under_either_name_starts_preflight(monkeypatch: pytest.MonkeyPatch,
                                                                     detail_type: str) -> None:
    with world_account(monkeypatch, PCLUSTER_WORLD, clusters=("llm-pretrain-b200",)):
        out = run(capacity_block_warning("cr-0107f80e222f82876", "2026-10-03T10:50:12Z", detail_type))
    (target,) = out["targets"]
    assert target["request"]["mode"] == "preflight" and target["request"]["cluster"] == "llm-pretrain-b200"
    assert target["request"]["until"] == "2026-10-03T10:50:00Z"
    assert "not visible" in out["skipped"][0]  # no instance names the block: every audited cluster


def test_a_capacity_block_warning_audits_only_the_clusters_running_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with world_account(monkeypatch, PCLUSTER_WORLD, clusters=("llm-pretrain-b200", "llm-pretrain")) as acct:
        head = next(i for i in acct.world.data["ec2"]["instances"] if i["InstanceId"] == "i-086e4d3cea27d2693")
        head["CapacityReservationId"] = "cr-0107f80e222f82876"
        out = run(capacity_block_warning("cr-0107f80e222f82876", "2026-10-03T10:50:12Z"))
    assert [t["request"]["cluster"] for t in out["targets"]] == ["llm-pretrain-b200"]


def test_console_input_is_an_audit_request(account: Account) -> None:
    given = {"cluster": "research-hp-slurm", "mode": "preflight", "since": "2026-10-01T00:00:00Z", "run_hours": 72}
    (target,) = run(given)["targets"]
    assert target["trigger"] == "console" and target["window_source"] is None
    assert target["request"]["run_hours"] == 72 and target["request"]["since"] == "2026-10-01T00:00:00Z"


def test_discovery_adds_every_hyperpod_cluster_of_the_region(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    deploy_configuration(monkeypatch, {"clusters": [], "discover": True})
    out = run(scheduled_event("2026-10-01T18:17:04Z"))
    assert [t["request"]["cluster"] for t in out["targets"]] == ["research-hp-slurm"] and out["gaps"] == []


@pytest.mark.parametrize(("event", "named"), [
    ({"cluster": "research-hp-slurm", "mode": "bogus"}, "mode: Input should be 'coverage', 'incident' or 'preflight'"),
    ({"mode": "incident"}, "cluster: Field required"),
    ({"cluster": "research-hp-slurm", "window": "24h"}, "window: Extra inputs are not permitted"),
    ({"cluster": "research-hp-slurm", "since": "yesterday"}, "since: Input should be a valid datetime"),
    ({"cluster": "research-hp-slurm", "run_hours": -5}, "run_hours: Input should be greater than 0"),
    (scheduled_event("2026-10-01T18:17:04Z") | {"detail-type": "EC2 Instance State-change Notification"},
     "does not match any of the expected tags"),
    (capacity_block_warning("not-a-reservation", "2026-10-03T10:50:12Z"), "capacity-reservation-id"),
    (hyperpod_cluster_event("x", "2026-10-01T16:42:31Z") | {"detail": {"EventDetails": {}}}, "names no cluster"),
    ([], "audit request"),
], ids=["bad-mode", "no-cluster", "unknown-key", "bad-time", "negative-run", "unknown-event", "bad-reservation",
        "no-cluster-in-event", "not-an-object"])
def test_a_malformed_trigger_gets_a_clear_validation_error(account: Account, event: Any, named: str) -> None:
    with pytest.raises(InvalidEvent) as raised:
        run(event)
    assert named in str(raised.value)


def test_a_burst_of_100_node_events_in_a_quarter_hour_starts_one_audit(account: Account, capsys: Any) -> None:
    """100 node-health events between 16:45:00 and 16:59:51 (one per node detection): the first plans the
    incident audit, the other 99 end at Plan, each naming the audit it was coalesced into."""
    outs = [run(hyperpod_node_health_event("research-hp-slurm", f"2026-10-01T16:{45 + i // 7:02d}:{(i * 7) % 60:02d}Z"))
            for i in range(100)]
    audits = [t for o in outs for t in o["targets"]]
    with capsys.disabled():
        print(f"\nburst: 100 events -> {len(audits)} audit(s), {sum(len(o['skipped']) for o in outs)} coalesced")
    assert len(audits) == 1
    assert all("coalesced" in o["skipped"][0] for o in outs[1:])
    # the next quarter hour is a new burst: audited again
    (later,) = run(hyperpod_node_health_event("research-hp-slurm", "2026-10-01T17:00:05Z"))["targets"]
    assert later["request"]["until"] == "2026-10-01T17:00:00Z"


def test_a_claim_that_cannot_be_made_never_blocks_the_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    with world_account(monkeypatch) as _account:
        monkeypatch.setenv("FINDINGS_TABLE", "no-such-table")
        out = run(hyperpod_node_health_event("research-hp-slurm", "2026-10-01T16:42:31Z"))
    assert len(out["targets"]) == 1 and "burst claim not made" in out["gaps"][0]


def test_an_on_demand_request_scoped_by_instances_alone_audits_a_labelled_fleet(account: Account) -> None:
    (target,) = run({"instance_ids": ["i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"], "mode": "incident",
                     "last": "24h"})["targets"]
    assert target["request"]["cluster"] == "fleet-of-2-instances"
    assert target["request"]["instance_ids"] == ["i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"]


def test_an_on_demand_request_without_cluster_or_instances_or_with_a_bad_id_is_refused(account: Account) -> None:
    with pytest.raises(InvalidEvent, match="cluster"):
        run({"mode": "coverage"})
    with pytest.raises(InvalidEvent, match="instance_ids"):
        run({"instance_ids": ["i-0abc"]})


def test_an_on_demand_request_scoped_by_file_systems_alone_audits_a_labelled_fleet(account: Account) -> None:
    (target,) = run({"file_system_ids": ["fs-0123456789abcdef0"], "mode": "coverage", "last": "24h"})["targets"]
    assert target["request"]["cluster"] == "fleet-of-1-file-systems"
    with pytest.raises(InvalidEvent, match="file_system_ids"):
        run({"file_system_ids": ["fs-XYZ"]})


@pytest.mark.parametrize(("event", "field"), [
    ({"cluster": "llm-pretrain", "log_groups": ["bad name!"]}, "log_groups"),
    ({"cluster": "llm-pretrain", "log_groups": [""]}, "log_groups"),
    ({"eks_cluster": "bad name!"}, "eks_cluster"),
    ({"cluster": "llm-pretrain", "instance_ids": ["i-0123456789abcdef0", "not-an-id"]}, "instance_ids"),
    ({"cluster": "llm-pretrain", "file_system_ids": ["fs-0"]}, "file_system_ids"),
])
def test_a_bad_scope_field_in_the_state_machine_input_is_refused_naming_it(account: Account, event: dict[str, Any],
                                                                           field: str) -> None:
    """#15 item 5: every scope input of the state machine, refused naming the field (never a silent skip)."""
    with pytest.raises(InvalidEvent, match=field):
        run(event)


def test_named_log_groups_and_an_eks_cluster_in_the_state_machine_input_reach_the_audit(account: Account) -> None:
    (target,) = run({"eks_cluster": "train-eks", "log_groups": ["/aws/batch/job"], "mode": "incident",
                     "last": "24h"})["targets"]
    assert target["request"]["cluster"] == "train-eks" and target["request"]["eks_cluster"] == "train-eks"
    assert target["request"]["log_groups"] == ["/aws/batch/job"]
