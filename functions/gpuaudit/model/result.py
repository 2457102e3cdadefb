"""The audit result: field names are the contract of OUTPUT-CONTRACT.md."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    WithJsonSchema,
    field_serializer,
)

from gpuaudit.model.gcpause import collection_paused
from gpuaudit.model.redaction import redact_tree
from gpuaudit.model.timeutil import UtcDatetime, iso

SCHEMA = "gpu-audit-result/1"

XidStatus = Literal["Measured", "Not observable", "No HMA detections"]
Verdict = Literal["REPLACE", "REBOOT", "LEAVE ALONE", "MONITOR", "NOT OBSERVABLE"]
VERDICTS: tuple[Verdict, ...] = ("REPLACE", "NOT OBSERVABLE", "REBOOT", "MONITOR", "LEAVE ALONE")
XidClass = Literal["application", "hardware", "sympathetic", "informational", "driver-config", "unverified"]
BranchLetter = Literal["A", "B", "C", "D", "E", "F"]
BranchStatus = Literal["Root cause", "Contributing", "Ruled out", "Not assessed", "UNVERIFIED"]
CauseLabel = Literal["Proven", "Hypothesis (to validate)"]
Readiness = Literal["Yes", "Yes with risks", "No"]
CheckResult = Literal["PASS", "RISK", "FAIL", "UNVERIFIED", "Needs input", "Not checked"]


# One verdict, two spellings (issue #49 item 4): the display word the reports print (`NOT OBSERVABLE`) and its
# machine form, an identifier (`NOT_OBSERVABLE`), which records and events carry beside it as `verdict_code` for a
# rule or a filter to match. Every input takes either, in any case, `-` for `_` too (`parse_verdict`).
def verdict_code(verdict: str | None) -> str | None:
    """`NOT OBSERVABLE` → `NOT_OBSERVABLE`; None stays None (no verdict)."""
    return verdict.replace(" ", "_") if verdict else None


def parse_verdict(word: str) -> Verdict | None:
    """The verdict a word names in any spelling (`not_observable`, `Not-Observable`, `NOT OBSERVABLE`), else None."""
    spoken = " ".join(re.split(r"[_\-\s]+", word.strip())).upper()
    return next((v for v in VERDICTS if v == spoken), None)


def any_verdict_spelling(value: object) -> object:
    """A pydantic before-validator: a verdict in any spelling becomes its display word; anything else is left for
    the field's own type to refuse."""
    return (parse_verdict(value) or value) if isinstance(value, str) else value


# The spellings an input schema lists (display word and code); lower case is taken too.
VERDICT_SPELLINGS: tuple[str, ...] = tuple(dict.fromkeys(w for v in VERDICTS for w in (v, v.replace(" ", "_"))))
# A verdict as an input field takes: any spelling, the display word kept.
VerdictInput = Annotated[Verdict, BeforeValidator(any_verdict_spelling), WithJsonSchema(
    {"type": "string", "enum": list(VERDICT_SPELLINGS),
     "description": "A verdict; NOT_OBSERVABLE and NOT OBSERVABLE (LEAVE_ALONE, LEAVE ALONE) are the same, any case"})]


# The one order of check results, worst first: how parts combine into one check, and how reports list checks.
CHECK_SEVERITY: tuple[CheckResult, ...] = ("FAIL", "RISK", "Needs input", "Not checked", "UNVERIFIED", "PASS")
# The one name of each root-cause branch (RULES §8), for headlines and reports.
BRANCH_NAMES: dict[BranchLetter, str] = {
    "A": "GPU/node hardware", "B": "capacity lifecycle", "C": "storage (FSx for Lustre)", "D": "GPU communication",
    "E": "cluster change", "F": "application"}


def check_rank(result: CheckResult) -> int:
    """Position of a check result in CHECK_SEVERITY, worst first."""
    return CHECK_SEVERITY.index(result)


def readiness_reasons(results: Iterable[tuple[str, CheckResult]]) -> str:
    """The checks that make the readiness answer, `FAIL P1, P6; RISK P3` (RULES §10: FAILs lead, then RISKs); with
    neither, the checks short of PASS that make it `Yes with risks` (`UNVERIFIED P5`)."""
    by_result: dict[CheckResult, list[str]] = {}
    for cid, result in results:
        by_result.setdefault(result, []).append(cid)
    leading: tuple[CheckResult, ...] = ("FAIL", "RISK")
    kinds = [k for k in leading if k in by_result] or [k for k in CHECK_SEVERITY if k in by_result and k != "PASS"]
    return "; ".join(f"{k} {', '.join(by_result[k])}" for k in kinds)
Signal = Literal["Observable", "Not observable", "Not applicable"]


class Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    @field_serializer("*", when_used="json")
    def _times(self, value: object) -> object:
        return iso(value) if isinstance(value, datetime) else value


class ClusterRef(Out):
    name: str
    kind: str
    region: str
    arn: str | None = None


