"""Powertools Logger, Tracer and Metrics, set up once and imported by every handler."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from gpuaudit.report.escape import outward, outward_json

SERVICE = "gpuaudit"
NAMESPACE = "gpuaudit"

F = TypeVar("F", bound=Callable[..., Any])


class TracerLike(Protocol):
    def capture_lambda_handler(self, lambda_handler: F) -> F: ...


class Untraced:
    """Stands in for Tracer where aws-xray-sdk is not installed (the development venv).

    Powertools' Tracer imports aws-xray-sdk even when tracing is disabled; the Lambda bundle
    installs it (`aws-lambda-powertools[tracer]`), and outside Lambda tracing is off anyway."""

    def capture_lambda_handler(self, lambda_handler: F) -> F:
        return lambda_handler


def _tracer() -> TracerLike:
    try:
        import aws_xray_sdk  # noqa: F401
    except ImportError:
        return Untraced()
    return Tracer(service=SERVICE)  # type: ignore[return-value]


class RedactingFormatter(LambdaPowertoolsFormatter):
    """Account IDs never reach the logs either (RULES §0.7): every record is redacted as it is written, and a
    control or invisible character the serialiser left raw (C1, line separators) is written as a JSON escape
    (report/escape.outward_json): the same redaction and escaping as every other output."""

    def serialize(self, log: Any) -> str:
        return outward_json(super().serialize(log))


logger = Logger(service=SERVICE, logger_formatter=RedactingFormatter())
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = _tracer()


def outward_errors(handler: F) -> F:
    """A raised error leaves as every other message does (report/escape.outward): the Lambda runtime makes its
    message the Step Functions error Cause (and the execution history, the failure record, a console), so an AWS
    message quoting the caller's ARN or the account's text is redacted and escaped there. The type is kept: the
    state machine's Retry and Catch match on it."""

    @functools.wraps(handler)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except Exception as err:
            said = outward(str(err))
            if said != str(err):
                err.args = (said,)
            raise

    return cast(F, run)


def step_handler(handler: F) -> F:
    """Every Lambda's wrapping, in one order: Lambda context in the logs (never the event: it carries the
    account ID), a trace, the EMF metrics flushed on return, and errors raised with an outward message."""
    wrapped = logger.inject_lambda_context(log_event=False)(
        tracer.capture_lambda_handler(metrics.log_metrics(outward_errors(handler))))
    return cast(F, wrapped)
