"""Fleet memory as evidence (issue #18, RULES §6/§7): what earlier audits saw of a node, judged like any source.

Pure: the spans arrive in `Evidence.history` (read by gpuaudit/writes/history.py), or a gap with scope "history" says
they could not be read. Three judgements:

* recurrence across audits — a hardware-class Xid on the same PCI bus (or infoROM corruption) seen by an earlier
  audit, a reboot after it, and again now → REPLACE, naming the earlier audit's id and time;
* a REPLACE given by an earlier audit and not acted on (the node still listed, not relaunched since) is
  escalated, said as such, never repeated as a new verdict;
* a node whose verdict keeps changing across audits is reported as flapping.

And one reading of the spans themselves, shared by every store and output (`actions_of`): a verdict that asks the
operator to do something (REPLACE, REBOOT, NOT OBSERVABLE's collection) stays *open* across audits — after its Xid
has left the window and later audits give no verdict — until a later audit shows it done: a reboot (a boot banner or
reboot call after the signal), a replacement or relaunch (`rules/acted.py` `already_done`, recorded per audit in
the span's `done`; a launch time after the signal), coverage Measured again, or the cluster gone.

With the history unreadable, recurrence is Not checked — a first occurrence is never stated as fact.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from gpuaudit.model.evidence import NAMED_BY_OPERATOR, Evidence, NodeInfo
from gpuaudit.model.history import (
    ASKS,
    ESCALATED,
    FLAPPING,
    Action,
    Closure,
    HistorySpan,
    HistoryXid,
    distinct,
    latest_spans,
    merged,
)
from gpuaudit.model.result import ASKED_VERDICTS, AskedAction, GpuError, Result
from gpuaudit.model.timeutil import iso
from gpuaudit.rules.acted import GONE, already_done, replacements
from gpuaudit.rules.signal_verdict import STRENGTH
from gpuaudit.rules.xid_catalog import FIRST_OCCURRENCE, classify
from gpuaudit.rules.xid_lines import bus_key
from gpuaudit.rules.xid_routing import NodeRouting, NodeXid

HistoryState = Literal["off", "unreadable", "read"]
FLAP_CHANGES = 3  # verdict changes across the look-back that make a node "flapping"
FLAP_SHOWN = 6
# Non-Xid memory signals whose persistence across a reboot is REPLACE (RULES §6/§7: infoROM corruption).
PERSISTING_SIGNALS = ("infoROM is corrupted",)
HISTORY_GROUP = "gpuaudit history"


def audit_id(evidence: Evidence, asked: Mapping[str, object] | None = None) -> str:
    """Deterministic: the same cluster, region, mode, window and inputs give the same id (idempotent sinks). The
    inputs that change what is judged (log groups and file systems the operator named, the stated onset, and
    `asked`: the planned run, Xid class overrides) are part of the key when given, so two audits of one window that
    differ in them never share an id (the second would overwrite the first's result); an audit given none of them
    keeps the id it always had."""
    parts = [evidence.cluster.name, evidence.cluster.region, evidence.mode, iso(evidence.window.start),
             iso(evidence.window.end)]
    inputs: dict[str, object] = {
        "log_groups": sorted(g.name for g in evidence.log_groups if NAMED_BY_OPERATOR in g.matched_patterns),
        "file_systems": sorted(evidence.named_file_systems),
        "onset": iso(evidence.window.onset) if evidence.window.onset else None,
        # an Xid watch audit narrowed to some nodes judges other nodes than the cluster's whole audit of the window
        "narrowed_to": evidence.node_scope.narrowed_to if evidence.node_scope else None, **(asked or {})}
    given = {k: v for k, v in sorted(inputs.items()) if v not in (None, [], {}, "")}
    if given:
        parts.append(json.dumps(given, sort_keys=True, default=str))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def state_of(evidence: Evidence) -> HistoryState:
    if evidence.history is not None:
        return "read"
    return "unreadable" if any(g.scope == "history" for g in evidence.gaps) else "off"


@dataclass(frozen=True)
class Memory:
    """One node's earlier audits as this audit sees them."""

    state: HistoryState
    spans: tuple[HistorySpan, ...] = ()
    since: datetime | None = None

    @classmethod
    def of(cls, evidence: Evidence, instance_id: str, this_audit: str) -> Memory:
        state = state_of(evidence)
        if evidence.history is None:
            return cls(state)
        return cls(state, tuple(evidence.history.of(instance_id, excluding_audit=this_audit)),
                   evidence.history.since)

    @property
    def audits(self) -> int:
        return sum(s.audits for s in self.spans)


@dataclass
class Remembered:
    routing: NodeRouting | None
    rows: list[GpuError] = field(default_factory=list)  # earlier audits' signals a verdict rests on
    note: str | None = None  # NodeResult.history


def _where(span: HistorySpan) -> str:
    return f"audit {span.audit_id} ({iso(span.audit_time)})"


def _recurrence(memory: Memory, xids: Sequence[NodeXid], signal_times: Mapping[str, list[datetime]],
                reboots: Sequence[datetime], overrides: Mapping[int, str] | None) -> NodeRouting | None:
    """The earliest current hardware-class Xid (or persisting signal) seen on the same bus by an earlier audit,
    with a reboot between the two. GSP faults (their own recurrence rule) and NVLink5 (same-link rule, the link
    is not kept) are left to the window's own routing."""
    every_reboot = sorted({*reboots, *(r for s in memory.spans for r in s.reboots)})
    for x in sorted(xids, key=lambda x: x.time):
        c = classify(x.code, x.text, overrides)
        if c.class_ != "hardware" or x.pci is None or c.qualifier_of is not None or c.rule in ("GSP", "NVLink5"):
            continue
        for span in memory.spans:
            for e in span.xids:
                if e.code != x.code or bus_key(e.pci) != bus_key(x.pci) or not e.first < x.time:
                    continue
                reboot = next((r for r in every_reboot if e.first < r < x.time), None)
                if reboot is None:
                    continue
                return NodeRouting(
                    verdict="REPLACE", hardware=True, cause_code=x.code, cause_class="hardware", pci=x.pci,
                    verdict_evidence=(f"Xid {x.code} ({c.meaning}, hardware class) on PCI {x.pci} at {iso(x.time)}; "
                                      f"also at {iso(e.first)} in earlier {_where(span)}, before the reboot at "
                                      f"{iso(reboot)}: a hardware-class Xid recurring on the same PCI bus across a "
                                      "reboot (RULES §7) → REPLACE"))
    for marker, times in signal_times.items():
        for span in memory.spans:
            earlier = [e for e in span.xids if e.signal == marker]
            for e in earlier:
                later = [t for t in times if t > e.first]
                reboot = next((r for r in every_reboot if later and e.first < r < later[0]), None)
                if reboot is not None:
                    return NodeRouting(
                        verdict="REPLACE", hardware=True,
                        verdict_evidence=(f"`{marker}` at {iso(later[0])}; also at {iso(e.first)} in earlier "
                                          f"{_where(span)}, before the reboot at {iso(reboot)}: persisting after a "
                                          "reboot (RULES §7) → REPLACE"))
    return None


def _present(node: NodeInfo) -> bool:
    return node.discovered_by == "api" and node.status.lower() not in GONE


def _unacted(memory: Memory, node: NodeInfo) -> HistorySpan | None:
    """The first REPLACE an earlier audit gave since the node's launch (a stop/start or replacement relaunches it)."""
    if not _present(node):
        return None
    given = [s for s in memory.spans if s.verdict == "REPLACE"
             and (node.launch_time is None or s.audit_time >= node.launch_time)]
    return min(given, key=lambda s: s.audit_time) if given else None


def _escalated(span: HistorySpan, node: NodeInfo, routing: NodeRouting | None) -> NodeRouting:
    launched = (f"launched {iso(node.launch_time)}, before that audit" if node.launch_time else
                "its launch time was not read, so a stop/start since cannot be ruled out")
    head = (f"REPLACE given at {iso(span.audit_time)} in audit {span.audit_id}, not acted on (node still listed, "
            f"status {node.status}; {launched}): {ESCALATED}")
    earlier = _signals_text(span.xids)
    now = (f"this audit: {routing.verdict_evidence}" if routing is not None and routing.verdict is not None
           else "this audit alone gives no verdict")
    basis = f"; that audit saw {earlier}" if earlier else ""
    first = next((x for x in span.xids if x.code is not None), None)
    keep_cause = routing is not None and routing.verdict == "REPLACE"
    return NodeRouting(verdict="REPLACE", hardware=True, verdict_evidence=f"{head}{basis}; {now}",
                       cause_code=routing.cause_code if keep_cause and routing else (first.code if first else None),
                       cause_class="hardware",
                       pci=routing.pci if keep_cause and routing else (first.pci if first else None))


def _signals_text(xids: Sequence[HistoryXid]) -> str:
    return ", ".join((f"Xid {x.code}" if x.code is not None else f"`{x.signal}`")
                     + (f" on PCI {x.pci}" if x.pci else "") + f" at {iso(x.first)}" for x in xids)


def history_rows(span: HistorySpan) -> list[GpuError]:
    """An escalated REPLACE rests on what that earlier audit saw: its rows, named as the history's."""
    said = f"recorded by audit {span.audit_id} (window to {iso(span.audit_time)}), which gave REPLACE"
    rows = [GpuError(time=x.first, last_time=x.last, code=x.code, pci=x.pci, class_="hardware", source="history",
                     log_group=HISTORY_GROUP, log_stream=f"audit {span.audit_id}",
                     message=(f"Xid {x.code}" if x.code is not None else f"`{x.signal}`")
                     + (f" on PCI {x.pci}" if x.pci else "") + f", {said}",
                     meaning="from an earlier audit (fleet memory): the REPLACE not acted on") for x in span.xids]
    return rows or [GpuError(time=span.audit_time, code=None, class_="hardware", source="history",
                             log_group=HISTORY_GROUP, log_stream=f"audit {span.audit_id}",
                             message=f"REPLACE {said}",
                             meaning="from an earlier audit (fleet memory): the REPLACE not acted on")]


def _flapping(memory: Memory, verdict: str | None) -> str | None:
    seq = [(s.verdict, s) for s in memory.spans]
    steps: list[tuple[str | None, HistorySpan | None]] = [*seq, (verdict, None)]
    changes = [i for i in range(1, len(steps)) if steps[i][0] != steps[i - 1][0]]
    if len(changes) < FLAP_CHANGES:
        return None
    shown = [steps[changes[0] - 1], *(steps[i] for i in changes)][-FLAP_SHOWN:]
    trail = " → ".join(f"{v or 'no verdict'} ({_where(s) if s else 'this audit'})" for v, s in shown)
    return (f"{FLAPPING} the verdict changed {len(changes)} times across {memory.audits + 1} audits since "
            f"{iso(memory.spans[0].audit_time)}: {trail}")


def _first_occurrence(routing: NodeRouting | None, memory: Memory) -> NodeRouting | None:
    """'First occurrence' only as far as was read: with the history unreadable, recurrence is Not checked."""
    if routing is None or FIRST_OCCURRENCE not in routing.verdict_evidence:
        return routing
    said = {"off": f"{FIRST_OCCURRENCE} in the logs read (no history of earlier audits kept)",
            "unreadable": f"{FIRST_OCCURRENCE} in this audit's logs; recurrence across earlier audits Not checked "
                          "(the history could not be read: see visibility gaps)",
            "read": f"{FIRST_OCCURRENCE} (no recurrence across a reboot in {memory.audits} earlier audit(s) since "
                    f"{iso(memory.since) if memory.since else '—'})"}[memory.state]
    return routing.model_copy(update={"verdict_evidence": routing.verdict_evidence.replace(FIRST_OCCURRENCE, said)})


def _note(memory: Memory, accelerated: bool, said: list[str]) -> str | None:
    if memory.state == "off":
        return None
    if memory.state == "unreadable":
        return ("Not checked: earlier audits could not be read (see visibility gaps)" if accelerated else None)
    if not memory.spans:
        return f"no earlier audit of this node since {iso(memory.since) if memory.since else '—'}"
    verdicts: dict[str, int] = {}
    for s in memory.spans:
        verdicts[s.verdict or "no verdict"] = verdicts.get(s.verdict or "no verdict", 0) + s.audits
    xids = [x for s in memory.spans for x in s.xids]
    reboots = sorted({r for s in memory.spans for r in s.reboots})
    parts = [f"{memory.audits} earlier audit(s) from {iso(memory.spans[0].audit_time)} to "
             f"{iso(max(s.through for s in memory.spans))}: "
             + ", ".join(f"{v} ×{n}" for v, n in sorted(verdicts.items()))]
    if xids:
        earlier = f" (+{len(xids) - 5} earlier)" if len(xids) > 5 else ""
        parts.append("hardware signals " + _signals_text(xids[-5:]) + earlier)
    if reboots:
        parts.append(f"{len(reboots)} reboot(s) seen, last at {iso(reboots[-1])}")
    return "; ".join([*parts, *said])


def remember(node: NodeInfo, memory: Memory, routing: NodeRouting | None, xids: Sequence[NodeXid],
             signal_times: Mapping[str, list[datetime]], reboots: Sequence[datetime],
             overrides: Mapping[int, str] | None, accelerated: bool) -> Remembered:
    """The node's routing with its earlier audits read as evidence, the rows a history verdict rests on, and the
    node's history line."""
    said: list[str] = []
    rows: list[GpuError] = []
    if memory.state == "read":
        recurring = _recurrence(memory, xids, signal_times, reboots, overrides)
        if recurring is not None and STRENGTH[routing.verdict if routing else None] < STRENGTH["REPLACE"]:
            routing = recurring
            said.append("recurrence across audits → REPLACE")
        unacted = _unacted(memory, node)
        if unacted is not None:
            routing = _escalated(unacted, node, routing)
            rows = history_rows(unacted)
            said.append(f"REPLACE given at {iso(unacted.audit_time)} in audit {unacted.audit_id}, not acted on")
        flap = _flapping(memory, routing.verdict if routing else None)
        if flap is not None:
            said.append(flap)
    return Remembered(_first_occurrence(routing, memory), rows, _note(memory, accelerated, said))


# --------------------------------------------------------------------------- actions asked for, open or done

def _span_signal(span: HistorySpan) -> datetime | None:
    return max((x.last for x in span.xids), default=None)


def _asked(span: HistorySpan) -> str | None:
    """The action a span's verdict asks for, unless the same audit already saw it done (RULES §7 precedence)."""
    if span.verdict not in ASKS or span.closed:
        return None
    if span.done == "replaced" or (span.done == "rebooted" and span.verdict == "REBOOT"):
        return None
    return span.verdict


def _closer(action: Action, span: HistorySpan) -> tuple[Closure, str] | None:
    """What in a later audit's span shows the action done, and how it is said (the audit is added by the caller);
    None when nothing does."""
    if span.closed:
        return "closed", f"closed: {span.closed}"
    if span.done == "replaced":
        return "replaced", f"replaced: {span.done_said or 'the node was replaced'}"
    if action.verdict in ("REPLACE", "REBOOT") and span.launch_time and span.launch_time > action.after:
        return "relaunched", f"relaunched at {iso(span.launch_time)}, after the verdict's signal"
    if action.verdict == "REBOOT":
        if span.done == "rebooted":
            return "rebooted", span.done_said or "rebooted after the signal"  # `already rebooted after …: <how>`
        later = [r for r in span.reboots if r > action.after]
        if later:
            return "rebooted", f"rebooted at {iso(min(later))}"
    if action.verdict == "NOT OBSERVABLE" and span.xid_status == "Measured":
        return "measured", "coverage Measured again"
    return None


def actions_of(spans: Sequence[HistorySpan]) -> list[Action]:
    """Every action one node's audits asked for, in the order given, each still open or closed with what closed it.

    An action is given by the first audit whose verdict asks it and stays open through the audits after — however
    many give no verdict once its Xid has left their window — until a later audit shows it done (`_closer`), or a
    REPLACE supersedes a REBOOT. The same verdict given again while open is the same action (its signal moves to
    the latest); given again after it was done, it is a new one. Pure: both stores and every output read it."""
    done: list[Action] = []
    standing: dict[str, Action] = {}
    for span in sorted(spans, key=lambda s: (s.audit_time, s.through, s.audit_id)):
        for verdict, action in list(standing.items()):
            shown = _closer(action, span)
            if shown is not None:
                how, said = shown
                done.append(replace(action, closed_at=span.audit_time, closed_by=f"{said} ({_where(span)})",
                                    closed_how=how, closed_said=said, closed_in=span.audit_id))
                del standing[verdict]
        asked = _asked(span)
        if asked == "REPLACE" and "REBOOT" in standing:
            done.append(replace(standing.pop("REBOOT"), closed_at=span.audit_time,
                                closed_by=f"superseded by REPLACE ({_where(span)})", closed_how="superseded",
                                closed_said="superseded by REPLACE", closed_in=span.audit_id))
        if asked == "REBOOT" and "REPLACE" in standing:
            asked = None  # a replacement does what a reboot would
        for verdict, action in list(standing.items()):
            if verdict != asked:
                standing[verdict] = replace(action, audits_since=action.audits_since + span.audits)
        if asked is not None:
            signal = _span_signal(span)
            current = standing.get(asked)
            if current is None:
                standing[asked] = Action(asked, span, span.through, signal)
            else:
                latest = max((t for t in (current.signal, signal) if t is not None), default=None)
                standing[asked] = replace(current, last_given=span.through, signal=latest, audits_since=0)
    return sorted([*done, *standing.values()], key=lambda a: (a.given.audit_time, a.verdict))


def open_actions(spans: Sequence[HistorySpan]) -> list[Action]:
    return [a for a in actions_of(spans) if a.open]


def actions_by_node(spans: Sequence[HistorySpan]) -> dict[str, list[Action]]:
    """`actions_of` for every node of a read (what `gpuaudit history` shows)."""
    grouped: dict[str, list[HistorySpan]] = defaultdict(list)
    for span in spans:
        grouped[span.instance_id].append(span)
    return {iid: actions_of(node_spans) for iid, node_spans in grouped.items()}


def actions_after(result: Result, evidence: Evidence,
                  reboots: Mapping[str, list[datetime]]) -> dict[str, list[AskedAction]] | None:
    """Each node's actions as the history will hold them once this audit is recorded (the spans read, with this
    audit's entries folded in as the store folds them), read by `actions_of`: those still open and those this audit
    showed done. What the alert and the events say of an action comes from here, whichever store was read. None
    when no history was read (off or unreadable): whether an earlier action was done is then not known."""
    if evidence.history is None:
        return None
    written = merged(entries_for(result, evidence, reboots), latest_spans(evidence.history))
    spans = distinct([*(s for s in evidence.history.spans if s.audit_id != result.audit_id), *written])
    out: dict[str, list[AskedAction]] = {}
    for iid, actions in actions_by_node(spans).items():
        out[iid] = [AskedAction(verdict=ASKED_VERDICTS[a.verdict], given_at=a.given.audit_time,
                                given_in=a.given.audit_id,
                                signal=a.signal, status="open" if a.open else a.closed_how or "closed",
                                done=a.closed_said if not a.open else None)
                    for a in actions if a.open or a.closed_in == result.audit_id]
    return out


def entries_for(result: Result, evidence: Evidence, reboots: Mapping[str, list[datetime]]) -> list[HistorySpan]:
    """What this audit adds to the history: one entry per node (hardware-class Xids and non-Xid memory signals
    per bus, reboots seen, verdict, coverage), before folding into spans. A node given an action by this audit, or
    with one still open from earlier audits, also carries what this audit saw done to it (`already_done`, after
    the signal the action rests on), which is what closes the action in `actions_of`."""
    launched = {n.instance_id: n.launch_time for n in evidence.nodes}
    earlier: dict[str, list[HistorySpan]] = defaultdict(list)
    for span in evidence.history.spans if evidence.history else []:
        if span.audit_id != result.audit_id:
            earlier[span.instance_id].append(span)
    replaced = replacements(result.nodes, evidence)
    out = []
    for n in result.nodes:
        if n.gpu_count == 0:
            continue  # no GPU: no Xid, no verdict the rules could remember
        standing = open_actions(earlier.get(n.instance_id, []))
        done = (already_done(n, evidence, replaced, reboots.get(n.instance_id, []),
                             since=max((a.after for a in standing), default=None))
                if standing or n.verdict in ASKS else None)
        xids = [HistoryXid(code=e.code, pci=e.pci, first=e.time, last=e.last_time or e.time)
                for e in n.gpu_errors if e.class_ == "hardware" and e.code is not None and e.source != "history"]
        xids += [HistoryXid(code=None, signal=marker, pci=None, first=e.time, last=e.last_time or e.time)
                 for e in n.gpu_errors if e.code is None and e.source == "kernel"
                 for marker in PERSISTING_SIGNALS if marker in e.message]
        out.append(HistorySpan(
            cluster=result.cluster.name, instance_id=n.instance_id, audit_id=result.audit_id,
            audit_time=result.window.end, last_audit_id=result.audit_id, through=result.window.end,
            mode=result.mode, verdict=n.verdict, xid_status=n.xid_status, xids=xids,
            reboots=sorted(set(reboots.get(n.instance_id, []))), launch_time=launched.get(n.instance_id),
            gaps=len(result.visibility_gaps), done=done.kind if done else None, done_said=done.said if done else None))
    return out
