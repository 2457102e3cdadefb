"""EC2: instances, their types and status, capacity reservations and Capacity Block extensions, the network."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gpuaudit.embedded.interface_templates import served_instance
from gpuaudit.embedded.responders.registry import ApiError, Backend, by_id, page, responds


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t.get("Key"): t.get("Value") for t in resource.get("Tags", []) or []}


def _ec2_filter(items: Iterable[dict[str, Any]], filters: list[dict[str, Any]],
                fields: dict[str, Callable[[dict[str, Any]], Any]]) -> list[dict[str, Any]]:
    selected = list(items)
    for flt in filters or []:
        name, values = flt["Name"], set(flt.get("Values", []))
        if name.startswith("tag:"):
            key = name[4:]
            selected = [r for r in selected if _tags(r).get(key) in values]
        elif name == "tag-key":
            selected = [r for r in selected if values & set(_tags(r))]
        elif name in fields:
            getter = fields[name]
            selected = [r for r in selected if _matches(getter(r), values)]
        else:
            raise ApiError("InvalidParameterValue", f"The filter '{name}' is invalid")
    return selected


def _matches(actual: Any, values: set[str]) -> bool:
    if isinstance(actual, list):
        return any(str(a) in values for a in actual)
    return str(actual) in values



INSTANCE_FIELDS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "instance-id": lambda i: i.get("InstanceId"),
    "instance-type": lambda i: i.get("InstanceType"),
    "instance-state-name": lambda i: i.get("State", {}).get("Name"),
    "private-dns-name": lambda i: i.get("PrivateDnsName"),
    "vpc-id": lambda i: i.get("VpcId"),
    "subnet-id": lambda i: i.get("SubnetId"),
    "capacity-reservation-id": lambda i: i.get("CapacityReservationId"),
}
MAX_RESULTS = (5, 1000)  # DescribeInstances and DescribeInstanceStatus: MaxResults between 5 and 1000
STATUS_MAX_IDS = 100  # DescribeInstanceStatus: "Constraints: Maximum 100 explicitly specified instance IDs"


def _ec2_page_limits(p: dict[str, Any], ids_key: str) -> None:
    """What EC2 refuses: MaxResults together with explicit IDs, and MaxResults outside 5..1000."""
    if p.get("MaxResults") is None:
        return
    if p.get(ids_key):
        raise ApiError("InvalidParameterCombination",
                       "The parameter instancesSet cannot be used with the parameter maxResults")
    low, high = MAX_RESULTS
    if not low <= int(p["MaxResults"]) <= high:
        raise ApiError("InvalidParameterValue", f"Value ( {p['MaxResults']} ) for parameter maxResults is invalid. "
                                                f"Expecting a value between {low} and {high}.")


@responds("ec2", "DescribeInstances")
def _describe_instances(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    _ec2_page_limits(p, "InstanceIds")
    items = by_id(b.world.section("ec2", "instances"), "InstanceId", p.get("InstanceIds"),
                   "InvalidInstanceID.NotFound", "instance")
    items = _ec2_filter(items, p.get("Filters", []), INSTANCE_FIELDS)
    body = page([{"Instances": [i]} for i in items], p, "Reservations", default=1000)
    # Compact worlds describe interfaces once per template: each instance of this page gets its own (only the
    # page's, so a 10,000-node world never holds every instance's interfaces at once).
    templates = b.world.interface_templates
    if templates:
        body["Reservations"] = [{"Instances": [served_instance(i, templates) for i in r["Instances"]]}
                                for r in body["Reservations"]]
    return body


@responds("ec2", "DescribeInstanceTypes")
def _describe_instance_types(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    items = b.world.section("ec2", "instance_types")
    wanted = p.get("InstanceTypes")
    if wanted:
        known = {t["InstanceType"] for t in items}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ApiError("InvalidInstanceType", f"The following supplied instance types do not exist: "
                                                  f"[{', '.join(unknown)}]")
        items = [t for t in items if t["InstanceType"] in wanted]
    return page(items, p, "InstanceTypes", default=100)


@responds("ec2", "DescribeInstanceStatus")
def _describe_instance_status(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    _ec2_page_limits(p, "InstanceIds")
    if len(p.get("InstanceIds") or []) > STATUS_MAX_IDS:
        # The code and text EC2 answers with (seen in SDK users' reports of this limit)
        raise ApiError("InvalidRequest", f"{len(p['InstanceIds'])} exceeds the maximum number of instance IDs that "
                                         f"can be specificied ({STATUS_MAX_IDS}). Please specify fewer than "
                                         f"{STATUS_MAX_IDS} instance IDs.")
    items = b.world.section("ec2", "instance_status")
    if p.get("InstanceIds"):
        items = [s for s in items if s.get("InstanceId") in p["InstanceIds"]]
    return page(items, p, "InstanceStatuses", default=1000)


@responds("ec2", "DescribeCapacityReservations")
def _describe_capacity_reservations(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    items = by_id(b.world.section("ec2", "capacity_reservations"), "CapacityReservationId",
                   p.get("CapacityReservationIds"), "InvalidCapacityReservationId.NotFound", "capacity reservation")
    items = _ec2_filter(items, p.get("Filters", []), {
        "instance-type": lambda r: r.get("InstanceType"), "state": lambda r: r.get("State"),
        "reservation-type": lambda r: r.get("ReservationType")})
    return page(items, p, "CapacityReservations", default=1000)


@responds("ec2", "DescribeCapacityBlockExtensionOfferings")
def _describe_cb_extensions(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    items = [o for o in b.world.section("ec2", "capacity_block_extension_offerings")
             if o.get("CapacityReservationId") in (None, p.get("CapacityReservationId"))]
    return page(items, p, "CapacityBlockExtensionOfferings", default=1000)


@responds("ec2", "DescribeSecurityGroups")
def _describe_security_groups(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    items = by_id(b.world.section("ec2", "security_groups"), "GroupId", p.get("GroupIds"),
                   "InvalidGroup.NotFound", "security group")
    return page(items, p, "SecurityGroups", default=1000)


@responds("ec2", "DescribeSubnets")
def _describe_subnets(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    items = by_id(b.world.section("ec2", "subnets"), "SubnetId", p.get("SubnetIds"),
                   "InvalidSubnetID.NotFound", "subnet")
    return page(items, p, "Subnets", default=1000)


@responds("ec2", "DescribeRouteTables")
def _describe_route_tables(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    items = _ec2_filter(b.world.section("ec2", "route_tables"), p.get("Filters", []), {
        "association.subnet-id": lambda r: [a.get("SubnetId") for a in r.get("Associations", [])],
        "vpc-id": lambda r: r.get("VpcId")})
    return page(items, p, "RouteTables", default=1000)
