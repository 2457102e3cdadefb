"""The compact world form (issue #50 item 4, docs/WORLD-FORMAT.md "Network interfaces described once"): instances
name an `ec2.network_interface_templates` entry instead of carrying their interfaces, and the embedded backend
expands it when DescribeInstances serves them. A world written both ways is served the same, in the before-call and
the wire-faithful mode; a bad template or reference is a world error naming its key; the generator's compact worlds
are a fraction of the size."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.worlds import ACCOUNT, NOW, REGION
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.collectors.aws import Aws
from gpuaudit.devtools import worldgen
from gpuaudit.devtools.bench import answer_digest
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import FORMAT, WorldError, parse_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.pipeline import collect
from gpuaudit.report.markdown import finalize
from gpuaudit.rules.judge import JudgeConfig, judge

MODES = pytest.mark.parametrize("wire", [False, True], ids=["before-call", "wire"])


def both_forms(nodes: int, days: float = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """One generated ParallelCluster world, written per instance and compact (through JSON, as a file holds it)."""
    def spec(compact: bool) -> worldgen.WorldSpec:
        return worldgen.WorldSpec(nodes=nodes, days=days, seed=3, xid_rate=0.5, silent_fraction=0.1, compact=compact)
    per_instance, compact = worldgen.generate(spec(False)), worldgen.generate(spec(True))
    return json.loads(worldgen.dumps(per_instance)), json.loads(worldgen.dumps(compact))


def described(raw: dict[str, Any], wire: bool, **params: Any) -> list[dict[str, Any]]:
    """Every instance DescribeInstances returns, page after page, as boto3 parsed them."""
    client = WorldBackend(parse_world(raw), wire=wire).session().client("ec2")
    pages = client.get_paginator("describe_instances").paginate(**params)
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


@MODES
def test_a_world_written_compact_is_described_exactly_as_written_per_instance(wire: bool) -> None:
    # Given 40 p5 nodes and a head node, written once with every interface and once with templates
    per_instance, compact = both_forms(40)
    assert all("NetworkInterfaces" not in i for i in compact["ec2"]["instances"])
    assert len(compact["ec2"]["network_interface_templates"]) == 2  # the head node's type and the p5's

    # When both are described, in pages of 15, and by instance ID
    full = described(per_instance, wire, PaginationConfig={"PageSize": 15})
    expanded = described(compact, wire, PaginationConfig={"PageSize": 15})
    some = [i["InstanceId"] for i in per_instance["ec2"]["instances"][::7]]

    # Then boto3 parses the same instances, interfaces, datetimes and derived identifiers and all
    assert expanded == full
    assert len(full) == 41 and sum(len(i["NetworkInterfaces"]) for i in full) == 40 * 32 + 1
    assert described(compact, wire, InstanceIds=some) == described(per_instance, wire, InstanceIds=some)
    enis = [n["NetworkInterfaceId"] for i in expanded for n in i["NetworkInterfaces"]]
    assert len(set(enis)) == len(enis)  # each instance its own interfaces, not the template's


def audited(raw: dict[str, Any]) -> tuple[str, Counter[int | None]]:
    """A one-day coverage audit of the world: its answer's digest, and how many nodes had how many EFA interfaces."""
    world = parse_world(raw)
    backend = WorldBackend(world)
    aws = Aws(session=backend.session(), region=world.region, clock=lambda: world.now, sleep=backend.sleep,
              monotonic=backend.monotonic)
    evidence = collect(aws, AuditRequest(cluster="bench-pcluster", since=world.now - timedelta(days=1)))
    result = finalize(judge(evidence, JudgeConfig(), generated_at=evidence.now), evidence)
    return answer_digest(result), Counter(n.efa_attached for n in evidence.nodes)


def test_an_audit_of_either_form_reads_the_same_answer() -> None:
    # Given a small world written both ways; When each is audited
    (per_instance, efa), (compact, efa_compact) = (audited(raw) for raw in both_forms(6))
    # Then the same answer, each p5 node's 32 EFA interfaces counted from its expanded template
    assert compact == per_instance
    assert efa_compact == efa == {0: 1, 32: 6}  # the head node's one interface is no EFA


