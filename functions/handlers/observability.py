"""Powertools Logger, Tracer and Metrics, set up once and imported by every handler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from gpuaudit.report.redact import redact

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
    """Account IDs never reach the logs either (RULES §0.7): every record is redacted as it is written."""

    def serialize(self, log: Any) -> str:
        return redact(super().serialize(log))


logger = Logger(service=SERVICE, logger_formatter=RedactingFormatter())
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = _tracer()


def step_handler(handler: F) -> F:
    """Every Lambda's wrapping, in one order: Lambda context in the logs (never the event: it carries the
    account ID), a trace, and the EMF metrics flushed on return."""
    wrapped = logger.inject_lambda_context(log_event=False)(tracer.capture_lambda_handler(metrics.log_metrics(handler)))
    return cast(F, wrapped)
