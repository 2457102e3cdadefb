"""The HTTP response AWS would send for an embedded answer, serialized from botocore's service model.

The wire-faithful mode of the backend (`WorldBackend(world, wire=True)`) answers at botocore's `before-send`
with these bytes, so the client's own parser reads real XML, JSON or CBOR: its cost in memory and CPU is
paid as against AWS, and a world value the protocol cannot carry fails the way AWS's answer would.

Protocols, as botocore resolves them for the audited services:
- `ec2` (EC2): `<OperationResponse>` XML, member names from `locationName`, lists as `<item>` elements,
  timestamps ISO 8601; errors `<Response><Errors><Error><Code>…`.
- `json` (CloudWatch Logs, SageMaker, CloudTrail, FSx, EventBridge, Service Quotas): a JSON document,
  timestamps epoch seconds; errors `{"__type": code, "message": …}`.
- `rest-json` (EKS): members bound to headers go there, the rest is the JSON body; errors name their code
  in `x-amzn-ErrorType`.
- `smithy-rpc-v2-cbor` (CloudWatch, Health): a CBOR map, timestamps tag 1; errors `__type` in the map.
- `query` (STS, SNS and the like): `<OperationResponse><OperationResult>` XML, lists as `<member>`.

Every value is checked against its shape on the way (a list where the API returns a string is a WorldError
naming the key path, as in the before-call mode): keys the API does not return are dropped.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.model import OperationModel, Shape

from gpuaudit.embedded.world_schema import WorldError
from gpuaudit.model.timeutil import parse_time

EC2_NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"
# XML 1.0 cannot carry these characters at all (not even as references): AWS never sends them.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "long": (int,), "boolean": (bool,), "double": (int, float),
    "float": (int, float), "blob": (str, bytes), "timestamp": (str, int, float, datetime)}


@dataclass(frozen=True)
class WireResponse:
    status: int
    headers: dict[str, str]
    body: bytes


def success(model: OperationModel, value: dict[str, Any], request_id: str, where: str) -> WireResponse:
    """The 2xx response carrying `value` (world data in the output shape's terms)."""
    protocol = model.service_model.resolved_protocol
    encoder = _SUCCESS.get(protocol)
    if encoder is None:
        raise WorldError(f"{where}: the wire mode does not serialize the {protocol} protocol")
    return encoder(model, value, request_id, where)


def failure(model: OperationModel, code: str, message: str, status: int, request_id: str) -> WireResponse:
    """The error response AWS sends for `code` in the operation's protocol."""
    protocol = model.service_model.resolved_protocol
    if protocol == "ec2":
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{_text(code)}</Code>'
                f"<Message>{_text(message)}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>")
        return WireResponse(status, {"Content-Type": "text/xml;charset=UTF-8"}, body.encode())
    if protocol == "query":
        kind = "Receiver" if status >= 500 else "Sender"
        body = (f'<ErrorResponse xmlns="{_query_namespace(model)}"><Error><Type>{kind}</Type><Code>{_text(code)}'
                f"</Code><Message>{_text(message)}</Message></Error><RequestId>{request_id}</RequestId>"
                "</ErrorResponse>")
        return WireResponse(status, {"Content-Type": "text/xml"}, body.encode())
    if protocol == "json":
        return WireResponse(status, _json_headers(model, request_id),
                            json.dumps({"__type": code, "message": message}).encode())
    if protocol == "rest-json":
        return WireResponse(status, {"Content-Type": "application/json", "x-amzn-RequestId": request_id,
                                     "x-amzn-ErrorType": code}, json.dumps({"message": message}).encode())
    if protocol == "smithy-rpc-v2-cbor":
        return WireResponse(status, _cbor_headers(request_id), _cbor({"__type": code, "message": message}))
    raise WorldError(f"{model.service_model.service_name}.{model.name}: the wire mode does not serialize the "
                     f"{protocol} protocol")


