"""`gpuaudit bench-history`: what reading fleet memory costs one audit (issue #18 item 5).

A cluster of N GPU nodes audited hourly for D days: each audit adds one entry per node, folded by
`model.history.merged` into the node's latest span and written with the store's own `write` — the path
`pipeline.record_history` takes after every audit. What an audit's entry holds is drawn from a seeded generator, as
a fleet behaves:

* most nodes are quiet (same verdict, coverage Measured, no Xid, no reboot): their hourly entries extend
  one span, cut after `MAX_SPAN` (seven days);
* a hardware-class Xid arrives at `xid_rate` per node-day; every audit whose 24-hour window holds it
  carries it (verdict REBOOT), then the node reboots once and is quiet again — an entry with an Xid or a
  reboot is never merged, so such a node costs one item per audit for a day;
* at `silent_rate` per node-day a node's kernel stream goes silent for `silent_hours` (NOT OBSERVABLE);
* a share `unrebooted` of the REBOOTs is never done: the Xid leaves the window, no reboot follows, and the
  action stays open (rules.history.actions_of) — what on-call must still see.

What `gpuaudit history` shows of that fleet is measured too (issue #37): the Markdown's lines, the HTML's bytes
and, with Debian's Chromium at /usr/bin/chromium, the HTML page's height as the browser lays it out at 1,400 px
wide (a copy of the page with one script that writes `scrollHeight` into the DOM, read with `--dump-dom`).

The store is filled once; the node's latest span is carried in memory between the filling audits (what the
pipeline reads back each hour is what it wrote). Then one audit reads the look-back as the pipeline does
(`store.read(cluster, every node, now - lookback, now)`), timed and traced (tracemalloc peak of that read
alone), from SQLite (`--history DIR`). What the same read costs on the findings table is computed from the
items its key condition selects (items, Query requests, read request units as DynamoDB bills them);
`--moto` also puts every span in the table in moto and reads it with `DynamoHistory`, which checks that
computation and that both stores return the same spans (moto's seconds are not DynamoDB's: it is slow).
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuaudit.model.history import (
    DEFAULT_LOOKBACK_DAYS,
    MAX_SPAN,
    HistoryRead,
    HistorySpan,
    HistoryStore,
    HistoryXid,
    latest_spans,
    merged,
)
from gpuaudit.pipeline import render_history
from gpuaudit.writes.dynamo_batch import shard_of
from gpuaudit.writes.history import (
    HISTORY_SHARDS,
    SQLITE_FILE,
    DynamoHistory,
    SqliteHistory,
    history_item,
    snapshot_chunks,
)

CLUSTER = "bench-history"
START = datetime(2026, 9, 1, tzinfo=UTC)
XID_WINDOW_HOURS = 24  # an hourly audit's window: an Xid stays in it for a day
RETENTION_DAYS = DEFAULT_LOOKBACK_DAYS + 7


@dataclass(frozen=True)
class HistoryBenchConfig:
    nodes: int = 2000
    days: int = 30
    lookback_days: int = DEFAULT_LOOKBACK_DAYS
    xid_rate: float = 0.05  # hardware-class Xids per node-day
    silent_rate: float = 0.01  # kernel stream silences per node-day
    silent_hours: int = 6
    unrebooted: float = 0.05  # share of REBOOTs never done (the action stays open)
    seed: int = 0
    moto: bool = False  # also put every span in the findings table (moto) and read it with DynamoHistory

    def check(self) -> None:
        if not 1 <= self.nodes <= 20000:
            raise ValueError(f"--nodes must be 1..20000; got {self.nodes}")
        if not 1 <= self.days <= 90:
            raise ValueError(f"--days must be 1..90; got {self.days}")
        if not 1 <= self.lookback_days <= self.days:
            raise ValueError(f"--lookback-days must be 1..--days ({self.days}); got {self.lookback_days}")
        for name, rate in (("--xid-rate", self.xid_rate), ("--silent-rate", self.silent_rate)):
            if not 0 <= rate <= 24:
                raise ValueError(f"{name} must be 0..24 per node-day; got {rate}")
        if not 0 <= self.unrebooted <= 1:
            raise ValueError(f"--unrebooted must be 0..1 (a share of the REBOOTs); got {self.unrebooted}")


def node_ids(nodes: int) -> list[str]:
    return [f"i-{i:017x}" for i in range(nodes)]


@dataclass
class _NodeState:
    xid_at: datetime | None = None  # the Xid in the current audit's window
    never_rebooted: bool = False  # this Xid's REBOOT is never done
    rebooted_at: datetime | None = None  # to be reported by the next audit
    silent_until: datetime | None = None


def _entries(config: HistoryBenchConfig, rng: random.Random, states: list[_NodeState], audit: int,
             when: datetime, undone: random.Random) -> list[HistorySpan]:
    audit_id = f"a{audit:05d}"
    out = []
    for node_id, state in zip(node_ids(len(states)), states, strict=True):
        if state.xid_at is not None and when - state.xid_at >= timedelta(hours=XID_WINDOW_HOURS):
            # the REBOOT was acted on (one reboot, then quiet), or never: the Xid leaves the window all the same
            state.xid_at, state.rebooted_at = None, None if state.never_rebooted else when
        elif state.xid_at is None and rng.random() < config.xid_rate / 24:
            state.xid_at = when - timedelta(minutes=rng.randint(1, 59))
            state.never_rebooted = undone.random() < config.unrebooted  # its own generator: the fleet stays the same
        if state.silent_until is None and rng.random() < config.silent_rate / 24:
            state.silent_until = when + timedelta(hours=config.silent_hours)
        silent = state.silent_until is not None and when < state.silent_until
        if state.silent_until is not None and not silent:
            state.silent_until = None
        xids = [HistoryXid(code=79, pci="0000:53:00", first=state.xid_at, last=state.xid_at)] if state.xid_at else []
        reboots = [state.rebooted_at] if state.rebooted_at else []
        state.rebooted_at = None
        verdict = "NOT OBSERVABLE" if silent else ("REBOOT" if xids else None)
        out.append(HistorySpan(cluster=CLUSTER, instance_id=node_id, audit_id=audit_id, audit_time=when,
                               last_audit_id=audit_id, through=when, mode="coverage", verdict=verdict,
                               xid_status="Not observable" if silent else "Measured", xids=xids, reboots=reboots,
                               launch_time=START - timedelta(days=1)))
    return out


def fill(config: HistoryBenchConfig, store: HistoryStore) -> dict[str, Any]:
    """Every hourly audit of `days`, written through the store's own merge-and-write path."""
    rng, undone = random.Random(config.seed), random.Random(config.seed + 1)
    states = [_NodeState() for _ in range(config.nodes)]
    latest: dict[str, HistorySpan] = {}
    puts = 0
    started = time.perf_counter()
    audits = config.days * 24
    for audit in range(audits):
        when = START + timedelta(hours=audit + 1)
        spans = merged(_entries(config, rng, states, audit, when, undone), latest)
        puts += len(spans)
        store.write(spans, RETENTION_DAYS, when)
        latest.update((s.instance_id, s) for s in spans)
    return {"audits": audits, "writes": puts, "writes_per_audit": round(puts / audits),
            "wall_s": round(time.perf_counter() - started, 1), "now": START + timedelta(hours=audits)}


