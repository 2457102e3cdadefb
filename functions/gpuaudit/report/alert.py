"""The alert an on-call engineer reads on a phone (SNS email, AWS Chatbot), rendered from the result and the
changes found against the cluster's latest state (rules/what_changed.compare).

* Subject: `[gpuaudit] <cluster>: 2 REBOOT, 1 NOT OBSERVABLE (coverage)` — printable ASCII, no new line, at most
  SUBJECT_MAX characters (SNS rejects a longer or multi-line subject).
* Body: the per-kind counts first, then one line per node or cluster-level change, worst first, each leading with
  what to do (the verdict), the node and its Xids, the prose last and cut at a word; then every node counted by
  verdict, the grouped actions (each command whole, its node count and where its IDs file is), the nodes' IDs by
  verdict (the first few, then a count); then the report link and the dedup key. Plain text: what the account wrote (log
  lines, names) is quoted as written, control characters shown as `\\xNN` (report/escape.visible), never
  Markdown-escaped — grepping the logs for a quoted line finds it.
* Chatbot (client-markdown) gets the same text inside a code block, so nothing from the account renders as
  markup or mentions anyone; its `nextSteps` are the grouped actions and the report, its `relatedResources` the
  cluster, the report and the IDs files. Every channel (email, chat, SMS) carries the report link.
* Message attributes: a stable dedup key (cluster, mode, window, what changed) for a pager's de-duplication, the
  severity and the kinds, for SNS subscription filter policies.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.changes import (
    DONE,
    FAIL,
    HYPOTHESIS,
    LEFT,
    NOT_OBSERVABLE,
    NOT_READY,
    NOT_RECHECKED,
    REBOOT,
    RECOVERED,
    REPLACE,
    ROOT_CAUSE,
    SELF_CHECK,
    Change,
    cut,
)
from gpuaudit.model.redaction import redact
from gpuaudit.model.result import ActionGroup, NodeResult, Result
from gpuaudit.model.timeutil import iso
from gpuaudit.report.escape import visible
from gpuaudit.report.order import verdict_counts, xid_codes

SUBJECT_MAX = 99  # SNS Publish: a subject "less than 100 characters long", printable ASCII, no line break
SUBJECT_PREFIX = "[gpuaudit] "
NAMED_IDS = 10  # node IDs the alert names per verdict before counting the rest (fewer when the alert is long)
ACTION_CHARS = 400  # one grouped action in the alert: its command whole, never the node list
ALERT_MAX_CHARS = 3500  # one message on a phone, well under Chatbot's and SNS's limits at any fleet size
ALERT_HEADLINE_CHARS = 400
ALERT_LINE_CHARS = 240
ALERT_MAX_LINES = 20

# What changed, worst first: the order of the counts and of the lines. Node kinds follow the verdict order of
# report/order.py (REPLACE, NOT OBSERVABLE, REBOOT); a cluster-level answer (a Proven root cause, Ready: No) leads.
# The kinds and the Change record are model/changes.py's (the rule that finds the changes uses them too).
KIND_ORDER = (SELF_CHECK, ROOT_CAUSE, NOT_READY, REPLACE, NOT_OBSERVABLE, REBOOT, FAIL, HYPOTHESIS, LEFT,
              NOT_RECHECKED, DONE, RECOVERED)
VERDICT_KINDS = (REPLACE, NOT_OBSERVABLE, REBOOT)
# The severity a pager routes on: act now, look soon, for the record.
CRITICAL = frozenset((SELF_CHECK, ROOT_CAUSE, NOT_READY, REPLACE, REBOOT))
WARNING = frozenset((NOT_OBSERVABLE, FAIL, HYPOTHESIS, LEFT, NOT_RECHECKED))


def kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def _xids(node: NodeResult | None) -> str:
    """The node's Xid codes read this audit, the deciding one first: `Xid 79` or `Xid 63, 31`."""
    codes = xid_codes(node, history=False) if node is not None else []
    return f" Xid {', '.join(str(c) for c in codes[:4])}" if codes else ""


@dataclass(frozen=True)
class AlertLine:
    kind: str
    text: str
    node: str | None


