"""`gpuaudit demo`: the shipped demo worlds through the whole pipeline, findings written to a
DynamoDB table and alerts published to an SNS topic, both in the embedded backend (moto)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from gpuaudit.collectors.aws import Aws
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import load_world
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report.html import render_html
from gpuaudit.sinks import write_and_alert

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


def run_demo(out_dir: Path, console: Console) -> list[Path]:
    from moto import mock_aws

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with mock_aws():
        for entry in demo_worlds():
            world = load_world(entry["path"])
            backend = WorldBackend(world)
            session = backend.session()
            aws = Aws(session=session, region=world.region, clock=_frozen(world.now), sleep=lambda _s: None)
            result = run_audit(aws, demo_request(entry))
            console.rule(f"[bold]{entry['title']}")
            console.print(Markdown(result.report_markdown))
            ddb, sns = session.client("dynamodb"), session.client("sns")
            ensure_findings_table(ddb)
            topic = sns.create_topic(Name=TOPIC)["TopicArn"]
            sink = write_and_alert(ddb, TABLE, sns, topic, result, int(world.now.timestamp()))
            again = write_and_alert(ddb, TABLE, sns, topic, result, int(world.now.timestamp()))
            stem = out_dir / demo_name(entry)
            Path(f"{stem}.result.json").write_text(result.to_json() + "\n", encoding="utf-8")
            Path(f"{stem}.report.md").write_text(result.report_markdown + "\n", encoding="utf-8")
            Path(f"{stem}.report.html").write_text(render_html(result) + "\n", encoding="utf-8")
            written += [Path(f"{stem}.result.json"), Path(f"{stem}.report.md"), Path(f"{stem}.report.html")]
            table = Table(title=f"Sinks (embedded): DynamoDB table {TABLE}, SNS topic {TOPIC}")
            table.add_column("what")
            table.add_column("value")
            table.add_row("items written", str(sink.items_written))
            table.add_row("alert published", "yes" if sink.published else "no (nothing changed)")
            table.add_row("alert text", sink.alert or "—")
            table.add_row("same audit delivered again", "duplicate: nothing written, nothing published"
                          if again.duplicate and not again.published else "WROTE AGAIN (bug)")
            table.add_row("result / report", f"{stem}.result.json, {stem}.report.md")
            console.print(table)
            console.print(f"HTML report: {stem}.report.html", soft_wrap=True, highlight=False)
    return written


def _frozen(now: datetime) -> Callable[[], datetime]:
    return lambda: now


def ensure_findings_table(ddb: Any) -> None:
    """The findings table with the key schema the stack gives it (pk, sk), created once in the embedded account."""
    if TABLE in ddb.list_tables()["TableNames"]:
        return
    ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                           {"AttributeName": "sk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}])