class WindowOut(Out):
    start: UtcDatetime
    end: UtcDatetime
    source: str
    padded_start: UtcDatetime | None = None
    padded_end: UtcDatetime | None = None
    # What "before the failure" was measured from (RULES §0.5): the stated onset or the first failure signal read;
    # None when neither exists (the window's start is never the onset).
    onset: UtcDatetime | None = None
    onset_source: str | None = None
    # No onset, and a source of one that could not be read (a job log's throughput lines): why "not known" is not
    # "no failure signal" there.
    onset_unread: str | None = None


class CoverageRow(Out):
    log_group: str
    log_stream: str | None
    kernel_lines_ever: int | None = None
    live_hours: int = 0
    empty_hours: list[UtcDatetime] = Field(default_factory=list)
    # False when whether every expected hour held a line was not determined (no stream, or its per-hour detail not
    # read): `empty_hours` is then not "none", and no output calls the row live (RULES §4).
    liveness_read: bool = True
    first_event: UtcDatetime | None = None
    last_event: UtcDatetime | None = None
    status: XidStatus
    source_kind: Literal["kernel", "hma"] = "kernel"
    note: str | None = None


class GpuError(Out):
    time: UtcDatetime
    code: int | None
    pci: str | None = None
    gpu_instance: int | None = None  # MIG: the GPU instance the driver attributes the Xid to (`GPU-I:05`)
    compute_instance: int | None = None  # MIG: its compute instance (`GPU-CI:02`)
    class_: XidClass = Field(validation_alias="class", serialization_alias="class")
    log_group: str
    log_stream: str
    message: str
    count: int = 1
    last_time: UtcDatetime | None = None
    # The node's reboots between the first and the last occurrence (RULES §6/§7: a hardware-class Xid recurring on the
    # same bus across a reboot is REPLACE), so the row shows the recurrence its verdict rests on.
    reboots_between: list[UtcDatetime] = Field(default_factory=list)
    meaning: str | None = None
    source: Literal["kernel", "hma", "history"] = "kernel"  # history: seen by an earlier audit (fleet memory)
    hma_reason: str | None = None


class NcclTransport(Out):
    """One transport a node's NCCL used (RULES §8 D layer 1), by the marker that says so: the first line verbatim
    with its log group and stream, how many lines said it, and whether it is what the node's hardware calls for."""

    transport: Literal["EFA/OFI", "IB", "Socket", "NVLS", "P2P", "SHM"]
    marker: str
    assessment: Literal["good", "bad", "expected", "unverified"]
    why: str
    time: UtcDatetime
    log_group: str
    log_stream: str
    message: str
    count: int = 1


class NodeSignals(Out):
    nccl: Signal = "Not observable"
    fabric_manager: Signal = "Not applicable"
    efa_counters: Signal = "Not observable"
    # What the EFA counters said (RULES §8 D layer 3): a rise and when, none, or why they were not read.
    efa_counters_detail: str | None = None
    gpu_activity: Signal = "Not observable"


AskedVerdict = Literal["REPLACE", "REBOOT", "NOT OBSERVABLE"]
ASKED_VERDICTS: dict[str, AskedVerdict] = {"REPLACE": "REPLACE", "REBOOT": "REBOOT", "NOT OBSERVABLE": "NOT OBSERVABLE"}


class AskedAction(Out):
    """An action a verdict asked for (RULES §7: replace, reboot, collect the kernel log) as fleet memory reads it once
    this audit is recorded (rules/history.py `actions_of`): still `open`, or shown done by this audit — `rebooted`,
    `replaced`, `relaunched`, coverage `measured` again, `closed` (the cluster gone) — or `superseded` by a REPLACE."""

    verdict: AskedVerdict
    given_at: UtcDatetime  # the audit that first gave it
    given_in: str  # that audit's id
    signal: UtcDatetime | None = None  # the latest hardware signal it rests on
    status: Literal["open", "rebooted", "replaced", "relaunched", "measured", "closed", "superseded"]
    done: str | None = None  # what this audit saw done, with its source


class NodeResult(Out):
    instance_id: str
    instance_group: str | None = None
    instance_type: str | None = None
    status: str
    role: str = "compute"
    discovered_by: str = "api"
    gpu_count: int | None = None
    verdict: Verdict | None = None
    verdict_evidence: str | None = None
    # The Xid code the verdict rests on (RULES §6 routing: the candidate cause), None when no Xid decided it (a memory
    # signal, the service's own word, a coverage gap): outputs list the node's Xids with this one first.
    deciding_xid: int | None = None
    xid_status: XidStatus
    coverage: list[CoverageRow] = Field(default_factory=list)
    gpu_errors: list[GpuError] = Field(default_factory=list)
    signals: NodeSignals = Field(default_factory=NodeSignals)
    nccl_transports: list[NcclTransport] = Field(default_factory=list)  # RULES §8 D layer 1, bad first
    efa: str | None = None  # "<attached> of <max>" or "Not observable (...)"
    nvswitch: str | None = None
    service_action: str | None = None
    kubernetes: str | None = None  # EKS: the node's health labels, taints and conditions, as the API returns them
    # What earlier audits saw of the node (fleet memory, issue #18): verdicts, hardware signals, reboots, and a
    # recurrence, an escalated REPLACE or flapping; "Not checked: …" when the history could not be read.
    history: str | None = None
    # The actions earlier audits or this one asked of the node that are still open, and those this audit showed
    # done (what_changed.compare: an open one is never announced recovered). None: no history read, so not known.
    actions_asked: list[AskedAction] | None = None


