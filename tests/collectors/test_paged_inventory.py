"""Paginated, streamed inventory (issue #34 item 2): DescribeInstances in MaxResults pages, turned into node
records page by page; DescribeInstanceStatus in chunks of at most 100 explicit IDs; Capacity Block plans that ask
EC2 for the reservation's instances only; and an embedded backend that refuses what EC2 refuses."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.utils import parse_timestamp
from handlers.targets import clusters_on_reservation
from helpers.worlds import PClusterWorld, at

from gpuaudit.collectors.aws import Aws, fast_timestamp, interface_types_only
from gpuaudit.collectors.inventory import (
    INSTANCE_PAGE,
    PCLUSTER_TAG,
    _node_from_instance,
    collect_inventory,
    instance_pages,
)
from gpuaudit.collectors.source_reads import READERS
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.evidence import Gap
from gpuaudit.model.evidence_parts import merged


class Recorded:
    """Every EC2 call's API parameters, as the collector passed them to botocore."""

    def __init__(self, aws: Aws) -> None:
        self.params: list[tuple[str, dict[str, Any]]] = []
        aws.session.events.register("before-parameter-build.ec2", self.keep)

    def keep(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.params.append((model.name, dict(params)))

    def of(self, operation: str) -> list[dict[str, Any]]:
        return [p for name, p in self.params if name == operation]


def wire_aws(w: PClusterWorld) -> Aws:
    world = w.world()
    backend = WorldBackend(world, wire=True)
    return Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
               monotonic=backend.monotonic)


