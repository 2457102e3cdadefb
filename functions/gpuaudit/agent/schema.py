"""The MCP tools' typed inputs and outputs (pydantic: the SDK publishes their JSON schemas), and how a Result is
cut down to them.

Bounded by construction: an audit answers with its summary and the worst nodes (at most NODE_PAGE_MAX), never the
result document; node lists, latest findings and history come in pages (`offset`, `limit`, `next_offset`); every
free text is cut to TEXT_MAX characters. Account text is as the Result's JSON has it: account IDs redacted
(model/redaction.py), control characters escaped (report/escape.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema
from pydantic_core import ErrorDetails

from gpuaudit.domain.window import is_duration
from gpuaudit.model.evidence import (
    TIME_TEXT_MAX,
    AuditRequest,
    CheckpointMinutes,
    ClusterText,
    EksClusterName,
    FileSystemId,
    InstanceId,
    LogGroupName,
    Mode,
    RunHours,
)
from gpuaudit.model.history import HistoryRead, latest_spans
from gpuaudit.model.redaction import redact
from gpuaudit.model.result import (
    BRANCH_NAMES,
    VERDICT_SPELLINGS,
    NodeResult,
    Result,
    Verdict,
    any_verdict_spelling,
)
from gpuaudit.model.text import echoed
from gpuaudit.model.timeutil import iso, parse_time
from gpuaudit.report.escape import one_line
from gpuaudit.report.order import (
    COVERAGE_WORDS,
    coverage_matches,
    coverage_status,
    verdict_counts,
    verdict_rank,
    worst_first,
    xid_codes,
)
from gpuaudit.report.records import reason_code

NODE_PAGE_DEFAULT, NODE_PAGE_MAX = 20, 200
LIST_MAX = 20  # gaps, next steps, branches or checks in one summary (the rest: counted, in the full result)
TEXT_MAX = 400
AUDIT_ID_PATTERN = r"^[0-9a-f]{24}$"
# audit_id optional (issue #49 item 8): none given, the cluster's latest stored audit (list_audits' first row)
LatestOrAuditId = Annotated[str | None, Field(pattern=AUDIT_ID_PATTERN, description=(
    "The audit's ID, as run_audit or list_audits returned it; omitted: the cluster's latest stored audit"))]
# what AuditRequest accepts as a cluster, and no slash: it names the folder (or key prefix) results are kept under
ClusterName = Annotated[ClusterText, Field(pattern=r"^[^/\\]+$",
                                           description="The cluster name (or fleet label) the audit used")]
TimeText = Annotated[str, Field(min_length=1, max_length=TIME_TEXT_MAX)]
Offset = Annotated[int, Field(ge=0, le=1_000_000, description="Index of the first item to return")]
Limit = Annotated[int, Field(ge=1, le=NODE_PAGE_MAX, description=f"Items per page (at most {NODE_PAGE_MAX})")]


class ToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Every field takes what AuditRequest takes (the CLI's and the Step Functions input's validator): the same types,
# lengths and bounds, so no entry point accepts what another refuses.

class AuditInput(ToolInput):
    """What to audit: the CLI's scope, mode, window and preflight flags."""

    cluster: ClusterText | None = Field(default=None, description="HyperPod or ParallelCluster name; optional with "
                                "instance_ids, file_system_ids or eks_cluster (the result is then a labelled fleet)")
    mode: Mode = Field(default="coverage", description="coverage | incident | preflight")
    instance_ids: list[InstanceId] = Field(default_factory=list, max_length=500,
                                           description="Self-managed EC2/EKS nodes, i-…")
    eks_cluster: EksClusterName | None = Field(
        default=None, description="Self-managed EKS: audit this EKS cluster's nodes"
    )
    file_system_ids: list[FileSystemId] = Field(default_factory=list, max_length=50,
                                                description="FSx for Lustre file systems, fs-…")
    log_groups: list[LogGroupName] = Field(default_factory=list, max_length=50,
                                           description="Extra CloudWatch Logs groups to search (exact names)")
    since: TimeText | None = Field(default=None, description="Window start, ISO-8601 UTC, or a length back from now "
                                                        "(30m, 2h, 2d)")
    until: TimeText | None = Field(default=None, description="Window end, ISO-8601 UTC")
    last: TimeText | None = Field(default=None, description="A length ending now: 30m, 2h, 24h, 7d")
    onset: TimeText | None = Field(default=None, description="Incident: when the failure began, ISO-8601 UTC")
    run_hours: RunHours | None = Field(default=None, description="Preflight: planned run length in hours")
    run_start: TimeText | None = Field(default=None, description="Preflight: planned start, ISO-8601 UTC")
    checkpoint_minutes: CheckpointMinutes | None = Field(default=None, description="Preflight: checkpoint interval")

    def request(self) -> AuditRequest:
        """The AuditRequest, or BadToolInput with the CLI's wording (the tool's field names for its flags)."""
        if not self.cluster and not self.instance_ids and not self.file_system_ids and not self.eks_cluster:
            raise BadToolInput("cluster is required unless instance_ids, file_system_ids or eks_cluster is given "
                               "(then the result's cluster is a labelled fleet, or the EKS cluster)")
        relative = self.since is not None and is_duration(self.since)
        if relative and self.until is not None:
            raise BadToolInput("since 2h counts back from now and cannot take until; give since and until as "
                               "ISO-8601 times, or last alone")
        if relative and self.last is not None:
            raise BadToolInput("since and last both set a length ending now; give one")
        try:
            return AuditRequest(
                cluster=self.cluster or "", mode=self.mode, since=None if relative else _time(self.since, "since"),
                until=_time(self.until, "until"), last=self.since if relative else self.last,
                instance_ids=list(dict.fromkeys(self.instance_ids)), log_groups=list(dict.fromkeys(self.log_groups)),
                file_system_ids=list(dict.fromkeys(self.file_system_ids)), eks_cluster=self.eks_cluster,
                run_hours=self.run_hours, run_start=_time(self.run_start, "run_start"),
                checkpoint_minutes=self.checkpoint_minutes, onset=_time(self.onset, "onset"))
        except ValidationError as exc:
            raise BadToolInput(validation_message(exc)) from None


