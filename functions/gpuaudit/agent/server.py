"""gpuaudit as an MCP server (issue #38): read-only tools over a backend, on the official Python SDK (`mcp`).

One server, two backends: `local_backend.LocalBackend` (`gpuaudit mcp`, over stdio: an account or a world, the
local history, results written to a directory) and `deployed.DeployedBackend` (the Lambda behind a Function URL:
the findings table, the results bucket, on-demand executions of the state machine). The local server runs audits
(`run_audit`); the deployed one starts them (`start_audit`) and reads what they wrote.

Errors a user can act on (bad input, an unknown cluster, expired credentials: the CLI's exit-2/exit-3 messages)
are tool errors (`isError`) carrying that message; anything else is the SDK's opaque "Error executing tool …",
its traceback only in the server's log. Long audits report each phase as a progress notification.

Nothing leaves unescaped: every answer and every tool error goes through report/escape.outward (account IDs
redacted, control and invisible characters shown as escapes), as the CLI's messages do; an argument a tool does
not take is refused by name, never dropped.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, Protocol, TypeVar

import anyio
import anyio.to_thread
from anyio import from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    InputRequiredResult,
    JSONRPCError,
    ToolAnnotations,
)
from pydantic import BaseModel, Field, ValidationError

from gpuaudit import __version__
from gpuaudit.agent import glossary
from gpuaudit.agent.schema import (
    AUDIT_ID_PATTERN,
    NODE_PAGE_DEFAULT,
    AuditInput,
    AuditList,
    AuditRow,
    AuditStarted,
    AuditSummary,
    BadToolInput,
    ClusterList,
    ClusterName,
    CoverageFilter,
    Explanation,
    GlossaryEntry,
    LatestFindings,
    LatestOrAuditId,
    Limit,
    NodeHistory,
    NodePage,
    Offset,
    ToolProblem,
    VerdictFilter,
    node_page,
    page_of,
    summarise,
    validation_message,
)
from gpuaudit.model.evidence import AuditRequest, InstanceId, Mode
from gpuaudit.model.result import Result
from gpuaudit.progress import PHASES
from gpuaudit.report.escape import one_line, outward, outward_tree

SERVER_NAME = "gpuaudit"
INSTRUCTIONS = (
    "Read-only auditor of GPU training clusters on AWS (HyperPod, ParallelCluster, self-managed EC2/EKS). "
    "Per node it proves whether GPU error evidence (NVIDIA Xid kernel lines, HyperPod health-agent detections) "
    "arrived, gives one verdict (REPLACE, NOT OBSERVABLE, REBOOT, MONITOR, LEAVE ALONE) and labels causes Proven or "
    "Hypothesis. Run or read an audit, then page through its nodes; `explain` defines every word of a verdict.")
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
# Tools that read only what gpuaudit itself stored (results, history, findings) or shipped (the glossary), never the
# audited account: the protocol's closed world (openWorldHint false)
READS_STORED = READ_ONLY.model_copy(update={"open_world_hint": False})
RESULT_URI = "gpuaudit://results/{cluster}/{audit_id}"
REPORT_URI = "gpuaudit://reports/{cluster}/{audit_id}"
CALLS_PER_STEP = 50  # progress inside a phase: value phase + calls/(calls + CALLS_PER_STEP), below the next phase
# Answer fields that keep their account ID (escaped all the same): a handle the caller uses as it is
HANDLES = frozenset({"execution_arn"})
Answer = TypeVar("Answer", bound=BaseModel)


class Backend(Protocol):
    def clusters(self) -> ClusterList: ...

    def result(self, cluster: str, audit_id: str) -> tuple[Result, str, str | None]:
        """The stored result, where it is, and where its report is."""

    def audits(self, cluster: str) -> tuple[list[AuditRow], str]:
        """The cluster's stored audits, the latest first, and where they are kept."""

    def report(self, cluster: str, audit_id: str) -> str:
        """The audit's HTML report."""

    def latest(self, cluster: str, mode: Mode, offset: int, limit: int) -> LatestFindings: ...

    def history(self, cluster: str, node: str, days: int, offset: int, limit: int) -> NodeHistory: ...


class Auditor(Backend, Protocol):
    def run_audit(self, request: AuditRequest, progress: Any) -> tuple[Result, str, str | None]: ...


class Starter(Backend, Protocol):
    def start_audit(self, request: AuditRequest) -> AuditStarted: ...


