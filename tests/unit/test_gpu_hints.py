"""The stream summary's hints are supersets of the reads an hourly audit asks by them: GPU hints (domain/markers.py
GPU_HINTS, collectors/log_queries.py GPU_HINT) of the GPU-lines query, kernel hints (KERNEL_HINT) of the kernel-streams
query. An hourly read asks only the streams with a hint for those lines, so a line the query would match in a stream
without a hint would be lost."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit.collectors.log_queries import GPU_QUERY, KERNEL_FILTER, KERNEL_QUERY, SUMMARY_QUERY, named_query
from gpuaudit.domain.markers import GPU_HINTS, GPU_LINE_MARKERS, HYPERPOD_STATUS_STREAMS, STATUS_STREAM_WORDS
from gpuaudit.embedded.insights import LogRecord, run_query

MARKERS = re.compile("|".join(GPU_LINE_MARKERS))
STATUS_STREAM = re.compile(f"^({'|'.join(s.rstrip('/') for s in HYPERPOD_STATUS_STREAMS)})/")
STATUS_WORDS = re.compile("|".join(STATUS_STREAM_WORDS))
T0 = 1_790_000_000  # seconds
ACCOUNT = "123456789012"


def _hinted(stream: str, message: str) -> bool:
    return any(h in message for h in GPU_HINTS) or (
        any(s in stream for s in HYPERPOD_STATUS_STREAMS) and any(w in message for w in STATUS_STREAM_WORDS))


KERNEL_REGEXES = [re.compile(m) for m in re.findall(r"like /((?:[^/\\]|\\.)*)/", KERNEL_FILTER)]


@settings(max_examples=200, deadline=None)
@given(line=st.one_of(*(st.from_regex(r) for r in KERNEL_REGEXES)))
def test_every_line_the_kernel_query_matches_holds_a_kernel_hint(line: str) -> None:
    assert "kernel:" in line or '"kernel"' in line, line


def test_the_kernel_filter_has_each_of_its_forms() -> None:
    assert len(KERNEL_REGEXES) == 3 and KERNEL_REGEXES[1].search('{"_TRANSPORT" : "kernel", "MESSAGE": "x"}')
    assert KERNEL_REGEXES[2].search('{"host":"ip-10-0-0-1","ident":"kernel","message":"NVRM: loading"}')


def test_hints_are_plain_text() -> None:
    assert not [h for h in GPU_HINTS if set(h) & set("()[]{}?*+|^$\\.")], GPU_HINTS


@settings(max_examples=300, deadline=None)
@given(line=st.from_regex(MARKERS), stream=st.sampled_from(["ip-10-0-1-2.i-0abc", "LifecycleConfig/g/i-0abc"]))
def test_every_line_the_gpu_query_matches_holds_a_hint(line: str, stream: str) -> None:
    assert _hinted(stream, line), line


@settings(max_examples=100, deadline=None)
@given(line=st.from_regex(STATUS_WORDS), stream=st.sampled_from(
    ["LifecycleConfig/worker/i-0abc", "DeepHealthCheckResults/worker/i-0abc"]))
def test_every_status_stream_error_line_holds_a_hint(line: str, stream: str) -> None:
    assert STATUS_STREAM.search(stream) and _hinted(stream, line), (stream, line)


LINES = [
    ("s-ok", "kernel: eth0: link up"),
    ("s-ok", "systemd[1]: Started Session 3 of user root."),
    ("s-xid", "kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, GPU has fallen off the bus."),
    ("s-nccl", "rank0: NCCL WARN Call to ibv_modify_qp failed"),
    ("s-fm", "nvidia-fabricmanager[812]: Fabric Manager started"),
    ("LifecycleConfig/worker/i-0abc", "ERROR: on_create.sh exited 1"),
    ("LifecycleConfig/worker/i-0def", "all good"),
    ("s-near", "NCCLINFO Fabric-Manager nvrm"),  # near misses: neither a GPU line nor a hint
    ("s-json", '{"_TRANSPORT" :  "kernel", "MESSAGE": "eth0: link up"}'),  # a kernel line, JSON as journald writes it
]


def test_the_summary_counts_hints_exactly_in_the_streams_the_gpu_query_finds_lines_in() -> None:
    # Given lines of several streams, some GPU lines, some near misses
    records = [LogRecord("/g", stream, (T0 + i) * 1000, message) for i, (stream, message) in enumerate(LINES)]

    # When the stream summary and the GPU-lines query run over them (as Logs Insights would, embedded)
    summary = run_query(SUMMARY_QUERY, records, T0 - 60, T0 + 60, ACCOUNT)
    gpu = run_query(GPU_QUERY, records, T0 - 60, T0 + 60, ACCOUNT)

    # Then the streams with a hint are the streams with GPU lines, and the named read finds the same lines
    hints = {dict(r)["@logStream"]: int(float(dict(r)["gpu_hints"])) for r in
             ([(c["field"], c["value"]) for c in row] for row in summary.rows)}
    with_lines = {dict((c["field"], c["value"]) for c in row)["@logStream"] for row in gpu.rows}
    assert {s for s, n in hints.items() if n} == with_lines == {
        "s-xid", "s-nccl", "s-fm", "LifecycleConfig/worker/i-0abc"}
    assert hints["s-xid"] == 1 and hints["s-ok"] == 0
    named = run_query(named_query(sorted(with_lines), GPU_QUERY), records, T0 - 60, T0 + 60, ACCOUNT)
    assert named.rows == gpu.rows
    # and likewise the kernel hints and the kernel-streams query
    kernel = run_query(KERNEL_QUERY, records, T0 - 60, T0 + 60, ACCOUNT)
    kernel_hints = {dict((c["field"], c["value"]) for c in row)["@logStream"]:
                    int(float(dict((c["field"], c["value"]) for c in row)["kernel_hints"])) for row in summary.rows}
    kernel_streams = {dict((c["field"], c["value"]) for c in row)["@logStream"]: row for row in kernel.rows}
    assert {s for s, n in kernel_hints.items() if n} == set(kernel_streams) == {"s-ok", "s-xid", "s-json"}
    assert kernel_hints["s-ok"] == 1  # "kernel: eth0: link up" only
    named_kernel = run_query(named_query(sorted(kernel_streams), KERNEL_QUERY), records, T0 - 60, T0 + 60, ACCOUNT)
    assert named_kernel.rows == kernel.rows
