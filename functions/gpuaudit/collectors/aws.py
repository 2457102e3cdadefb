"""The AWS port every collector uses: clients from an injected session, call counting,
bounded retries on throttling, and failures turned into named gaps instead of exceptions.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.utils import parse_timestamp
from dateutil.tz import tzutc

from gpuaudit.model.evidence import CallCount, Gap, GapKind, GapScope
from gpuaudit.model.trail import TrailShare
from gpuaudit.progress import ProgressHook

THROTTLING = {"ThrottlingException", "Throttling", "TooManyRequestsException", "RequestLimitExceeded",
              "LimitExceededException", "RequestThrottled", "SlowDown"}
DEADLINE_EXCEEDED = "AuditDeadlineExceeded"
GAP_KINDS: dict[str, GapKind] = {
    **dict.fromkeys(THROTTLING, "throttled"),
    **dict.fromkeys(("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException",
                     "AuthorizationError", "AuthFailure"), "denied"),
    **dict.fromkeys(("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                     "NoCredentialsError"), "expired-credentials"),
    **dict.fromkeys(("ServiceUnavailable", "ServiceUnavailableException", "InternalError", "InternalFailure",
                     "InternalServerError", "InternalServerException"), "unavailable"),
    **dict.fromkeys(("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                     "Unreachable"),
                    "unreachable"),
    DEADLINE_EXCEEDED: "deadline",
}
# Requests per second per account and Region that AWS documents for an operation (CloudTrail LookupEvents: "limited
# to two per second, per account, per Region"). This process spaces its own calls so; other audits of the account
# share the rate, so a throttled call still backs off with jitter.
RATES: dict[tuple[str, str], float] = {("cloudtrail", "LookupEvents"): 2.0}
BACKOFF_S = 0.2  # the first throttling backoff; a rate-limited operation starts at its own interval
# Read-only by construction: the only operation prefixes a collector may call.
READ_PREFIXES = ("Describe", "List", "Get", "Lookup", "Filter", "Search", "StartQuery", "StopQuery")


# AWS's usual timestamp form in XML and JSON bodies: UTC, "Z", no fraction or milliseconds or microseconds.
_UTC_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{3}|\.\d{6})?Z")
_UTC = tzutc()


def fast_timestamp(value: Any) -> datetime:
    """botocore's timestamp parse, the same datetime (tzutc), without dateutil for AWS's usual form: a
    p5.48xlarge in DescribeInstances holds 35 timestamps, and dateutil took about 40 % of botocore's parse of a
    2,000-node fleet (docs/BENCHMARKS.md, where Inventory's time goes). Any other form: botocore's own parser."""
    if isinstance(value, str) and _UTC_ISO.fullmatch(value):
        return datetime.fromisoformat(value[:-1]).replace(tzinfo=_UTC)
    parsed: datetime = parse_timestamp(value)
    return parsed


def _fast_timestamps(session: boto3.Session) -> None:
    """Clients of this session parse timestamps with fast_timestamp (botocore's documented parser default)."""
    botocore_session = getattr(session, "_session", None)  # a test's stand-in session may have none
    if botocore_session is not None:
        botocore_session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=fast_timestamp)


# DescribeInstances for a reader that needs of each network interface only its type (the inventory counts EFA
# interfaces; discovery reads tags): a p5.48xlarge's 32 EFA interfaces are most of its 33 KB of XML, and botocore's
# parse of them was most of the Inventory step's own time (docs/BENCHMARKS.md, issue #50 item 5). Each interface set
# is cut, before botocore parses the body, to one item per interface type it holds; everything else is untouched.
# A reader that needs the interfaces themselves (preflight's security groups and addresses) asks without it.
_INTERFACE_SET = re.compile(rb"<networkInterfaceSet>(.*?)</networkInterfaceSet>", re.S)
_INTERFACE_TYPE = re.compile(rb"<interfaceType>([^<]*)</interfaceType>")
INTERFACE_TYPES = "interface-types"  # the `view` of DescribeInstances that keeps only the interfaces' types


def interface_types_only(body: bytes) -> bytes:
    """A DescribeInstances XML body whose every `networkInterfaceSet` holds only `<item><interfaceType>…` per
    interface that states a type (markup cannot occur inside an element's text: XML escapes `<` there)."""
    def types(found: re.Match[bytes]) -> bytes:
        items = b"".join(b"<item><interfaceType>" + t + b"</interfaceType></item>"
                         for t in _INTERFACE_TYPE.findall(found.group(1)))
        return b"<networkInterfaceSet>" + items + b"</networkInterfaceSet>"
    return _INTERFACE_SET.sub(types, body)


def _interface_types(response_dict: dict[str, Any], **_: Any) -> None:
    """botocore's `before-parse` hook of the INTERFACE_TYPES view: the body it parses is cut as above (an error
    answer is left whole)."""
    body = response_dict.get("body")
    if isinstance(body, bytes) and int(response_dict.get("status_code") or 200) < 300:
        response_dict["body"] = interface_types_only(body)


class CallFailed(Exception):
    """A read call that could not be completed; `gap` says what was not seen and which call settles it."""

    def __init__(self, service: str, operation: str, code: str, message: str) -> None:
        super().__init__(f"{service} {operation}: {code}: {message}")
        self.service, self.operation, self.code, self.message = service, operation, code, message

    def gap_for(self, unseen: str, scope: GapScope | None = None) -> Gap:
        """The typed gap of this failure: why (from the error code), the call, and what stays unseen."""
        return Gap(kind=GAP_KINDS.get(self.code, "not-read"), service=self.service, operation=self.operation,
                   error_code=self.code, error_message=self.message, unseen=unseen, scope=scope)


# A call's wait for AWS: each attempt's read timeout (connect: at most 5 s), botocore's attempts of one call (the first
# and two retries, which it makes on a timeout or a 5xx), and the steps a near deadline cuts the timeout to.
CALL_TIMEOUT_S, CONNECT_TIMEOUT_S, BOTOCORE_ATTEMPTS = 30.0, 5.0, 3
TIMEOUT_STEPS = (30.0, 15.0, 8.0, 4.0, 2.0, 1.0)
# An audit with no deadline given (CLI, `gpuaudit mcp`) stops calling AWS after this and reports what it read (the
# rest Not checked): an account that answers slowly or holds far more than expected never leaves it without answer.
DEFAULT_DEADLINE_S = 900.0


@dataclass
class Aws:
    """Clients for one region, the clock, and the running tally of calls."""

    session: boto3.Session
    region: str
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic  # what `sleep` moves: the clock calls are spaced on
    jitter: Callable[[], float] = random.random  # in [0, 1): spreads the retries of audits throttled together
    max_attempts: int = 4
    deadline: float | None = None  # time.monotonic() after which no further call is made (audit deadline)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    # (cluster, endpoint, CA) -> Kubernetes API; None: the cluster's endpoint directly (collectors/kubernetes.py)
    kube_connector: Callable[[str, str, str], Any] | None = None
    watcher: ProgressHook | None = None  # told of every call attempt (CLI progress, --verbose); never decides
    _clients: dict[str, Any] = field(default_factory=dict)
    _last_call: dict[tuple[str, str], float] = field(default_factory=dict)  # rate-limited operations only
    # Account-wide CloudTrail reads kept for the next lookup (collectors/trail.py); None until the first.
    trail_share: TrailShare | None = None

    def client(self, service: str, view: str | None = None) -> Any:
        """The service's client, its timeouts cut to what the deadline leaves (a call in flight ends by then too);
        with `view` INTERFACE_TYPES, an EC2 client of its own whose DescribeInstances answers carry only the network
        interfaces' types (`interface_types_only`)."""
        timeout = self.call_timeout()
        key = (f"{service}/{view}" if view else service) + ("" if timeout == CALL_TIMEOUT_S else f"@{timeout:g}s")
        if key not in self._clients:
            if not self._clients:
                _fast_timestamps(self.session)
            config = Config(retries={"max_attempts": BOTOCORE_ATTEMPTS - 1, "mode": "standard"},
                            connect_timeout=min(CONNECT_TIMEOUT_S, timeout), read_timeout=timeout)
            client = self.session.client(service, region_name=self.region, config=config)
            if view == INTERFACE_TYPES:
                client.meta.events.register("before-parse.ec2.DescribeInstances", _interface_types)
            elif view is not None:
                raise ValueError(f"unknown client view {view!r}")
            self._clients[key] = client
        return self._clients[key]

    def call_timeout(self) -> float:
        """Seconds one attempt of the next call may wait for AWS: 30, or less when the audit's deadline is near —
        the botocore attempts of one call (a read timeout is retried) all end by the deadline, to the nearest step
        (a handful of clients per service, not one per call)."""
        if self.deadline is None:
            return CALL_TIMEOUT_S
        share = (self.deadline - time.monotonic()) / BOTOCORE_ATTEMPTS
        return next((step for step in TIMEOUT_STEPS if step <= share), TIMEOUT_STEPS[-1])

    def call(self, service: str, operation: str, *, view: str | None = None, **params: Any) -> dict[str, Any]:
        """One read call; throttling is retried with backoff, anything else raises CallFailed. `view`: the client's
        (`client`), for a reader that needs less of the answer."""
        if not operation.startswith(READ_PREFIXES):
            raise PermissionError(f"{service} {operation} is not a read call; gpuaudit never mutates")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise CallFailed(service, operation, DEADLINE_EXCEEDED,
                             "the audit deadline passed before this call; the result holds what was read")
        method = getattr(self.client(service, view), _snake(operation))
        rate = RATES.get((service, operation))
        delay = 1.0 / rate if rate else BACKOFF_S
        for attempt in range(1, self.max_attempts + 1):
            if rate:
                self._keep_rate((service, operation), rate)
            self.counts[(service, operation)] += 1
            try:
                response: dict[str, Any] = method(**params)
                if not response.get("ResponseMetadata", {}).get("RequestId"):
                    # AWS answers every call with a request ID; a 200 without one is not the service's protocol
                    # (a captive portal, a proxy's page): botocore parsed nothing of it, so nothing in it is read.
                    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
                    raise CallFailed(service, operation, NOT_AWS,
                                     f"HTTP {status} without an AWS request ID: the endpoint's answer is not the "
                                     f"{service} API (a captive portal or proxy?)")
                if rate:  # spaced from when AWS answered: it took the call at or before then
                    self._last_call[(service, operation)] = self.monotonic()
                if self.watcher is not None:
                    self.watcher.call(service, operation, response, None)
                return response
            except ClientError as err:
                code = err.response.get("Error", {}).get("Code", "Unknown")
                message = err.response.get("Error", {}).get("Message", str(err))
                if self.watcher is not None:
                    self.watcher.call(service, operation, None, code)
                if code in THROTTLING and attempt < self.max_attempts and not self._past_deadline(delay):
                    # Exponential backoff with equal jitter: at least half the step, so a retry never lands at
                    # once, and spread over the other half so audits throttled together do not retry together.
                    self.sleep(delay * (0.5 + 0.5 * self.jitter()))
                    delay *= 2
                    continue
                raise CallFailed(service, operation, code, message) from None
            except BotoCoreError as err:
                if self.watcher is not None:
                    self.watcher.call(service, operation, None, type(err).__name__)
                raise CallFailed(service, operation, type(err).__name__, str(err)) from None
        raise AssertionError("unreachable")

    def _keep_rate(self, key: tuple[str, str], rate: float) -> None:
        """Space this process's calls of a rate-limited operation at its documented interval, from the last answer."""
        last = self._last_call.get(key)
        if last is not None:
            wait = last + 1.0 / rate - self.monotonic()
            if wait > 0:
                self.sleep(wait)

    def _past_deadline(self, wait: float) -> bool:
        return self.deadline is not None and time.monotonic() + wait >= self.deadline

    def paginate(self, service: str, operation: str, key: str, *, token: str = "NextToken",
                 out_token: str | None = None, view: str | None = None, **params: Any) -> Iterator[Any]:
        """Every item of a listed key across all pages (the collectors' rule: paginate to the end)."""
        out_token = out_token or token
        while True:
            page = self.call(service, operation, view=view, **params)
            yield from page.get(key, [])
            next_token = page.get(out_token)
            if not next_token or next_token == params.get(token):
                return
            params = {**params, token: next_token}

    def read_all(self, gaps: list[Gap], unseen: str, service: str, operation: str, key: str,
                 **params: Any) -> list[Any] | None:
        """Every item of a listing, or None with a gap naming the failed call and what was not seen."""
        try:
            return list(self.paginate(service, operation, key, **params))
        except CallFailed as failed:
            gaps.append(failed.gap_for(unseen))
            return None

    def call_counts(self) -> list[CallCount]:
        return [CallCount(service=s, operation=o, count=n) for (s, o), n in sorted(self.counts.items())]


NOT_AWS = "NotAnAwsResponse"


def _snake(operation: str) -> str:
    out = []
    for i, ch in enumerate(operation):
        if ch.isupper() and i and (not operation[i - 1].isupper() or
                                   (i + 1 < len(operation) and operation[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def assumed_session(session: boto3.Session, role_arn: str, external_id: str | None = None,
                    session_name: str = "gpuaudit") -> boto3.Session:
    """A session on another account's read-only role (infra/cross_account.py), or CallFailed naming why not."""
    params = {"RoleArn": role_arn, "RoleSessionName": session_name}
    if external_id:
        params["ExternalId"] = external_id
    try:
        creds = session.client("sts").assume_role(**params)["Credentials"]
    except ClientError as err:
        error = err.response.get("Error", {})
        raise CallFailed("sts", "AssumeRole", error.get("Code", "Unknown"), error.get("Message", str(err))) from None
    except BotoCoreError as err:
        raise CallFailed("sts", "AssumeRole", type(err).__name__, str(err)) from None
    return boto3.Session(aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                         aws_session_token=creds["SessionToken"], region_name=session.region_name)