class ProgressBridge:
    """The pipeline's ProgressHook, run in the audit's worker thread, sending MCP progress notifications through the
    event loop. Values only grow (the protocol requires it): each phase is a step; AWS calls move within one."""

    def __init__(self, send: Callable[[float, str], None]) -> None:
        self.send, self.step, self.calls, self.name = send, 0, 0, ""

    def phase(self, name: str, *, nodes: int | None = None, log_groups: int | None = None) -> None:
        self.step, self.calls, self.name = self.step + 1, 0, name
        counts = ", ".join(f"{n} {what}" for n, what in ((nodes, "nodes"), (log_groups, "log groups")) if n is not None)
        self.send(float(self.step), f"{name}" + (f" ({counts})" if counts else ""))

    def call(self, service: str, operation: str, response: dict[str, Any] | None, error: str | None) -> None:
        self.calls += 1
        if self.calls % CALLS_PER_STEP == 0:
            self.send(self.step + self.calls / (self.calls + CALLS_PER_STEP), f"{self.name}: {self.calls} AWS calls")


def _flat(model: type[AuditInput], body: Callable[..., Any]) -> Callable[..., Any]:
    """`body(ctx, **fields)` with the model's fields as its own parameters: the tool's schema is flat (what agents
    fill best) and carries each field's type, constraints and description."""
    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    annotations: dict[str, Any] = {"ctx": Context}
    for name, info in model.model_fields.items():
        # the field's constraints and description; its default goes on the parameter (a FieldInfo cannot carry both)
        annotation = Annotated[(info.annotation, *info.metadata, Field(description=info.description))]  # type: ignore[name-defined,valid-type]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                        default=info.get_default(call_default_factory=True)))
        annotations[name] = annotation
    returns = typing.get_type_hints(body)["return"]
    body.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    body.__annotations__ = {**annotations, "return": returns}
    return body


def _outward(answer: Answer) -> Answer:
    """The answer as it may leave: every string redacted and escaped (report/escape.outward), whatever field it is
    in (a node's group or type, a cluster name, a gap), so no field can be forgotten."""
    return type(answer).model_validate(outward_tree(answer.model_dump(), HANDLES))


async def _off_loop_text(work: Callable[[], str]) -> str:
    """_off_loop for a resource's text: ToolProblem becomes the resource's error, in the same words."""
    try:
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except ToolProblem as problem:
        raise ResourceError(outward(one_line(str(problem)))) from None


def _resource_id(cluster: str, audit_id: str) -> str:
    """A resource URI's parts, refused as a tool's arguments would be (an audit ID, a cluster name with no slash)."""
    if not re.fullmatch(AUDIT_ID_PATTERN.strip("^$"), audit_id):
        raise ResourceError(f"audit_id {outward(one_line(audit_id[:80]))!r} is not an audit ID (24 hex digits, as "
                            "list_audits gives)")
    if not cluster or re.search(r"[/\\]", cluster):
        raise ResourceError(f"cluster {outward(one_line(cluster[:80]))!r} is not a cluster name")
    return audit_id


async def _off_loop(work: Callable[[], Answer]) -> Answer:
    """Blocking work (boto3, SQLite, the pipeline) in a worker thread; ToolProblem becomes the tool's error."""
    try:
        # abandoned on cancel: Ctrl-C (or a client gone) stops the server without waiting for an audit in flight
        return _outward(await anyio.to_thread.run_sync(work, abandon_on_cancel=True))
    except ToolProblem as problem:
        raise ToolError(str(problem)) from None


