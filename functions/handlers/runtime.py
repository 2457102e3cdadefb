"""What every handler shares: settings from the environment, the default session and clock,
events parsed into models, and the two errors the state machine treats specially.

- `InvalidEvent`: the event does not match the handler's model (a clear, field-by-field message).
- `ThrottlingException`: AWS throttled a call beyond the in-process retries; the state machine
  retries the whole step with backoff (its Retry names this error type).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, overload

import boto3
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from botocore.exceptions import ClientError
from pydantic import BaseModel, ValidationError

from gpuaudit.collectors.aws import THROTTLING, Aws, CallFailed, assumed_session
from gpuaudit.collectors.kubernetes import reader_connector
from gpuaudit.model.evidence import CallCount, Gap
from gpuaudit.settings import Settings
from gpuaudit.writes.dynamo_batch import WritesNotDone
from handlers.observability import metrics

EventModel = TypeVar("EventModel", bound=BaseModel)


class InvalidEvent(ValueError):
    """The event does not match the model of the handler that received it."""


class ThrottlingException(RuntimeError):
    """AWS kept throttling past the in-process retries: the state machine retries the step."""


class StepFailure(BaseModel):
    """A state machine step that raised, as its Catch recorded it: becomes a `Not checked` gap."""

    step: str
    error: str
    cause: str | None = None
    groups: list[str] = []
    batch: int | None = None  # the failed log batch's index (batches travel by reference: Finish names its groups)

    def gap(self) -> Gap:
        what = f" for log groups {', '.join(self.groups)}" if self.groups else ""
        unseen = {"CollectLogs": "coverage of their streams not proven",
                  "Finish": "log batches not joined, instance profiles and control plane not read"}.get(self.step)
        return Gap(kind="step-failed", service="step", operation=self.step, outcome=f"failed{what}",
                   error_code=self.error, error_message=_cause_message(self.cause), unseen=unseen)


def _cause_message(cause: str | None) -> str:
    """A Lambda error's Cause is the JSON of the raised exception; keep only its message."""
    if not cause:
        return "no cause recorded"
    try:
        parsed = json.loads(cause)
    except json.JSONDecodeError:
        return cause[:500]
    if isinstance(parsed, dict):
        return str(parsed.get("errorMessage") or parsed.get("errorType") or cause)[:500]
    return cause[:500]


def utc_now() -> datetime:
    return datetime.now(UTC)


def default_session() -> boto3.Session:
    return boto3.Session()


@functools.lru_cache(maxsize=4)
def _settings_of(environ: tuple[tuple[str, str], ...]) -> Settings:
    return Settings.deployed(dict(environ))


def _read_variables() -> tuple[tuple[str, str], ...]:
    """The variables the settings are made of, and only those: Lambda changes others per invocation
    (`_X_AMZN_TRACE_ID`), which must not make the settings be validated again."""
    return tuple((name, os.environ[name]) for name in Settings.read_names() if name in os.environ)


def settings(*needs: str) -> Settings:
    """The function's settings (gpuaudit/settings.py): validated once per container, at the first step's start (the
    environment of a running Lambda does not change; keyed by it, so a test that changes it gets them anew), then
    the variables this step `needs` checked present. Missing or malformed: BadSetting naming the variable. The one
    place a handler reads the environment (tests/unit/test_architecture.py)."""
    read = _settings_of(_read_variables())
    for name in needs:
        read.required(name)
    return read


@dataclass
class Step(Generic[EventModel]):
    """What every step starts from: its event parsed, its settings validated, its session."""

    event: EventModel
    settings: Settings
    session: boto3.Session

    @functools.cached_property
    def s3(self) -> Any:
        return self.session.client("s3")


def begin(event: Any, model: type[EventModel], what: str, session_factory: Callable[[], boto3.Session],
          needs: Iterable[str] = ("EVIDENCE_BUCKET",)) -> Step[EventModel]:
    """The step preamble, the same for every step: the event parsed (InvalidEvent naming every bad field), then the
    settings it `needs` (BadSetting naming the variable), both before any AWS call; then the session."""
    given = parse_event(event, model, what)
    return Step(event=given, settings=settings(*needs), session=session_factory())


DEADLINE_MARGIN_S = 30.0  # time left to serialise what was read before Lambda stops the invocation


