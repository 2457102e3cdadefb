"""Branch D names what it read (#35 item 8), from RULES §0.4 ("every claim carries the identifiers behind it … for
what was cleared as much as for what was blamed") and §8 D layer 4 (a security group with a self-referencing
all-traffic rule inbound and outbound; a missing rule is a proven precondition failure).

With no NCCL line anywhere, layer 1 is Not observable — but the security group rules were still read, so the
branch row names the group (`sg-…`) and says whether the self-referencing rule was found or is missing.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import HyperPodWorld, PClusterWorld, at

SG = "sg-0c0ffee000000a11"
SINCE, UNTIL = at(6), at(10)


def _rules(to_self: bool) -> list[dict[str, Any]]:
    if to_self:
        return [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}], "IpRanges": []}]
    return [{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "UserIdGroupPairs": [],
             "IpRanges": [{"CidrIp": "10.0.0.0/16"}]}]


def _pcluster(*, inbound: bool, outbound: bool) -> PClusterWorld:
    """Two p5 nodes in SG, kernel streams live, and no NCCL line in any source."""
    w = PClusterWorld(n_compute=2)
    ids = {n.instance_id for n in w.compute}
    for raw in w.section("ec2", "instances"):
        if raw["InstanceId"] in ids:
            raw["SecurityGroups"] = [{"GroupId": SG, "GroupName": "train-efa"}]
            raw["VpcId"] = "vpc-0abc"
    w.section("ec2", "security_groups").append({"GroupId": SG, "GroupName": "train-efa", "VpcId": "vpc-0abc",
                                                "IpPermissions": _rules(inbound),
                                                "IpPermissionsEgress": _rules(outbound)})
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    return w


def _d(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "D")


def test_no_nccl_lines_still_names_the_security_group_and_the_self_rule_found() -> None:
    w = _pcluster(inbound=True, outbound=True)
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert d.status == "Not assessed"  # layer 1 is Not observable: not ruled out on the rules alone
    assert "no NCCL INFO/WARN lines" in d.evidence
    assert SG in d.evidence
    assert "inbound" in d.evidence and "outbound" in d.evidence and "Cleared" in d.evidence


@pytest.mark.parametrize(("inbound", "outbound", "missing"), [(False, True, "inbound"), (True, False, "outbound")])
def test_a_missing_self_rule_is_named_with_its_group_and_is_never_cleared(inbound: bool, outbound: bool,
                                                                          missing: str) -> None:
    w = _pcluster(inbound=inbound, outbound=outbound)
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert SG in d.evidence
    assert f"no all-traffic {missing} rule" in d.evidence
    assert d.status not in ("Ruled out", "Not assessed")  # a missing rule is a proven precondition failure
    assert "precondition failure" in d.evidence


def test_hyperpod_names_the_cluster_vpc_security_group() -> None:
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.described["VpcConfig"] = {"SecurityGroupIds": [SG], "Subnets": ["subnet-0123456789abcdef0"]}
    w.section("ec2", "security_groups").append({"GroupId": SG, "GroupName": "hp-efa", "VpcId": "vpc-0abc",
                                                "IpPermissions": _rules(True), "IpPermissionsEgress": _rules(True)})
    w.cluster_metrics(at(-48), at(12, 25))
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert SG in d.evidence and "VpcConfig" in d.evidence


DEFAULT_EGRESS = [{"IpProtocol": "-1", "UserIdGroupPairs": [], "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]


def test_the_default_all_traffic_egress_reaches_the_group_in_branch_d_as_in_p7() -> None:
    """RULES §8 D layer 4 asks for traffic to and from the group itself: all traffic to 0.0.0.0/0 (a new security
    group's default egress rule) reaches the group's members, so it is no missing rule. The incident's branch D and
    the pre-flight's P7 read the same group and must say the same (a result never contradicts itself)."""
    w = _pcluster(inbound=True, outbound=False)
    w.section("ec2", "security_groups")[-1]["IpPermissionsEgress"] = DEFAULT_EGRESS
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert SG in d.evidence and "0.0.0.0/0" in d.evidence
    assert "precondition failure" not in d.evidence and "no all-traffic outbound rule" not in d.evidence
    p7 = next(c for c in w.audit(w.cluster, mode="preflight", since=SINCE, until=UNTIL).checks if c.id == "P7")
    assert "no outbound rule" not in p7.evidence and SG in p7.evidence


def test_no_outbound_rule_at_all_is_still_a_precondition_failure_in_both() -> None:
    w = _pcluster(inbound=True, outbound=False)  # egress: tcp 443 to 10.0.0.0/16 only
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert "no all-traffic outbound rule" in d.evidence and "precondition failure" in d.evidence
    p7 = next(c for c in w.audit(w.cluster, mode="preflight", since=SINCE, until=UNTIL).checks if c.id == "P7")
    assert p7.result == "FAIL"


def test_hyperpod_default_egress_instead_of_the_self_rule_is_named_as_documented_to_fail() -> None:
    """On HyperPod EFA clusters the 0.0.0.0/0 egress instead of the self rule is documented to fail the EFA health
    checks (§8 D layer 4): D keeps it a missing rule and says why, the pre-flight's P15 flags it."""
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.described["VpcConfig"] = {"SecurityGroupIds": [SG], "Subnets": ["subnet-0123456789abcdef0"]}
    w.section("ec2", "security_groups").append({"GroupId": SG, "GroupName": "hp-efa", "VpcId": "vpc-0abc",
                                                "IpPermissions": _rules(True), "IpPermissionsEgress": DEFAULT_EGRESS})
    w.cluster_metrics(at(-48), at(12, 25))
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert "no all-traffic outbound rule" in d.evidence and "0.0.0.0/0" in d.evidence and "P15" in d.evidence
    p15 = next(c for c in w.audit(w.cluster, mode="preflight", since=SINCE, until=UNTIL).checks if c.id == "P15")
    assert p15.result == "RISK"
