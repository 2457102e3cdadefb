"""The MCP server as Streamable HTTP: stateless, JSON responses, and a Lambda Function URL event served through it.

Stateless: no `Mcp-Session-Id` is issued or needed, so any Lambda instance answers any request. JSON responses, not
an SSE stream: Lambda's Python runtime has no response streaming (only Node.js managed runtimes and custom runtimes
stream), so the Function URL is BUFFERED and each POST is answered with one JSON-RPC message once the tool is done;
progress notifications are therefore not delivered over HTTP (the stdio server sends them).
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, MutableMapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

PATH = "/mcp"
MAX_BODY = 1024 * 1024  # one JSON-RPC request; a Function URL accepts at most 6 MB
Message = MutableMapping[str, Any]


def http_app(server: MCPServer, allowed_hosts: list[str] | None = None) -> Starlette:
    """A fresh app (its session manager runs once): loopback hosts only unless `allowed_hosts` names others.
    Behind a Function URL with AWS_IAM auth every request is SigV4-signed, which a rebinding page cannot do, and the
    Host is the URL's own: the Lambda passes its host, so the check stays on."""
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=allowed_hosts or ["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=[f"https://{h}" for h in allowed_hosts or []] or ["http://127.0.0.1:*", "http://localhost:*"])
    app = server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, json_response=True,
                                     transport_security=security, max_request_body_size=MAX_BODY)
    app.add_middleware(NoEventStream)
    return app


class NoEventStream:
    """GET opens the server-to-client SSE stream, which a stateless, buffered endpoint cannot hold open (a Function
    URL would wait for the Lambda's timeout): answered 405, as the transport allows a server without that stream."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 405,
                        "headers": [(b"allow", b"POST"), (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,'
                                                              b'"message":"Method Not Allowed: POST JSON-RPC messages; '
                                                              b'this stateless endpoint keeps no event stream"}}'})
            return
        await self.app(scope, receive, send)


def malformed_event(event: object) -> str | None:
    """What makes `event` not a Function URL request (payload format 2.0) this endpoint can serve, or None. Lambda
    builds the event, but anything that invokes the function directly can hand it any JSON: each field the endpoint
    reads is checked for its type before it is read, the body's base64 decoded strictly."""
    if not isinstance(event, dict):
        return f"the event is {type(event).__name__}, not an object"
    context = event.get("requestContext", {})
    if not isinstance(context, dict):
        return "requestContext is not an object"
    for part in ("http", "authorizer"):
        if not isinstance(context.get(part, {}), dict):
            return f"requestContext.{part} is not an object"
    if not isinstance(context.get("authorizer", {}).get("iam", {}), dict):
        return "requestContext.authorizer.iam is not an object"
    headers = event.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        return "headers is not an object of strings"
    try:
        for k, v in headers.items():
            k.encode("latin-1"), v.encode("latin-1")
    except UnicodeEncodeError:
        return "a header is not latin-1 (HTTP headers are bytes of ISO-8859-1)"
    for name in ("body", "rawPath", "rawQueryString"):
        if event.get(name) is not None and not isinstance(event[name], str):
            return f"{name} is not a string"
    if not isinstance(event.get("isBase64Encoded", False), bool):
        return "isBase64Encoded is not true or false"
    if event.get("isBase64Encoded"):
        try:
            base64.b64decode(event.get("body") or "", validate=True)
        except ValueError:
            return "body is marked isBase64Encoded and is not base64"
    elif len((event.get("body") or "").encode("utf-8", "surrogatepass")) > 6 * 1024 * 1024:
        return "body is larger than a Function URL takes (6 MB)"
    return None


def refuses_malformed_events(handler: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Any, Any], dict[str, Any]]:
    """A Function URL handler that answers a malformed event 400 naming its field (never a traceback)."""
    @functools.wraps(handler)
    def checked(event: Any, context: Any) -> dict[str, Any]:
        problem = malformed_event(event)
        if problem is not None:
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": f"not a Function URL request: {problem}"}})
            return {"statusCode": 400, "headers": {"content-type": "application/json"}, "cookies": [], "body": body,
                    "isBase64Encoded": False}
        return handler(event, context)
    return checked


async def serve_function_url(app: Starlette, event: dict[str, Any]) -> dict[str, Any]:
    """One Function URL request (payload format 2.0) through the ASGI app, inside the app's lifespan."""
    http = event.get("requestContext", {}).get("http", {})
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    body = event.get("body") or ""
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": http.get("method", "GET"),
             "scheme": "https", "path": event.get("rawPath", "/"), "raw_path": event.get("rawPath", "/").encode(),
             "query_string": (event.get("rawQueryString") or "").encode(), "root_path": "",
             "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
             "client": (http.get("sourceIp", ""), 0), "server": (headers.get("host", ""), 443)}
    sent: list[Message] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if delivered:
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    async with app.router.lifespan_context(app):
        await app(scope, receive, send)
    return _response(sent)


def _response(sent: list[Message]) -> dict[str, Any]:
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for key, value in start.get("headers", []):
        name, text = key.decode("latin-1").lower(), value.decode("latin-1")
        if name == "set-cookie":
            cookies.append(text)
        else:
            headers[name] = f"{headers[name]}, {text}" if name in headers else text
    try:
        return {"statusCode": start["status"], "headers": headers, "cookies": cookies, "body": body.decode(),
                "isBase64Encoded": False}
    except UnicodeDecodeError:
        return {"statusCode": start["status"], "headers": headers, "cookies": cookies,
                "body": base64.b64encode(body).decode(), "isBase64Encoded": True}


