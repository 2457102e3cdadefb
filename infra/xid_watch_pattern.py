"""The Xid watch's filter pattern (issue #51), generated from the Xid catalog data: a catalog change (or a deployment's
`xid_class_overrides`) changes the watch. No CDK here, so tests and benchmarks read it without the CDK runtime."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.domain.markers import FALLEN_OFF_BUS_MARKER
from gpuaudit.rules.xid_catalog import load_catalog
from gpuaudit.settings import XID_WATCH_ALARM_INFIX

# The classes a line of which starts an incident audit: RULES §6's hardware class (a verdict on the node) and
# unverified (no verdict without evidence the audit reads). Application, driver-config, informational and
# sympathetic lines wait for the hourly audit.
WATCHED_CLASSES = frozenset({"hardware", "unverified"})
NAMESPACE = "gpuaudit/XidWatch"
# CloudWatch Logs quotas (PutMetricFilter API reference): a filter pattern is at most 1,024 characters; a log group
# holds at most 100 metric filters. The generated pattern uses no regular expression, so it takes none of the five
# regex filter patterns a log group may hold.
MAX_PATTERN_CHARS = 1024
METRIC_FILTERS_PER_GROUP = 100
ALARM_PERIOD_S = 60


def watched_codes(overrides: Iterable[str] = ()) -> list[int]:
    """The catalog's hardware-class and unverified codes, with the deployment's `xid_class_overrides` (CODE=CLASS)
    applied: an override to hardware adds a code, an override away from it removes one."""
    classes = {entry.code: entry.class_ for entry in load_catalog().codes}
    for item in overrides:
        code, _, klass = item.partition("=")
        if code.strip().isdigit():
            classes[int(code)] = klass.strip()  # type: ignore[assignment]
    return sorted(code for code, klass in classes.items() if klass in WATCHED_CLASSES)


def xid_term(code: int) -> str:
    """How the driver prints the code: `NVRM: Xid (PCI:0000:91:00): 79, …` — the closing parenthesis, the code and
    its comma. The parenthesis keeps 46 from matching 146's line, the comma 14 from matching 140's."""
    return f"): {code},"


def filter_pattern(overrides: Iterable[str] = ()) -> str:
    """The metric filter's pattern: any watched code's line, or any "fallen off the bus" line (RULES §6 reads those
    as Xid 79 with or without an Xid). Unstructured-log OR terms (`?"…"`), each a quoted phrase matched anywhere in
    the event (CloudWatch Logs filter pattern syntax)."""
    terms = [xid_term(code) for code in watched_codes(overrides)] + [FALLEN_OFF_BUS_MARKER]
    pattern = " ".join(f'?"{term}"' for term in terms)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the Xid watch's filter pattern is {len(pattern)} characters, past CloudWatch Logs' "
                         f"{MAX_PATTERN_CHARS}: split it across filters")
    return pattern


def metric_name(cluster: str) -> str:
    return f"FatalXidLines-{cluster}"


def alarm_name(stack_name: str, cluster: str) -> str:
    return f"{stack_name}{XID_WATCH_ALARM_INFIX}{cluster}"
