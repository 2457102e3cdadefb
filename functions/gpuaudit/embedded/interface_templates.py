"""Network-interface templates (docs/WORLD-FORMAT.md, "Network interfaces described once"): the compact form of
a world's instances, expanded when DescribeInstances serves them.

A p5.48xlarge carries 32 interfaces of a few dozen keys each; a 10,000-node world written per instance was 230 MB
of them (issue #50 item 4). A template lists the interfaces of one kind of instance once; an instance names it with
`network_interfaces_template` and gets its own copy when served, strings filled from a closed set of placeholders:

- `{InstanceId}`, `{InstanceType}`, `{LaunchTime}`, `{PrivateDnsName}`, `{PrivateIpAddress}`, `{SubnetId}`,
  `{VpcId}`: that field of the instance as written;
- `{index}`: the interface's position in the template (0, 1, ...);
- `{hex}`: 17 hexadecimal digits derived from the instance ID, the interface's position and the key path of the
  string (`NetworkInterfaceId`, `Attachment.AttachmentId`): unique per interface, the same on every load;
- `{mac}`: a MAC address (`0a:` and five bytes) derived the same way;
- `{{` and `}}`: a literal brace.

A string that is exactly one placeholder takes its value's own type (`"{index}"` an integer, `"{LaunchTime}"` the
instance's value, epoch milliseconds or ISO text, as written). Imports: stdlib only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

INSTANCE_FIELDS = ("InstanceId", "InstanceType", "LaunchTime", "PrivateDnsName", "PrivateIpAddress", "SubnetId",
                   "VpcId")
DERIVED = ("index", "hex", "mac")
PLACEHOLDERS = INSTANCE_FIELDS + DERIVED
TEMPLATE_KEY = "network_interfaces_template"  # the instance's reference (the format's own key, not an AWS one)
HEX_DIGITS = 17  # as many as an ENI or attachment ID carries after its prefix

# `{{`, `}}`, or `{name}`: anything between single braces is a placeholder name, checked against PLACEHOLDERS.
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def placeholders_in(value: Any) -> set[str]:
    """Every placeholder name the strings of `value` (a JSON value) use, known or not."""
    found: set[str] = set()
    if isinstance(value, str):
        found.update(m.group(1) for m in _TOKEN.finditer(value) if m.group(1) is not None)
    elif isinstance(value, Mapping):
        for item in value.values():
            found |= placeholders_in(item)
    elif isinstance(value, list):
        for item in value:
            found |= placeholders_in(item)
    return found


def derived_hex(instance_id: str, index: int, path: str) -> str:
    """What `{hex}` stands for: the first 17 hex digits of BLAKE2b-128 of "<instance id>/<index>/<key path>"."""
    digest = hashlib.blake2b(f"{instance_id}/{index}/{path}".encode(), digest_size=16).hexdigest()
    return digest[:HEX_DIGITS]


def derived_mac(instance_id: str, index: int, path: str) -> str:
    """What `{mac}` stands for: `0a:` then the first five bytes of the same digest, colon-separated."""
    d = derived_hex(instance_id, index, path)
    return f"0a:{d[0:2]}:{d[2:4]}:{d[4:6]}:{d[6:8]}:{d[8:10]}"


# One filled string: (the instance as written, the interface's position, the string's key path) -> its value.
Filler = Callable[[Mapping[str, Any], int, str], Any]


def _filler(text: str) -> Filler | None:
    """How to fill one template string, or None when it holds no placeholder (served as written)."""
    tokens = list(_TOKEN.finditer(text))
    if not tokens:
        return None
    whole = tokens[0] if len(tokens) == 1 and tokens[0].span() == (0, len(text)) else None
    if whole is not None and whole.group(1) is not None:
        name = whole.group(1)
        return lambda instance, index, path: _value(name, instance, index, path)

    def fill(instance: Mapping[str, Any], index: int, path: str) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            return m.group(0)[0] if name is None else str(_value(name, instance, index, path))
        return _TOKEN.sub(one, text)
    return fill


def _value(name: str, instance: Mapping[str, Any], index: int, path: str) -> Any:
    if name == "index":
        return index
    if name == "hex":
        return derived_hex(instance["InstanceId"], index, path)
    if name == "mac":
        return derived_mac(instance["InstanceId"], index, path)
    return instance[name]  # the schema checked that the instance has every field its template names


class InterfaceTemplate:
    """One template, compiled once: each string that holds a placeholder knows how to fill itself."""

    def __init__(self, name: str, interfaces: list[dict[str, Any]]) -> None:
        self.name = name
        self._compiled = [_compile(interface) for interface in interfaces]

    def expand(self, instance: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The instance's own interfaces: fresh objects, every placeholder filled."""
        return [_build(plan, instance, index, "") for index, plan in enumerate(self._compiled)]


# A compiled JSON value: ("fill", Filler), ("dict", [(key, plan)]), ("list", [plan]) or ("same", value).
Plan = tuple[str, Any]


def _compile(value: Any) -> Plan:
    if isinstance(value, str):
        filler = _filler(value)
        return ("same", value) if filler is None else ("fill", filler)
    if isinstance(value, Mapping):
        return ("dict", [(key, _compile(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [_compile(item) for item in value])
    return ("same", value)


def _build(plan: Plan, instance: Mapping[str, Any], index: int, path: str) -> Any:
    kind, body = plan
    if kind == "same":
        return body
    if kind == "fill":
        return body(instance, index, path)
    if kind == "dict":
        return {key: _build(item, instance, index, f"{path}.{key}" if path else key) for key, item in body}
    return [_build(item, instance, index, f"{path}[{i}]") for i, item in enumerate(body)]


def served_instance(instance: dict[str, Any], templates: Mapping[str, InterfaceTemplate]) -> dict[str, Any]:
    """The instance as DescribeInstances returns it: a template reference replaced by the interfaces it stands for
    (the world's own dict is never changed); an instance written with its interfaces is returned as it is."""
    name = instance.get(TEMPLATE_KEY)
    if name is None:
        return instance
    served = {key: value for key, value in instance.items() if key != TEMPLATE_KEY}
    served["NetworkInterfaces"] = templates[name].expand(instance)
    return served