def lines_of(result: Result, changes: Sequence[Change]) -> list[AlertLine]:
    """One line per node (all its changes together) and per cluster-level change, worst first."""
    nodes = {n.instance_id: n for n in result.nodes}
    by_node: dict[str, list[Change]] = {}
    out: list[tuple[tuple[int, int, str], AlertLine]] = []
    for c in changes:
        if c.node is None:  # a cluster-level answer or a check: its own words lead (ROOT CAUSE …, P6 …: FAIL)
            line = c.what + (f" — {c.detail}" if c.detail else "")
            out.append(((kind_rank(c.kind), c.rank, ""), AlertLine(c.kind, cut(line, ALERT_LINE_CHARS), None)))
        else:
            by_node.setdefault(c.node, []).append(c)
    for iid, said in by_node.items():
        node = nodes.get(iid)
        verdict = node.verdict if node is not None else None
        kinds = sorted({c.kind for c in said}, key=kind_rank)
        # The node's line leads with its verdict when a verdict-kind change is about it (a hardware verdict wins
        # over a coverage gap stated beside it, RULES §7); otherwise with the worst kind of change.
        kind = verdict if verdict in VERDICT_KINDS and any(k in VERDICT_KINDS for k in kinds) else kinds[0]
        ordered = sorted(said, key=lambda c: (kind_rank(c.kind), c.rank))
        flapping = " (flapping across audits)" if any(c.flapping for c in said) else ""
        whats = "; ".join(dict.fromkeys(c.what for c in ordered))
        details = "; ".join(dict.fromkeys(c.detail for c in ordered if c.detail))
        line = f"{kind} {iid}{_xids(node)}{flapping}: {whats}" + (f" — {details}" if details else "")
        out.append(((kind_rank(kind), min(c.rank for c in said), iid), AlertLine(kind, cut(line, ALERT_LINE_CHARS),
                                                                                 iid)))
    return [line for _, line in sorted(out, key=lambda entry: entry[0])]


def counts(lines: Sequence[AlertLine]) -> list[tuple[str, int]]:
    """How many nodes (or cluster-level answers) each kind of change names, worst first."""
    tally: dict[str, int] = {}
    for line in lines:
        tally[line.kind] = tally.get(line.kind, 0) + 1
    return sorted(tally.items(), key=lambda kv: kind_rank(kv[0]))


def _counted(tally: Sequence[tuple[str, int]]) -> list[str]:
    return [f"{n:,} {kind}" for kind, n in tally]


def ascii_text(text: str) -> str:
    """Printable ASCII only (an SNS subject): anything else becomes `?`, a line break a space."""
    return "".join(ch if " " <= ch <= "~" else "?" for ch in " ".join(text.split()))


# What HTML, Markdown (client-markdown, Slack) or a chat mention would read as markup in a name
MARKUP = re.compile(r"[<>&\[\]()*`|~#!@\\]")


def plain_name(text: str, accounts: frozenset[str] = frozenset()) -> str:
    """A name from the account (the cluster) where alerts lead with it (subject, Chatbot title, the body's second
    line): printable ASCII, account IDs redacted, markup characters as `?`, so no subscriber renders it as a tag,
    a link, emphasis or a mention. The body's quoted log lines stay as written (greppable), in a code block."""
    return redact(MARKUP.sub("?", ascii_text(text)), accounts)  # the mask `<account>` is the auditor's own text


def subject(result: Result, changes: Sequence[Change]) -> str:
    """`[gpuaudit] <cluster>: 2 REBOOT, 1 NOT OBSERVABLE (coverage)`: the product's name first (a mail filter, a
    pager rule), at most SUBJECT_MAX printable ASCII characters; the counts that do not fit are said as `+N more`."""
    cluster = plain_name(result.cluster.name, result.account_ids)[:40]
    parts = _counted(counts(lines_of(result, changes))) or ["no change"]
    tail = f" ({ascii_text(result.mode)})"
    for shown in range(len(parts), 0, -1):
        more = f", +{len(parts) - shown} more" if shown < len(parts) else ""
        text = f"{SUBJECT_PREFIX}{cluster}: {', '.join(parts[:shown])}{more}{tail}"
        if len(text) <= SUBJECT_MAX:
            return text
    return f"{SUBJECT_PREFIX}{cluster}: {len(parts)} kinds of change{tail}"[:SUBJECT_MAX]


def dedup_key(result: Result, changes: Sequence[Change]) -> str:
    """The same cluster, mode, window and changes give the same key (a retried delivery, a re-run audit), so a
    pager opens one incident; anything new in what changed gives a new key."""
    said = [result.cluster.name, result.cluster.region, result.mode, iso(result.window.start),
            iso(result.window.end), sorted(redact(c.text, result.account_ids) for c in changes)]
    return hashlib.sha256(json.dumps(said, ensure_ascii=True).encode()).hexdigest()[:32]


