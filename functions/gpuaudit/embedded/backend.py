"""Serve a World to real boto3 clients through botocore's own event system.

The audit code builds ordinary boto3 clients from an injected session; this module
registers two handlers on that session:
- `before-parameter-build`: keeps the caller's API parameters (already validated by
  botocore against the service model) for the responder;
- `before-call`: answers read calls from the world (short-circuiting the HTTP request),
  injects the world's faults as real ClientErrors, and lets the product's own writes
  (DynamoDB findings, SNS alerts, S3 evidence) through to moto;
- `before-send` (first): a fault with `"applied": true` on one of those writes lets moto apply the call, then
  answers it with the fault's error (`InternalServerError`, `ServiceUnavailable`: a 5xx; `ReadTimeoutError`: no
  answer at all) — the write committed and the caller told it failed, as DynamoDB or SNS do under load; botocore
  retries it as it retries AWS's own 5xx and timeouts;
  or, in wire mode (`WorldBackend(world, wire=True)`), `before-send`: the same answers as the
  HTTP response AWS would send (embedded/wire.py), parsed by botocore's own parser.

Responses are shaped by the operation's output shape: timestamps become datetimes as
boto3 would return them, and keys the call does not return are dropped.
Any mutating call on an audited service is refused: the auditor is read-only.
Each service's responders live in embedded/responders/, one module a service; this module routes a call to one.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from botocore.model import OperationModel, Shape

from gpuaudit.embedded import wire
from gpuaudit.embedded.dynamodb_limits import DynamoLimits
from gpuaudit.embedded.eventbridge import EventBridgeStandIn
from gpuaudit.embedded.responders import eks  # importing the package fills RESPONDERS, every service's
from gpuaudit.embedded.responders.registry import RESPONDERS, ApiError, RunningQuery
from gpuaudit.embedded.world import World, WorldError
from gpuaudit.model.timeutil import parse_time

# The product's own resources live in moto, not in the world.
PASS_THROUGH_SERVICES = {"dynamodb", "sns", "s3", "stepfunctions", "lambda", "sts"}
PARAMS_KEY = "gpuaudit_api_params"
APPLYING_KEY = "gpuaudit_applying"  # a request being applied by moto under an "applied, then failed" fault
# The HTTP status an "applied, then failed" fault answers with, by error code (a 5xx: the commit was not seen).
APPLIED_STATUS = {"InternalServerError": 500, "InternalFailure": 500, "InternalError": 500, "ServiceUnavailable": 503}
MODEL_KEY = "gpuaudit_operation_model"
# Every world session reads the same service models. botocore caches what it parsed per loader, and each new
# session makes its own: one loader shared by world sessions saves re-parsing about a megabyte of model JSON per
# client, which was most of a world audit's time (and of the test suite's). Models are read-only data.
_SHARED_LOADER = botocore.loaders.create_loader()


# Requests per second per account and Region that AWS documents for an operation, enforced on the backend's clock
# (`WorldBackend.monotonic`): "The rate of lookup requests is limited to two per second, per account, per Region.
# If this limit is exceeded, a throttling error occurs." (CloudTrail API reference, LookupEvents).
RATE_LIMITS: dict[tuple[str, str], int] = {("cloudtrail", "LookupEvents"): 2}


@dataclass
class WorldBackend:
    world: World
    queries: dict[str, RunningQuery] = field(default_factory=dict)
    fault_hits: dict[int, int] = field(default_factory=dict)
    fault_seen: dict[int, int] = field(default_factory=dict)
    # Wire mode: answer at `before-send` with the HTTP response AWS would send (embedded/wire.py), so botocore
    # parses real XML/JSON/CBOR and retries what it retries; otherwise at `before-call` with parsed dicts.
    wire: bool = False
    serve_s: float = 0.0  # seconds spent answering and serializing in wire mode (AWS's side of the call)
    serve_cpu_s: float = 0.0  # the process CPU seconds of the same (a step's own CPU time is the rest)
    # The account's clock for request rates: the process's monotonic time plus what callers slept through
    # `sleep` (a world audit sleeps without waiting, so its backoff still moves the clock the rate is kept on).
    slept_s: float = 0.0
    elapsed: Callable[[], float] = time.monotonic  # the real part of that clock (a test may freeze it)
    # Accepted calls per rate-limited operation (the times, on `monotonic`, in order), for RATE_LIMITS.
    accepted: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    rejected: dict[tuple[str, str], int] = field(default_factory=dict)  # throttled calls, per operation
    # The product's own events:PutEvents (issue #38): EventBridge's limits and partial failures, the events delivered.
    eventbridge: EventBridgeStandIn | None = None
    dynamodb: DynamoLimits = field(init=False)

    def __post_init__(self) -> None:
        if self.eventbridge is None:
            self.eventbridge = EventBridgeStandIn(self.world.account_id, self.world.region)
        self.dynamodb = DynamoLimits(self.world.faults, self.inject_fault, PARAMS_KEY)

    def monotonic(self) -> float:
        return self.elapsed() + self.slept_s

    def sleep(self, seconds: float) -> None:
        """What a world audit's Aws sleeps with: no real wait, but the account's rate clock moves on."""
        self.slept_s += max(0.0, seconds)

    def attach(self, session: boto3.Session) -> None:
        session.events.register("before-parameter-build", self._keep_params)
        if self.wire:
            # First, so moto's own before-send stubber (under mock_aws) never answers a world's call as well.
            session.events.register_first("before-send", self._send)
        else:
            session.events.register("before-call", self._serve)
        # The product's own table (moto) held to DynamoDB's limits, with the world's throttling and unprocessed items.
        self.dynamodb.attach(session)
        # Writes that commit and then fail in the response (faults with "applied": true).
        session.events.register_first("before-send", functools.partial(self._applied_then_failed, session))
        # The Kubernetes API of the world's EKS clusters, found by collectors/kubernetes.py on the session.
        session.gpuaudit_kubernetes = self.kubernetes  # type: ignore[attr-defined]

    def kubernetes(self, cluster: str, _endpoint: str, _ca: str) -> eks.EmbeddedKubeApi:
        return eks.EmbeddedKubeApi(self, cluster)

    def session(self) -> boto3.Session:
        """A boto3 session wired to this world (dummy credentials: nothing leaves the process)."""
        core = botocore.session.get_session()
        # A world is not an account: the caller's AWS_PROFILE (even one naming no profile) is never read for it.
        core.get_component("config_store").set_config_variable("profile", None)  # an override, unlike the session's
        core.register_component("data_loader", _SHARED_LOADER)
        session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                region_name=self.world.region, botocore_session=core)
        self.attach(session)
        return session

    # -- botocore hooks -------------------------------------------------------------
    def _keep_params(self, params: dict[str, Any], model: OperationModel, context: dict[str, Any],
                     **_: Any) -> None:
        context[PARAMS_KEY] = dict(params)
        context[MODEL_KEY] = model

    def _answer(self, model: OperationModel, params: dict[str, Any]) -> dict[str, Any] | ApiError:
        """The world's answer to one call (its response body in the output shape's terms), or the API's error."""
        service = model.service_model.service_name
        operation = model.name
        try:
            self.inject_fault(service, operation)
            self._keep_rate(service, operation)
            responder = RESPONDERS.get((service, operation))
            if responder is None:
                if not operation.startswith(("Describe", "List", "Get", "Lookup", "Filter", "Search")):
                    raise ApiError("AccessDeniedException",
                                   f"{service}:{operation} is a mutating call; the auditor is read-only", 403)
                raise ApiError("UnsupportedOperation",
                               f"the embedded backend does not serve {service}:{operation}", 501)
            return responder(self, params)
        except ApiError as err:
            return err
        except (TypeError, KeyError, AttributeError, ValueError, IndexError) as exc:
            # A world item of the wrong shape (a null node, a missing InstanceId, a CloudTrailEvent that is not
            # an object): bad input in the world file, named, never a traceback from the audit.
            raise WorldError(f"world {self.world.source}: data served for {service}:{operation} is malformed "
                             f"({type(exc).__name__}: {exc}); see WORLD-FORMAT") from None

    def _serve(self, model: OperationModel, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict] | None:
        service = model.service_model.service_name
        operation = model.name
        if service in PASS_THROUGH_SERVICES:
            return None
        body = self._answer(model, context.get(PARAMS_KEY, {}))
        if isinstance(body, ApiError):
            return _response(body.status), {"Error": {"Code": body.code, "Message": body.message},
                                            "ResponseMetadata": {"HTTPStatusCode": body.status}}
        try:
            parsed = _shape(model.output_shape, body, f"{service}.{operation}") if model.output_shape else {}
        except (TypeError, KeyError, AttributeError, ValueError, IndexError) as exc:
            raise WorldError(f"world {self.world.source}: data served for {service}:{operation} does not fit the "
                             f"API's response shape ({type(exc).__name__}: {exc})") from None
        parsed["ResponseMetadata"] = {"HTTPStatusCode": 200, "RequestId": str(uuid.uuid4())}
        return _response(200), parsed

    def _send(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        """Wire mode: the HTTP response AWS would send, for botocore to parse as it parses AWS's."""
        context = request.context or {}
        model: OperationModel | None = context.get(MODEL_KEY)
        if model is None or model.service_model.service_name in PASS_THROUGH_SERVICES:
            return None
        started, cpu = time.perf_counter(), time.process_time()
        body = self._answer(model, context.get(PARAMS_KEY, {}))
        request_id = str(uuid.uuid4())
        if isinstance(body, ApiError):
            answer = wire.failure(model, body.code, body.message, body.status, request_id)
        else:
            try:
                answer = wire.success(model, body, request_id, f"{model.service_model.service_name}.{model.name}")
            except (TypeError, KeyError, AttributeError, ValueError, IndexError) as exc:
                raise WorldError(f"world {self.world.source}: data served for {model.service_model.service_name}:"
                                 f"{model.name} does not fit the API's response shape ({type(exc).__name__}: "
                                 f"{exc})") from None
        del body
        self.serve_s += time.perf_counter() - started
        self.serve_cpu_s += time.process_time() - cpu
        # Answered here: no other before-send handler (moto's stubber, matching AWS host names) may answer too.
        request.url = "https://embedded.world/"
        return AWSResponse(request.url, answer.status, answer.headers, _RawBody(answer.body))

    def inject_fault(self, service: str, operation: str) -> None:
        for i, fault in enumerate(self.world.faults):
            if fault.get("service") != service or fault.get("operation") not in (operation, "*"):
                continue
            if fault.get("error") in (None, "") or "status" in fault or fault.get("applied"):
                continue  # behaviour faults (e.g. a query that stays Running) are applied by the responder;
                # "applied, then failed" faults by `_applied_then_failed`, after the write
            # `after`: let that many calls succeed first (e.g. a pagination token that expires on page 2).
            seen = self.fault_seen.get(i, 0)
            self.fault_seen[i] = seen + 1
            if seen < int(fault.get("after", 0)):
                continue
            times = fault.get("times")
            hits = self.fault_hits.get(i, 0)
            if times is not None and hits >= int(times):
                continue
            self.fault_hits[i] = hits + 1
            if fault["error"] == "EndpointConnectionError":
                raise EndpointConnectionError(endpoint_url=f"https://{service}.{self.world.region}.amazonaws.com")
            status = 400
            if "Throttl" in fault["error"] or "LimitExceeded" in fault["error"]:
                status = 400
            elif "AccessDenied" in fault["error"]:
                status = 403
            raise ApiError(fault["error"], fault.get("message", fault["error"]), status)

    def _applied_then_failed(self, session: boto3.Session, request: AWSPreparedRequest, event_name: str,
                             **_: Any) -> AWSResponse | None:
        """A product write (a pass-through service) under an `"applied": true` fault: the rest of the chain (moto)
        applies it, then the caller gets the fault's error instead of moto's answer — a 5xx, or no answer at all
        (`ReadTimeoutError`). Counted with `after`/`times` like every fault."""
        context = request.context if isinstance(getattr(request, "context", None), dict) else {}
        model: OperationModel | None = context.get(MODEL_KEY)
        if model is None or context.get(APPLYING_KEY):
            return None
        service = model.service_model.service_name
        if service not in PASS_THROUGH_SERVICES:
            return None
        fault = self._applied_fault(service, model.name)
        if fault is None:
            return None
        context[APPLYING_KEY] = True
        try:
            applied = [r for _, r in session.events.emit(event_name, request=request) if r is not None]
        finally:
            context.pop(APPLYING_KEY, None)
        if not applied or applied[0].status_code >= 300:
            return applied[0] if applied else None  # moto refused it: nothing was applied, its answer stands
        if fault["error"] == "ReadTimeoutError":
            raise ReadTimeoutError(endpoint_url=request.url)
        answer = wire.failure(model, fault["error"], fault.get("message", fault["error"]),
                              APPLIED_STATUS.get(fault["error"], 500), str(uuid.uuid4()))
        return AWSResponse(request.url, answer.status, answer.headers, _RawBody(answer.body))

    def _applied_fault(self, service: str, operation: str) -> dict[str, Any] | None:
        for i, fault in enumerate(self.world.faults):
            if not fault.get("applied") or fault.get("service") != service \
                    or fault.get("operation") not in (operation, "*"):
                continue
            seen = self.fault_seen.get(i, 0)
            self.fault_seen[i] = seen + 1
            if seen < int(fault.get("after", 0)):
                continue
            hits = self.fault_hits.get(i, 0)
            if fault.get("times") is not None and hits >= int(fault["times"]):
                continue
            self.fault_hits[i] = hits + 1
            return fault
        return None

    def _keep_rate(self, service: str, operation: str) -> None:
        """Refuse a call past the operation's documented per-account rate, as AWS does (ThrottlingException);
        a refused call does not count against the rate."""
        limit = RATE_LIMITS.get((service, operation))
        if limit is None:
            return
        now = self.monotonic()
        accepted = self.accepted.setdefault((service, operation), [])
        if sum(1 for t in accepted[-limit:] if t > now - 1.0) >= limit:
            self.rejected[(service, operation)] = self.rejected.get((service, operation), 0) + 1
            raise ApiError("ThrottlingException", "Rate exceeded", 400)
        accepted.append(now)

    def behaviour_fault(self, service: str, operation: str) -> dict[str, Any] | None:
        for fault in self.world.faults:
            if fault.get("service") == service and fault.get("operation") == operation and "status" in fault:
                return fault
        return None


def _response(status: int) -> AWSResponse:
    return AWSResponse(url="https://embedded.world/", status_code=status, headers={}, raw=None)


class _RawBody:
    """The raw HTTP body botocore reads from (`AWSResponse.content` joins `stream()`)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def _shape(shape: Shape, value: Any, where: str) -> Any:
    """Coerce world data to what boto3 would return for `shape` (drops unknown keys)."""
    if value is None:
        return None
    kind = shape.type_name
    if kind == "structure":
        if not isinstance(value, dict):
            raise WorldError(f"{where}: expected an object, got {type(value).__name__}")
        out = {}
        for name, member in shape.members.items():
            if name in value and value[name] is not None:
                out[name] = _shape(member, value[name], f"{where}.{name}")
        return out
    if kind == "list":
        if not isinstance(value, list):
            raise WorldError(f"{where}: expected a list")
        return [_shape(shape.member, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind == "map":
        if not isinstance(value, dict):
            raise WorldError(f"{where}: expected an object, got {type(value).__name__}")
        return {k: _shape(shape.value, v, f"{where}.{k}") for k, v in value.items()}
    if kind == "timestamp":
        try:
            return parse_time(value)
        except (TypeError, ValueError, OverflowError, OSError) as exc:
            raise WorldError(f"{where}: bad timestamp {value!r} ({exc})") from None
    # boto3 hands the audit only values of the shape's type: a list where the API returns a string never gets through
    allowed = SCALAR_TYPES.get(kind)
    if allowed is not None and (not isinstance(value, allowed) or (isinstance(value, bool) and kind != "boolean")):
        raise WorldError(f"{where}: expected a {kind}, got {type(value).__name__}")
    return value


SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "long": (int,), "boolean": (bool,), "double": (int, float),
    "float": (int, float), "blob": (str, bytes)}


__all__ = ["RESPONDERS", "ApiError", "WorldBackend"]
