"""The schema of a world file (WORLD-FORMAT.md), checked before any of it is used.

Two kinds of model:
- the format's own structure (top level, sections, log groups, streams, lines, periodic entries, faults) is
  closed: an unknown key is an error, because a typo would silently empty a section;
- the served AWS items (Instance, DescribeCluster, LookupEvents Event shapes...) are free-form API shapes:
  keys the schema does not name are left alone and served as written, and only the fields the embedded
  backend itself reads are typed (an identifier, a timestamp it parses, a list it iterates).

Every violation becomes one line `world: <key path>: <what is wrong>`, all of them in one WorldError (the CLI
exits 2 with it). Imports: stdlib, pydantic, the model's time helpers and interface_templates' placeholder names.
"""

from __future__ import annotations

import json
import reprlib
from functools import lru_cache
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpuaudit.embedded.interface_templates import INSTANCE_FIELDS, PLACEHOLDERS, TEMPLATE_KEY, placeholders_in
from gpuaudit.model.timeutil import parse_time, to_epoch_ms

FORMAT = "gpu-audit-world/1"
EARLIEST_MS, LATEST_MS = 0, 4_102_444_800_000  # 1970-01-01 to 2100-01-01
MIN_EVERY_S = 0.1  # periodic entries: at most ten lines a second
MAX_EVERY_S = 366 * 86_400  # and at least one a year: a larger period is no log line (1e308 s overflowed)
MAX_PERIODIC_LINES = 50_000_000  # one entry; generated 10,000-node weeks stay below
# CloudWatch Logs takes events of up to 1 MB (PutLogEvents API reference); counted here in characters.
MAX_MESSAGE_CHARS = 1_048_576
MAX_NAME_CHARS = 512  # log group and log stream names (CreateLogGroup / CreateLogStream)
REGION_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$"
# The Logs Insights concurrent-query quota the account allows (30 unless raised; docs/decisions.md).
DEFAULT_LOGS_CONCURRENT_QUERIES = 30
MAX_FAULT_COUNT = 1_000_000  # `times` / `after`: beyond any audit's call count
MAX_ERRORS_SHOWN = 20

# The services the embedded backend answers, as botocore names them (responders/registry.RESPONDERS; a test keeps
# the two equal). A fault naming another service could never fire.
SERVED_SERVICES = ("sagemaker", "ec2", "logs", "cloudtrail", "cloudwatch", "fsx", "events", "health",
                   "service-quotas", "eks", "kubernetes")
# Behaviour faults: a Logs Insights query that ends with this status instead of Complete.
QUERY_STATUSES = ("Scheduled", "Running", "Failed", "Timeout", "Cancelled", "Unknown")


class WorldError(ValueError):
    """The world file is unreadable, not of this format, or holds a bad key or value."""


# -- value types --------------------------------------------------------------------------------------
def _epoch_ms(value: Any) -> int:
    """ISO-8601 UTC text or epoch milliseconds -> epoch milliseconds, within 1970-2100."""
    if type(value) is int:  # epoch milliseconds, as written (most lines of a big world)
        ms = value
    elif isinstance(value, (str, float)):
        ms = _converted_ms(value)
    else:
        raise PydanticCustomError("timestamp_type", "must be an ISO-8601 UTC time or epoch milliseconds")
    if not EARLIEST_MS <= ms < LATEST_MS:
        raise PydanticCustomError("timestamp_range", "is outside the years 1970-2100")
    return ms


@lru_cache(maxsize=4096)  # periodic entries of a generated fleet share a few bounds
def _converted_ms(value: str | float) -> int:
    try:
        return to_epoch_ms(parse_time(value))
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise PydanticCustomError("timestamp_parsing", "bad timestamp {value} ({reason})",
                                  {"value": _shown(value), "reason": str(exc)}) from None


