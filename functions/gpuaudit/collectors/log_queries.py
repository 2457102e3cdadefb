"""The Logs Insights query texts of the log reads (collectors/logs.py, collectors/kernel_lookback.py), in one place
so the reads, the conformance check (devtools/conformance.py) and the tests run the very same text: the GPU-lines and
job-figures queries are built from the markers the rules match (domain/markers.py, domain/throughput.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from gpuaudit.collectors.insights import MAX_ROWS
from gpuaudit.domain.markers import (
    GPU_HINTS,
    HYPERPOD_STATUS_STREAMS,
    NCCL_MARKER,
    NCCL_TIMEOUT_MARKERS,
    STATUS_STREAM_WORDS,
    gpu_lines_query,
)
from gpuaudit.domain.throughput import job_figures_query


def _quoted_insights(text: str) -> str:
    """A Logs Insights string literal: single quotes when the text holds a double quote (no escapes needed)."""
    return f"'{text}'" if '"' in text and "'" not in text else json.dumps(text)


# The kernel's lines in the three forms they are shipped in (RULES §4 (b)): the syslog marker `kernel:`; the journal's
# JSON kernel transport field; and the syslog marker as a parser records it in JSON, the program name in `ident`
# (Container Insights' Fluent Bit `syslog` parser on /var/log/messages: `{"host":…,"ident":"kernel","message":…}`).
KERNEL_FILTER = ('filter @message like /kernel:/ or @message like /"_TRANSPORT"\\s*:\\s*"kernel"/ '
                 'or @message like /"ident"\\s*:\\s*"kernel"/')
KERNEL_QUERY = (f"{KERNEL_FILTER} | stats count(*) as kernel_lines, max(@timestamp) as last_kernel_line "
                "by @log, @logStream")
# The kernel lines themselves, oldest first (a lagging stream's, by name: collectors/lagging.py counts those that
# arrived after the last audit read the stream).
KERNEL_LINES_QUERY = f"{KERNEL_FILTER} | fields @timestamp, @log, @logStream | sort @timestamp asc | limit {MAX_ROWS}"

def _any_of(field: str, texts: Iterable[str]) -> str:
    """1 when `field` holds any of `texts`, else 0: `strcontains` per text, the greatest of them."""
    tests = [f"strcontains({field}, {_quoted_insights(t)})" for t in texts]
    return tests[0] if len(tests) == 1 else f"greatest({', '.join(tests)})"


# 1 on a line the GPU-lines query may match, else 0 (domain/markers.py GPU_HINTS: a superset of its markers).
GPU_HINT = (f"greatest({_any_of('@message', GPU_HINTS)}, least({_any_of('@logStream', HYPERPOD_STATUS_STREAMS)}, "
            f"{_any_of('@message', STATUS_STREAM_WORDS)}))")
# 1 on a line KERNEL_FILTER may match, else 0: its JSON form holds `"kernel"` however it is spaced.
KERNEL_HINT = _any_of("@message", ("kernel:", '"kernel"'))
# Per stream: the hours holding a line, its lines, first and last line, and its lines that may be GPU lines
# (`gpu_hints`) or kernel lines (`kernel_hints`). An hourly read asks only the streams with a hint for their GPU
# lines and kernel lines (collectors/logs.py).
SUMMARY_QUERY = (
    f"fields {GPU_HINT} as gpu_hint, {KERNEL_HINT} as kernel_hint "
    "| stats count(*) as lines, sum(gpu_hint) as hints, sum(kernel_hint) as kernel_hint_lines, "
    "min(@timestamp) as first, max(@timestamp) as last by @log, @logStream, bin(1h) as hour "
    "| stats count(*) as live_hours, sum(lines) as total_lines, sum(hints) as gpu_hints, "
    "sum(kernel_hint_lines) as kernel_hints, min(first) as first_event, max(last) as last_event by @log, @logStream"
)
# How many rows the two per-stream reads return, in one query and one row: `streams` (a line: stream-summary rows)
# and `kernel_streams` (a kernel line: kernel-streams rows). `strcontains` is the documented 1-or-0 substring test
# (a query cannot test a regex per line), so the JSON form of KERNEL_FILTER is counted in its two usual spacings
# only; a count is only a size, and a part it makes too big is read again in halves (`_Parts`).
# `id_streams` / `kernel_id_streams`: those whose name holds "i-" (an instance ID, as a substring test sees it), so
# the names without one, which ride with the first part, can be given parts of their own from the start.
KERNEL_MARKERS = ("kernel:", '"_TRANSPORT":"kernel"', '"_TRANSPORT": "kernel"', '"ident":"kernel"', '"ident": "kernel"')
_KERNEL_LINE = f"greatest({', '.join(f'strcontains(@message, {_quoted_insights(m)})' for m in KERNEL_MARKERS)})"
_NAMED = 'strcontains(@logStream, "i-")'
STREAM_COUNTS = (
    f"fields {_KERNEL_LINE} as kernel_line, {_NAMED} as named, least({_KERNEL_LINE}, {_NAMED}) as kernel_named "
    "| stats max(kernel_line) as kernel, max(named) as id, max(kernel_named) as kernel_id by @log, @logStream "
    "| stats count(*) as streams, sum(kernel) as kernel_streams, sum(id) as id_streams, "
    "sum(kernel_id) as kernel_id_streams by @log"
)
# The GPU evidence lines the rules match on (domain/markers.py), with the status streams' error lines.
GPU_QUERY = gpu_lines_query(MAX_ROWS)
# A training job's throughput and step-time lines (domain/throughput.py), and what makes a group a job's: NCCL's
# own lines are printed by the training processes, so a group holding them holds the job's output.
JOB_QUERY = job_figures_query(MAX_ROWS)
JOB_LINE = re.compile("|".join((NCCL_MARKER, *NCCL_TIMEOUT_MARKERS)))


def named_query(streams: Iterable[str], query: str) -> str:
    """`query` (GPU_QUERY, KERNEL_QUERY) over named streams only: `@logStream in [...]` first, which the log group's
    default `@logStream` field index serves (the query scans only those streams' lines)."""
    return f"filter @logStream in [{_names(streams)}] | {query}"


def lagging_hours_query(streams: Iterable[str]) -> str:
    """Per-hour lines of named streams with each hour's first and last line (collectors/lagging.py)."""
    return (f"filter @logStream in [{_names(streams)}] | stats count(*) as lines, min(@timestamp) as first, "
            "max(@timestamp) as last by @log, @logStream, bin(1h) as hour")


def hours_query(streams: Iterable[str]) -> str:
    """Detail bins for named streams; names are JSON-quoted, so no name can break out of the string."""
    return f"filter @logStream in [{_names(streams)}] | stats count(*) as lines by @log, @logStream, bin(1h) as hour"


def _names(streams: Iterable[str]) -> str:
    return ", ".join(_quoted(s) for s in sorted(set(streams)))


def _quoted(stream: str) -> str:
    """A stream name as a query's string literal: non-ASCII characters as themselves, only quotes and backslashes
    escaped (the escapes a query string reads: a `\\u00e9` would stay six characters and name no stream). Only for
    `nameable` names."""
    return json.dumps(stream, ensure_ascii=False)


def nameable(stream: str) -> bool:
    """Whether a query can name the stream: every character printable (JSON would escape a control character as
    `\\n` or `\\u0001`, which a query string does not read back). A read that would name another is made whole."""
    return stream.isprintable()


def hours_query_cost(stream: str) -> int:
    """Characters a stream adds to `hours_query`: its quoted name and the ", " before it."""
    return len(_quoted(stream)) + 2


def xid_locate_query(terms: Iterable[str]) -> str:
    """The streams that wrote a line the Xid watch matches (collectors/xid_locate.py): `terms` are the watch's own
    (rules/xid_watch.py::watch_terms, the metric filter's quoted phrases), each a case-sensitive substring
    (`like "…"`, as a quoted filter term matches anywhere in the event); one row per stream."""
    tests = " or ".join(f"@message like {_quoted_insights(t)}" for t in terms)
    return f"filter {tests} | stats count(*) as lines, min(@timestamp) as first_line by @log, @logStream"