class Branch(Out):
    branch: BranchLetter
    status: BranchStatus
    label: CauseLabel | None = None
    evidence: str
    confirming_measurement: str | None = None


class Check(Out):
    id: str
    title: str
    result: CheckResult
    evidence: str
    action: str | None = None


FindingStepStatus = Literal["Blocked", "Cleared", "Measured", "Not observable", "Not checked", "Not applicable"]


class FindingStep(Out):
    """One thing an incident finding checked, in the order it checked it, with the evidence it read."""

    name: str
    status: FindingStepStatus
    evidence: str


class Finding(Out):
    """An incident question answered beside the branches (why no replacement, idle reserved GPUs, a hang with idle
    GPUs): the answer, its label, and every step checked — the one that decided it and the ones cleared or not
    checked."""

    id: str
    question: str
    answer: str
    label: CauseLabel | None = None
    steps: list[FindingStep] = Field(default_factory=list)
    action: str | None = None


# Where a grouped command's IDs file stands in its text until the audit's outputs are written: report/ids.py puts
# the real path (or S3 URI) there, beside the report, when it writes the file.
IDS_AT = "<report>"


class ActionGroup(Out):
    """One operator action for every node it applies to (RULES §11: identical actions on many nodes are one action
    with the list of nodes). `action` names every node (it is also in `actions`); `ids_file`, when a command reads
    the IDs from a file, is that file's name beside the report (`<report stem>.<ids_file>`); `ids_at` is where it
    was written (a path or an S3 URI), None until an output wrote it."""

    verdict: Verdict
    nodes: list[str]
    action: str
    ids_file: str | None = None
    ids_at: str | None = None


class GapNodes(Out):
    """Every node a visibility gap is about: its text may count them ("1,980 of 2,000 NVSwitch nodes") so the
    report stays readable, and each node stays findable here."""

    gap: str
    nodes: list[str]


class TimelineEntry(Out):
    time: UtcDatetime
    source: str
    resource: str
    event: str
    # What the event is without the node's own words (`first Xid 31`), when it has any: past 100 nodes the reports
    # show events of one kind on many nodes as one row (RULES §11); `event` keeps each line.
    kind: str | None = None


class Call(Out):
    service: str
    operation: str
    count: int


class Result(Out):
    schema_: str = Field(default=SCHEMA, alias="schema")
    audit_id: str
    mode: str
    cluster: ClusterRef
    window: WindowOut
    generated_at: UtcDatetime
    headline: str
    confidence: Literal["High", "Medium", "Low"]
    confidence_basis: str = ""  # RULES §11: the confidence with its basis, in words
    nodes: list[NodeResult] = Field(default_factory=list)
    branches: list[Branch] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)  # incident mode: questions answered beside the branches
    ready: Readiness | None = None
    planned_run: str | None = None  # preflight: "<hours> h from <start>" or the defaults evaluated
    timeline: list[TimelineEntry] = Field(default_factory=list)
    resources: list[str] = Field(default_factory=list)
    cluster_state: list[str] = Field(default_factory=list)
    # The nodes this audit alone judged, of a cluster with more (an Xid watch audit narrowed to the nodes its lines
    # name, issue #51); None: every node of the cluster. The nodes not judged are neither gone nor recovered.
    narrowed_to: list[str] | None = None
    config_overrides: list[str] = Field(default_factory=list)
    visibility_gaps: list[str] = Field(default_factory=list)
    gap_nodes: list[GapNodes] = Field(default_factory=list)  # every node of a gap that names nodes
    actions: list[str] = Field(default_factory=list)
    action_groups: list[ActionGroup] = Field(default_factory=list)  # the node actions of `actions`, grouped
    calls: list[Call] = Field(default_factory=list)
    self_check: str = ""
    invariants_broken: list[str] = Field(default_factory=list)  # named invariants this result breaks: a bug
    report_markdown: str = ""

    # Account IDs seen by this audit, kept only to redact them from alerts and logs; never serialised.
    _account_ids: frozenset[str] = PrivateAttr(default_factory=frozenset)

    def with_account_ids(self, ids: frozenset[str]) -> Result:
        copy = self.model_copy()
        copy._account_ids = ids
        return copy

    @property
    def account_ids(self) -> frozenset[str]:
        return self._account_ids

    def to_json(self) -> str:
        """The result document as every consumer reads it: account IDs redacted in every field but
        `cluster.arn` (OUTPUT-CONTRACT privacy)."""
        # ensure_ascii: DEL and C1 controls (e.g. U+009B, a terminal's CSI) are \u-escaped like the C0 ones
        with collection_paused():  # the document's objects all live until it is written (model/gcpause.py)
            return json.dumps(redact_tree(self.model_dump(mode="json", by_alias=True), account_ids=self._account_ids),
                              indent=2, ensure_ascii=True)