class ToolProblem(Exception):
    """A failure the user can act on, with the product's message (the CLI's exit-2 or exit-3 text): the tool's
    error, never a traceback."""


class BadToolInput(ToolProblem, ValueError):
    """Input the product refuses, with the message the CLI would print (exit 2)."""


def _time(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    if len(value) > TIME_TEXT_MAX:
        raise BadToolInput(f"{field}: not an ISO-8601 time: {echoed(value)} is {len(value):,} characters long")
    try:
        parsed = parse_time(value)
    except (ValueError, OverflowError):
        raise BadToolInput(f"{field}: not an ISO-8601 time: {echoed(value)} (e.g. 2026-09-27T10:00:00Z)") from None
    if not 1970 <= parsed.year <= 2100:
        raise BadToolInput(f"{field}: {value!r} is outside the years 1970-2100")
    return parsed


def validation_message(exc: ValidationError) -> str:
    """Every refused argument in one sentence an agent can act on: `bad input: limit: ... (got 500); verdicts[0]:
    one of 'REPLACE', ... or 'none' (got 'nope')`. A union's alternatives (pydantic reports one error per member,
    located by a tag like `literal['none']`) are one clause listing what each would take."""
    clauses: dict[str, list[ErrorDetails]] = {}
    for error in exc.errors():
        clauses.setdefault(_argument(error["loc"]), []).append(error)
    return "bad input: " + "; ".join(f"{where}: {_said(errors)} (got {echoed(errors[0].get('input'))})"
                                     for where, errors in clauses.items())


def _argument(loc: tuple[int | str, ...]) -> str:
    """`verdicts.0.literal['none']` -> `verdicts[0]`: the argument and item, without pydantic's union-member tags."""
    where = ""
    for part in loc:
        if isinstance(part, int):
            where += f"[{part}]"
        elif not where or not any(c in part for c in "[-("):
            where += f".{part}" if where else part
    return where or "input"


def _said(errors: list[ErrorDetails]) -> str:
    literals = [str(e.get("ctx", {}).get("expected")) for e in errors if e["type"] == "literal_error"]
    if literals and len(literals) == len(errors) and len(errors) > 1:
        return "Input should be " + " or ".join(literals)
    return " or ".join(dict.fromkeys(str(e["msg"]).removeprefix("Value error, ") for e in errors))


class VerdictCount(BaseModel):
    verdict: str
    nodes: int


class NodeRow(BaseModel):
    instance_id: str
    verdict: str | None = Field(description="REPLACE, NOT OBSERVABLE, REBOOT, MONITOR, LEAVE ALONE; null: no GPU "
                                            "signal in the window")
    reason_code: str
    reason: str | None = Field(description="The evidence sentence (cut to 400 characters)")
    xid_codes: list[int] = Field(description="The node's Xid codes, the one its verdict rests on first")
    coverage: str = Field(description="Xid status: Measured, Not observable, No HMA detections")
    instance_group: str | None
    instance_type: str | None
    status: str


class BranchRow(BaseModel):
    branch: str
    name: str
    status: str
    label: str | None
    evidence: str
    confirming_measurement: str | None


class CheckRow(BaseModel):
    id: str
    title: str
    result: str
    evidence: str
    action: str | None


class AuditSummary(BaseModel):
    """One audit, summarised; the whole result is at `result_location`."""

    audit_id: str
    cluster: str
    region: str
    mode: str
    window_start: datetime
    window_end: datetime
    headline: str
    confidence: str
    ready: str | None = Field(description="Preflight: Yes, Yes with risks, No")
    verdict_counts: list[VerdictCount] = Field(description="Nodes per verdict, worst first")
    nodes_total: int
    worst_nodes: list[NodeRow] = Field(description="The first nodes, worst first; page on with audit_nodes")
    next_node_offset: int | None = Field(description="Offset of the next node page (audit_nodes); null: none left")
    branches: list[BranchRow] = Field(description="Incident: root-cause branches A-F")
    checks: list[CheckRow] = Field(description="Preflight: checks P1-P16, worst first")
    gaps: list[str] = Field(description="Visibility gaps: what could not be read")
    gaps_total: int
    next_steps: list[str]
    next_steps_total: int
    result_location: str = Field(description="Where the full result JSON is (a file or an s3:// URI)")
    report_location: str | None = Field(description="The Markdown or HTML report, when written")


class NodePage(BaseModel):
    audit_id: str
    cluster: str
    total: int = Field(description="Nodes matching the filter")
    offset: int
    nodes: list[NodeRow]
    next_offset: int | None


class AuditRow(BaseModel):
    audit_id: str
    stored_at: datetime = Field(description="When its result was written (the latest first)")
    result_location: str


class AuditList(BaseModel):
    cluster: str
    source: str = Field(description="Where results are kept: the results directory or bucket")
    total: int
    offset: int
    audits: list[AuditRow] = Field(description="Stored audits of the cluster, the latest first")
    next_offset: int | None


class ClusterRow(BaseModel):
    name: str
    kind: str = Field(description="hyperpod | parallelcluster | configured")


class ClusterList(BaseModel):
    region: str
    clusters: list[ClusterRow]
    gaps: list[str] = Field(description="Sources that could not be listed (the list may be incomplete)")
    note: str


class LatestRow(BaseModel):
    instance_id: str
    verdict: str | None
    coverage: str
    audit_id: str
    as_of: str = Field(description="End of the audit window that recorded this state (ISO-8601)")
    closed: str | None = Field(description="Why the standing verdict no longer applies (node gone, cluster gone)")


class LatestFindings(BaseModel):
    cluster: str
    mode: str
    source: str = Field(description="The store read: a local history file or the findings table")
    total: int
    offset: int
    nodes: list[LatestRow]
    next_offset: int | None


class XidSeen(BaseModel):
    code: int | None
    signal: str
    pci: str | None
    first: datetime
    last: datetime


class HistorySpanRow(BaseModel):
    audit_time: datetime
    through: datetime
    audits: int
    mode: str
    verdict: str | None
    coverage: str
    xids: list[XidSeen]
    reboots: list[datetime]
    closed: str | None


class NodeHistory(BaseModel):
    cluster: str
    instance_id: str
    source: str
    since: datetime
    until: datetime
    total: int
    offset: int
    spans: list[HistorySpanRow] = Field(description="Spans of audits with the same state, oldest first")
    next_offset: int | None


class GlossaryEntry(BaseModel):
    term: str
    section: str
    meaning: str


class Explanation(BaseModel):
    term: str
    entries: list[GlossaryEntry]
    source: str


class AuditStarted(BaseModel):
    """Deployed: the on-demand execution started; its findings appear in latest_findings when it ends."""

    execution_arn: str
    started_at: datetime
    request: dict[str, Any]
    note: str


def cut(text: str | None, limit: int = TEXT_MAX) -> str | None:
    if text is None:
        return None
    text = one_line(text)
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def node_row(node: NodeResult, accounts: frozenset[str]) -> NodeRow:
    return NodeRow(instance_id=node.instance_id, verdict=node.verdict, reason_code=reason_code(node),
                   reason=cut(redact(node.verdict_evidence, accounts)) if node.verdict_evidence else None,
                   xid_codes=xid_codes(node),  # the Xid the verdict rests on first
                   coverage=node.xid_status, instance_group=node.instance_group, instance_type=node.instance_type,
                   status=node.status)


def _texts(items: Sequence[str], accounts: frozenset[str]) -> list[str]:
    return [cut(redact(i, accounts)) or "" for i in items[:LIST_MAX]]


def summarise(result: Result, result_location: str, report_location: str | None,
              limit: int = NODE_PAGE_DEFAULT) -> AuditSummary:
    accounts = result.account_ids
    page = node_page(result, 0, limit)
    return AuditSummary(
        audit_id=result.audit_id, cluster=result.cluster.name, region=result.cluster.region, mode=result.mode,
        window_start=result.window.start, window_end=result.window.end,
        headline=cut(redact(result.headline, accounts), 1_000) or "", confidence=result.confidence, ready=result.ready,
        verdict_counts=[VerdictCount(verdict=v, nodes=c) for v, c in verdict_counts(result.nodes)],
        nodes_total=len(result.nodes), worst_nodes=page.nodes, next_node_offset=page.next_offset,
        branches=[BranchRow(branch=b.branch, name=BRANCH_NAMES[b.branch], status=b.status, label=b.label,
                            evidence=cut(redact(b.evidence, accounts)) or "",
                            confirming_measurement=cut(redact(b.confirming_measurement or "", accounts)) or None)
                  for b in result.branches[:LIST_MAX]],
        checks=[CheckRow(id=c.id, title=c.title, result=c.result, evidence=cut(redact(c.evidence, accounts)) or "",
                         action=cut(redact(c.action, accounts)) if c.action else None)
                for c in result.checks[:LIST_MAX]],
        gaps=_texts(result.visibility_gaps, accounts), gaps_total=len(result.visibility_gaps),
        next_steps=_texts(result.actions, accounts), next_steps_total=len(result.actions),
        result_location=result_location, report_location=report_location)


# A verdict in any spelling (NOT_OBSERVABLE, NOT OBSERVABLE, not_observable: model.result.parse_verdict), or `none`
VerdictFilter = Annotated[Verdict | Literal["none"], BeforeValidator(any_verdict_spelling), WithJsonSchema(
    {"type": "string", "enum": [*VERDICT_SPELLINGS, "none"],
     "description": "A verdict (NOT_OBSERVABLE and NOT OBSERVABLE are the same, any case); `none`: no verdict"})]


def _coverage_word(value: Any) -> Any:
    """A coverage status in any spelling (report/order.py coverage_status, as the CLI's --coverage reads it)."""
    if not isinstance(value, str):
        return value
    status = coverage_status(value)
    if status is None:
        raise ValueError(f"{value[:80]!r} is not a coverage status; use {', '.join(COVERAGE_WORDS)}")
    return status


CoverageFilter = Annotated[str, BeforeValidator(_coverage_word), WithJsonSchema(
    {"type": "string", "description": f"A GPU-evidence status: {', '.join(COVERAGE_WORDS)} (any case, `_`, `-` or a "
     "space between words); GAP: any coverage gap (an empty hour, or not observable)"})]


def node_page(result: Result, offset: int, limit: int, verdicts: Sequence[VerdictFilter] = (),
              coverage: Sequence[str] = ()) -> NodePage:
    """Nodes worst first (the reports' order), optionally only these verdicts (`none`: no verdict) and only these
    coverage statuses (`gap`: any coverage gap): the CLI's --verdict and --coverage."""
    wanted, statuses = set(verdicts), set(coverage)
    nodes = [n for n in worst_first(result.nodes)
             if (not wanted or (n.verdict or "none") in wanted) and coverage_matches(n, statuses)]
    shown = nodes[offset:offset + limit]
    return NodePage(audit_id=result.audit_id, cluster=result.cluster.name, total=len(nodes), offset=offset,
                    nodes=[node_row(n, result.account_ids) for n in shown],
                    next_offset=offset + limit if offset + limit < len(nodes) else None)


def page_of(total: int, offset: int, limit: int) -> tuple[slice, int | None]:
    return slice(offset, offset + limit), offset + limit if offset + limit < total else None


def history_page(read: HistoryRead, cluster: str, instance_id: str, offset: int, limit: int) -> NodeHistory:
    spans = sorted(read.spans, key=lambda s: (s.audit_time, s.through))
    window, following = page_of(len(spans), offset, limit)
    return NodeHistory(
        cluster=cluster, instance_id=instance_id, source=read.store, since=read.since, until=read.until,
        total=len(spans), offset=offset, next_offset=following,
        spans=[HistorySpanRow(audit_time=s.audit_time, through=s.through, audits=s.audits, mode=s.mode,
                              verdict=s.verdict, coverage=s.xid_status, reboots=s.reboots[:LIST_MAX], closed=s.closed,
                              xids=[XidSeen(code=x.code, signal=cut(x.signal, 80) or "", pci=x.pci, first=x.first,
                                            last=x.last) for x in s.xids[:LIST_MAX]])
               for s in spans[window]])


def latest_from_history(read: HistoryRead, cluster: str, mode: str, offset: int, limit: int) -> LatestFindings:
    """Each node's latest span of this mode in a local history: its standing verdict, worst first."""
    latest = latest_spans(read.model_copy(update={"spans": [s for s in read.spans if s.mode == mode]}))
    rows = [LatestRow(instance_id=s.instance_id, verdict=s.verdict, coverage=s.xid_status, audit_id=s.last_audit_id,
                      as_of=iso(s.through), closed=s.closed) for s in latest.values()]
    return latest_page(rows, cluster, mode, read.store, offset, limit)


def latest_page(rows: Sequence[LatestRow], cluster: str, mode: str, source: str, offset: int,
                limit: int) -> LatestFindings:
    ordered = sorted(rows, key=lambda r: (r.closed is not None, verdict_rank(r.verdict), r.instance_id))
    window, following = page_of(len(ordered), offset, limit)
    return LatestFindings(cluster=cluster, mode=mode, source=source, total=len(ordered), offset=offset,
                          nodes=list(ordered[window]), next_offset=following)