# -- the placeholders, as the format defines them ------------------------------------------------------------
TEMPLATE = {"name": "gpu", "interfaces": [
    {"NetworkInterfaceId": "eni-{hex}", "MacAddress": "{mac}", "InterfaceType": "efa",
     "Description": "card {index} of {InstanceId} ({InstanceType}) {{literal}}", "SubnetId": "{SubnetId}",
     "VpcId": "{VpcId}", "PrivateIpAddress": "{PrivateIpAddress}", "PrivateDnsName": "{PrivateDnsName}",
     "Attachment": {"AttachTime": "{LaunchTime}", "AttachmentId": "eni-attach-{hex}", "NetworkCardIndex": "{index}",
                    "DeviceIndex": 0}},
    {"NetworkInterfaceId": "eni-{hex}", "InterfaceType": "efa-only", "Attachment": {"NetworkCardIndex": "{index}"}},
]}


def instance(iid: str, **extra: Any) -> dict[str, Any]:
    return {"InstanceId": iid, "InstanceType": "p5.48xlarge", "LaunchTime": "2026-09-30T10:00:00Z",
            "PrivateDnsName": f"ip-{iid}.internal", "PrivateIpAddress": "10.0.0.7", "SubnetId": "subnet-1",
            "VpcId": "vpc-1", "State": {"Code": 16, "Name": "running"}, **extra}


def world_of(instances: list[dict[str, Any]], templates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"format": FORMAT, "now": NOW, "account_id": ACCOUNT, "region": REGION,
            "ec2": {"instances": instances, "network_interface_templates": [TEMPLATE] if templates is None
                    else templates}}


