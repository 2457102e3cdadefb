"""Where the lines that tripped the Xid watch were written (issue #51 item 1): one Logs Insights query over the
audit's log groups for the minutes around the alarm, with the watch's own terms (given by the caller: the catalog
is the rules' to read), returning the distinct streams. Through the one runner (collectors/insights.py) and the
audit's query slots; a query that fails, runs past its deadline or reaches the row cap locates nothing (`streams`
None) and its gap says why: the audit is then of the whole cluster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpuaudit.collectors import insights  # insights.MAX_ROWS: one cap, patched in one place
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.insights import MAX_GROUPS_PER_QUERY, InsightsRunner, _batches, _group_name
from gpuaudit.collectors.log_queries import xid_locate_query
from gpuaudit.collectors.query_budget import QuerySlots
from gpuaudit.model.evidence import Gap, QueryRecord

# The locate runs in Inventory, before the log reads: a query over a few minutes of the cluster's groups answers in
# seconds; past this it is stopped and the audit is the whole cluster's (Inventory's own timeout is 15 minutes).
LOCATE_DEADLINE_S = 120.0


@dataclass(frozen=True)
class Located:
    """The (log group, stream) pairs holding a line the watch matches; None when the read was not whole."""

    streams: list[tuple[str, str]] | None
    gaps: list[Gap] = field(default_factory=list)
    queries: list[QueryRecord] = field(default_factory=list)


def locate_streams(aws: Aws, groups: Sequence[str], terms: Sequence[str], start: datetime, end: datetime,
                   slots: QuerySlots | None = None, deadline_s: float = LOCATE_DEADLINE_S) -> Located:
    """One query per 50 groups (one for almost every cluster) over [start, end): the distinct streams."""
    gaps: list[Gap] = []
    runner = InsightsRunner(aws, gaps, deadline_s=deadline_s, slots=slots)
    query = xid_locate_query(terms)
    found: dict[tuple[str, str], None] = {}
    whole = True
    for batch in _batches(list(groups), MAX_GROUPS_PER_QUERY):
        rows = runner.results(runner.start("xid-locate", batch, start, end, query))
        if rows is None:  # failed, refused or stopped: the runner's gap says which
            whole = False
            continue
        if len(rows) >= insights.MAX_ROWS:
            gaps.append(Gap(kind="truncated", service="logs", operation="GetQueryResults", target=", ".join(batch),
                            outcome="reached the row cap",
                            unseen=f"xid-locate query returned {len(rows)} streams, the {insights.MAX_ROWS}-row "
                                   "cap: streams past it were not returned"))
            whole = False
            continue
        found.update(dict.fromkeys((_group_name(r.get("@log", "")), r.get("@logStream", "")) for r in rows))
    return Located(streams=sorted(found) if whole else None, gaps=gaps, queries=runner.records)