def read_once(store: HistoryStore, config: HistoryBenchConfig, now: datetime) -> tuple[HistoryRead, dict[str, Any]]:
    """The audit's read, timed untraced, then once more under tracemalloc for its peak (tracing slows Python)."""
    ids = node_ids(config.nodes)
    since = now - timedelta(days=config.lookback_days)
    started = time.perf_counter()
    read = store.read(CLUSTER, ids, since, now)
    wall = time.perf_counter() - started
    tracemalloc.start()
    store.read(CLUSTER, ids, since, now)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return read, {"items_read": read.items_read, "requests": read.requests, "spans": len(read.spans),
                  "wall_s": round(wall, 2), "peak_traced_mb": round(peak / 2**20, 1)}


def dynamodb_read_cost(stored: list[HistorySpan], ids: list[str], since: datetime, until: datetime) -> dict[str, Any]:
    """What `DynamoHistory.read` costs on DynamoDB, from the items its keys select: the snapshot (a GetItem of its
    head, a Query of its pieces: each node's latest span), then one Query per shard of closed spans
    (`sk BETWEEN since - MAX_SPAN AND until`), a page per started 1 MB, and, consistent, 1 read request unit per
    started 4 KB of the items a request reads (DynamoDB bills what the key condition reads)."""
    low, high = since - MAX_SPAN, until
    latest = latest_spans(HistoryRead(store="", since=since, until=until, spans=stored))
    pieces = snapshot_chunks(latest)
    snapshot_bytes = sum(len(p) for p in pieces)
    per_shard = dict.fromkeys(range(HISTORY_SHARDS), 0)
    items = 0
    for s in stored:
        if latest.get(s.instance_id) != s and low <= s.audit_time <= high:
            per_shard[shard_of(s.instance_id, HISTORY_SHARDS)] += len(json.dumps(history_item(s, "0")))
            items += 1
    sizes = [*per_shard.values(), snapshot_bytes]
    return {"items_read": items + len(pieces) + 1,
            "requests": 1 + sum(max(1, math.ceil(size / 2**20)) for size in sizes),
            "read_request_units": 1 + sum(max(1, math.ceil(size / 4096)) for size in sizes),
            "item_mb_read": round(sum(sizes) / 2**20, 1), "snapshot_pieces": len(pieces),
            "wanted_nodes": len(set(ids))}