def hex17(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()[:17]


@MODES
def test_each_placeholder_is_filled_from_the_instance_as_the_format_says(wire: bool) -> None:
    # Given two instances naming one template, and one written with its own interfaces beside them
    raw = world_of([instance("i-0aaa", network_interfaces_template="gpu"),
                    instance("i-0bbb", network_interfaces_template="gpu"),
                    instance("i-0ccc", NetworkInterfaces=[{"NetworkInterfaceId": "eni-own", "InterfaceType": "efa"}])])

    # When described
    a, b, own = described(raw, wire)

    # Then each instance field fills its placeholder; {index} alone is the interface's position, as an integer
    first = a["NetworkInterfaces"][0]
    assert first["Description"] == "card 0 of i-0aaa (p5.48xlarge) {literal}"
    assert (first["SubnetId"], first["VpcId"]) == ("subnet-1", "vpc-1")
    assert (first["PrivateIpAddress"], first["PrivateDnsName"]) == ("10.0.0.7", "ip-i-0aaa.internal")
    assert first["Attachment"]["AttachTime"] == datetime.fromisoformat("2026-09-30T10:00:00+00:00")
    assert [n["Attachment"]["NetworkCardIndex"] for n in a["NetworkInterfaces"]] == [0, 1]
    # {hex}: 17 hex digits of BLAKE2b-128 of "<instance id>/<position>/<key path>"; {mac}: 0a: and five bytes of it
    assert first["NetworkInterfaceId"] == "eni-" + hex17("i-0aaa/0/NetworkInterfaceId")
    assert first["Attachment"]["AttachmentId"] == "eni-attach-" + hex17("i-0aaa/0/Attachment.AttachmentId")
    mac = hex17("i-0aaa/0/MacAddress")
    assert first["MacAddress"] == f"0a:{mac[0:2]}:{mac[2:4]}:{mac[4:6]}:{mac[6:8]}:{mac[8:10]}"
    assert a["NetworkInterfaces"][1]["NetworkInterfaceId"] == "eni-" + hex17("i-0aaa/1/NetworkInterfaceId")
    assert b["NetworkInterfaces"][0]["NetworkInterfaceId"] == "eni-" + hex17("i-0bbb/0/NetworkInterfaceId")
    # and an instance written with its interfaces is served as written
    assert own["NetworkInterfaces"] == [{"NetworkInterfaceId": "eni-own", "InterfaceType": "efa"}]


def test_serving_leaves_the_world_as_written() -> None:
    # Given a compact world; When it is described twice; Then the same answer, and its instances still name the template
    world = parse_world(world_of([instance("i-0aaa", network_interfaces_template="gpu")]))
    client = WorldBackend(world).session().client("ec2")
    first, again = client.describe_instances()["Reservations"], client.describe_instances()["Reservations"]
    assert first == again
    assert world.section("ec2", "instances") == [instance("i-0aaa", network_interfaces_template="gpu")]


# -- a bad template or reference is bad input, named -------------------------------------------------------------
@pytest.mark.parametrize(("raw", "expected"), [
    (world_of([instance("i-0aaa", network_interfaces_template="p5")]),
     "world: ec2.instances[0].network_interfaces_template: no template named 'p5' in "
     "ec2.network_interface_templates"),
    (world_of([instance("i-0aaa", network_interfaces_template="gpu", NetworkInterfaces=[])]),
     "world: ec2.instances[0]: an instance has either 'NetworkInterfaces' or 'network_interfaces_template', not both"),
    (world_of([{"InstanceId": "i-0aaa", "network_interfaces_template": "gpu"}]),
     "world: ec2.instances[0].network_interfaces_template: template 'gpu' fills InstanceType, LaunchTime, "
     "PrivateDnsName, PrivateIpAddress, SubnetId, VpcId from the instance, which has no such key"),
    (world_of([], [{"name": "gpu", "interfaces": [{"Description": "{Hostname} of {InstanceId}"}]}]),
     "world: ec2.network_interface_templates[0].interfaces: unknown placeholder(s) {Hostname}; known: {InstanceId}"),
    (world_of([], [TEMPLATE, TEMPLATE]),
     "world: ec2: network_interface_templates[1]: template 'gpu' appears twice (first at "
     "network_interface_templates[0])"),
    (world_of([instance("i-0aaa", network_interfaces_template=7)]),
     "world: ec2.instances[0].network_interfaces_template: must be a string, got 7"),
], ids=["missing template", "both forms", "instance lacks a field", "unknown placeholder", "duplicate name",
        "reference not a name"])
def test_a_bad_template_or_reference_is_a_world_error_naming_its_key(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(WorldError) as raised:
        parse_world(raw)
    assert str(raised.value).startswith(expected), str(raised.value)


# -- what the compact form saves --------------------------------------------------------------------------------
def test_the_generated_2000_node_world_is_under_a_third_of_its_per_instance_size(capsys: pytest.CaptureFixture[str],
                                                                               tmp_path: Path) -> None:
    # Given the generator's 2,000-node ParallelCluster world written both ways
    sizes = {form: worldgen.write(worldgen.generate(worldgen.WorldSpec(nodes=2000, compact=form == "compact")),
                                  str(tmp_path / f"{form}.json"))
             for form in ("per-instance", "compact")}
    with capsys.disabled():
        print(f"\n2,000-node world: per instance {sizes['per-instance'] / 1e6:.1f} MB, "
              f"compact {sizes['compact'] / 1e6:.1f} MB")
    # Then the compact file is under a third of the per-instance one (the interfaces were ~3/4 of it)
    assert sizes["compact"] * 3 < sizes["per-instance"]


def test_world_generate_writes_templates_unless_asked_for_every_interface(tmp_path: Path) -> None:
    # Given `gpuaudit world generate` run with and without --per-instance-interfaces
    def generated(*flag: str) -> dict[str, Any]:
        out = tmp_path / f"world{len(flag)}.json"
        run = CliRunner().invoke(app, ["world", "generate", "--kind", "parallelcluster", "--nodes", "3", "--days", "1",
                                       "--out", str(out), *flag])
        assert run.exit_code == 0, run.output
        return json.loads(out.read_text(encoding="utf-8"))
    compact, written_out = generated(), generated("--per-instance-interfaces")
    # Then the default names a template per instance type; the flag writes each instance's 32 interfaces
    assert {i["network_interfaces_template"] for i in compact["ec2"]["instances"]} == {"m5.2xlarge", "p5.48xlarge"}
    assert "network_interface_templates" not in written_out["ec2"]
    assert sorted(len(i["NetworkInterfaces"]) for i in written_out["ec2"]["instances"]) == [1, 32, 32, 32]
