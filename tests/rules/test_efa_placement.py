"""EFA placement (issue #53 item 14), from RULES §8 D layer 4 ("nodes of one job split across subnets or AZs") and
its status rule: "another layer-4 defect read (nodes of the job split across subnets or AZs …) with layers 1–3 Not
observable makes D `UNVERIFIED`, Hypothesis (to validate), naming the defect and the layer-1 collection command as the
confirming measurement — never `Not assessed`".

The operator's case: two P5 nodes of one ParallelCluster queue, EFA security group correct, kernel logs live, no NCCL
line anywhere; the nodes were launched into two subnets.
"""

from __future__ import annotations

from gpuaudit.model.result import Branch, Result
from tests.helpers.worlds import HyperPodWorld, PClusterWorld, at

SINCE, UNTIL = at(6), at(10)
SG = "sg-0c0ffee000000a11"
SUBNET_A, SUBNET_B = "subnet-0aaaa1111bbbb2222", "subnet-0cccc3333dddd4444"
SELF = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}], "IpRanges": []}]


def _world(subnets: tuple[str, str], zones: tuple[str, str]) -> PClusterWorld:
    w = PClusterWorld(n_compute=2)
    placed = dict(zip((n.instance_id for n in w.compute), subnets, strict=True))
    for raw in w.section("ec2", "instances"):
        if raw["InstanceId"] in placed:
            raw.update(SubnetId=placed[raw["InstanceId"]], VpcId="vpc-0abc",
                       SecurityGroups=[{"GroupId": SG, "GroupName": "train-efa"}])
    w.section("ec2", "security_groups").append({"GroupId": SG, "GroupName": "train-efa", "VpcId": "vpc-0abc",
                                                "IpPermissions": SELF, "IpPermissionsEgress": SELF})
    head = ("subnet-0123456789abcdef0", "us-west-2a")  # the head node's (PClusterWorld)
    for subnet, zone in dict([*zip(subnets, zones, strict=True), head]).items():
        w.section("ec2", "subnets").append({"SubnetId": subnet, "VpcId": "vpc-0abc", "AvailabilityZone": zone,
                                            "CidrBlock": "10.0.0.0/24", "AvailableIpAddressCount": 200})
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    return w


def _d(result: Result) -> Branch:
    return next(b for b in result.branches if b.branch == "D")


def test_nodes_split_across_azs_make_d_a_hypothesis_naming_the_split_and_the_nccl_command() -> None:
    w = _world((SUBNET_A, SUBNET_B), ("us-west-2a", "us-west-2b"))
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert d.status == "UNVERIFIED" and d.label == "Hypothesis (to validate)"
    assert "Availability Zones" in d.evidence
    for text in (SUBNET_A, SUBNET_B, "us-west-2a", "us-west-2b", *(n.instance_id for n in w.compute)):
        assert text in d.evidence
    assert d.confirming_measurement is not None and "NCCL_DEBUG=INFO" in d.confirming_measurement


def test_two_subnets_of_one_az_are_a_split_too() -> None:
    w = _world((SUBNET_A, SUBNET_B), ("us-west-2a", "us-west-2a"))
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert d.status == "UNVERIFIED" and "split across 2 subnets" in d.evidence


def test_one_subnet_is_cleared_and_named_and_d_stays_not_assessed_without_nccl_lines() -> None:
    w = _world((SUBNET_A, SUBNET_A), ("us-west-2a", "us-west-2a"))
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert d.status == "Not assessed"
    assert "EFA placement" in d.evidence and "Cleared" in d.evidence and SUBNET_A in d.evidence


def test_hyperpod_placement_is_not_checked_never_cleared() -> None:
    w = HyperPodWorld(gpu_nodes=2, gpu_type="ml.p5.48xlarge")
    w.described["VpcConfig"] = {"SecurityGroupIds": [SG], "Subnets": [SUBNET_A, SUBNET_B]}
    w.section("ec2", "security_groups").append({"GroupId": SG, "GroupName": "hp-efa", "VpcId": "vpc-0abc",
                                                "IpPermissions": SELF, "IpPermissionsEgress": SELF})
    w.cluster_metrics(at(-48), at(12, 25))
    d = _d(w.audit(w.cluster, mode="incident", since=SINCE, until=UNTIL))
    assert "EFA placement" in d.evidence and "Not checked" in d.evidence and SUBNET_B in d.evidence
    assert d.status != "Ruled out"
