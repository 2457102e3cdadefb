"""The deployed MCP endpoint (issue #38): a Function URL (AWS_IAM auth) request → the MCP server's Streamable HTTP
app (stateless, JSON responses) → the Function URL response. The tools read the findings table and the results
bucket and may start the state machine (gpuaudit/agent/deployed.py); nothing else.

The server (tool schemas) is built once per container; each request gets a fresh HTTP app, whose session manager
runs once (stateless: nothing is kept between requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext
from mcp.server.mcpserver import MCPServer

from gpuaudit.agent.deployed import DeployedBackend
from gpuaudit.agent.http import http_app, refuses_malformed_events, serve_function_url
from gpuaudit.agent.server import build_server
from gpuaudit.report.escape import outward
from handlers import runtime
from handlers.observability import logger

# The SDK's own log lines (a refused argument, a tool that crashed, with its traceback) go through the same
# redacting, escaping formatter as ours: no account ID or raw character reaches the function's log group.
copy_config_to_registered_loggers(source_logger=logger, include={"mcp"})
session_factory: Callable[[], boto3.Session] = runtime.default_session
clock: Callable[[], datetime] = runtime.utc_now


@cache
def server() -> MCPServer:
    settings = runtime.settings("FINDINGS_TABLE", "EVIDENCE_BUCKET", "STATE_MACHINE_ARN")
    session = session_factory()
    region = settings.aws_region or session.region_name or "us-east-1"
    return build_server(DeployedBackend(
        session=session, region=region, table=settings.table, bucket=settings.bucket,
        state_machine_arn=settings.required("STATE_MACHINE_ARN"), deployment=settings.audited, clock=clock))


@refuses_malformed_events
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    host = (event.get("headers") or {}).get("host") or event.get("requestContext", {}).get("domainName", "")
    caller = outward(event.get("requestContext", {}).get("authorizer", {}).get("iam", {}).get("userArn") or "")
    logger.info("mcp request", extra={"method": event.get("requestContext", {}).get("http", {}).get("method"),
                                      "caller": caller})
    return asyncio.run(serve_function_url(http_app(server(), [host]), event))