def audit_port(session: boto3.Session, clock: Any, context: Any = None, cluster: str | None = None) -> Aws:
    """The collectors' AWS port for this invocation: the session's region, the handler's clock, and an
    audit deadline of the invocation's remaining time minus a margin (no call is made after it). A cluster of a
    member account (cdk.json `member_roles`, in the deployment document) is read through that account's
    read-only role, with the external ID read from its SSM SecureString parameter; the payloads, cache and findings
    stay on the auditor's own session."""
    read = settings()
    region = session.region_name or read.required("AWS_REGION")
    member = read.member_roles.get(cluster) if cluster else None
    if member is not None:
        external_id = member.external_id
        if member.external_id_parameter:
            external_id = external_id_from(session, member.external_id_parameter)
        session = assumed_session(session, member.role_arn, external_id, f"gpuaudit-{cluster}"[:64])
    aws = Aws(session=session, region=region, clock=clock)
    if read.kube_readers:  # private EKS endpoints are read by the in-VPC KubeRead function
        aws.kube_connector = reader_connector(aws, read.kube_readers)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        with contextlib.suppress(TypeError, ValueError):
            aws.deadline = time.monotonic() + max(0.0, float(remaining()) / 1000.0 - DEADLINE_MARGIN_S)
    return aws


def account_reader(cluster: str) -> str:
    """Whose account a cluster is read in: its member role (cdk.json `member_roles`), or the auditor's own."""
    member = settings().member_roles.get(cluster)
    return member.role_arn if member is not None else "own"


_EXTERNAL_IDS: dict[str, str] = {}  # parameter name -> value, once per container


def external_id_from(session: boto3.Session, parameter: str) -> str:
    """A member role's external ID, from its SSM SecureString parameter (IAM: ssm:GetParameter on exactly that
    parameter); read once per container. Unreadable: CallFailed of the read, so the step fails naming it."""
    if parameter not in _EXTERNAL_IDS:
        try:
            answer = session.client("ssm").get_parameter(Name=parameter, WithDecryption=True)
        except ClientError as err:
            error = err.response.get("Error", {})
            raise CallFailed("ssm", "GetParameter", error.get("Code", "Unknown"),
                             f"external ID parameter {parameter}: {error.get('Message', err)}") from None
        _EXTERNAL_IDS[parameter] = answer["Parameter"]["Value"]
    return _EXTERNAL_IDS[parameter]


@overload
def parse_event(event: Any, model: type[EventModel], what: str) -> EventModel: ...


@overload
def parse_event(event: Any, model: Any, what: str) -> Any: ...  # an annotated union of models


def parse_event(event: Any, model: Any, what: str) -> Any:
    """Parse with Powertools Parser; a mismatch raises InvalidEvent naming every bad field."""
    try:
        return parse(event=event, model=model)
    except (ValidationError, TypeError, ValueError) as exc:
        metrics.add_metric(name="InvalidEvents", unit=MetricUnit.Count, value=1)
        raise InvalidEvent(f"{what}: {describe(exc) if isinstance(exc, ValidationError) else exc}") from None


def describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "event"
        got = repr(error.get("input"))
        parts.append(f"{where}: {error['msg']} (got {got[:120]})")
    return "; ".join(parts)


@contextlib.contextmanager
def reported_failures() -> Iterator[None]:
    """A step that fails is counted (StepErrors); throttling that escaped the in-process retries becomes
    ThrottlingException, the error the state machine retries with backoff."""
    try:
        yield
    except Exception as err:
        code = err.code if isinstance(err, CallFailed) else \
            err.response.get("Error", {}).get("Code", "") if isinstance(err, ClientError) else ""
        metrics.add_metric(name="StepErrors", unit=MetricUnit.Count, value=1)
        # DynamoDB writes still unprocessed or throttled after the in-process retries: the step is retried later
        if code in THROTTLING or isinstance(err, WritesNotDone):
            raise ThrottlingException(str(err)) from None
        raise


def sum_calls(tallies: Iterable[Iterable[CallCount]]) -> list[CallCount]:
    """The calls of every step's own Aws port, added up: what one in-process Aws would have counted."""
    total: Counter[tuple[str, str]] = Counter()
    for tally in tallies:
        for call in tally:
            total[(call.service, call.operation)] += call.count
    return [CallCount(service=s, operation=o, count=n) for (s, o), n in sorted(total.items())]