class AuditorServer(MCPServer):
    """MCPServer whose tool calls refuse arguments the tool does not take (the SDK drops them silently) and whose
    tool errors leave as every other message does: redacted and escaped (outward)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.accepted: dict[str, frozenset[str]] = {}  # tool -> its argument names (before the SDK adds any tool)
        super().__init__(*args, **kwargs)

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> CallToolResult | InputRequiredResult:
        accepted = self.accepted.get(name)
        unknown = sorted(set(arguments) - accepted) if accepted is not None else []
        if unknown:
            named = ", ".join(repr(u)[:80] for u in unknown[:10]) + (f" and {len(unknown) - 10} more"
                                                                      if len(unknown) > 10 else "")
            raise ToolError(outward(one_line(f"{name}: unknown argument(s) {named}; it takes "
                                             f"{', '.join(sorted(accepted or ())) or 'none'}")))
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:  # its cause kept: the SDK logs a refused argument by field name only
            cause = exc.__cause__
            said = f"{name}: {validation_message(cause)}" if isinstance(cause, ValidationError) else str(exc)
            raise ToolError(outward(one_line(said))) from cause

    async def run_stdio_async(self) -> None:
        """As the SDK serves stdio, and a line that is not JSON-RPC is answered with the protocol's error (the SDK
        drops it without a word, and the client waits for an answer that never comes)."""
        async with stdio_server() as (read_stream, write_stream):
            await self._lowlevel_server.run(AnsweringBadLines(read_stream, write_stream), write_stream,
                                            self._lowlevel_server.create_initialization_options())

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().add_tool(fn, name, *args, **kwargs)
        self.accepted[name or fn.__name__] = frozenset(
            p for p, param in inspect.signature(fn).parameters.items() if param.annotation not in (Context, "Context"))


def protocol_error(problem: Exception) -> JSONRPCError:
    """JSON-RPC 2.0's answer to a line it cannot take: -32700 Parse error (not JSON), -32600 Invalid Request (JSON,
    not a JSON-RPC message); id null, as the id could not be read. The line itself is not echoed."""
    errors = problem.errors() if isinstance(problem, ValidationError) else []
    parse = any(e["type"] == "json_invalid" for e in errors)
    detail = outward(one_line(errors[0]["msg"] if errors else type(problem).__name__))[:200]
    return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
        code=PARSE_ERROR if parse else INVALID_REQUEST,
        message=f"{'Parse error' if parse else 'Invalid Request'}: {detail}"))


class AnsweringBadLines:
    """The stdio transport's read stream, where a line the transport could not parse (an Exception in the stream)
    is answered at once with the protocol's error instead of reaching the server, which would drop it."""

    def __init__(self, inner: Any, write: Any) -> None:
        self.inner, self.write = inner, write

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def _answered(self, item: Any) -> bool:
        if isinstance(item, Exception):
            await self.write.send(SessionMessage(protocol_error(item)))
            return True
        return False

    async def receive(self) -> Any:
        while await self._answered(item := await self.inner.receive()):
            pass
        return item

    def __aiter__(self) -> AnsweringBadLines:
        return self

    async def __anext__(self) -> Any:
        while await self._answered(item := await self.inner.__anext__()):
            pass
        return item

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> AnsweringBadLines:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def build_server(backend: Backend) -> AuditorServer:
    server = AuditorServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)

    if hasattr(backend, "run_audit"):
        auditor: Auditor = backend  # type: ignore[assignment]

        async def run_audit(ctx: Context, **fields: Any) -> AuditSummary:
            request = _request(fields)

            def send(value: float, message: str) -> None:
                # a watcher only: a client gone (or a call outside a request) never fails the audit
                with contextlib.suppress(Exception):
                    from_thread.run(ctx.report_progress, value, float(len(PHASES)), message)

            def audit() -> AuditSummary:
                result, location, report = auditor.run_audit(request, ProgressBridge(send))
                return summarise(result, location, report)

            return await _off_loop(audit)

        server.add_tool(_flat(AuditInput, run_audit), name="run_audit", title="Run an audit", annotations=READ_ONLY,
                        description=(
            "Run one audit (coverage, incident or preflight) of a cluster, instances, file systems or an EKS "
            "cluster. Returns the headline, verdict counts, the worst nodes (page on with audit_nodes), branches or "
            "checks, visibility gaps, next steps and where the full result is. Read-only; reports progress."))
    else:
        from gpuaudit.agent.deployed import MCP_STARTS_PER_PERIOD
        from gpuaudit.domain.window import MAX_WINDOW

        starter: Starter = backend  # type: ignore[assignment]

        async def start_audit(ctx: Context, **fields: Any) -> AuditStarted:
            request = _request(fields)
            return await _off_loop(lambda: starter.start_audit(request))

        server.add_tool(_flat(AuditInput, start_audit), name="start_audit", title="Start an audit",
                        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                    idempotent_hint=True, open_world_hint=True), description=(
            "Start an on-demand audit on the deployed state machine (its only non-read action; the audit itself is "
            "read-only). Returns the execution ARN; its findings appear in latest_findings and audit_summary when "
            "it ends (minutes). The same request again within the hour returns the same execution; at most "
            f"{MCP_STARTS_PER_PERIOD} distinct audits an hour; the window at most {MAX_WINDOW.days} days, as the "
            "CLI's."))

    def stored(cluster: str, audit_id: str | None) -> tuple[Result, str, str | None]:
        """The named audit's result, or (no ID) the cluster's latest stored one."""
        return backend.result(cluster, audit_id or backend.audits(cluster)[0][0].audit_id)

    @server.tool(title="Audit summary", annotations=READS_STORED)
    async def audit_summary(cluster: ClusterName, audit_id: LatestOrAuditId = None,
                            limit: Limit = NODE_PAGE_DEFAULT) -> AuditSummary:
        """The summary of an audit already run (the same shape run_audit returns), read from where it was stored;
        without audit_id, the cluster's latest audit."""

        def read() -> AuditSummary:
            result, location, report = stored(cluster, audit_id)
            return summarise(result, location, report, limit)

        return await _off_loop(read)

    @server.tool(title="Audit nodes (one page)", annotations=READS_STORED)
    async def audit_nodes(cluster: ClusterName, audit_id: LatestOrAuditId = None, offset: Offset = 0,
                          limit: Limit = NODE_PAGE_DEFAULT,
                          verdicts: Annotated[list[VerdictFilter] | None, Field(
                              max_length=6, description="Only these verdicts; `none`: nodes without one")] = None,
                          coverage: Annotated[list[CoverageFilter] | None, Field(
                              max_length=4, description="Only these GPU-evidence statuses (MEASURED, NOT_OBSERVABLE, "
                              "NO_HMA_DETECTIONS) or GAP (any coverage gap), as the CLI's --coverage")] = None
                          ) -> NodePage:
        """One page of an audit's nodes, worst first (REPLACE, NOT OBSERVABLE, REBOOT, MONITOR, LEAVE ALONE, none);
        without audit_id, the cluster's latest audit. Filters given together: a node passes each."""

        def read() -> NodePage:
            return node_page(stored(cluster, audit_id)[0], offset, limit, verdicts or (), coverage or ())

        return await _off_loop(read)

    @server.tool(title="List stored audits", annotations=READS_STORED)
    async def list_audits(cluster: ClusterName, offset: Offset = 0, limit: Limit = NODE_PAGE_DEFAULT) -> AuditList:
        """The cluster's stored audits, the latest first: each audit_id for audit_summary, audit_nodes and the
        result and report resources."""

        def read() -> AuditList:
            rows, source = backend.audits(cluster)
            window, following = page_of(len(rows), offset, limit)
            return AuditList(cluster=cluster, source=source, total=len(rows), offset=offset, audits=rows[window],
                             next_offset=following)

        return await _off_loop(read)

    @server.resource(RESULT_URI, title="Audit result (JSON)", mime_type="application/json", description=(
        "An audit's whole result document (OUTPUT-CONTRACT), account IDs redacted; the IDs from list_audits"))
    async def result_document(cluster: str, audit_id: str) -> str:
        checked_id = _resource_id(cluster, audit_id)
        result = (await _off_loop_text(lambda: backend.result(cluster, checked_id)[0].to_json()))
        return json.dumps(outward_tree(json.loads(result)), indent=2, ensure_ascii=True)

    @server.resource(REPORT_URI, title="Audit report (HTML)", mime_type="text/html", description=(
        "An audit's HTML report, as rendered (escaped, account IDs redacted); the IDs from list_audits"))
    async def report_document(cluster: str, audit_id: str) -> str:
        checked_id = _resource_id(cluster, audit_id)
        return await _off_loop_text(lambda: backend.report(cluster, checked_id))

    @server.tool(title="List clusters", annotations=READ_ONLY)
    async def list_clusters() -> ClusterList:
        """The clusters in scope: the region's HyperPod clusters and ParallelClusters (deployed: the audited set)."""
        return await _off_loop(backend.clusters)

    @server.tool(title="Latest findings per node", annotations=READS_STORED)
    async def latest_findings(cluster: ClusterName, mode: Mode = "coverage", offset: Offset = 0,
                              limit: Limit = NODE_PAGE_DEFAULT) -> LatestFindings:
        """Each node's standing verdict and coverage from the latest audits of a cluster, worst first (local: the
        history directory; deployed: the findings table)."""
        return await _off_loop(lambda: backend.latest(cluster, mode, offset, limit))

    @server.tool(title="Node history", annotations=READS_STORED)
    async def node_history(cluster: ClusterName, node: InstanceId,
                           days: Annotated[int, Field(ge=1, le=3650, description="Look-back in days")] = 30,
                           offset: Offset = 0, limit: Limit = NODE_PAGE_DEFAULT) -> NodeHistory:
        """One node's timeline across audits: verdicts, hardware-class Xids by PCI bus, reboots, coverage."""
        return await _off_loop(lambda: backend.history(cluster, node, days, offset, limit))

    @server.tool(title="Explain a report word", annotations=READS_STORED)
    async def explain(term: Annotated[str, Field(min_length=1, max_length=100, description=(
            "A verdict (REPLACE, NOT_OBSERVABLE…), coverage status (Measured), label (Proven, Hypothesis (to "
            "validate)), confidence (High), branch letter (A-F), `RULES §7`, a section (Pre-flight) or an Xid code "
            "(79, Xid 48)"))]) -> Explanation:
        """What a word of a gpuaudit report promises and on what evidence (the glossary, docs/VERDICTS.md)."""
        entries = glossary.explain(term)
        if not entries:
            raise ToolError(f"{term!r} is not in the glossary; known terms: {', '.join(glossary.terms())}, a section "
                            "heading, or an Xid code")
        return _outward(Explanation(term=term, source="docs/VERDICTS.md (shipped as gpuaudit/data/VERDICTS.md)",
                           entries=[GlossaryEntry(term=e.term, section=e.section, meaning=e.meaning) for e in entries]))

    return server


def _request(fields: dict[str, Any]) -> AuditRequest:
    try:
        return AuditInput.model_validate(fields).request()
    except BadToolInput as exc:
        raise ToolError(str(exc)) from None
