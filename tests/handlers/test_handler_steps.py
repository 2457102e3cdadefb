"""Inventory, CollectLogs and Finish: the same evidence as the CLI's in-process pipeline, large
evidence by S3 reference, a failed batch as a `Not checked` gap, throttling surfaced for retry."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from handlers import collect_logs, coverage_cache, finish, inventory, payload, plan, runtime
from handlers.models import LogBatch
from handlers.runtime import InvalidEvent, ThrottlingException
from lambda_harness import (
    PCLUSTER_WORLD,
    Account,
    LambdaContext,
    console_target,
    scheduled_event,
    through_steps,
    world_account,
)

from gpuaudit import pipeline
from gpuaudit.collectors.aws import Aws
from gpuaudit.model.evidence import Evidence


def evidence_of(account: Account, stored: dict[str, Any]) -> Evidence:
    return Evidence.model_validate(payload.load(stored, account.session.client("s3")))


def scheduled_target() -> dict[str, Any]:
    (target,) = plan.handler(scheduled_event("2026-10-01T18:17:04Z"), LambdaContext())["targets"]
    return target  # type: ignore[no-any-return]


def test_the_steps_collect_exactly_what_the_cli_collects(account: Account) -> None:
    target = scheduled_target()
    deployed = evidence_of(account, through_steps(target)["evidence"])
    in_process = pipeline.collect(Aws(session=account.backend.session(), region=account.world.region,
                                      clock=lambda: account.world.now),
                                  pipeline.AuditRequest.model_validate(target["request"]))
    assert deployed.window.source == "schedule" and in_process.window.source == "user"
    assert deployed.model_copy(update={"window": in_process.window}) == in_process
    assert deployed.calls == in_process.calls  # the sum over every step's own Aws port


def test_inventory_stamps_the_window_source_and_plans_batches_of_at_most_50_groups(account: Account) -> None:
    found = inventory.handler(scheduled_target(), LambdaContext())
    evidence = evidence_of(account, found["evidence"])
    assert evidence.window.source == "schedule" and evidence.cluster.name == "research-hp-slurm"
    assert [b["index"] for b in found["batches"]] == list(range(len(found["batches"])))
    # by reference: each batch's groups are cut from the evidence, every group in exactly one batch of at most 50
    cut = [LogBatch.model_validate(b).groups_of(evidence.log_groups) for b in found["batches"]]
    assert sum(len(groups) for groups in cut) == len(evidence.log_groups) and all(len(g) <= 50 for g in cut)
    assert {(c.service, c.operation) for c in evidence.calls} >= {("sagemaker", "DescribeCluster"),
                                                                  ("logs", "DescribeLogGroups")}


def test_large_evidence_travels_through_the_bucket_by_reference(account: Account,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for limit in ("INLINE_LIMIT", "INVENTORY_SHARE", "BATCHES_SHARE"):
        monkeypatch.setattr(payload, limit, 1_000)
    target = scheduled_target()
    found = inventory.handler(target, LambdaContext())
    assert payload.is_reference(found["evidence"])
    collected = collect_logs.handler({"evidence": found["evidence"], "batch": found["batches"][0]}, LambdaContext())
    assert payload.is_reference(collected["batch"])
    joined = finish.handler({"request": target["request"], "evidence": found["evidence"], "batches": [collected]},
                            LambdaContext())
    assert payload.is_reference(joined["evidence"])
    payloads = {k.split("/")[1] for k in account.object_keys() if k.startswith("payloads/")}
    assert payloads == {"inventory", "batch", "evidence"}
    assert evidence_of(account, joined["evidence"]).stream_activity


def test_a_failed_batch_becomes_a_not_checked_gap(account: Account) -> None:
    target = scheduled_target()
    found = inventory.handler(target, LambdaContext())
    assert found["batches"][0]["groups"] == []  # the batch list by reference: index and count, no group names
    groups = [g.name for g in evidence_of(account, found["evidence"]).log_groups][:50]
    # what the BatchNotChecked Catch hands Finish: the failed batch's index; Finish names its groups
    failure = {"step": "CollectLogs", "batch": found["batches"][0]["index"], "error": "RuntimeError",
               "cause": '{"errorMessage": "Logs Insights unreachable", "errorType": "RuntimeError"}'}
    joined = finish.handler({"request": target["request"], "evidence": found["evidence"],
                             "batches": [{"failed": failure}]}, LambdaContext())
    gaps = evidence_of(account, joined["evidence"]).gaps
    (step_gap,) = [g for g in gaps if g.kind == "step-failed" and g.operation == "CollectLogs"]
    gap = step_gap.prose()
    assert gap.startswith("Not checked: step CollectLogs failed for log groups ")
    assert groups[0] in gap and "(RuntimeError: Logs Insights unreachable)" in gap
    assert "coverage of their streams not proven" in gap


def test_throttling_past_the_in_process_retries_is_raised_for_the_state_machine_to_retry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fault = {"service": "ec2", "operation": "DescribeInstances", "error": "RequestLimitExceeded"}
    with world_account(monkeypatch, PCLUSTER_WORLD, clusters=("llm-pretrain-b200",), faults=[fault]):
        target = console_target({"cluster": "llm-pretrain-b200", "mode": "coverage"})
        with pytest.raises(ThrottlingException, match="RequestLimitExceeded"):
            inventory.handler(target, LambdaContext())


@pytest.mark.parametrize(("module", "event", "named"), [
    (inventory, {}, "request: Field required"),
    (inventory, {"request": {"cluster": "c"}, "trigger": "cron"}, "trigger: Input should be"),
    (collect_logs, {"evidence": {}, "batch": {"index": 0, "of": 1, "groups": [f"/g/{i}" for i in range(51)]}},
     "batch.groups: List should have at most 50 items"),
    (finish, {"request": {"cluster": "c"}, "evidence": {}, "batches": "all"}, "batches: Input should be a valid list"),
], ids=["inventory-empty", "inventory-bad-trigger", "collect-oversized-batch", "finish-bad-batches"])
def test_a_malformed_step_event_gets_a_clear_validation_error(account: Account, module: Any, event: dict[str, Any],
                                                              named: str) -> None:
    with pytest.raises(InvalidEvent, match="expects") as raised:
        module.handler(event, LambdaContext())
    assert named in str(raised.value)


def test_the_invocation_deadline_stops_calls_and_logs_carry_no_account_id() -> None:
    import io
    import logging

    import boto3
    from handlers import runtime
    from handlers.observability import logger

    class AlmostOut:
        def get_remaining_time_in_millis(self) -> int:
            return 10_000  # less than the margin: no call may start

    aws = runtime.audit_port(boto3.Session(region_name="us-west-2"), runtime.utc_now, AlmostOut())
    with pytest.raises(runtime.CallFailed, match="AuditDeadlineExceeded"):
        aws.call("ec2", "DescribeInstances")
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(logger.registered_formatter)
    logger.addHandler(handler)
    try:
        logger.info("role arn:aws:iam::111122223333:role/x in account 111122223333")
    finally:
        logger.removeHandler(handler)
    assert "role/x" in written.getvalue() and "111122223333" not in written.getvalue()


def test_the_next_hourly_batch_reads_only_new_hours_from_the_coverage_cache(account: Account) -> None:
    target = scheduled_target()
    found = inventory.handler(target, LambdaContext())
    item = {"evidence": found["evidence"], "batch": found["batches"][0]}
    first = collect_logs.handler(item, LambdaContext())
    again = collect_logs.handler(item, LambdaContext())
    assert any(k.startswith("cache/") for k in account.object_keys())

    def batch(collected: dict[str, Any]) -> dict[str, Any]:
        return payload.load(collected["batch"], account.session.client("s3"))

    def scanned(collected: dict[str, Any]) -> float:
        return sum(q["records_scanned"] for q in batch(collected)["queries"])

    def live(collected: dict[str, Any]) -> dict[tuple[str, str], int]:
        return {(a["log_group"], a["log_stream"]): a["live_hours"] for a in batch(collected)["activity"]}

    assert scanned(again) * 5 < scanned(first)
    assert live(again) == live(first)


def test_a_new_cache_format_never_reads_entries_of_the_old_one(monkeypatch: pytest.MonkeyPatch) -> None:
    current = coverage_cache.key("c1", "us-west-2", "/aws/g")
    monkeypatch.setattr(coverage_cache, "FORMAT", "gpu-audit-cache/2")
    assert coverage_cache.key("c1", "us-west-2", "/aws/g") != current
    assert current.startswith("cache/c1/")


SLOW_QUERIES = [{"service": "logs", "operation": "GetQueryResults", "status": "Running", "times": 2}]


def test_collect_logs_hands_running_queries_to_the_state_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """CollectLogs never waits on a running query: it returns `pending` with its journal; invoked again with its
    own output (what the Choice → Wait → CollectLogs loop does), it finishes with the batch the CLI collects."""
    with world_account(monkeypatch, faults=SLOW_QUERIES) as acct:
        monkeypatch.setattr("gpuaudit.collectors.aws.time.sleep", lambda s: pytest.fail(f"a Lambda slept {s} s"))
        target = scheduled_target()
        found = inventory.handler(target, LambdaContext())
        # the handlers' port waits through the backend (lambda_harness): CollectLogs waits not at all
        monkeypatch.setattr(acct.backend, "sleep", lambda s: pytest.fail(f"CollectLogs slept {s} s"))
        item: dict[str, Any] = {"evidence": found["evidence"], "batch": found["batches"][0]}
        rounds = 0
        while True:
            rounds += 1
            item = collect_logs.handler(item, LambdaContext())
            if not item["pending"]:
                break
            assert item["journal"] and rounds < 50
        assert rounds > 1
        batch = payload.load(item["batch"], acct.session.client("s3"))
        assert {q["status"] for q in batch["queries"]} == {"Complete"}
        calls = {(c["service"], c["operation"]): c["count"] for c in item["calls"]}
        assert calls[("logs", "StartQuery")] == len(batch["queries"])  # each query started once over all rounds
        assert calls[("logs", "GetQueryResults")] > len(batch["queries"])  # the rounds' reads are all counted
    with world_account(monkeypatch) as acct:  # the same batch, queries answering at once
        found = inventory.handler(scheduled_target(), LambdaContext())
        fast = collect_logs.handler({"evidence": found["evidence"], "batch": found["batches"][0]}, LambdaContext())
        assert not fast["pending"]
        reference = payload.load(fast["batch"], acct.session.client("s3"))
    assert {k: v for k, v in batch.items() if k != "queries"} == {k: v for k, v in reference.items() if k != "queries"}


HOSTILE_MESSAGE = "User: arn:aws:sts::111122223333:assumed-role/a/b denied \x1b]0;x\x07 \x9b31m \u2028 \u200b end"
RAW_IN_LOGS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200b]")


def test_a_log_line_is_valid_json_with_no_account_id_and_no_raw_character() -> None:
    """Every Lambda log line (ours and the MCP SDK's) redacted and escaped as every other output (issue #48)."""
    import logging

    from handlers import mcp_endpoint  # noqa: F401 - its import hands our formatter to the SDK's loggers
    from handlers.observability import RedactingFormatter, logger

    sdk = logging.getLogger("mcp")  # every SDK module's logger propagates to it
    formatters = [logger.registered_formatter, *(h.formatter for h in sdk.handlers)]
    assert any(isinstance(f, RedactingFormatter) for f in formatters[1:]), sdk.handlers  # the SDK's lines too
    record = logging.LogRecord("mcp.server.mcpserver.server", logging.WARNING, __file__, 1, HOSTILE_MESSAGE, None,
                               None)
    for formatter in formatters:
        if isinstance(formatter, RedactingFormatter):
            line = formatter.format(record)
            assert json.loads(line)["message"].endswith(" end")  # still one JSON document
            assert "111122223333" not in line and not RAW_IN_LOGS.search(line), line


def test_a_step_error_leaves_redacted_and_escaped_with_its_type() -> None:
    """The message of a raised error is the Step Functions Cause: redacted and escaped; its type, which Retry and
    Catch match, unchanged."""
    from handlers.observability import step_handler

    @step_handler
    def failing(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise runtime.CallFailed("ec2", "DescribeInstances", "UnauthorizedOperation", HOSTILE_MESSAGE)

    with pytest.raises(runtime.CallFailed) as raised:
        failing({}, LambdaContext())
    said = str(raised.value)
    assert "arn:aws:sts::<account>:assumed-role/a/b" in said and "\\x1b]0;x\\x07" in said
    assert not RAW_IN_LOGS.search(said) and raised.value.code == "UnauthorizedOperation"
