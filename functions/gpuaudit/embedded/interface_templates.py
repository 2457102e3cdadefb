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


# One compiled template value: (the instance as written, the interface's position) -> the value served.
Builder = Callable[[Mapping[str, Any], int], Any]


def _string(text: str, path: str) -> Builder | None:
    """How to fill one template string at `path`, or None when it holds no placeholder (served as written)."""
    tokens = list(_TOKEN.finditer(text))
    if not tokens:
        return None
    if len(tokens) == 1 and tokens[0].span() == (0, len(text)) and tokens[0].group(1) is not None:
        name = tokens[0].group(1)  # the whole string: the value keeps its own type
        return lambda instance, index: _value(name, instance, index, path)

    # The string cut once into literal text and placeholder names: (is a name, text or name), in order
    parts: list[tuple[bool, str]] = []
    last = 0
    for token in tokens:
        parts.append((False, text[last:token.start()]))
        name = token.group(1)
        parts.append((False, token.group(0)[0]) if name is None else (True, name))
        last = token.end()
    parts.append((False, text[last:]))
    parts = [(is_name, part) for is_name, part in parts if is_name or part]

    def fill(instance: Mapping[str, Any], index: int) -> str:
        return "".join(str(_value(part, instance, index, path)) if is_name else part for is_name, part in parts)
    return fill


def _value(name: str, instance: Mapping[str, Any], index: int, path: str) -> Any:
    if name == "index":
        return index
    if name == "hex":
        return derived_hex(instance["InstanceId"], index, path)
    if name == "mac":
        return derived_mac(instance["InstanceId"], index, path)
    return instance[name]  # the schema checked that the instance has every field its template names


def _compile(value: Any, path: str) -> Builder | None:
    """A builder of copies of `value` with its placeholders filled; None for a value that holds no placeholder, served
    as written (as an instance's own interfaces are: the backend never changes what it serves). The key paths, which
    `{hex}` and `{mac}` derive from, are fixed here once rather than per served interface."""
    if isinstance(value, str):
        return _string(value, path)
    if isinstance(value, Mapping):
        members = [(key, item, _compile(item, f"{path}.{key}" if path else key)) for key, item in value.items()]
        if all(build is None for _, _, build in members):
            return None
        return lambda instance, index: {key: item if build is None else build(instance, index)
                                        for key, item, build in members}
    if isinstance(value, list):
        elements = [(item, _compile(item, f"{path}[{i}]")) for i, item in enumerate(value)]
        if all(build is None for _, build in elements):
            return None
        return lambda instance, index: [item if build is None else build(instance, index) for item, build in elements]
    return None


class InterfaceTemplate:
    """One template, compiled once: each string that holds a placeholder knows how to fill itself."""

    def __init__(self, name: str, interfaces: list[dict[str, Any]]) -> None:
        self.name = name
        self._builders = [(interface, _compile(interface, "")) for interface in interfaces]

    def expand(self, instance: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The instance's own interfaces, every placeholder filled (what holds none is the template's own value)."""
        return [build(instance, index) if build is not None else interface
                for index, (interface, build) in enumerate(self._builders)]


def served_instance(instance: dict[str, Any], templates: Mapping[str, InterfaceTemplate]) -> dict[str, Any]:
    """The instance as DescribeInstances returns it: a template reference replaced by the interfaces it stands for
    (the world's own dict is never changed); an instance written with its interfaces is returned as it is."""
    name = instance.get(TEMPLATE_KEY)
    if name is None:
        return instance
    served = {key: value for key, value in instance.items() if key != TEMPLATE_KEY}
    served["NetworkInterfaces"] = templates[name].expand(instance)
    return served