# -- type checks shared by every protocol ------------------------------------------------------------
def _checked(shape: Shape, value: Any, where: str) -> None:
    kind = shape.type_name
    if kind == "structure" or kind == "map":
        if not isinstance(value, dict):
            raise WorldError(f"{where}: expected an object, got {type(value).__name__}")
    elif kind == "list":
        if not isinstance(value, list):
            raise WorldError(f"{where}: expected a list")
    else:
        allowed = _SCALARS.get(kind)
        if allowed is not None and (not isinstance(value, allowed) or (isinstance(value, bool) and kind != "boolean")):
            raise WorldError(f"{where}: expected a {kind}, got {type(value).__name__}")


def _instant(value: Any, where: str) -> datetime:
    try:
        return parse_time(value)
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise WorldError(f"{where}: bad timestamp {value!r} ({exc})") from None


def _timestamp_text(shape: Shape, value: Any, default: str, where: str) -> str | float:
    instant = _instant(value, where)
    form = shape.serialization.get("timestampFormat", default)
    if form == "unixTimestamp":
        return instant.timestamp()
    if form == "rfc822":
        return instant.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"


# -- XML (ec2, query) -----------------------------------------------------------------------------------
def _text(value: str) -> str:
    text = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _XML_INVALID.sub("\ufffd", text)


class _XmlWriter:
    """Streams elements into one text buffer: a 1,000-instance page holds the buffer, never a tree."""

    def __init__(self, list_item: str) -> None:
        self.buffer = io.StringIO()
        self.write = self.buffer.write
        self.list_item = list_item

    def element(self, shape: Shape, value: Any, tag: str, where: str) -> None:
        _checked(shape, value, where)
        kind = shape.type_name
        write = self.write
        if kind == "structure":
            write(f"<{tag}>")
            self.members(shape, value, where)
            write(f"</{tag}>")
        elif kind == "list":
            member = shape.member
            if shape.serialization.get("flattened"):
                name = member.serialization.get("name", tag)
                for i, item in enumerate(value):
                    if item is not None:
                        self.element(member, item, name, f"{where}[{i}]")
                return
            name = member.serialization.get("name", self.list_item)
            write(f"<{tag}>")
            for i, item in enumerate(value):
                if item is not None:
                    self.element(member, item, name, f"{where}[{i}]")
            write(f"</{tag}>")
        elif kind == "map":
            key_name = shape.key.serialization.get("name", "key")
            value_name = shape.value.serialization.get("name", "value")
            if not shape.serialization.get("flattened"):
                write(f"<{tag}>")
            for k, v in value.items():
                write("<entry>" if not shape.serialization.get("flattened") else f"<{tag}>")
                self.element(shape.key, k, key_name, f"{where}.{k}")
                if v is not None:
                    self.element(shape.value, v, value_name, f"{where}.{k}")
                write("</entry>" if not shape.serialization.get("flattened") else f"</{tag}>")
            if not shape.serialization.get("flattened"):
                write(f"</{tag}>")
        else:
            write(f"<{tag}>{self.scalar(shape, value, where)}</{tag}>")

    def members(self, shape: Shape, value: dict[str, Any], where: str) -> None:
        for name, member in shape.members.items():
            item = value.get(name)
            if item is None:
                continue
            tag = member.serialization.get("name", name)
            if member.type_name == "list" and member.serialization.get("flattened"):
                tag = member.member.serialization.get("name", tag)
            self.element(member, item, tag, f"{where}.{name}")

    @staticmethod
    def scalar(shape: Shape, value: Any, where: str) -> str:
        kind = shape.type_name
        if kind == "boolean":
            return "true" if value else "false"
        if kind == "timestamp":
            return str(_timestamp_text(shape, value, "iso8601", where))
        if kind == "blob":
            raw = value.encode() if isinstance(value, str) else value
            return base64.b64encode(raw).decode()
        if kind in ("double", "float"):
            return repr(float(value))
        if kind in ("integer", "long"):
            return str(int(value))
        return _text(str(value))


