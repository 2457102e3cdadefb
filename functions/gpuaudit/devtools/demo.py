"""`gpuaudit demo`: the shipped demo worlds through the whole pipeline, findings written to a
DynamoDB table and alerts published to an SNS topic, both in the embedded backend (moto). The reports go to files
(on the terminal with --verbose); the terminal gets one recap table."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.text import Text

from gpuaudit.collectors.aws import Aws
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import load_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.timeutil import parse_time
from gpuaudit.outputs import write_ids_files
from gpuaudit.pipeline import run_audit
from gpuaudit.report.alert import cut
from gpuaudit.report.escape import one_line
from gpuaudit.report.html import render_html
from gpuaudit.writes.sinks import write_and_alert

TABLE = "gpuaudit-findings"
TOPIC = "gpuaudit-alerts"


def demo_worlds() -> list[dict[str, Any]]:
    folder = resources.files("gpuaudit") / "worlds"
    manifest = json.loads((folder / "demo.json").read_text(encoding="utf-8"))
    return [dict(entry, path=str(folder / entry["world"])) for entry in manifest["audits"]]


def demo_request(entry: dict[str, Any]) -> AuditRequest:
    """The audit a demo entry runs, with the scope flags the CLI takes: `instances` (--instances), `filesystems`
    (--filesystem), `log_groups` (--log-group), `eks_cluster` (--eks-cluster); `cluster` is optional beside them."""
    return AuditRequest.model_validate({
        "cluster": entry.get("cluster"), "mode": entry["mode"],
        "since": parse_time(entry["since"]) if entry.get("since") else None,
        "until": parse_time(entry["until"]) if entry.get("until") else None,
        "run_hours": entry.get("run_hours"), "instance_ids": entry.get("instances", []),
        "file_system_ids": entry.get("filesystems", []), "log_groups": entry.get("log_groups", []),
        "eks_cluster": entry.get("eks_cluster")})


def demo_name(entry: dict[str, Any]) -> str:
    """The entry's output stem: its `name`, else its world's (one world can serve several scoped runs)."""
    return str(entry.get("name") or entry["world"].replace(".world.json", ""))


@dataclass(frozen=True)
class DemoRun:
    """One scenario of the demo, as its recap row says it."""

    scenario: str
    question: str
    answer: str
    alert: str  # the subject published, or why none was
    html: Path
    redelivered_cleanly: bool  # the same audit delivered again wrote and published nothing


@contextmanager
def _environment(changes: dict[str, str | None]) -> Iterator[None]:
    """os.environ with `changes` (None: unset) for the block, then as it was."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_demo(out_dir: Path, console: Console, verbose: bool = False) -> list[DemoRun]:
    """Every shipped scenario through audit, report, findings table and alert topic (moto). Writes per scenario
    `<name>.result.json`, `.report.md`, `.report.html` and, when an alert went out, `.alert.txt`; prints the
    full reports only when `verbose`, and ends with one recap table."""
    from moto import mock_aws

    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[DemoRun] = []
    # The demo reads no account: the caller's profile (even one that does not exist) is not read by moto's own
    # sessions either, as mock_aws already keeps the caller's credentials out.
    no_profile: dict[str, str | None] = {"AWS_PROFILE": None, "AWS_DEFAULT_PROFILE": None}
    with mock_aws(), _environment(no_profile):
        for entry in demo_worlds():
            world = load_world(entry["path"])
            backend = WorldBackend(world)
            session = backend.session()
            aws = Aws(session=session, region=world.region, clock=_frozen(world.now), sleep=backend.sleep,
                      monotonic=backend.monotonic)
            result = run_audit(aws, demo_request(entry))
            # the IDs files beside the reports, named where the commands (and the alert) read them
            result, _ = write_ids_files(result, out_dir / demo_name(entry))
            ddb, sns = session.client("dynamodb"), session.client("sns")
            ensure_findings_table(ddb)
            topic = sns.create_topic(Name=TOPIC)["TopicArn"]
            sink = write_and_alert(ddb, TABLE, sns, topic, result, int(world.now.timestamp()))
            again = write_and_alert(ddb, TABLE, sns, topic, result, int(world.now.timestamp()))
            stem = out_dir / demo_name(entry)
            html = Path(f"{stem}.report.html")
            Path(f"{stem}.result.json").write_text(result.to_json() + "\n", encoding="utf-8")
            Path(f"{stem}.report.md").write_text(result.report_markdown + "\n", encoding="utf-8")
            html.write_text(render_html(result) + "\n", encoding="utf-8")
            if sink.alert is not None:
                Path(f"{stem}.alert.txt").write_text(f"Subject: {sink.subject}\n\n{sink.alert}\n", encoding="utf-8")
            if verbose:
                console.rule(f"[bold]{escape(entry['title'])}")
                console.print(Markdown(result.report_markdown))
                console.print(Text(f"Alert: {sink.subject}\n{sink.alert}" if sink.alert else "Alert: none"))
            runs.append(DemoRun(demo_name(entry), entry["title"], result.headline,
                                sink.subject or "no (nothing changed)" if sink.published else "no (nothing changed)",
                                html, again.duplicate and not again.published))
    for line in recap(runs, out_dir):
        # soft wrap: the terminal wraps a long line where it must, Rich never breaks one inside an ID or a path
        console.print(line, soft_wrap=True, highlight=False)
    return runs


def recap(runs: list[DemoRun], out_dir: Path) -> list[Text]:
    """The demo's last word: a few plain lines per scenario, each value whole on its own labelled line (a table
    folds IDs and paths mid-token at 80 or 160 columns; these lines read the same on a terminal and in a pipe)."""
    lines = [Text(f"gpuaudit demo: {len(runs)} scenarios (findings table {TABLE} and alert topic {TOPIC} in an "
                  f"embedded account); per scenario {out_dir}/<scenario>.result.json, .report.md, .report.html, "
                  ".alert.txt", style="bold")]
    for run in runs:
        alert = run.alert if run.redelivered_cleanly else f"{run.alert}; SAME AUDIT WROTE AGAIN (bug)"
        # Text, never markup; what a world wrote shown with its control characters made visible
        lines += [Text(""), Text(one_line(run.scenario), style="bold"),
                  Text(f"  question: {one_line(run.question)}"),
                  Text(f"  answer:   {one_line(cut(run.answer, 160))}"),
                  Text(f"  alert:    {one_line(alert)}"),
                  Text(f"  report:   {one_line(str(run.html))}")]
    return lines


def _frozen(now: datetime) -> Callable[[], datetime]:
    return lambda: now


def ensure_findings_table(ddb: Any) -> None:
    """The findings table with the key schema the stack gives it (pk, sk), created once in the embedded account."""
    if TABLE in ddb.list_tables()["TableNames"]:
        return
    ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                           {"AttributeName": "sk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                {"AttributeName": "sk", "KeyType": "RANGE"}])
