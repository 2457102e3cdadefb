"""The log reads that look back before the window (RULES §2, §4 b): where the kernel look-back starts, the look-back
read a day at a time, the deep look-back for nodes older than it, and the boot-time lines (Fabric Manager, the
driver banner) of nodes whose window held none. collect_batch (collectors/logs.py) runs them in a batch's reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuaudit.collectors import insights
from gpuaudit.collectors.insights import InsightsRunner, _group_name, _time
from gpuaudit.collectors.log_queries import KERNEL_QUERY
from gpuaudit.domain.capability import accelerated_by_family, nvswitch_class
from gpuaudit.domain.markers import DRIVER_BANNER, FABRIC_MANAGER_STARTED, boot_lines_query
from gpuaudit.domain.streams import NodeIndex, stream_node_ids
from gpuaudit.model.evidence import GpuLine, KernelStream, NodeInfo


def lifetime_start(nodes: list[NodeInfo], padded_start: datetime, lookback: timedelta) -> datetime:
    """Kernel-stream identification looks back over node lifetimes (since launch), not just the window — but never
    more than `lookback` before the padded window: a full read's cost grows with it (docs/DEPLOY.md), and a node
    older than that is judged on the lines of the bounded span, with the bound said (rules/coverage.py)."""
    launches = [n.launch_time for n in nodes if n.launch_time]
    earliest = min(launches) if launches and len(launches) == len(nodes) else padded_start - lookback
    return min(max(earliest, padded_start - lookback), padded_start)


def deep_kernel_start(nodes: list[NodeInfo], lifetime: datetime, deep: timedelta) -> datetime | None:
    """Where a full read's second look for older nodes starts (their earliest launch, at most `deep` before the
    bounded lifetime start); None when no node launched before it."""
    launches = [n.launch_time for n in nodes if n.launch_time and n.launch_time < lifetime]
    return max(min(launches), lifetime - deep) if launches else None


DAY = timedelta(days=1)


def day_spans(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at each UTC midnight inside it: no span is longer than a day."""
    cuts = [start]
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0) + DAY
    while midnight < end:
        cuts.append(midnight)
        midnight += DAY
    return list(zip(cuts, [*cuts[1:], end], strict=True))


def kernel_spans(start: datetime, end: datetime, by_day: bool) -> list[tuple[datetime, datetime]]:
    """The kernel look-back's query ranges: the whole as one, or (`by_day`) cut at each UTC midnight."""
    return day_spans(start, end) if by_day else [(start, end)]


