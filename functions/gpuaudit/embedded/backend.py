"""Serve a World to real boto3 clients through botocore's own event system.

The audit code builds ordinary boto3 clients from an injected session; this module
registers two handlers on that session:
- `before-parameter-build`: keeps the caller's API parameters (already validated by
  botocore against the service model) for the responder;
- `before-call`: answers read calls from the world (short-circuiting the HTTP request),
  injects the world's faults as real ClientErrors, and lets the product's own writes
  (DynamoDB findings, SNS alerts, S3 evidence) through to moto;
  or, in wire mode (`WorldBackend(world, wire=True)`), `before-send`: the same answers as the
  HTTP response AWS would send (embedded/wire.py), parsed by botocore's own parser.

Responses are shaped by the operation's output shape: timestamps become datetimes as
boto3 would return them, and keys the call does not return are dropped.
Any mutating call on an audited service is refused: the auditor is read-only.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import EndpointConnectionError
from botocore.model import OperationModel, Shape

from gpuaudit.embedded import insights, wire
from gpuaudit.embedded.dynamodb_limits import DynamoLimits
from gpuaudit.embedded.eventbridge import EventBridgeStandIn, PutEventsRefused
from gpuaudit.embedded.world import World, WorldError
from gpuaudit.model.timeutil import parse_time

# The product's own resources live in moto, not in the world.
PASS_THROUGH_SERVICES = {"dynamodb", "sns", "s3", "stepfunctions", "lambda", "sts"}
PARAMS_KEY = "gpuaudit_api_params"
MODEL_KEY = "gpuaudit_operation_model"
# Every world session reads the same service models. botocore caches what it parsed per loader, and each new
# session makes its own: one loader shared by world sessions saves re-parsing about a megabyte of model JSON per
# client, which was most of a world audit's time (and of the test suite's). Models are read-only data.
_SHARED_LOADER = botocore.loaders.create_loader()


# Requests per second per account and Region that AWS documents for an operation, enforced on the backend's clock
# (`WorldBackend.monotonic`): "The rate of lookup requests is limited to two per second, per account, per Region.
# If this limit is exceeded, a throttling error occurs." (CloudTrail API reference, LookupEvents).
RATE_LIMITS: dict[tuple[str, str], int] = {("cloudtrail", "LookupEvents"): 2}


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


Responder = Callable[["WorldBackend", dict[str, Any]], dict[str, Any]]
RESPONDERS: dict[tuple[str, str], Responder] = {}


def responds(service: str, operation: str) -> Callable[[Responder], Responder]:
    def register(fn: Responder) -> Responder:
        RESPONDERS[(service, operation)] = fn
        return fn
    return register


@dataclass
class RunningQuery:
    outcome: insights.QueryOutcome | None
    status: str
    # Counts against the account's concurrent-query quota until its final status has been read or it was
    # stopped: the embedded backend answers at once, so "still running" is modelled as "not yet collected",
    # the worst case for a caller that starts queries faster than it reads them.
    holds_slot: bool = True
    # A `status: Running` fault with `times: N`: the query reports Running for N reads, then Complete (a slow
    # query, as a state machine's Wait loop meets it); without `times` it never finishes.
    running_reads: int | None = None


@dataclass
class WorldBackend:
    world: World
    queries: dict[str, RunningQuery] = field(default_factory=dict)
    fault_hits: dict[int, int] = field(default_factory=dict)
    fault_seen: dict[int, int] = field(default_factory=dict)
    # Wire mode: answer at `before-send` with the HTTP response AWS would send (embedded/wire.py), so botocore
    # parses real XML/JSON/CBOR and retries what it retries; otherwise at `before-call` with parsed dicts.
    wire: bool = False
    wire_bytes: int = 0  # response bodies served in wire mode
    serve_s: float = 0.0  # seconds spent answering and serializing in wire mode (AWS's side of the call)
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
        self.dynamodb = DynamoLimits(self.world.faults, self._inject_fault, PARAMS_KEY)

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
        # The Kubernetes API of the world's EKS clusters, found by collectors/kubernetes.py on the session.
        session.gpuaudit_kubernetes = self.kubernetes  # type: ignore[attr-defined]

    def kubernetes(self, cluster: str, _endpoint: str, _ca: str) -> EmbeddedKubeApi:
        return EmbeddedKubeApi(self, cluster)

    def session(self) -> boto3.Session:
        """A boto3 session wired to this world (dummy credentials: nothing leaves the process)."""
        core = botocore.session.get_session()
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
            self._inject_fault(service, operation)
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
        started = time.perf_counter()
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
        self.wire_bytes += len(answer.body)
        self.serve_s += time.perf_counter() - started
        # Answered here: no other before-send handler (moto's stubber, matching AWS host names) may answer too.
        request.url = "https://embedded.world/"
        return AWSResponse(request.url, answer.status, answer.headers, _RawBody(answer.body))

    def _inject_fault(self, service: str, operation: str) -> None:
        for i, fault in enumerate(self.world.faults):
            if fault.get("service") != service or fault.get("operation") not in (operation, "*"):
                continue
            if fault.get("error") in (None, "") or "status" in fault:
                continue  # behaviour faults (e.g. a query that stays Running) are applied by the responder
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


# -- pagination and filters -------------------------------------------------------------
def page(items: list[Any], params: dict[str, Any], key: str, *, token: str = "NextToken",
         limit: str = "MaxResults", default: int = 50) -> dict[str, Any]:
    start = int(params.get(token) or 0)
    size = int(params.get(limit) or default)
    body: dict[str, Any] = {key: items[start:start + size]}
    if start + size < len(items):
        body[token] = str(start + size)
    return body


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


def _by_id(items: list[dict[str, Any]], key: str, wanted: list[str] | None, error: str, noun: str) -> list[dict]:
    if not wanted:
        return items
    found = {i.get(key): i for i in items}
    missing = [w for w in wanted if w not in found]
    if missing:
        raise ApiError(error, f"The {noun} ID '{missing[0]}' does not exist")
    return [found[w] for w in wanted]


# -- SageMaker HyperPod ---------------------------------------------------------------------
def _cluster(backend: WorldBackend, name_or_arn: str) -> dict[str, Any]:
    for c in backend.world.section("sagemaker", "clusters"):
        if name_or_arn in (c.get("ClusterName"), c.get("ClusterArn")):
            return c
    raise ApiError("ResourceNotFound", f"Cluster {name_or_arn} not found")


@responds("sagemaker", "ListClusters")
def _list_clusters(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    summaries = [{k: c.get(k) for k in ("ClusterArn", "ClusterName", "ClusterStatus", "CreationTime")}
                 for c in b.world.section("sagemaker", "clusters")]
    return page(summaries, p, "ClusterSummaries", default=100)


@responds("sagemaker", "DescribeCluster")
def _describe_cluster(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    return _cluster(b, p["ClusterName"])


@responds("sagemaker", "ListClusterNodes")
def _list_cluster_nodes(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    nodes = _cluster(b, p["ClusterName"]).get("Nodes", [])
    if p.get("InstanceGroupNameContains"):
        nodes = [n for n in nodes if p["InstanceGroupNameContains"] in n.get("InstanceGroupName", "")]
    nodes = sorted(nodes, key=lambda n: parse_time(n.get("LaunchTime") or "1970-01-01T00:00:00Z"),
                   reverse=p.get("SortOrder", "Descending") == "Descending")
    return page(nodes, p, "ClusterNodeSummaries", default=100)


@responds("sagemaker", "DescribeClusterNode")
def _describe_cluster_node(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    for node in _cluster(b, p["ClusterName"]).get("Nodes", []):
        if node.get("InstanceId") == p.get("NodeId"):
            return {"NodeDetails": node}
    raise ApiError("ResourceNotFound", f"Node {p.get('NodeId')} not found in cluster {p['ClusterName']}")


CONTINUOUS_ONLY = "ListClusterEvents is only supported for cluster with NodeProvisioningMode set to Continuous"


def _cluster_events(b: WorldBackend, name: str) -> list[dict[str, Any]]:
    cluster = _cluster(b, name)
    if cluster.get("NodeProvisioningMode") != "Continuous":
        raise ApiError("ValidationException", CONTINUOUS_ONLY)
    return list(cluster.get("Events", []))


@responds("sagemaker", "ListClusterEvents")
def _list_cluster_events(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    events = _cluster_events(b, p["ClusterName"])
    after, before = p.get("EventTimeAfter"), p.get("EventTimeBefore")
    selected = []
    for e in events:
        t = parse_time(e["EventTime"])
        if (after and t < parse_time(after)) or (before and t > parse_time(before)):
            continue
        if p.get("NodeId") and e.get("InstanceId") != p["NodeId"]:
            continue
        if p.get("InstanceGroupName") and e.get("InstanceGroupName") != p["InstanceGroupName"]:
            continue
        if p.get("ResourceType") and e.get("ResourceType") != p["ResourceType"]:
            continue
        selected.append(e)
    selected.sort(key=lambda e: parse_time(e["EventTime"]), reverse=p.get("SortOrder") == "Descending")
    return page(selected, p, "Events", default=100)


@responds("sagemaker", "DescribeClusterEvent")
def _describe_cluster_event(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    for e in _cluster_events(b, p["ClusterName"]):
        if e.get("EventId") == p["EventId"]:
            return {"EventDetails": e}
    raise ApiError("ResourceNotFound", f"Event {p['EventId']} not found")


@responds("sagemaker", "DescribeTrainingPlan")
def _describe_training_plan(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    for plan in b.world.section("sagemaker", "training_plans"):
        if p["TrainingPlanName"] in (plan.get("TrainingPlanName"), plan.get("TrainingPlanArn")):
            return plan
    raise ApiError("ResourceNotFound", f"Training plan {p['TrainingPlanName']} not found")


# -- EC2 ------------------------------------------------------------------------------------
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
def _describe_instances(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    _ec2_page_limits(p, "InstanceIds")
    items = _by_id(b.world.section("ec2", "instances"), "InstanceId", p.get("InstanceIds"),
                   "InvalidInstanceID.NotFound", "instance")
    items = _ec2_filter(items, p.get("Filters", []), INSTANCE_FIELDS)
    body = page([{"Instances": [i]} for i in items], p, "Reservations", default=1000)
    return body


@responds("ec2", "DescribeInstanceTypes")
def _describe_instance_types(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
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
def _describe_instance_status(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
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
def _describe_capacity_reservations(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    items = _by_id(b.world.section("ec2", "capacity_reservations"), "CapacityReservationId",
                   p.get("CapacityReservationIds"), "InvalidCapacityReservationId.NotFound", "capacity reservation")
    items = _ec2_filter(items, p.get("Filters", []), {
        "instance-type": lambda r: r.get("InstanceType"), "state": lambda r: r.get("State"),
        "reservation-type": lambda r: r.get("ReservationType")})
    return page(items, p, "CapacityReservations", default=1000)


@responds("ec2", "DescribeCapacityBlockExtensionOfferings")
def _describe_cb_extensions(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    items = [o for o in b.world.section("ec2", "capacity_block_extension_offerings")
             if o.get("CapacityReservationId") in (None, p.get("CapacityReservationId"))]
    return page(items, p, "CapacityBlockExtensionOfferings", default=1000)


@responds("ec2", "DescribeSecurityGroups")
def _describe_security_groups(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    items = _by_id(b.world.section("ec2", "security_groups"), "GroupId", p.get("GroupIds"),
                   "InvalidGroup.NotFound", "security group")
    return page(items, p, "SecurityGroups", default=1000)


@responds("ec2", "DescribeSubnets")
def _describe_subnets(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    items = _by_id(b.world.section("ec2", "subnets"), "SubnetId", p.get("SubnetIds"),
                   "InvalidSubnetID.NotFound", "subnet")
    return page(items, p, "Subnets", default=1000)


@responds("ec2", "DescribeRouteTables")
def _describe_route_tables(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    items = _ec2_filter(b.world.section("ec2", "route_tables"), p.get("Filters", []), {
        "association.subnet-id": lambda r: [a.get("SubnetId") for a in r.get("Associations", [])],
        "vpc-id": lambda r: r.get("VpcId")})
    return page(items, p, "RouteTables", default=1000)


# -- CloudWatch Logs --------------------------------------------------------------------------
@responds("logs", "DescribeLogGroups")
def _describe_log_groups(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    pattern, prefix = p.get("logGroupNamePattern"), p.get("logGroupNamePrefix")
    if pattern and prefix:
        raise ApiError("InvalidParameterException", "logGroupNamePattern and logGroupNamePrefix are exclusive")
    groups = []
    for name in sorted(b.world.log_groups):
        if pattern and pattern not in name:  # case-sensitive substring, as AWS documents
            continue
        if prefix and not name.startswith(prefix):
            continue
        meta = dict(b.world.log_groups[name].meta)
        meta.setdefault("arn", f"arn:aws:logs:{b.world.region}:{b.world.account_id}:log-group:{name}:*")
        groups.append(meta)
    return page(groups, p, "logGroups", token="nextToken", limit="limit", default=50)


def _group(b: WorldBackend, name: str) -> Any:
    group = b.world.log_groups.get(name)
    if group is None:
        raise ApiError("ResourceNotFoundException", "The specified log group does not exist.")
    return group


@responds("logs", "DescribeLogStreams")
def _describe_log_streams(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    group = _group(b, p.get("logGroupName") or p.get("logGroupIdentifier", ""))
    streams = list(group.streams.values())
    if p.get("logStreamNamePrefix"):
        if p.get("orderBy") == "LastEventTime":
            raise ApiError("InvalidParameterException", "Cannot order by LastEventTime with a logStreamNamePrefix.")
        streams = [s for s in streams if s.name.startswith(p["logStreamNamePrefix"])]
    if p.get("orderBy") == "LastEventTime":
        streams.sort(key=lambda s: s.last_ms or 0, reverse=bool(p.get("descending")))
    else:
        streams.sort(key=lambda s: s.name, reverse=bool(p.get("descending")))
    shaped = []
    for s in streams:
        item: dict[str, Any] = {"logStreamName": s.name,
                                "arn": f"arn:aws:logs:{b.world.region}:{b.world.account_id}:log-group:"
                                       f"{group.name}:log-stream:{s.name}"}
        for key, value in (("creationTime", s.creation_ms or s.first_ms), ("firstEventTimestamp", s.first_ms),
                           ("lastEventTimestamp", s.last_ms), ("lastIngestionTime", s.last_ms)):
            if value is not None:
                item[key] = value
        shaped.append(item)
    return page(shaped, p, "logStreams", token="nextToken", limit="limit", default=50)


def query_input(world: World, groups: Iterable[str], start_ms: int | None, end_ms: int | None,
                streams: Iterable[str] | None = None) -> Iterable[insights.ScanItem]:
    """The lines of the groups in [start_ms, end_ms], group by group and stream by stream: a stream's
    events as records, then each of its periodic entries as one run of identical lines (Logs Insights
    reads them so; `insights.expanded` gives them line by line). Unknown groups are skipped (callers
    check them first); `streams` keeps only those streams, in the group's order."""
    wanted = None if streams is None else set(streams)
    for name in groups:
        group = world.log_groups.get(name)
        if group is None:
            continue
        for stream in group.streams.values():
            if wanted is not None and stream.name not in wanted:
                continue
            events, runs = stream.pieces(start_ms, end_ms)
            for ts, msg in events:
                yield insights.LogRecord(name, stream.name, ts, msg)
            for stamps, msg in runs:
                yield insights.LogRun(name, stream.name, stamps, msg)


