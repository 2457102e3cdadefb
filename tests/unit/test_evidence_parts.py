"""The one place a collector's part becomes Evidence (model/evidence_parts.py::merged): only the fields a collector
set are taken, an explicit None included; the gaps are appended in the order the parts came."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuaudit.model.evidence import ClusterInfo, Evidence, Gap, Window
from gpuaudit.model.evidence_parts import CloudTrailPart, HealthPart, KubeNodesPart, merged
from gpuaudit.model.planned_reads import HealthEvent

NOW = datetime(2026, 9, 27, 12, tzinfo=UTC)


def evidence(**fields: object) -> Evidence:
    return Evidence(mode="incident", cluster=ClusterInfo(name="c", kind="ec2", region="us-west-2"),
                    window=Window(start=NOW.replace(hour=10), end=NOW, source="user"), now=NOW, **fields)


def gap(operation: str) -> Gap:
    return Gap(kind="denied", service="ec2", operation=operation)


def test_a_field_the_part_did_not_set_keeps_what_the_evidence_held() -> None:
    # Given evidence whose health events were read, and a part of another source that set nothing (it failed)
    held = [HealthEvent(arn="arn:aws:health:1")]
    before = evidence(health_events=held)

    after = merged(before, KubeNodesPart(gaps=[gap("DescribeCluster")]))

    assert after.health_events == held
    assert after.kube_nodes is None  # not read stays not read
    assert [g.operation for g in after.gaps] == ["DescribeCluster"]


def test_a_field_set_to_none_is_merged_as_none_and_a_default_left_unset_is_not() -> None:
    # Given evidence holding CloudTrail events, and a CloudTrail part whose every name failed (None: not read)
    before = evidence(cloudtrail=[], cloudtrail_complete=True)

    after = merged(before, CloudTrailPart(cloudtrail=None, gaps=[gap("LookupEvents")]))

    assert after.cloudtrail is None
    assert after.cloudtrail_complete is True  # the part left its default unset: not merged


def test_gaps_are_appended_in_the_order_the_parts_came_and_the_evidence_given_is_unchanged() -> None:
    before = evidence(gaps=[gap("DescribeInstances")])

    after = merged(before, HealthPart(gaps=[gap("DescribeEvents")]), KubeNodesPart(gaps=[gap("ListNodes")]),
                   HealthPart(health_events=[]))

    assert [g.operation for g in after.gaps] == ["DescribeInstances", "DescribeEvents", "ListNodes"]
    assert after.health_events == []  # a later part's field over an earlier's
    assert [g.operation for g in before.gaps] == ["DescribeInstances"]
    assert before.health_events is None