def test_a_fleet_larger_than_a_page_is_read_in_maxresults_pages_through_wire_parsing():
    # Given a ParallelCluster of 450 compute nodes and a head node
    w = PClusterWorld(n_compute=450)
    aws = wire_aws(w)
    recorded = Recorded(aws)

    # When inventoried
    cluster, nodes = collect_inventory(aws, "llm-pretrain", None, [])

    # Then every node is there once, from ceil(451 / page) DescribeInstances pages each asking MaxResults
    assert sorted(n.instance_id for n in nodes) == sorted(i["InstanceId"] for i in w.section("ec2", "instances"))
    pages = recorded.of("DescribeInstances")
    assert len(pages) == -(-451 // INSTANCE_PAGE) and len(pages) >= 3
    assert all(p["MaxResults"] == INSTANCE_PAGE and "InstanceIds" not in p for p in pages)
    assert [bool(p.get("NextToken")) for p in pages] == [False] + [True] * (len(pages) - 1)
    assert cluster.subnet_ids == ["subnet-0123456789abcdef0"]


def test_status_checks_of_250_nodes_go_in_chunks_of_at_most_100_ids():
    # Given 250 running compute nodes, each with a status entry (one impaired)
    w = PClusterWorld(n_compute=250)
    statuses = w.section("ec2", "instance_status")
    for k, node in enumerate(w.compute):
        statuses.append({"InstanceId": node.instance_id, "InstanceState": {"Name": "running"},
                         "SystemStatus": {"Status": "impaired" if k == 170 else "ok"},
                         "InstanceStatus": {"Status": "ok"}})
    aws = wire_aws(w)
    recorded = Recorded(aws)
    _cluster, nodes = collect_inventory(aws, "llm-pretrain", None, [])
    from gpuaudit.model.evidence import Evidence
    evidence = Evidence.model_construct(nodes=nodes, cluster=_cluster, gaps=[], instance_status=None)

    # When the status checks are read
    evidence = merged(evidence, READERS["instance-status"](aws, evidence, None))  # type: ignore[arg-type]

    # Then three calls of <= 100 IDs read all 251 (the head node too), the impaired one among them
    chunks = recorded.of("DescribeInstanceStatus")
    assert [len(c["InstanceIds"]) for c in chunks] == [100, 100, 51]
    assert len(evidence.instance_status or []) == 250
    impaired = [s.instance_id for s in evidence.instance_status or [] if s.system_status == "impaired"]
    assert impaired == [w.compute[170].instance_id]
    assert evidence.gaps == []


def test_the_embedded_backend_refuses_what_ec2_refuses():
    w = PClusterWorld(n_compute=120)
    ec2 = WorldBackend(w.world(), wire=True).session().client("ec2")
    ids = [n.instance_id for n in w.compute]

    with pytest.raises(ClientError) as raised:
        ec2.describe_instance_status(InstanceIds=ids[:101])
    assert raised.value.response["Error"]["Code"] == "InvalidRequest"
    assert "maximum number of instance IDs" in raised.value.response["Error"]["Message"]
    assert len(ec2.describe_instance_status(InstanceIds=ids[:100], IncludeAllInstances=True)["InstanceStatuses"]) == 0

    with pytest.raises(ClientError) as raised:
        ec2.describe_instances(InstanceIds=ids[:2], MaxResults=5)
    assert raised.value.response["Error"]["Code"] == "InvalidParameterCombination"

    for too_many in (1001, 4):
        with pytest.raises(ClientError) as raised:
            ec2.describe_instances(MaxResults=too_many)
        assert raised.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert sum(len(r["Instances"]) for r in ec2.describe_instances(MaxResults=1000)["Reservations"]) == 121


def test_a_capacity_block_plan_reads_the_reservations_instances_only():
    # Given two clusters: 3 nodes of "llm-pretrain" in cr-a, 40 nodes of "other" in no reservation
    w = PClusterWorld(n_compute=3)
    for node in w.compute:
        next(i for i in w.section("ec2", "instances") if i["InstanceId"] == node.instance_id)[
            "CapacityReservationId"] = "cr-0aaaaaaaaaaaaaaaa"
    for _ in range(40):
        w.add_instance(cluster="other", launch=at(-10))
    aws = wire_aws(w)
    recorded = Recorded(aws)
    gaps: list[str] = []

    # When the plan asks which clusters run in cr-a
    running = clusters_on_reservation(aws, "cr-0aaaaaaaaaaaaaaaa", gaps)

    # Then EC2 was asked for that reservation's instances (filter), not for every ParallelCluster instance
    assert running == ["llm-pretrain"] and gaps == []
    (params,) = recorded.of("DescribeInstances")
    assert {"Name": "capacity-reservation-id", "Values": ["cr-0aaaaaaaaaaaaaaaa"]} in params["Filters"]
    assert clusters_on_reservation(aws, "cr-0bbbbbbbbbbbbbbbb", gaps) == []


def test_a_failed_status_chunk_leaves_status_checks_unread_not_partial():
    # Given 150 nodes and DescribeInstanceStatus refused after the first chunk
    w = PClusterWorld(n_compute=150)
    w.raw.setdefault("faults", []).append({"service": "ec2", "operation": "DescribeInstanceStatus",
                                           "error": "UnauthorizedOperation", "after": 1})
    aws = wire_aws(w)
    cluster, nodes = collect_inventory(aws, "llm-pretrain", None, [])
    from gpuaudit.model.evidence import Evidence
    evidence = Evidence.model_construct(nodes=nodes, cluster=cluster, gaps=[], instance_status=None)

    evidence = merged(evidence, READERS["instance-status"](aws, evidence, None))  # type: ignore[arg-type]

    # Then no status list (Not checked downstream) and a gap naming the refused call
    assert evidence.instance_status is None
    gap: Gap = evidence.gaps[0]
    assert gap.operation == "DescribeInstanceStatus" and gap.kind == "denied"


def test_timestamps_are_parsed_without_dateutil_into_the_same_node_records_as_botocores_parser(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a ParallelCluster read through wire parsing, once by botocore's own timestamp parser (a plain client)
    w = PClusterWorld(n_compute=12)
    plain = WorldBackend(w.world(), wire=True).session().client("ec2", region_name="us-west-2")
    by_botocore = [_node_from_instance(i).model_dump(mode="json")
                   for r in plain.describe_instances(Filters=[{"Name": f"tag:{PCLUSTER_TAG}",
                                                               "Values": ["llm-pretrain"]}])["Reservations"]
                   for i in r["Instances"]]

    # When inventoried through the port, dateutil unavailable
    def no_dateutil(*_: Any, **__: Any) -> Any:
        raise AssertionError("dateutil parsed a timestamp")
    monkeypatch.setattr("dateutil.parser.parse", no_dateutil)
    _, nodes = collect_inventory(wire_aws(w), "llm-pretrain", None, [])

    # Then no timestamp went through dateutil and the node records are the same, launch times included
    assert [n.model_dump(mode="json") for n in nodes] == by_botocore
    assert all(n.launch_time is not None for n in nodes)
    monkeypatch.undo()
    # other forms: botocore's
    assert fast_timestamp("2026-12-06T08:00:00.5Z") == parse_timestamp("2026-12-06T08:00:00.5Z")


def _interfaces(kinds: list[str | None]) -> list[dict[str, Any]]:
    """Network interfaces as DescribeInstances returns them, with addresses, groups and an attachment each (the
    parts a slim read leaves out), of the given types (None: the answer states no type)."""
    out = []
    for card, kind in enumerate(kinds):
        interface: dict[str, Any] = {
            "Attachment": {"AttachmentId": f"eni-attach-{card:017x}", "DeviceIndex": min(card, 1),
                           "NetworkCardIndex": card, "Status": "attached", "AttachTime": "2026-09-29T00:00:00Z"},
            "Groups": [{"GroupId": "sg-0123456789abcdef0", "GroupName": "<networkInterfaceSet>compute</x>"}],
            "NetworkInterfaceId": f"eni-{card:017x}", "OwnerId": "111122223333", "Status": "in-use",
            "PrivateIpAddresses": [{"Primary": True, "PrivateIpAddress": f"10.0.1.{card + 4}"}],
            "Description": "an <interfaceType>efa</interfaceType> in words"}
        if kind is not None:
            interface["InterfaceType"] = kind
        out.append(interface)
    return out


def test_inventory_parses_only_the_interface_types_into_the_same_node_records_as_a_full_parse() -> None:
    # Given a ParallelCluster whose nodes carry interfaces of every type, one stating none, with text that looks
    # like the interface markup in a description, a security group's name and a tag value (XML escapes it)
    w = PClusterWorld(n_compute=3)
    kinds: list[list[str | None]] = [["efa"] * 4, ["interface", "efa-only", "efa", None], [], ["efa-only", "trunk"]]
    for instance, its in zip(w.section("ec2", "instances"), kinds, strict=True):
        instance["NetworkInterfaces"] = _interfaces(its)
        instance["Tags"].append({"Key": "note", "Value": "</networkInterfaceSet><interfaceType>efa</interfaceType>"})
    filters = [{"Name": f"tag:{PCLUSTER_TAG}", "Values": ["llm-pretrain"]}]
    plain = WorldBackend(w.world(), wire=True).session().client("ec2", region_name="us-west-2")
    full = [i for r in plain.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]
    by_botocore = [_node_from_instance(i).model_dump(mode="json") for i in full]
    assert [n["efa_attached"] for n in by_botocore] == [4, 2, 0, 1]

    # When inventoried through the port (wire parsing), and the same instances asked for with their interfaces
    aws = wire_aws(w)
    _, nodes = collect_inventory(aws, "llm-pretrain", None, [])
    slim = list(instance_pages(aws, interfaces=False, Filters=filters))
    whole = list(instance_pages(aws, Filters=filters))

    # Then the node records are those of botocore's full parse, EFA counts included
    assert [n.model_dump(mode="json") for n in nodes] == by_botocore
    # and the inventory's read kept of each interface only its stated type, everything else of the instance whole
    assert [i["NetworkInterfaces"] for i in slim] == [[{"InterfaceType": k} for k in its if k] for its in kinds]
    assert [{k: v for k, v in i.items() if k != "NetworkInterfaces"} for i in slim] == \
        [{k: v for k, v in i.items() if k != "NetworkInterfaces"} for i in full]
    # while a reader that needs the interfaces (preflight's groups and addresses) still gets them whole
    assert whole == full


def test_only_an_interface_set_is_cut_and_an_empty_or_absent_one_is_left_as_it_is() -> None:
    body = (b"<r><item><networkInterfaceSet><item><networkInterfaceId>eni-1</networkInterfaceId>"
            b"<groupSet><item><groupId>sg-1</groupId></item></groupSet><interfaceType>efa</interfaceType></item>"
            b"<item><interfaceType>interface</interfaceType><status>in-use</status></item></networkInterfaceSet>"
            b"<tagSet><item><key>k</key><value>&lt;networkInterfaceSet&gt;</value></item></tagSet></item>"
            b"<item><networkInterfaceSet></networkInterfaceSet><instanceId>i-2</instanceId></item>"
            b"<item><instanceId>i-3</instanceId></item></r>")
    assert interface_types_only(body) == (
        b"<r><item><networkInterfaceSet><item><interfaceType>efa</interfaceType></item>"
        b"<item><interfaceType>interface</interfaceType></item></networkInterfaceSet>"
        b"<tagSet><item><key>k</key><value>&lt;networkInterfaceSet&gt;</value></item></tagSet></item>"
        b"<item><networkInterfaceSet></networkInterfaceSet><instanceId>i-2</instanceId></item>"
        b"<item><instanceId>i-3</instanceId></item></r>")