def _json_object_text(value: str) -> str:
    """CloudTrailEvent and EventPattern: a JSON object written as a string, as the APIs return them."""
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise PydanticCustomError("json_text", "must be a JSON object written as a string ({reason})",
                                  {"reason": str(exc)[:80]}) from None
    if not isinstance(parsed, dict):
        raise PydanticCustomError("json_text", "must be a JSON object written as a string, not a JSON "
                                  "{kind}", {"kind": type(parsed).__name__})
    return value


def _as_logged(value: Any) -> Any:
    """CloudWatch Logs stores UTF-8: what is not (lone surrogates in JSON) arrives as U+FFFD."""
    if isinstance(value, str) and not value.isascii():
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value


EpochMs = Annotated[int, BeforeValidator(_epoch_ms)]
Text = Annotated[str, Strict()]
Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME_CHARS)]
Id = Annotated[str, Strict(), Field(min_length=1)]
Message = Annotated[str, Strict(), Field(max_length=MAX_MESSAGE_CHARS), BeforeValidator(_as_logged)]
Count = Annotated[int, Strict(), Field(ge=0)]
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
JsonObjectText = Annotated[str, Strict(), AfterValidator(_json_object_text)]
# [timestamp, value] and [timestamp, message]: JSON arrays of two, read as pairs.
Datapoint = Annotated[tuple[EpochMs, Number], Strict(False)]
LogLine = Annotated[tuple[EpochMs, Message], Strict(False)]


class Closed(BaseModel):
    """A structure of the world format itself: every key is known."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Served(BaseModel):
    """An AWS response item: served as written; only what the backend reads is typed here.

    Defaults of optional fields are never read (the raw item is served); a key that is present must hold a value
    of its type (JSON null is not a value boto3 returns: leave the key out)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


# -- SageMaker HyperPod -------------------------------------------------------------------------------
class ClusterNode(Served):
    InstanceId: Id
    InstanceGroupName: Text = ""
    InstanceType: Text = ""
    LaunchTime: EpochMs = 0


class ClusterEvent(Served):
    EventTime: EpochMs
    EventId: Text = ""
    InstanceId: Text = ""
    InstanceGroupName: Text = ""
    ResourceType: Text = ""


class InstanceGroup(Served):
    InstanceGroupName: Id
    InstanceType: Text = ""
    CurrentCount: Count = 0
    TargetCount: Count = 0
    SlurmConfig: dict[str, Any] = {}
    OnStartDeepHealthChecks: list[Text] = []
    TrainingPlanArn: Text = ""


class Cluster(Served):
    ClusterName: Id
    ClusterArn: Text = ""
    ClusterStatus: Text = ""
    CreationTime: EpochMs = 0
    NodeProvisioningMode: Text = ""
    InstanceGroups: list[InstanceGroup] = []
    Nodes: list[ClusterNode] = []
    Events: list[ClusterEvent] = []


class TrainingPlan(Served):
    TrainingPlanName: Text = ""
    TrainingPlanArn: Text = ""
    StartTime: EpochMs = 0
    EndTime: EpochMs = 0


class SageMaker(Closed):
    clusters: list[Cluster] = []
    training_plans: list[TrainingPlan] = []


# -- EC2 ----------------------------------------------------------------------------------------------
class Tag(Served):
    Key: Text
    Value: Text


class InstanceState(Served):
    Name: Text = ""


class Instance(Served):
    InstanceId: Id
    InstanceType: Text = ""
    State: InstanceState = InstanceState()
    PrivateDnsName: Text = ""
    PrivateIpAddress: Text = ""
    VpcId: Text = ""
    SubnetId: Text = ""
    LaunchTime: EpochMs = 0
    Tags: list[Tag] = []
    # The compact form: the name of an ec2.network_interface_templates entry, expanded when served
    network_interfaces_template: Name | None = None

    @model_validator(mode="before")
    @classmethod
    def _interfaces_once(cls, data: Any) -> Any:
        if isinstance(data, dict) and TEMPLATE_KEY in data and "NetworkInterfaces" in data:
            raise PydanticCustomError("template_both", "an instance has either 'NetworkInterfaces' or "
                                      "'network_interfaces_template', not both")
        return data


