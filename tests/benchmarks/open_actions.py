"""What reading the open actions costs the judge (issue #37 item 4, alerts): `rules.judge.with_actions_asked` folds
the audit's entries into the history it read and runs `rules.history.actions_of` per node, so the alert and the events
say "done" or nothing, never "recovered" while the action is open.

    .venv/bin/python tests/benchmarks/open_actions.py --nodes 2000

A fleet world of N GPU nodes, a tenth with an Xid 79 at 09:00 (REBOOT, RULES §7), half of those rebooted at 20:00,
is audited to 10:00 and to 22:00 with a SQLite history: the second audit reads the first's spans, the Xids have left
its window, half the REBOOTs are done (a boot banner after the signal) and half still open. Per audit it prints the
judge's wall seconds, the part of them the actions take, the spans read, the actions open and done, and the changes
`what_changed.compare` finds against the previous audit's latest state (expected at 22:00: one DONE per rebooted node,
nothing for the open ones, no RECOVERED).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "tests"), str(ROOT / "tests" / "helpers"),
                 str(ROOT / "tests" / "writes"), str(ROOT)]

from helpers.worlds import (  # noqa: E402
    PClusterWorld,  # noqa: E402
    at,
    aws_for,
)
from test_fleet_memory import reboot_line, xid_line  # noqa: E402

from gpuaudit import pipeline  # noqa: E402
from gpuaudit.model.evidence import AuditRequest  # noqa: E402
from gpuaudit.model.timeutil import parse_time  # noqa: E402
from gpuaudit.report.markdown import finalize  # noqa: E402
from gpuaudit.rules.judge import JudgeConfig, judge, with_actions_asked  # noqa: E402
from gpuaudit.rules.what_changed import compare  # noqa: E402
from gpuaudit.writes.history import SqliteHistory  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args(argv)
    world = PClusterWorld(n_compute=args.nodes)
    for i, node in enumerate(world.compute):
        stream = world.healthy(node, at(-2), at(40))
        if i % 10 == 0:
            world.stream(world.group, stream, events=[(at(9), xid_line(node.hostname))])
            if i % 20 == 0:
                world.stream(world.group, stream, events=[(at(20), reboot_line(node.hostname))])
    store = SqliteHistory(Path(tempfile.mkdtemp()))
    previous: dict[str, dict[str, str]] = {}
    for end in (10, 22):
        world.raw["now"] = at(end, 30)
        request = AuditRequest(cluster=world.cluster, since=parse_time(at(end - 4)), until=parse_time(at(end)))
        evidence = pipeline.read_history(store, pipeline.collect(aws_for(world.world()), request), 30)
        started = time.perf_counter()
        result = judge(evidence, JudgeConfig.from_request(request), generated_at=evidence.now)
        judge_s = time.perf_counter() - started
        started = time.perf_counter()
        with_actions_asked(result, evidence)  # the same work the judge did once more, timed alone
        actions_s = time.perf_counter() - started
        result = finalize(pipeline.record_history(store, result, evidence), evidence)
        asked = [a for n in result.nodes for a in n.actions_asked or []]
        comparison = compare(result, previous)
        previous = {**previous, **{w.sk: dict(w.attrs) for w in comparison.writes}}
        kinds: dict[str, int] = {}
        for c in comparison.records:
            kinds[c.kind] = kinds.get(c.kind, 0) + 1
        print(f"{args.nodes:,} nodes, audit to {at(end)}: judge {judge_s:.2f} s, of which open actions "
              f"{actions_s:.2f} s; spans read {len(evidence.history.spans) if evidence.history else 0:,}; "
              f"actions open {sum(a.status == 'open' for a in asked):,}, done "
              f"{sum(a.status != 'open' for a in asked):,}; changes {kinds or 'none'}")


if __name__ == "__main__":
    main()