def _dynamodb_read(config: HistoryBenchConfig, stored: list[HistorySpan], now: datetime) -> tuple[
        HistoryRead, dict[str, Any]]:
    """Every stored span put in the findings table (moto) by the deployed store, then the same read."""
    from moto import mock_aws

    from gpuaudit.devtools.demo import TABLE, ensure_findings_table
    from gpuaudit.embedded.backend import WorldBackend
    from gpuaudit.embedded.world import World

    with mock_aws():
        world = World(now=now, account_id="000000000000", region="us-west-2", data={}, log_groups={}, faults=[])
        ddb = WorldBackend(world).session().client("dynamodb")
        ensure_findings_table(ddb)
        store = DynamoHistory(ddb, TABLE)
        started = time.perf_counter()
        store.write(stored, RETENTION_DAYS, now)
        put_s = time.perf_counter() - started
        read, figures = read_once(store, config, now)
        return read, {**figures, "items_put": len(stored), "put_wall_s": round(put_s, 1)}


def _spans_key(spans: list[HistorySpan]) -> list[str]:
    return sorted(s.model_dump_json() for s in spans)


CHROMIUM = Path("/usr/bin/chromium")
PAGE_WIDTH = 1400
_HEIGHT = re.compile(r'data-page-height="(\d+)"')


def page_height(html: str, chromium: Path = CHROMIUM) -> int | None:
    """The page's height in CSS px as Chromium lays it out at PAGE_WIDTH (closed `<details>` stay closed); None
    without Chromium. The measured copy drops the page's CSP and adds one script that writes `scrollHeight` into the
    DOM, which `--dump-dom` prints once the page has loaded."""
    if not chromium.exists():
        return None
    probe = ("<script>window.addEventListener('load',function(){document.body.setAttribute('data-page-height',"
             "String(document.documentElement.scrollHeight))})</script>")
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html).replace("</body>", probe + "</body>")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "page.html"
        path.write_text(page, encoding="utf-8")
        run = subprocess.run(
            [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={Path(folder) / 'profile'}", f"--window-size={PAGE_WIDTH},1000",
             "--virtual-time-budget=30000", "--dump-dom", path.as_uri()],
            capture_output=True, text=True, timeout=600, check=False)
    found = _HEIGHT.search(run.stdout)
    if run.returncode != 0 or found is None:
        raise RuntimeError(f"chromium could not measure the page (exit {run.returncode}): {run.stderr[-500:]}")
    return int(found.group(1))