def _placeholders_known(interfaces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    unknown = sorted(placeholders_in(interfaces) - set(PLACEHOLDERS))
    if unknown:
        raise PydanticCustomError("template_placeholder", "unknown placeholder(s) {names}; known: {known} "
                                  "(write {{ and }} for a literal brace)",
                                  {"names": ", ".join("{" + u + "}" for u in unknown),
                                   "known": ", ".join("{" + k + "}" for k in PLACEHOLDERS)})
    return interfaces


class NetworkInterfaceTemplate(Closed):
    """The network interfaces of one kind of instance, described once (interface_templates.py)."""

    name: Name
    interfaces: Annotated[list[dict[str, Any]], AfterValidator(_placeholders_known)]


class InstanceTypeInfo(Served):
    InstanceType: Id


class InstanceStatus(Served):
    InstanceId: Id


class CapacityReservation(Served):
    CapacityReservationId: Id
    InstanceType: Text = ""
    State: Text = ""
    ReservationType: Text = ""
    StartDate: EpochMs = 0
    EndDate: EpochMs = 0
    CreateDate: EpochMs = 0
    Tags: list[Tag] = []


class CapacityBlockExtensionOffering(Served):
    CapacityReservationId: Text = ""
    StartDate: EpochMs = 0
    CapacityBlockExtensionStartDate: EpochMs = 0
    CapacityBlockExtensionEndDate: EpochMs = 0


class SecurityGroup(Served):
    GroupId: Id
    Tags: list[Tag] = []


class Subnet(Served):
    SubnetId: Id
    Tags: list[Tag] = []


class RouteTableAssociation(Served):
    SubnetId: Text = ""


class RouteTable(Served):
    RouteTableId: Id
    VpcId: Text = ""
    Associations: list[RouteTableAssociation] = []
    Tags: list[Tag] = []


class Ec2(Closed):
    instances: list[Instance] = []
    instance_types: list[InstanceTypeInfo] = []
    instance_status: list[InstanceStatus] = []
    capacity_reservations: list[CapacityReservation] = []
    capacity_block_extension_offerings: list[CapacityBlockExtensionOffering] = []
    security_groups: list[SecurityGroup] = []
    subnets: list[Subnet] = []
    route_tables: list[RouteTable] = []
    network_interface_templates: list[NetworkInterfaceTemplate] = []

    @model_validator(mode="after")
    def _templates_resolve(self) -> Ec2:
        _no_repeats([t.name for t in self.network_interface_templates], "network_interface_templates", "template")
        needs = {t.name: placeholders_in(t.interfaces) & set(INSTANCE_FIELDS) for t in self.network_interface_templates}
        for i, instance in enumerate(self.instances):
            name = instance.network_interfaces_template
            if name is None:
                continue
            at = f"instances[{i}].network_interfaces_template"
            if name not in needs:
                raise PydanticCustomError("template_ref", "no template named {name} in "
                                          "ec2.network_interface_templates", {"at": at, "name": _shown(name)})
            missing = sorted(needs[name] - instance.model_fields_set)
            if missing:
                raise PydanticCustomError("template_ref", "template {name} fills {fields} from the instance, "
                                          "which has no such key", {"at": at, "name": _shown(name),
                                                                    "fields": ", ".join(missing)})
        return self


# -- CloudTrail, CloudWatch, FSx, EventBridge, Health, Service Quotas -------------------------------------
class TrailResource(Served):
    ResourceName: Text = ""
    ResourceType: Text = ""


class TrailEvent(Served):
    EventTime: EpochMs
    EventId: Text = ""
    EventName: Text = ""
    EventSource: Text = ""
    Username: Text = ""
    Resources: list[TrailResource] = []
    CloudTrailEvent: JsonObjectText = "{}"


class CloudTrail(Closed):
    events: list[TrailEvent] = []


class Dimension(Served):
    Name: Id
    Value: Text


class MetricSeries(Served):
    Namespace: Id
    MetricName: Id
    Dimensions: list[Dimension] = []
    Unit: Text = ""
    Datapoints: list[Datapoint] = []


class MetricAlarm(Served):
    AlarmName: Text = ""
    StateValue: Text = ""
    Dimensions: list[Dimension] = []


class CloudWatch(Closed):
    metrics: list[MetricSeries] = []
    alarms: list[MetricAlarm] = []


class FileSystem(Served):
    FileSystemId: Id
    CreationTime: EpochMs = 0


class Fsx(Closed):
    file_systems: list[FileSystem] = []


class EventRule(Served):
    Name: Id
    EventPattern: JsonObjectText = "{}"
    State: Text = ""


class EventBridge(Closed):
    rules: list[EventRule] = []


class HealthEntity(Served):
    entityValue: Text = ""


class HealthEvent(Served):
    arn: Id
    service: Text = ""
    eventTypeCode: Text = ""
    startTime: EpochMs = 0
    endTime: EpochMs = 0
    lastUpdatedTime: EpochMs = 0
    AffectedEntities: list[HealthEntity] = []


class Health(Closed):
    events: list[HealthEvent] = []


class ServiceQuota(Served):
    ServiceCode: Id
    QuotaCode: Id
    QuotaName: Text = ""
    Value: Number = 0.0


class ServiceQuotas(Closed):
    quotas: list[ServiceQuota] = []


class KubeNodeItem(Served):
    """A Node as GET /api/v1/nodes lists it (served as written)."""

    metadata: dict[str, Any]
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


class Kubernetes(Closed):
    nodes: list[KubeNodeItem] = []
    events: list[dict[str, Any]] = []


class EksCluster(Served):
    name: Id
    endpoint: Text = ""
    kubernetes: Kubernetes = Kubernetes()


class Eks(Closed):
    clusters: list[EksCluster] = []


# -- CloudWatch Logs (the format's own shapes: explicit and generated lines) ------------------------------
class Periodic(Closed):
    """One line every `every_s` seconds from `from` (inclusive) to `to` (exclusive)."""

    start_ms: EpochMs = Field(alias="from")
    end_ms: EpochMs = Field(alias="to")
    every_s: Annotated[float, Strict(), Field(ge=MIN_EVERY_S, le=MAX_EVERY_S, allow_inf_nan=False)]
    message: Message

    @model_validator(mode="after")
    def _bounded(self) -> Periodic:
        if self.end_ms < self.start_ms:
            raise PydanticCustomError("periodic_order", "'to' is before 'from'")
        lines = (self.end_ms - self.start_ms) / 1000 / self.every_s
        if lines > MAX_PERIODIC_LINES:
            raise PydanticCustomError("periodic_count", "{lines} lines, more than {limit} in one periodic entry",
                                      {"lines": f"{lines:,.0f}", "limit": f"{MAX_PERIODIC_LINES:,}"})
        return self


class LogStream(Closed):
    logStreamName: Name
    events: list[LogLine] = []
    periodic: list[Periodic] = []
    creationTime: EpochMs | None = None
    firstEventTimestamp: EpochMs | None = None  # derived from the lines when served; accepted for fidelity
    lastEventTimestamp: EpochMs | None = None
    lastIngestionTime: EpochMs | None = None
    arn: Text = ""
    storedBytes: Count = 0
    uploadSequenceToken: Text = ""


class LogGroup(Closed):
    logGroupName: Name
    streams: list[LogStream] = []
    creationTime: EpochMs | None = None
    retentionInDays: Annotated[int, Strict(), Field(ge=1)] = 1
    metricFilterCount: Count = 0
    arn: Text = ""
    logGroupArn: Text = ""
    storedBytes: Count = 0
    logGroupClass: Text = ""
    kmsKeyId: Text = ""
    dataProtectionStatus: Text = ""

    @model_validator(mode="after")
    def _streams_unique(self) -> LogGroup:
        _no_repeats([s.logStreamName for s in self.streams], "streams", "log stream")
        return self


class Logs(Closed):
    groups: list[LogGroup] = []

    @model_validator(mode="after")
    def _groups_unique(self) -> Logs:
        _no_repeats([g.logGroupName for g in self.groups], "groups", "log group")
        return self


def _no_repeats(names: list[str], key: str, noun: str) -> None:
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise PydanticCustomError("duplicate", "{key}[{i}]: {noun} {name} appears twice (first at {key}[{first}])",
                                      {"key": key, "i": i, "noun": noun, "name": reprlib.repr(name),
                                       "first": first[name]})
        first[name] = i


# -- faults and the top level -------------------------------------------------------------------------------
class Fault(Closed):
    """Makes a served call fail: an AWS error code (`error`), or a Logs Insights query that ends with `status`."""

    service: Literal[SERVED_SERVICES]  # type: ignore[valid-type]
    operation: Annotated[str, Strict(), Field(pattern=r"^(\*|[A-Z][A-Za-z0-9]+)$")]
    error: Annotated[str, Strict(), Field(pattern=r"^[A-Za-z][A-Za-z0-9.]*$")] | None = None
    status: Literal[QUERY_STATUSES] | None = None  # type: ignore[valid-type]
    message: Text = ""
    times: Annotated[int, Strict(), Field(ge=0, le=MAX_FAULT_COUNT)] | None = None
    after: Annotated[int, Strict(), Field(ge=0, le=MAX_FAULT_COUNT)] = 0

    @model_validator(mode="after")
    def _one_kind(self) -> Fault:
        if (self.error is None) == (self.status is None):
            raise PydanticCustomError("fault_kind", "a fault names exactly one of 'error' (an AWS error code) or "
                                      "'status' (how a Logs Insights query ends)")
        if self.status is not None and (self.service, self.operation) != ("logs", "GetQueryResults"):
            raise PydanticCustomError("fault_kind", "'status' applies to logs GetQueryResults only")
        return self


class WorldFile(Closed):
    format: Literal["gpu-audit-world/1"]
    now: EpochMs
    account_id: Annotated[str, Strict(), Field(pattern=r"^\d{12}$")]
    region: Annotated[str, Strict(), Field(pattern=REGION_PATTERN)]
    logs_concurrent_queries: Annotated[int, Strict(), Field(ge=1, le=10_000)] = DEFAULT_LOGS_CONCURRENT_QUERIES
    faults: list[Fault] = []
    sagemaker: SageMaker = SageMaker()
    ec2: Ec2 = Ec2()
    cloudtrail: CloudTrail = CloudTrail()
    logs: Logs = Logs()
    cloudwatch: CloudWatch = CloudWatch()
    fsx: Fsx = Fsx()
    events: EventBridge = EventBridge()
    health: Health = Health()
    servicequotas: ServiceQuotas = ServiceQuotas()
    eks: Eks = Eks()


SECTIONS: dict[str, tuple[str, ...]] = {
    name: tuple(field.annotation.model_fields)  # type: ignore[union-attr]
    for name, field in WorldFile.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, Closed)
}


