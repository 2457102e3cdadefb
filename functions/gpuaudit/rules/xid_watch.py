"""What the opt-in Xid watch (issue #51) matches, written once: the deploy-time metric filter's pattern
(infra/xid_watch.py) and the audit's locate query (collectors/xid_locate.py) are both built from `watch_terms`, so
the nodes an audit narrows to are those whose lines could have tripped the alarm, and a catalog change (or a
deployment's `xid_class_overrides`) changes both. Also the window in which a line that tripped the alarm was
written, from the alarm's period and the delivery latencies (`LOCATE_LOOKBACK`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta

from gpuaudit.domain.markers import FALLEN_OFF_BUS_MARKER
from gpuaudit.domain.streams import NodeIndex, stream_node_ids
from gpuaudit.model.evidence import NodeInfo, NodeScope
from gpuaudit.rules.actions import NAMED_UP_TO  # the nodes a line names; the result's `narrowed_to` holds every one
from gpuaudit.rules.xid_catalog import load_catalog

# The classes a line of which starts an incident audit: RULES §6's hardware class (a verdict on the node) and
# unverified (no verdict without evidence the audit reads). Application, driver-config, informational and
# sympathetic lines wait for the hourly audit.
WATCHED_CLASSES = frozenset({"hardware", "unverified"})
# CloudWatch Logs quotas (PutMetricFilter API reference): a filter pattern is at most 1,024 characters.
MAX_PATTERN_CHARS = 1024
ALARM_PERIOD_S = 60  # the alarm's period and its one evaluation period (infra/xid_watch.py)

# When the line that tripped the alarm was written, seen from the alarm's state change (the trigger's minute, to
# which Plan rounds the window's end down). Each hop's bound and its source:
#  - the CloudWatch agent sends a buffered line at most force_flush_interval after it is written, default 5 s
#    (documented: CloudWatch agent configuration file, `force_flush_interval`);
#  - a metric filter turns an ingested event into a datapoint with no bound AWS documents: 30 s taken (assumed, as
#    tests/benchmarks/xid_watch_latency.py's `filter_to_metric`);
#  - the datapoint belongs to the minute of the line's own timestamp, and the alarm (period 60 s, one evaluation
#    period) sees that minute once it has ended: one period;
#  - alarms with a period of 60 s or more are evaluated once a minute (documented: CloudWatch User Guide, "Alarm
#    evaluation"): up to one more period before the state changes;
#  - the trigger's time rounded down to its minute: up to one more period on the other side.
AGENT_FLUSH_S = 5
FILTER_TO_METRIC_S = 30
EVALUATION_INTERVAL_S = 60
LOCATE_LOOKBACK = timedelta(seconds=ALARM_PERIOD_S + AGENT_FLUSH_S + FILTER_TO_METRIC_S + EVALUATION_INTERVAL_S)
LOCATE_AHEAD = timedelta(seconds=ALARM_PERIOD_S)


def watched_codes(overrides: Iterable[str] = ()) -> list[int]:
    """The catalog's hardware-class and unverified codes, with the deployment's `xid_class_overrides` (CODE=CLASS)
    applied: an override to hardware adds a code, an override away from it removes one."""
    classes: dict[int, str] = {entry.code: entry.class_ for entry in load_catalog().codes}
    for item in overrides:
        code, _, klass = item.partition("=")
        if code.strip().isdigit():
            classes[int(code)] = klass.strip()
    return sorted(code for code, klass in classes.items() if klass in WATCHED_CLASSES)


def xid_term(code: int) -> str:
    """How the driver prints the code: `NVRM: Xid (PCI:0000:91:00): 79, …` — the closing parenthesis, the code and
    its comma. The parenthesis keeps 46 from matching 146's line, the comma 14 from matching 140's."""
    return f"): {code},"


def watch_terms(overrides: Iterable[str] = ()) -> list[str]:
    """The texts any one of which makes a line the watch's: any watched code's print, or any "fallen off the bus"
    line (RULES §6 reads those as Xid 79 with or without an Xid). Each is matched case-sensitively anywhere in the
    line, by the metric filter (a quoted term) and by the locate query (`like "…"`) alike."""
    return [xid_term(code) for code in watched_codes(overrides)] + [FALLEN_OFF_BUS_MARKER]


def filter_pattern(overrides: Iterable[str] = ()) -> str:
    """The metric filter's pattern: unstructured-log OR terms (`?"…"`), each a quoted phrase matched anywhere in the
    event (CloudWatch Logs filter pattern syntax)."""
    pattern = " ".join(f'?"{term}"' for term in watch_terms(overrides))
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the Xid watch's filter pattern is {len(pattern)} characters, past CloudWatch Logs' "
                         f"{MAX_PATTERN_CHARS}: split it across filters")
    return pattern


WHOLE_CLUSTER = "audit of the whole cluster"


def node_scope(streams: Sequence[tuple[str, str]] | None, unread: str, nodes: Sequence[NodeInfo]) -> NodeScope:
    """Which nodes an Xid watch audit judges, from the streams the locate query returned (None: the query did not
    read them whole, `unread` says why). A stream names its node as everywhere in the audit (domain/streams.py: by
    instance ID, else by private DNS name). Fail closed: a locate not read whole, or whose streams name no node of
    the cluster, narrows nothing — the audit is the whole cluster's, and the line says why."""
    if streams is None:
        return NodeScope(said=f"{WHOLE_CLUSTER}: the lines that tripped the Xid watch could not be located "
                              f"({unread})")
    index = NodeIndex(nodes)
    named = sorted({iid for _group, stream in streams for iid in stream_node_ids(stream, index)})
    if not named:
        found = (f"the {len(streams)} stream(s) holding such a line name" if streams
                 else "no stream holds such a line, so they name")
        return NodeScope(said=f"{WHOLE_CLUSTER}: the lines that tripped the Xid watch were searched for in the "
                              f"minutes around the alarm, and {found} no node of the cluster")
    shown = ", ".join(named[:NAMED_UP_TO]) + (f" (+{len(named) - NAMED_UP_TO} more in the result's narrowed_to)"
                                              if len(named) > NAMED_UP_TO else "")
    rest = len({n.instance_id for n in nodes}) - len(named)
    return NodeScope(narrowed_to=named, said=f"audit of {len(named)} node(s): the lines that tripped the Xid watch "
                                             f"name {shown}; the rest of the cluster ({rest} node(s)) is audited "
                                             "hourly")
