"""Verdict: findings to DynamoDB and one alert to SNS (moto), the HTML report next to the result, linked; the same audit
again writes and
publishes nothing new; EMF metrics; a failed step is a `Not checked` gap in the result."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from handlers import inventory, verdict
from handlers.runtime import InvalidEvent, ThrottlingException
from lambda_harness import (
    BUCKET,
    EVENT_ACCOUNT,
    PCLUSTER_WORLD,
    Account,
    LambdaContext,
    console_target,
    through_steps,
    world_account,
)

from gpuaudit.collectors.aws import Aws
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.pipeline import run_audit
from gpuaudit.writes import dynamo_batch
from gpuaudit.writes.history import SqliteHistory
from gpuaudit.writes.sinks import latest_pk

INCIDENT = {"cluster": "llm-pretrain-b200", "mode": "incident", "since": "2026-09-27T10:00:00Z",
            "until": "2026-09-27T12:00:00Z"}


@pytest.fixture
def pcluster(monkeypatch: pytest.MonkeyPatch) -> Any:
    with world_account(monkeypatch, PCLUSTER_WORLD, clusters=("llm-pretrain-b200",)) as acct:
        yield acct


def test_the_verdict_writes_findings_and_alerts_once_per_audit(pcluster: Account) -> None:
    given = through_steps(console_target(INCIDENT))
    first = verdict.handler(given, LambdaContext())
    items, alerts, objects = pcluster.findings(), pcluster.published(), pcluster.object_keys()

    assert first["audited"] and not first["findings"]["duplicate"] and first["alert_published"]
    summary = [i for i in items if i["pk"] == f"AUDIT#{first['audit_id']}" and i["sk"] == "SUMMARY"]
    assert len(summary) == 1 and summary[0]["cluster"] == "llm-pretrain-b200"
    assert {i["sk"] for i in items if i["pk"] == latest_pk("llm-pretrain-b200", "incident", "NODE#i-0e58b081006f7e3df")
            } >= {"NODE#i-0e58b081006f7e3df"}
    assert summary[0]["result_key"] == first["result"]["json"]  # the result JSON holds every node's row
    (alert,) = alerts
    # the subject counts what changed (two blind nodes, the leading hypothesis) and names the mode
    assert alert["subject"] == "[gpuaudit] llm-pretrain-b200: 2 NOT OBSERVABLE, 1 NEW HYPOTHESIS (incident)"
    assert "i-0e58b081006f7e3df" in alert["message"]["default"]
    assert json.loads(alert["message"]["https"])["content"]["textType"] == "client-markdown"  # AWS Chatbot's shape
    assert {first["result"]["json"], first["result"]["report"], first["result"]["html"]} <= set(objects)

    again = verdict.handler(given, LambdaContext())
    assert again["findings"] == {"written": 0, "duplicate": True} and not again["alert_published"]
    assert (pcluster.findings(), pcluster.published(), pcluster.object_keys()) == (items, alerts, objects)


def test_the_html_report_lands_next_to_the_result_and_the_alert_and_summary_link_to_it(pcluster: Account) -> None:
    given = through_steps(console_target(INCIDENT))
    first = verdict.handler(given, LambdaContext())
    html_key = first["result"]["html"]
    assert html_key == first["result"]["json"].removesuffix(".json") + ".html"
    assert html_key == f"results/llm-pretrain-b200/{first['audit_id']}.html"
    s3 = pcluster.session.client("s3")
    got = s3.get_object(Bucket=BUCKET, Key=html_key)
    assert got["ContentType"].startswith("text/html")
    assert got["Body"].read().decode().lstrip().lower().startswith("<!doctype html")

    region = pcluster.world.region
    link = (f"https://console.aws.amazon.com/s3/object/{BUCKET}?region={region}&prefix={html_key}"
            f" · s3://{BUCKET}/{html_key}")
    (summary,) = [i for i in pcluster.findings() if i["pk"] == f"AUDIT#{first['audit_id']}" and i["sk"] == "SUMMARY"]
    assert summary["report_link"] == link
    (alert,) = pcluster.published()
    assert alert["message"]["default"].splitlines()[-2] == f"Report: {link}"
    assert link in json.loads(alert["message"]["https"])["content"]["description"]
    assert "X-Amz-Signature" not in json.dumps(alert) + summary["report_link"]  # no presigned URL

    items, alerts, objects = pcluster.findings(), pcluster.published(), pcluster.object_keys()
    again = verdict.handler(given, LambdaContext())
    assert again["findings"] == {"written": 0, "duplicate": True} and not again["alert_published"]
    assert (pcluster.findings(), pcluster.published(), pcluster.object_keys()) == (items, alerts, objects)


def test_no_account_id_in_alerts_findings_or_the_summary(pcluster: Account) -> None:
    out = verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
    text = json.dumps([out, pcluster.published(), pcluster.findings()])
    assert pcluster.world.account_id not in text and EVENT_ACCOUNT not in text


def test_the_result_and_report_land_in_the_evidence_bucket(pcluster: Account) -> None:
    out = verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
    result = pcluster.read_json(out["result"]["json"])
    assert result["audit_id"] == out["audit_id"] and result["schema"] == "gpu-audit-result/1"
    assert result["window"]["start"] == "2026-09-27T10:00:00Z" and result["window"]["source"] == "user"
    assert any(b["branch"] == "B" for b in result["branches"])


def test_a_grouped_command_s_ids_file_lands_beside_the_report_and_every_output_names_its_uri(
        pcluster: Account) -> None:
    # issue #49 item 1: the two blind nodes are one action whose IDs the file beside the report in S3 lists
    out = verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
    result = pcluster.read_json(out["result"]["json"])
    (group,) = [g for g in result["action_groups"] if g["ids_file"]]
    key = out["result"]["json"].removesuffix(".json") + "." + group["ids_file"]
    assert group["ids_at"] == f"s3://{BUCKET}/{key}" and group["ids_at"] in group["action"]
    assert out["result"]["ids"] == [group["ids_at"]]  # the execution's output names it too
    body = pcluster.session.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
    assert body.split() == group["nodes"] and len(group["nodes"]) == 2
    assert "<report>." not in json.dumps(result)


def test_emf_metrics_count_nodes_by_xid_status_verdicts_and_gaps(pcluster: Account,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    nodes = {m["xid_status"]: m["Nodes"] for m in emitted if "Nodes" in m}
    verdicts = {m["verdict"]: m["Verdicts"] for m in emitted if "Verdicts" in m}
    assert nodes == {"Measured": [1.0], "Not observable": [2.0]}
    assert verdicts == {"NOT OBSERVABLE": [2.0], "none": [1.0]}
    (flushed,) = [m for m in emitted if "VisibilityGaps" in m]
    assert flushed["cluster"] == "llm-pretrain-b200" and flushed["AlertsPublished"] == [1.0]
    assert flushed["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "gpuaudit"


def test_a_failed_finish_is_judged_on_the_inventory_evidence_with_a_not_checked_gap(pcluster: Account) -> None:
    target = console_target(INCIDENT)
    found = inventory.handler(target, LambdaContext())
    out = verdict.handler({"request": target["request"], "evidence": found["evidence"], "failure": {
        "step": "Finish", "error": "States.Timeout", "cause": "Task timed out after 600.00 seconds"}},
        LambdaContext())
    (gap,) = out["not_checked"]
    assert gap.startswith("Not checked: step Finish failed (States.Timeout: Task timed out")
    result = pcluster.read_json(out["result"]["json"])
    assert gap in result["visibility_gaps"]
    assert all(n["xid_status"] != "Measured" for n in result["nodes"])  # no coverage proven without the logs


def test_findings_expire_after_the_configured_retention(pcluster: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINDING_RETENTION_DAYS", "7")
    out = verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
    (summary,) = [i for i in pcluster.findings() if i["pk"] == f"AUDIT#{out['audit_id']}" and i["sk"] == "SUMMARY"]
    assert int(summary["expires_at"]) == int((pcluster.world.now + timedelta(days=7)).timestamp())


def test_a_malformed_verdict_event_gets_a_clear_validation_error(pcluster: Account) -> None:
    with pytest.raises(InvalidEvent, match="evidence: Field required"):
        verdict.handler({"request": INCIDENT}, LambdaContext())


def test_the_changes_go_out_as_events_on_the_configured_bus_and_failures_are_counted(
        pcluster: Account, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    bus = "arn:aws:events:us-west-2:123456789012:event-bus/default"
    monkeypatch.setenv("EVENT_BUS", bus)
    stand_in = pcluster.backend.eventbridge
    assert stand_in is not None
    given = through_steps(console_target(INCIDENT))
    first = verdict.handler(given, LambdaContext())
    # one event per change the alert counts: two nodes NOT OBSERVABLE, the leading hypothesis
    kinds = sorted(e["detail-type"] for e in stand_in.delivered)
    assert kinds == ["GPU Audit Node Verdict Changed"] * 2 + ["GPU Audit Root Cause Changed"]
    assert first["events"] == {"events_sent": 3, "events_failed": 0}
    assert all(e["detail"]["report"].endswith(f"{first['result']['html']}") for e in stand_in.delivered)
    assert {e["detail"]["audit_id"] for e in stand_in.delivered} == {first["audit_id"]}
    # the same audit again: a duplicate, nothing sent
    verdict.handler(given, LambdaContext())
    assert len(stand_in.delivered) == 3



def test_events_the_bus_refuses_are_counted_and_the_audit_stands(pcluster: Account, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: Any) -> None:
    monkeypatch.setenv("EVENT_BUS", "arn:aws:events:us-west-2:123456789012:event-bus/default")
    stand_in = pcluster.backend.eventbridge
    assert stand_in is not None
    stand_in.refuse_next(100, "AccessDeniedException")
    out = verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    assert out["audited"] and out["alert_published"] and stand_in.delivered == []
    assert out["events"] == {"events_sent": 0, "events_failed": 3}
    assert [r["EventsFailed"] for r in emitted if "EventsFailed" in r] in ([3], [3.0], [[3.0]])


def test_throttled_and_unprocessed_writes_are_retried_until_every_node_state_lands(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given DynamoDB throttling a read and a batch, and leaving items unprocessed in two batches (issue #34)
    monkeypatch.setattr(dynamo_batch, "pause", lambda _s: None)
    faults = [{"service": "dynamodb", "operation": "BatchWriteItem", "unprocessed": 1, "times": 2},
              {"service": "dynamodb", "operation": "BatchWriteItem", "error": "ProvisionedThroughputExceededException",
               "times": 1},
              {"service": "dynamodb", "operation": "Query", "error": "ThrottlingException", "times": 1}]
    with world_account(monkeypatch, PCLUSTER_WORLD, clusters=("llm-pretrain-b200",), faults=faults) as acct:
        out = verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
        items = acct.findings()
        result = acct.read_json(out["result"]["json"])
        unprocessed = acct.backend.dynamodb.unprocessed_returned

    # Then every node's latest state and history landed: the retries recovered what DynamoDB left
    assert unprocessed == 2
    nodes = {n["instance_id"] for n in result["nodes"]}
    assert {i["sk"].removeprefix("NODE#") for i in items if i["pk"].startswith("LATEST#") and
            i["sk"].startswith("NODE#")} == nodes
    (snapshot,) = [i for i in items if i["pk"] == "HISTSNAP#llm-pretrain-b200" and i["sk"].startswith("GEN#")]
    assert all(n in snapshot["spans"] for n in nodes if any(r["instance_id"] == n and r.get("gpu_count")
                                                              for r in result["nodes"]))
    assert not [g for g in result["visibility_gaps"] if "history" in g.lower()]


def test_writes_dynamodb_keeps_refusing_are_reported_never_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given DynamoDB throttling every BatchWriteItem for good
    monkeypatch.setattr(dynamo_batch, "pause", lambda _s: None)
    faults = [{"service": "dynamodb", "operation": "BatchWriteItem", "error": "ProvisionedThroughputExceededException"}]
    with world_account(monkeypatch, PCLUSTER_WORLD, clusters=("llm-pretrain-b200",), faults=faults) as acct:
        # Then the step fails as throttling (the state machine retries it, then RecordFailure records it) and
        # commits nothing: no summary, so the retry redoes the writes and the alert
        with pytest.raises(ThrottlingException, match="not done after 8 attempts"):
            verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
        assert not [i for i in acct.findings() if i["sk"] == "SUMMARY"]
        # and the history's own write failure is a named gap of the result it wrote
        (key,) = [k for k in acct.object_keys() if k.endswith(".json") and k.startswith("results/")]
        gaps = acct.read_json(key)["visibility_gaps"]
    assert any("dynamodb BatchWriteItem" in g and "this audit is not in the history" in g for g in gaps)


def test_every_kind_of_write_applied_then_failed_commits_once_and_alerts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given DynamoDB applying the first two PutItem and BatchWriteItem calls of the step and answering each with a
    # 500 (issue #48 items 2 and 4): botocore sends each again, and each conditional write meets its own
    applied = [{"service": "dynamodb", "operation": op, "error": "InternalServerError", "applied": True, "times": 2}
               for op in ("PutItem", "BatchWriteItem")]
    with world_account(monkeypatch, PCLUSTER_WORLD, clusters=("llm-pretrain-b200",), faults=applied) as acct:
        given = through_steps(console_target(INCIDENT))
        first = verdict.handler(given, LambdaContext())
        again = verdict.handler(given, LambdaContext())
        items, alerts = acct.findings(), acct.published()
        result = acct.read_json(first["result"]["json"])
    # Then the step succeeds with fleet memory whole (the head names a generation that exists), the latest state
    # written, one alert, and the redelivery is a duplicate
    assert first["alert_published"] and len(alerts) == 1
    assert again["findings"]["duplicate"] and not again["alert_published"]
    (head,) = [i for i in items if i["pk"] == "HISTSNAP#llm-pretrain-b200" and i["sk"] == "HEAD"]
    pieces = [
        i for i in items if i["pk"] == "HISTSNAP#llm-pretrain-b200" and i["sk"].startswith(f"GEN#{head['generation']}#")
    ]
    assert len(pieces) == int(head["pieces"])
    assert {i["sk"] for i in items if i["pk"].startswith("LATEST#llm-pretrain-b200#incident#")} >= {
        f"NODE#{n['instance_id']}" for n in result["nodes"]}
    assert not [g for g in result["visibility_gaps"] if "history" in g.lower()]


def test_the_verdict_step_and_the_cli_give_the_same_result_and_report_for_a_world(pcluster: Account,
                                                                                    tmp_path: Any) -> None:
    # Given the same incident audit of one world, deployed (the steps, then Verdict) and from the CLI, each with an
    # empty history (the findings table's, the CLI's --history DIR)
    out = verdict.handler(through_steps(console_target(INCIDENT)), LambdaContext())
    deployed = pcluster.read_json(out["result"]["json"])
    request = AuditRequest.model_validate(console_target(INCIDENT)["request"])
    backend = pcluster.backend  # its clock and sleep, as the handlers' (CloudTrail's rate is kept on them)
    cli = run_audit(Aws(session=backend.session(), region=pcluster.world.region, clock=lambda: pcluster.world.now,
                        sleep=backend.sleep, monotonic=backend.monotonic), request, history=SqliteHistory(tmp_path))
    # Then the sequence both ran (pipeline.judge_with_history) gives one answer. How many CloudTrail calls a read
    # took is not compared: LookupEvents is kept to its rate (2 a second) on a clock that real time moves, so the
    # retries after a throttle vary from run to run; which calls were made is compared.
    # The grouped commands' IDs files are named where each path writes them (issue #49 item 1): the CLI's result,
    # placed where the deployed auditor writes them (beside the report in S3), names the same files
    from gpuaudit.report.ids import placed

    stem = out["result"]["json"].removesuffix(".json")
    said = json.loads(placed(cli, f"s3://{BUCKET}/{stem}").to_json())
    counted = {"calls", "report_markdown"}  # compared below, without the counts
    assert {k: v for k, v in deployed.items() if k not in counted} == {
        k: v for k, v in said.items() if k not in counted
    }
    assert [(c["service"], c["operation"]) for c in deployed["calls"]] == [(c["service"], c["operation"])
                                                                            for c in said["calls"]]
    markdown = pcluster.session.client("s3").get_object(Bucket=BUCKET, Key=out["result"]["report"])["Body"].read()
    assert uncounted(markdown.decode()) == uncounted(placed(cli, f"s3://{BUCKET}/{stem}").report_markdown)


def uncounted(report: str) -> str:
    """A report with its call counts (`logs StartQuery ×3`) left out."""
    return re.sub(r" ×\d+", "", report)