def shown(config: HistoryBenchConfig, everything: HistoryRead) -> dict[str, Any]:
    """What `gpuaudit history --days <look-back>` prints of the fleet: Markdown lines, HTML bytes and height."""
    markdown = render_history(everything, CLUSTER, "md", config.lookback_days)
    html = render_history(everything, CLUSTER, "html", config.lookback_days)
    opened = render_history(everything, CLUSTER, "md", config.lookback_days, open_only=True)
    return {"markdown_lines": len(markdown.splitlines()), "markdown_open_lines": len(opened.splitlines()),
            "html_kb": round(len(html.encode()) / 1024), "html_height_px": page_height(html),
            "chromium": CHROMIUM.exists()}


def run_history_bench(config: HistoryBenchConfig) -> dict[str, Any]:
    config.check()
    with tempfile.TemporaryDirectory() as folder:
        sqlite = SqliteHistory(Path(folder))
        filled = fill(config, sqlite)
        now = filled.pop("now")
        everything = sqlite.read(CLUSTER, None, START - timedelta(days=1), now)
        stored = everything.spans
        read, sqlite_figures = read_once(sqlite, config, now)
        sqlite_figures["file_mb"] = round((Path(folder) / SQLITE_FILE).stat().st_size / 2**20, 1)
    ids = node_ids(config.nodes)
    figures: dict[str, Any] = {
        "config": {"nodes": config.nodes, "days": config.days, "lookback_days": config.lookback_days,
                   "xid_rate": config.xid_rate, "silent_rate": config.silent_rate,
                   "silent_hours": config.silent_hours, "unrebooted": config.unrebooted, "seed": config.seed},
        "fill": {**filled, "spans_stored": len(stored)},
        "sqlite": sqlite_figures,
        "dynamodb": dynamodb_read_cost(stored, ids, now - timedelta(days=config.lookback_days), now),
        "spans_per_node": round(len(read.spans) / config.nodes, 2),
        "shown": shown(config, everything),
    }
    if config.moto:
        dyn_read, figures["dynamodb_moto"] = _dynamodb_read(config, stored, now)
        figures["same_spans"] = _spans_key(dyn_read.spans) == _spans_key(read.spans)
    return figures


def render_history_table(figures: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    c, fill_ = figures["config"], figures["fill"]
    table = Table(title=(f"gpuaudit bench-history: {c['nodes']:,} nodes × {c['days']} days of hourly audits, "
                         f"one audit reading {c['lookback_days']} days (seed {c['seed']}, Xid rate {c['xid_rate']:g}, "
                         f"silent rate {c['silent_rate']:g} per node-day)"))
    table.add_column("")
    table.add_column("SQLite (--history DIR)", justify="right")
    table.add_column("DynamoDB (key condition)", justify="right")
    table.add_column("DynamoDB in moto", justify="right")
    sq, dy, mo = figures["sqlite"], figures["dynamodb"], figures.get("dynamodb_moto", {})

    def cell(figures_of: dict[str, Any], key: str) -> str:
        return f"{figures_of[key]:,}" if key in figures_of else "—"

    for label, key in (("items read", "items_read"), ("requests", "requests"), ("spans returned", "spans"),
                       ("read request units", "read_request_units"), ("read wall s", "wall_s"),
                       ("read peak traced MB", "peak_traced_mb")):
        table.add_row(label, cell(sq, key), cell(dy, key), cell(mo, key))
    console.print(table)
    same = figures.get("same_spans")
    console.print(f"filled by {fill_['audits']:,} audits: {fill_['writes_per_audit']:,} span writes per audit, "
                  f"{fill_['spans_stored']:,} spans stored (SQLite file {sq['file_mb']} MB, fill {fill_['wall_s']} s); "
                  f"{figures['spans_per_node']} spans per node in the look-back; DynamoDB items read "
                  f"{dy['item_mb_read']} MB; same spans from both stores: "
                  f"{'not checked (--moto)' if same is None else ('yes' if same else 'NO')}")
    sh = figures["shown"]
    height = (f"{sh['html_height_px']:,} px tall" if sh["html_height_px"] is not None
              else "height not measured (no Chromium)")
    console.print(f"`gpuaudit history --days {c['lookback_days']}`: Markdown {sh['markdown_lines']:,} lines "
                  f"(--open {sh['markdown_open_lines']:,}); HTML "
                  f"{sh['html_kb']:,} KB, {height} at {PAGE_WIDTH} px wide")