def severity(changes: Sequence[Change]) -> str:
    kinds = {c.kind for c in changes}
    return "critical" if kinds & CRITICAL else "warning" if kinds & WARNING else "info"


def verdict_tally(result: Result) -> str:
    """Every node of the audit counted by verdict, worst first: `42 REPLACE · 184 REBOOT · 1,735 LEAVE ALONE`."""
    return " · ".join(f"{n:,} {v}" for v, n in verdict_counts(result.nodes)) or "none (no node with a GPU signal)"


def _groups_for(result: Result, lines: Sequence[AlertLine]) -> list[ActionGroup]:
    """The grouped actions of the verdicts the alert is about (REPLACE, NOT OBSERVABLE, REBOOT) that name a node
    it lists, worst first (rules/actions.py orders them)."""
    named = {line.node for line in lines if line.node is not None}
    return [g for g in result.action_groups if g.verdict in VERDICT_KINDS and named.intersection(g.nodes)]


def _ids_where(group: ActionGroup | None) -> str:
    if group is not None and group.ids_at:
        return group.ids_at
    return "the report's JSON result"


def action_line(group: ActionGroup) -> str:
    """A grouped action as the alert says it: the command whole (with where its IDs file is), its node count, never
    the node list (that is the IDs file's)."""
    listed = ", ".join(group.nodes)
    head = group.action[: group.action.rindex(listed)] if len(group.nodes) > 1 and listed in group.action \
        else group.action
    head = head.rstrip(" :").removesuffix(" — the IDs file beside the report lists them").rstrip(" :")
    count = f"{len(group.nodes):,} node{'s' if len(group.nodes) != 1 else ''}"
    where = f"; IDs: {_ids_where(group)}" if len(group.nodes) > 1 else ""
    return f"{cut(head, ACTION_CHARS)} [{count}{where}]"


def _ids_by_verdict(result: Result, lines: Sequence[AlertLine], named: int) -> list[str]:
    """The nodes the alert is about, by the verdict (or kind) each line leads with: `REBOOT (184): i-…, i-… +174
    more (all in <IDs file>)`."""
    by_kind: dict[str, list[str]] = {}
    for line in lines:
        if line.node is not None:
            by_kind.setdefault(line.kind, []).append(line.node)
    groups: dict[str, ActionGroup] = {}
    for g in result.action_groups:  # a verdict's largest group with an IDs file (rules/actions.py: largest first)
        if g.ids_at:
            groups.setdefault(g.verdict, g)
    out = []
    for kind, nodes in by_kind.items():
        shown = ", ".join(nodes[:named])
        rest = len(nodes) - min(len(nodes), named)
        where = _ids_where(groups.get(kind)) if kind in VERDICT_KINDS else "the report"
        out.append(f"{kind} ({len(nodes):,}): {shown}" + (f" +{rest:,} more (all in {where})" if rest else ""))
    return out


def message(result: Result, changes: Sequence[Change], report_link: str | None = None) -> str:
    """The plain-text alert, at most ALERT_MAX_CHARS characters at any fleet size: what changed counted, the headline
    (cut), one line per change worst first while they fit, then every node counted by verdict, the grouped actions
    with their node counts and where their IDs are, the nodes' IDs by verdict (named while they fit, then counted);
    the report link and the dedup key always stay."""
    lines = lines_of(result, changes)
    window = f"{iso(result.window.start)} → {iso(result.window.end)}"
    # The first four lines keep their places (what changed, where, the headline, a blank) and the change lines
    # follow, as a mail rule or a parser reads them; the fleet-scale sections come after them, before the tail.
    head = [f"Changes: {', '.join(_counted(counts(lines))) or 'none'}",
            f"gpuaudit {result.mode} · {plain_name(result.cluster.name, result.account_ids)} "
            f"({plain_name(result.cluster.region)}) · window {window}",
            cut(result.headline, ALERT_HEADLINE_CHARS), ""]
    groups = _groups_for(result, lines)
    # numbered and unbulleted, so "- " still starts exactly the change lines (what a mail rule or a parser reads)
    actions = ["Actions (not executed):", *[f"{i}. {action_line(g)}" for i, g in enumerate(groups, 1)], ""] \
        if groups else []
    tail = ["", *([f"Report: {report_link}"] if report_link else []), f"Dedup key: {dedup_key(result, changes)}"]
    listed = [f"- {line.text}" for line in lines]

    def text(named: int, shown: int) -> str:
        ids = ["Nodes:", *_ids_by_verdict(result, lines, named), ""] if any(line.node for line in lines) else []
        more = [f"- … and {len(listed) - shown:,} more (see the report)"] if shown < len(listed) else []
        sections = ["", f"Verdicts: {verdict_tally(result)}", "", *actions, *ids]
        return redact(visible("\n".join([*head, *listed[:shown], *more, *sections]).rstrip("\n") + "\n"
                              + "\n".join(tail)), result.account_ids)

    named, shown = NAMED_IDS, min(len(listed), ALERT_MAX_LINES)
    while shown and len(text(named, shown)) > ALERT_MAX_CHARS:
        shown -= 1
    while named > 1 and len(text(named, shown)) > ALERT_MAX_CHARS:
        named -= 1
    full = text(named, shown)
    if len(full) <= ALERT_MAX_CHARS:
        return full
    # still too long (many kinds, long commands): keep the tail (the report link, the dedup key) whole
    end = redact(visible("\n".join(tail)), result.account_ids)
    return full[: ALERT_MAX_CHARS - len(end) - 2].rstrip() + "\n…" + end