def _ec2(model: OperationModel, value: dict[str, Any], request_id: str, where: str) -> WireResponse:
    writer = _XmlWriter("item")
    root = f"{model.name}Response"
    writer.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{EC2_NAMESPACE}">'
                 f"<requestId>{request_id}</requestId>")
    if model.output_shape is not None:
        _checked(model.output_shape, value, where)
        writer.members(model.output_shape, value, where)
    writer.write(f"</{root}>")
    return WireResponse(200, {"Content-Type": "text/xml;charset=UTF-8"}, _drained(writer))


def _query_namespace(model: OperationModel) -> str:
    return f"https://{model.service_model.endpoint_prefix}.amazonaws.com/doc/{model.service_model.api_version}/"


def _query(model: OperationModel, value: dict[str, Any], request_id: str, where: str) -> WireResponse:
    writer = _XmlWriter("member")
    root = f"{model.name}Response"
    writer.write(f'<{root} xmlns="{_query_namespace(model)}">')
    shape = model.output_shape
    if shape is not None:
        _checked(shape, value, where)
        wrapper = shape.serialization.get("resultWrapper", f"{model.name}Result")
        writer.write(f"<{wrapper}>")
        writer.members(shape, value, where)
        writer.write(f"</{wrapper}>")
    writer.write(f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{root}>")
    return WireResponse(200, {"Content-Type": "text/xml"}, _drained(writer))


def _drained(writer: _XmlWriter) -> bytes:
    text = writer.buffer.getvalue()
    writer.buffer.close()  # the buffer goes before the bytes are made: one copy of the page at a time, not three
    return text.encode("utf-8")


# -- JSON (json, rest-json) ------------------------------------------------------------------------------
def _jsonable(shape: Shape, value: Any, where: str, timestamps: str = "unixTimestamp") -> Any:
    _checked(shape, value, where)
    kind = shape.type_name
    if kind == "structure":
        out = {}
        for name, member in shape.members.items():
            item = value.get(name)
            if item is not None and "location" not in member.serialization:
                out[member.serialization.get("name", name)] = _jsonable(member, item, f"{where}.{name}", timestamps)
        return out
    if kind == "list":
        return [_jsonable(shape.member, v, f"{where}[{i}]", timestamps) for i, v in enumerate(value) if v is not None]
    if kind == "map":
        return {k: _jsonable(shape.value, v, f"{where}.{k}", timestamps) for k, v in value.items() if v is not None}
    if kind == "timestamp":
        return _timestamp_text(shape, value, timestamps, where)
    if kind == "blob":
        raw = value.encode() if isinstance(value, str) else value
        return base64.b64encode(raw).decode()
    if kind in ("double", "float") and isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _json_headers(model: OperationModel, request_id: str) -> dict[str, str]:
    version = model.service_model.metadata.get("jsonVersion", "1.0")
    return {"Content-Type": f"application/x-amz-json-{version}", "x-amzn-RequestId": request_id}


def _json(model: OperationModel, value: dict[str, Any], request_id: str, where: str) -> WireResponse:
    body = _jsonable(model.output_shape, value, where) if model.output_shape is not None else {}
    return WireResponse(200, _json_headers(model, request_id), json.dumps(body, separators=(",", ":")).encode())


def _rest_json(model: OperationModel, value: dict[str, Any], request_id: str, where: str) -> WireResponse:
    headers = {"Content-Type": "application/json", "x-amzn-RequestId": request_id}
    status = int(model.http.get("responseCode", 200))
    shape = model.output_shape
    if shape is None:
        return WireResponse(status, headers, b"{}")
    _checked(shape, value, where)
    for name, member in shape.members.items():
        item = value.get(name)
        location = member.serialization.get("location")
        if item is None or location is None:
            continue
        if location == "header":
            scalar = _jsonable(member, item, f"{where}.{name}", "rfc822")
            headers[member.serialization.get("name", name)] = (json.dumps(scalar) if isinstance(scalar, (dict, list))
                                                               else str(scalar).lower() if isinstance(scalar, bool)
                                                               else str(scalar))
        elif location == "statusCode":
            status = int(item)
        elif location == "headers":
            prefix = member.serialization.get("name", "")
            headers.update({f"{prefix}{k}": str(v) for k, v in item.items()})
    payload = shape.serialization.get("payload")
    if payload is not None:
        member = shape.members[payload]
        item = value.get(payload)
        if item is None:
            return WireResponse(status, headers, b"")
        if member.type_name in ("blob", "string"):
            return WireResponse(status, headers, item.encode() if isinstance(item, str) else item)
        return WireResponse(status, headers, json.dumps(_jsonable(member, item, f"{where}.{payload}")).encode())
    return WireResponse(status, headers, json.dumps(_jsonable(shape, value, where), separators=(",", ":")).encode())


# -- CBOR (smithy-rpc-v2-cbor) ---------------------------------------------------------------------------------
def _cbor_headers(request_id: str) -> dict[str, str]:
    return {"Content-Type": "application/cbor", "smithy-protocol": "rpc-v2-cbor", "x-amzn-RequestId": request_id}


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | extra]) + n.to_bytes(size, "big")
    raise WorldError(f"integer {n} does not fit CBOR")