def summed_days(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """kernel-streams rows of several days as the whole look-back's: per stream, the kernel lines summed and the
    latest last line."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        key = (r.get("@log", ""), r.get("@logStream", ""))
        prior = out.get(key)
        if prior is None:
            out[key] = dict(r)
            continue
        prior["kernel_lines"] = str(int(float(prior["kernel_lines"])) + int(float(r["kernel_lines"])))
        if (_time(r.get("last_kernel_line")) or _EARLIEST) > (_time(prior.get("last_kernel_line")) or _EARLIEST):
            prior["last_kernel_line"] = r.get("last_kernel_line", "")
    return list(out.values())


_EARLIEST = datetime.min.replace(tzinfo=UTC)


BOOT_ROWS = 1_000  # newest boot-time lines kept per query: a node boots a few times, each boot logs a few lines


def lacking_boot_lines(nodes: list[NodeInfo], lines: list[GpuLine], index: NodeIndex) -> list[str]:
    """GPU nodes whose own streams held, in the GPU-lines window, no driver banner — or, on an NVSwitch type
    (RULES §2 table), no Fabric Manager start line: the ones a since-launch search is for."""
    seen_fm: set[str] = set()
    seen_driver: set[str] = set()
    for line in lines:
        owners = stream_node_ids(line.log_stream, index)
        if any(m in line.message for m in FABRIC_MANAGER_STARTED):
            seen_fm.update(owners)
        if DRIVER_BANNER in line.message:
            seen_driver.update(owners)
    out = []
    for n in nodes:
        itype = (n.instance_type or "").removeprefix("ml.")
        if n.role not in ("compute", "unknown") or accelerated_by_family(itype) is False:
            continue
        fm_expected = bool(itype) and nvswitch_class(itype, None)[1]
        if n.instance_id not in seen_driver or (fm_expected and n.instance_id not in seen_fm):
            out.append(n.instance_id)
    return sorted(out)


def read_boot_lines(runner: InsightsRunner, batch: list[str], index: NodeIndex, nodes: list[NodeInfo],
                    lines: list[GpuLine], start: datetime, end: datetime) -> list[GpuLine]:
    """RULES §2: Fabric Manager and the driver banner are logged at boot, often before the window. Their cost is
    bounded: only nodes lacking them in the window, only their streams named, from the lifetime start `start`
    (launch, at most KERNEL_LOOKBACK before the window, the kernel-streams query's own range) to `end`, where the
    GPU-lines query began — nothing it read is read twice — and at most BOOT_ROWS rows."""
    if start >= end:
        return []
    lacking = lacking_boot_lines(nodes, lines, index)
    found: list[GpuLine] = []
    for i in range(0, len(lacking), DEEP_IDS_PER_QUERY):
        for r in _boot_rows(runner, batch, lacking[i:i + DEEP_IDS_PER_QUERY], start, end):
            found.append(GpuLine(time=_time(r.get("@timestamp")) or start,
                                 log_group=_group_name(r.get("@log", "")), log_stream=r.get("@logStream", ""),
                                 message=r.get("@message", "")))
    return found


def _boot_rows(runner: InsightsRunner, batch: list[str], ids: list[str], start: datetime,
               end: datetime) -> list[dict[str, str]]:
    """The boot-time lines of `ids`' streams; a read that fills its row limit is read again for each half of the
    nodes, so no node's boot is cut off by another's (one node alone keeps its newest lines: its latest boots)."""
    limit = min(BOOT_ROWS, insights.MAX_ROWS)
    pending = runner.start("boot-lines", batch, start, end, boot_lines_query(ids, limit))
    rows = runner.results(pending) or []
    if len(rows) < limit or len(ids) == 1:
        return rows
    half = len(ids) // 2
    rows = [*_boot_rows(runner, batch, ids[:half], start, end), *_boot_rows(runner, batch, ids[half:], start, end)]
    runner.mark_reread(pending)  # the capped read's nodes were all read again, in halves
    return rows


DEEP_IDS_PER_QUERY = 200  # instance IDs named in one deep kernel query's stream filter


def read_deep_kernel(runner: InsightsRunner, batch: list[str], index: NodeIndex, nodes: list[NodeInfo],
                     kernel_keys: set[tuple[str, str]], start: datetime, lifetime: datetime,
                     by_day: bool = False) -> list[KernelStream]:
    """RULES §4 (b) is "since launch": nodes launched before the bounded lookback whose streams held no `kernel:`
    line in it are looked up back to their launch (at most KERNEL_DEEP_LOOKBACK), naming only their streams, so a
    quiet kernel stream is never called "not shipping kernel lines" for want of reading its boot lines."""
    proven = {iid for _, stream in kernel_keys for iid in stream_node_ids(stream, index)}
    lacking = sorted(n.instance_id for n in nodes if n.launch_time and n.launch_time < lifetime
                     and n.instance_id not in proven and n.role in ("compute", "unknown"))
    found: list[KernelStream] = []
    for i in range(0, len(lacking), DEEP_IDS_PER_QUERY):
        ids = lacking[i:i + DEEP_IDS_PER_QUERY]
        query = f"filter @logStream like /{'|'.join(ids)}/ | {KERNEL_QUERY}"
        days = [runner.start("kernel-streams", batch, a, b, query) for a, b in kernel_spans(start, lifetime, by_day)]
        rows = summed_days([r for p in days for r in runner.results(p) or []])
        for r in rows:
            found.append(KernelStream(log_group=_group_name(r.get("@log", "")), log_stream=r.get("@logStream", ""),
                                      kernel_lines=int(r["kernel_lines"]),
                                      last_kernel_line=_time(r.get("last_kernel_line"))))
    return found