@responds("logs", "FilterLogEvents")
def _filter_log_events(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    name = p.get("logGroupName") or p.get("logGroupIdentifier", "")
    group = _group(b, name)
    wanted = set(p["logStreamNames"]) if p.get("logStreamNames") else None
    if p.get("logStreamNamePrefix"):
        wanted = {s for s in group.streams if s.startswith(p["logStreamNamePrefix"])}
    matcher = _filter_pattern(p.get("filterPattern"))
    events = [{"logStreamName": r.log_stream, "timestamp": r.timestamp_ms, "message": r.message,
               "ingestionTime": r.timestamp_ms, "eventId": f"{r.timestamp_ms}-{i}"}
              for i, r in enumerate(insights.expanded(query_input(b.world, [name], p.get("startTime"),
                                                                  p.get("endTime"), wanted)))
              if matcher(r.message)]
    events.sort(key=lambda e: int(str(e["timestamp"])))
    return page(events, p, "events", token="nextToken", limit="limit", default=10000)


def _filter_pattern(pattern: str | None) -> Callable[[str], bool]:
    """Text filter patterns: terms (AND), "exact phrases", ?alternatives, %regex%."""
    if not pattern or not pattern.strip():
        return lambda _m: True
    text = pattern.strip()
    if text.startswith("%") and text.endswith("%") and len(text) > 1:
        rx = re.compile(text[1:-1])
        return lambda m: rx.search(m) is not None
    terms = re.findall(r'\?"[^"]*"|\?\S+|"[^"]*"|\S+', text)
    optional = [t[1:].strip('"') for t in terms if t.startswith("?")]
    required = [t.strip('"') for t in terms if not t.startswith("?")]
    if text.startswith("{"):
        raise ApiError("InvalidParameterException", f"JSON filter patterns are not served by the embedded backend: {text}")
    return lambda m: all(t in m for t in required) and (not optional or any(t in m for t in optional))


@responds("logs", "GetLogEvents")
def _get_log_events(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    group = _group(b, p.get("logGroupName") or p.get("logGroupIdentifier", ""))
    stream = group.streams.get(p["logStreamName"])
    if stream is None:
        raise ApiError("ResourceNotFoundException", "The specified log stream does not exist.")
    events = sorted(stream.lines(p.get("startTime"), p.get("endTime")))
    events_out = [{"timestamp": ts, "message": msg, "ingestionTime": ts} for ts, msg in events]
    if not p.get("startFromHead"):
        events_out = events_out[-int(p.get("limit") or 10000):]
    body = page(events_out, {"x": p.get("nextToken", "").split("/")[-1] or 0, "l": p.get("limit")}, "events",
                token="x", limit="l", default=10000)
    return {"events": body["events"], "nextForwardToken": f"f/{body.get('x', len(events_out))}",
            "nextBackwardToken": "b/0"}


@responds("logs", "StartQuery")
def _start_query(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    names = list(p.get("logGroupNames") or ([p["logGroupName"]] if p.get("logGroupName") else [])
                 or p.get("logGroupIdentifiers") or [])
    if not names:
        raise ApiError("InvalidParameterException", "Provide logGroupNames or logGroupIdentifiers")
    # The limits below follow the StartQuery API reference (embedded/insights/syntax.py cites the pages).
    if len(names) > insights.MAX_LOG_GROUPS:
        raise ApiError(insights.INVALID_PARAMETER,
                       f"A query can target at most {insights.MAX_LOG_GROUPS} log groups; got {len(names)}")
    if p["endTime"] < p["startTime"]:
        raise ApiError(insights.INVALID_PARAMETER, "endTime must be later than startTime")
    for name in names:
        _group(b, name)
    query = p["queryString"]
    if p.get("limit") is not None:
        query = f"{query} | limit {int(p['limit'])}"
    try:
        insights.parse_query(p["queryString"])  # the length limit applies to the string as sent
        insights.parse_query(query, max_chars=None)
    except insights.QueryError as exc:
        raise ApiError(exc.exception, str(exc)) from None
    # "You can have up to 30 concurrent CloudWatch Logs insights queries, including queries that have been
    # added to dashboards" (StartQuery API page); a world states its account's quota (logs_concurrent_queries).
    in_flight = sum(1 for running in b.queries.values() if running.holds_slot)
    if in_flight >= b.world.logs_concurrent_queries:
        raise ApiError("LimitExceededException",
                       f"Account has {in_flight} concurrent Logs Insights queries; the limit is "
                       f"{b.world.logs_concurrent_queries}")
    outcome = insights.run_query(query, query_input(b.world, names, p["startTime"] * 1000, p["endTime"] * 1000 + 999),
                                 p["startTime"], p["endTime"], b.world.account_id, max_chars=None)
    query_id = str(uuid.uuid4())
    stuck = b.behaviour_fault("logs", "GetQueryResults")
    slow = stuck is not None and stuck["status"] == "Running" and stuck.get("times") is not None
    b.queries[query_id] = RunningQuery(outcome, stuck["status"] if stuck else "Complete",
                                       running_reads=int(stuck["times"]) if slow and stuck else None)
    return {"queryId": query_id}


@responds("logs", "GetQueryResults")
def _get_query_results(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    query = b.queries.get(p["queryId"])
    if query is None:
        raise ApiError("ResourceNotFoundException", f"Query {p['queryId']} does not exist")
    if query.running_reads is not None and query.status == "Running":
        if query.running_reads > 0:
            query.running_reads -= 1
        else:
            query.status = "Complete"
    if query.status not in ("Running", "Scheduled"):
        query.holds_slot = False  # its final status has been collected
    if query.status != "Complete" or query.outcome is None:
        return {"status": query.status, "results": [], "statistics": {"recordsMatched": 0.0, "recordsScanned": 0.0,
                                                                     "bytesScanned": 0.0}}
    out = query.outcome
    return {"status": "Complete", "results": out.rows,
            "statistics": {"recordsMatched": float(out.records_matched), "recordsScanned": float(out.records_scanned),
                           "bytesScanned": float(out.bytes_scanned)}}


@responds("logs", "StopQuery")
def _stop_query(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    query = b.queries.get(p["queryId"])
    if query is None or not (query.status in ("Running", "Scheduled") or query.holds_slot):
        return {"success": False}  # a query whose final status was collected has nothing to stop
    query.status = "Cancelled"
    query.holds_slot = False
    return {"success": True}


# -- CloudTrail ----------------------------------------------------------------------------------
@responds("cloudtrail", "LookupEvents")
def _lookup_events(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    events = b.world.section("cloudtrail", "events")
    start, end = p.get("StartTime"), p.get("EndTime")
    attrs = p.get("LookupAttributes") or []
    if len(attrs) > 1:
        raise ApiError("InvalidLookupAttributesException", "Only one lookup attribute is allowed")
    selected = []
    for e in events:
        t = parse_time(e["EventTime"])
        if (start and t < parse_time(start)) or (end and t > parse_time(end)):
            continue
        if attrs:
            key, value = attrs[0]["AttributeKey"], attrs[0]["AttributeValue"]
            if key == "EventName" and e.get("EventName") != value:
                continue
            if key == "EventSource" and e.get("EventSource") != value:
                continue
            if key == "ResourceName" and value not in [r.get("ResourceName") for r in e.get("Resources", [])]:
                continue
            if key == "Username" and e.get("Username") != value:
                continue
        selected.append(e)
    selected.sort(key=lambda e: parse_time(e["EventTime"]), reverse=True)  # newest first, as CloudTrail
    return page(selected, p, "Events", default=50)


# -- CloudWatch metrics and alarms, FSx, EventBridge, Health, Service Quotas -----------------------
@responds("cloudwatch", "ListMetrics")
def _list_metrics(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    selected = []
    for m in b.world.section("cloudwatch", "metrics"):
        if p.get("Namespace") and m.get("Namespace") != p["Namespace"]:
            continue
        if p.get("MetricName") and m.get("MetricName") != p["MetricName"]:
            continue
        dims = {d["Name"]: d.get("Value") for d in m.get("Dimensions", [])}
        if any(f["Name"] not in dims or ("Value" in f and dims[f["Name"]] != f["Value"])
               for f in p.get("Dimensions", [])):
            continue
        selected.append({k: m[k] for k in ("Namespace", "MetricName", "Dimensions") if k in m})
    return page(selected, p, "Metrics", default=500)


@responds("cloudwatch", "GetMetricData")
def _get_metric_data(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    start, end = parse_time(p["StartTime"]), parse_time(p["EndTime"])
    results = []
    for query in p["MetricDataQueries"]:
        stat = query.get("MetricStat")
        if stat is None:
            raise ApiError("InvalidParameterValue", "The embedded backend serves MetricStat queries only")
        metric = stat["Metric"]
        dims = sorted((d["Name"], d["Value"]) for d in metric.get("Dimensions", []))
        series = next((m for m in b.world.section("cloudwatch", "metrics")
                       if m.get("Namespace") == metric.get("Namespace") and m.get("MetricName") == metric["MetricName"]
                       and sorted((d["Name"], d["Value"]) for d in m.get("Dimensions", [])) == dims), None)
        period_s = int(stat["Period"])
        buckets: dict[int, list[float]] = {}
        for ts, value in (series or {}).get("Datapoints", []):
            t = parse_time(ts)
            if start <= t < end:
                key = int(t.timestamp()) // period_s * period_s
                buckets.setdefault(key, []).append(float(value))
        aggregations: dict[str, Callable[[list[float]], float]] = {
            "Sum": sum, "Maximum": max, "Minimum": min, "Average": lambda v: sum(v) / len(v),
            "SampleCount": lambda v: float(len(v))}
        agg = aggregations.get(stat["Stat"])
        if agg is None:
            raise ApiError("InvalidParameterValue", f"Unsupported statistic {stat['Stat']}")
        keys = sorted(buckets, reverse=p.get("ScanBy", "TimestampDescending") == "TimestampDescending")
        results.append({"Id": query["Id"], "Label": metric["MetricName"], "StatusCode": "Complete",
                        "Timestamps": [datetime.fromtimestamp(k, tz=start.tzinfo) for k in keys],
                        "Values": [float(agg(buckets[k])) for k in keys]})
    return {"MetricDataResults": results}


@responds("cloudwatch", "DescribeAlarms")
def _describe_alarms(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    alarms = b.world.section("cloudwatch", "alarms")
    if p.get("StateValue"):
        alarms = [a for a in alarms if a.get("StateValue") == p["StateValue"]]
    if p.get("AlarmNamePrefix"):
        alarms = [a for a in alarms if a.get("AlarmName", "").startswith(p["AlarmNamePrefix"])]
    if p.get("AlarmNames"):
        alarms = [a for a in alarms if a.get("AlarmName") in p["AlarmNames"]]
    return page(alarms, p, "MetricAlarms", limit="MaxRecords", default=100)


@responds("fsx", "DescribeFileSystems")
def _describe_file_systems(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    items = _by_id(b.world.section("fsx", "file_systems"), "FileSystemId", p.get("FileSystemIds"),
                   "FileSystemNotFound", "file system")
    return page(items, p, "FileSystems", default=2147483647)


@responds("events", "PutEvents")
def _put_events(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    """The product's own write (findings as events), not a read of the audited account: the strict stand-in."""
    assert b.eventbridge is not None
    try:
        return b.eventbridge.put_events(p)
    except PutEventsRefused as refused:
        raise ApiError(refused.code, refused.message) from None


@responds("events", "ListRules")
def _list_rules(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    rules = [r for r in b.world.section("events", "rules")
             if not p.get("NamePrefix") or r.get("Name", "").startswith(p["NamePrefix"])]
    return page(rules, p, "Rules", limit="Limit", default=100)


# -- EKS and its Kubernetes API ----------------------------------------------------------------------------------
def _eks_cluster(b: WorldBackend, name: str) -> dict[str, Any]:
    found = next((c for c in b.world.section("eks", "clusters") if c.get("name") == name), None)
    if found is None:
        raise ApiError("ResourceNotFoundException", f"No cluster found for name: {name}.", 404)
    return found


@responds("eks", "DescribeCluster")
def _describe_eks_cluster(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    return {"cluster": {k: v for k, v in _eks_cluster(b, p["name"]).items() if k != "kubernetes"}}


@dataclass
class EmbeddedKubeApi:
    """GET /api/v1/nodes and /api/v1/events of a world's EKS cluster, paginated with limit/continue as the API
    server does; a fault of service "kubernetes" (operation ListNodes or ListEvents) answers its HTTP status
    (Unauthorized 401, Forbidden 403, InternalError 500) or a timeout."""

    backend: WorldBackend
    cluster: str

    def get(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        from gpuaudit.collectors.aws import CallFailed

        kinds = {"/api/v1/nodes": ("ListNodes", "nodes"), "/api/v1/events": ("ListEvents", "events")}
        if path not in kinds:
            raise CallFailed("kubernetes", f"GET {path}", "404", "the embedded backend serves nodes and events only")
        operation, key = kinds[path]
        try:
            self.backend._inject_fault("kubernetes", operation)
        except ApiError as err:
            code = {"Unauthorized": "401", "Forbidden": "403", "InternalError": "500"}.get(err.code, err.code)
            raise CallFailed("kubernetes", f"GET {path}", code, err.message) from None
        nodes = (_eks_cluster(self.backend, self.cluster).get("kubernetes") or {}).get(key, [])
        if query.get("fieldSelector") == "involvedObject.kind=Node":
            nodes = [e for e in nodes if (e.get("involvedObject") or {}).get("kind") == "Node"]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(nodes) or 1)
        rest = start + limit < len(nodes)
        return {"kind": "NodeList", "items": nodes[start:start + limit],
                "metadata": {"continue": str(start + limit)} if rest else {}}


@responds("health", "DescribeEvents")
def _describe_health_events(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    flt = p.get("filter") or {}
    events = []
    for e in b.world.section("health", "events"):
        if flt.get("services") and e.get("service") not in flt["services"]:
            continue
        events.append(e)
    return page(events, p, "events", token="nextToken", limit="maxResults", default=100)


@responds("health", "DescribeAffectedEntities")
def _describe_affected(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    arns = set((p.get("filter") or {}).get("eventArns", []))
    entities = [dict(ent, eventArn=e.get("arn")) for e in b.world.section("health", "events")
                if e.get("arn") in arns for ent in e.get("AffectedEntities", [])]
    return page(entities, p, "entities", token="nextToken", limit="maxResults", default=100)


@responds("service-quotas", "ListServiceQuotas")
def _list_service_quotas(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    quotas = [q for q in b.world.section("servicequotas", "quotas") if q.get("ServiceCode") == p["ServiceCode"]]
    return page(quotas, p, "Quotas", default=100)


@responds("service-quotas", "GetServiceQuota")
def _get_service_quota(b: WorldBackend, p: dict[str, Any]) -> dict[str, Any]:
    for q in b.world.section("servicequotas", "quotas"):
        if q.get("ServiceCode") == p["ServiceCode"] and q.get("QuotaCode") == p["QuotaCode"]:
            return {"Quota": q}
    raise ApiError("NoSuchResourceException", f"Quota {p['ServiceCode']}/{p['QuotaCode']} not found")


__all__ = ["RESPONDERS", "ApiError", "WorldBackend"]