def _cbor(value: Any) -> bytes:
    """RFC 8949 for the JSON-like values _cborable yields (and tag 1 for timestamps)."""
    out = bytearray()

    def put(v: Any) -> None:
        if v is None:
            out.append(0xF6)
        elif v is True or v is False:
            out.append(0xF5 if v else 0xF4)
        elif isinstance(v, _Epoch):
            out.append(0xC1)
            put(v.seconds)
        elif isinstance(v, int):
            out.extend(_head(0, v) if v >= 0 else _head(1, -1 - v))
        elif isinstance(v, float):
            out.append(0xFB)
            out.extend(struct.pack(">d", v))
        elif isinstance(v, str):
            raw = v.encode("utf-8")
            out.extend(_head(3, len(raw)))
            out.extend(raw)
        elif isinstance(v, bytes):
            out.extend(_head(2, len(v)))
            out.extend(v)
        elif isinstance(v, list):
            out.extend(_head(4, len(v)))
            for item in v:
                put(item)
        elif isinstance(v, dict):
            out.extend(_head(5, len(v)))
            for k, item in v.items():
                put(k)
                put(item)
        else:
            raise WorldError(f"a {type(v).__name__} has no CBOR form")

    put(value)
    return bytes(out)


@dataclass(frozen=True)
class _Epoch:
    seconds: float


def _cborable(shape: Shape, value: Any, where: str) -> Any:
    _checked(shape, value, where)
    kind = shape.type_name
    if kind == "structure":
        return {name: _cborable(member, value[name], f"{where}.{name}")
                for name, member in shape.members.items() if value.get(name) is not None}
    if kind == "list":
        return [_cborable(shape.member, v, f"{where}[{i}]") for i, v in enumerate(value) if v is not None]
    if kind == "map":
        return {k: _cborable(shape.value, v, f"{where}.{k}") for k, v in value.items() if v is not None}
    if kind == "timestamp":
        return _Epoch(_instant(value, where).timestamp())
    if kind == "blob":
        return value.encode() if isinstance(value, str) else value
    if kind in ("double", "float"):
        return float(value)
    return value


def _smithy_cbor(model: OperationModel, value: dict[str, Any], request_id: str, where: str) -> WireResponse:
    body = _cborable(model.output_shape, value, where) if model.output_shape is not None else {}
    return WireResponse(200, _cbor_headers(request_id), _cbor(body))


_SUCCESS: dict[str, Callable[[OperationModel, dict[str, Any], str, str], WireResponse]] = {
    "ec2": _ec2, "query": _query, "json": _json, "rest-json": _rest_json, "smithy-rpc-v2-cbor": _smithy_cbor}