# -- validation with errors that name the key path ----------------------------------------------------------
def validate_world(raw: Any) -> WorldFile:
    """The world, checked against the schema; WorldError listing every violation by key path otherwise."""
    if not isinstance(raw, dict):
        raise WorldError(f"world: top level must be a JSON object, got {_shown(raw)}")
    if raw.get("format") != FORMAT:  # another format: nothing else in it is worth reporting
        raise WorldError(f"world: format: must be {FORMAT!r}, got {_shown(raw.get('format'))}")
    try:
        return WorldFile.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        lines = [_explain(e) for e in errors[:MAX_ERRORS_SHOWN]]
        if len(errors) > MAX_ERRORS_SHOWN:
            lines.append(f"world: … and {len(errors) - MAX_ERRORS_SHOWN} more violation(s)")
        raise WorldError("\n".join(lines)) from None


def key_path(loc: tuple[int | str, ...]) -> str:
    """('logs', 'groups', 2, 'streams', 0, 'events', 1, 0) -> 'logs.groups[2].streams[0].events[1][0]'."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


TYPE_WORDS = {"string_type": "a string", "int_type": "an integer", "float_type": "a number", "bool_type": "a boolean",
              "list_type": "a list", "dict_type": "an object", "model_type": "an object",
              "model_attributes_type": "an object"}


def _explain(error: Any) -> str:
    loc = tuple(error["loc"])
    kind, ctx = error["type"], error.get("ctx") or {}
    got = f", got {_shown(error.get('input'))}"
    if kind == "missing" and isinstance(loc[-1], int):  # a pair short of an item
        loc = loc[:-1]
        what = f"must be a JSON array of two: [timestamp, {'message' if 'events' in loc else 'value'}]"
        got = ""
    elif kind == "missing":
        what = "missing required key"
        got = ""
    elif kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        what = "unknown key" + (f"; allowed here: {', '.join(allowed)}" if allowed else "")
        got = ""
    elif kind in TYPE_WORDS:
        what = f"must be {TYPE_WORDS[kind]}"
    elif kind in ("tuple_type", "too_short", "too_long"):
        what = f"must be a JSON array of two: [timestamp, {'message' if 'events' in loc else 'value'}]"
    elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        sign = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}[kind]
        what = f"must be {sign} {next(iter(ctx.values()))}"
    elif kind == "finite_number":
        what = "must be a finite number"
    elif kind == "literal_error":
        what = f"must be one of {ctx.get('expected')}"
    elif kind == "string_pattern_mismatch":
        what = _PATTERN_WORDS.get(loc[-1] if loc else "", f"must match {ctx.get('pattern')}")
    elif kind in ("string_too_short", "string_too_long"):
        what = f"must have {ctx.get('min_length', 1)} to {ctx.get('max_length', MAX_NAME_CHARS):,} characters"
        got = f", got {len(error['input']):,}" if isinstance(error.get("input"), str) else got
    elif kind.startswith(("timestamp", "json_text", "periodic", "fault_kind", "duplicate", "template")):
        what = error["msg"]
        got = got if kind in ("timestamp_type", "timestamp_range", "json_text") else ""
    else:
        what = str(error["msg"])
    where = key_path(loc)
    if kind == "template_ref":  # raised by the section, about one of its instances: named down to that key
        where = f"{where}.{ctx['at']}"
    return f"world: {where}: {what}{got}" if where else f"world: {what}{got}"


_PATTERN_WORDS = {
    "region": "must be an AWS region name such as 'us-west-2'",
    "account_id": "must be a 12-digit AWS account ID",
    "operation": "must be an API operation name such as 'StartQuery', or '*'",
    "error": "must be an AWS error code such as 'ThrottlingException'",
}
_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxlevel = 60, 60, 3, 3, 2


def _shown(value: Any) -> str:
    """A short repr of a bad value (the world is untrusted: bounded, and the CLI shows control characters)."""
    return _SHOWN.repr(value)


def _allowed_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys a closed structure at `loc` accepts (for an unknown-key message)."""
    node: Any = WorldFile
    for part in loc:
        while get_origin(node) is Annotated:
            node = get_args(node)[0]
        if isinstance(part, int):
            args = [a for a in get_args(node) if a is not type(None)]
            node = args[0] if args else None
        elif isinstance(node, type) and issubclass(node, BaseModel):
            fields = {f.alias or name: f for name, f in node.model_fields.items()}
            node = fields[part].annotation if part in fields else None
        else:
            return []
    while get_origin(node) is Annotated:
        node = get_args(node)[0]
    if isinstance(node, type) and issubclass(node, Closed):
        return sorted(f.alias or name for name, f in node.model_fields.items())
    return []