def _code_block(text: str) -> str:
    """Text inside a client-markdown code block that it cannot close, and that mentions no one."""
    return "```\n" + text.replace("```", "`\u200b`\u200b`").replace("@", "@\u200b") + "\n```"


def _no_mention(text: str) -> str:
    """Chat text that mentions no one (`@here`, `@channel`, a user) and opens no link markup of its own."""
    return text.replace("@", "@\u200b").replace("<", "‹").replace(">", "›")


def chatbot_payload(result: Result, changes: Sequence[Change], alert: str, report_link: str | None = None) -> str:
    """AWS Chatbot (Amazon Q Developer in chat applications) custom notification: version 1.0, source custom,
    client-markdown content; the dedup key as the event id and thread, so updates of one change share a thread.
    `nextSteps`: each grouped action (its command in a code span, its node count, where its IDs are), then the
    report; `relatedResources`: the cluster's ARN, the report, the IDs files — outside the code block, so the
    report link is one tap away in the channel too."""
    key = dedup_key(result, changes)
    first, _, rest = alert.partition("\n")
    accounts = result.account_ids
    steps = [
        _no_mention(redact(visible(action_line(g)), accounts)) for g in _groups_for(result, lines_of(result, changes))
    ]
    if report_link:
        steps.append(f"Open the report: {_no_mention(report_link)}")
    related = [r for r in (result.cluster.arn, *(report_link or "").split(" · "),
                           *(g.ids_at for g in result.action_groups if g.ids_at)) if r]
    return json.dumps(
        {
            "version": "1.0",
            "source": "custom",
            "id": key,
            "content": {
                "textType": "client-markdown",
                "title": subject(result, changes),
                "description": _code_block(rest.strip("\n") or first),
                "nextSteps": steps,
                "keywords": [result.mode, severity(changes), *[kind for kind, _ in counts(lines_of(result, changes))]],
            },
            "metadata": {
                "threadId": plain_name(f"gpuaudit-{result.cluster.name}-{result.mode}", accounts),
                "summary": first,
                "eventType": f"gpuaudit.{result.mode}",
                "relatedResources": list(dict.fromkeys(related)),
                "additionalContext": {"dedup_key": key, "severity": severity(changes)},
            },
        }
    )


def sms_text(result: Result, changes: Sequence[Change], report_link: str | None = None) -> str:
    """The SMS channel (SNS `sms`): the subject and where the report is, short enough for a text message."""
    where = report_link.split(" · ")[-1] if report_link else "no report link"
    return redact(f"{subject(result, changes)} — {where}", result.account_ids)


def message_attributes(result: Result, changes: Sequence[Change]) -> dict[str, dict[str, Any]]:
    """SNS message attributes (at most 10): what a subscription filter policy or a pager integration keys on."""
    kinds = [kind for kind, _ in counts(lines_of(result, changes))]
    return {"dedup_key": {"DataType": "String", "StringValue": dedup_key(result, changes)},
            "cluster": {"DataType": "String",
                        "StringValue": ascii_text(redact(result.cluster.name, result.account_ids)) or "?"},
            "mode": {"DataType": "String", "StringValue": result.mode},
            "window": {"DataType": "String", "StringValue": f"{iso(result.window.start)}/{iso(result.window.end)}"},
            "severity": {"DataType": "String", "StringValue": severity(changes)},
            "kinds": {"DataType": "String.Array", "StringValue": json.dumps(kinds)},
            "changes": {"DataType": "Number", "StringValue": str(len(lines_of(result, changes)))}}
