"""The deployed MCP endpoint's backend: what the stack's audits wrote, and on-demand executions of its state machine.

Reads only: the findings table (`LATEST#<cluster>#<mode>` items, `HIST#` spans: writes/sinks.py,
writes/history.py) and the results bucket (`results/<cluster>/<audit_id>.json`, handlers/verdict.py). Its one
non-read action is StartExecution of the stack's own state machine, whose roles run the audit (read-only) and
write its findings, as a console start would.
Audits are not run in this Lambda: the state machine spreads a large cluster's Logs Insights queries over its
steps within the account's query quota, and an in-process audit would need every read of the collectors here too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from gpuaudit.agent.schema import (
    AuditRow,
    AuditStarted,
    BadToolInput,
    ClusterList,
    ClusterRow,
    LatestFindings,
    LatestRow,
    NodeHistory,
    ToolProblem,
    history_page,
    latest_page,
)
from gpuaudit.collectors.aws import Aws
from gpuaudit.collectors.discovery import discovered_clusters
from gpuaudit.collectors.session import next_step
from gpuaudit.domain.window import BadWindow, resolve_window
from gpuaudit.model.evidence import AuditRequest, Mode
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import floor_hour
from gpuaudit.settings import DeploymentDocument
from gpuaudit.writes.history import DynamoHistory, HistoryUnreadable
from gpuaudit.writes.sinks import latest_state

RESULTS_PREFIX = "results"  # handlers/verdict.py writes results/<cluster>/<audit_id>.json, .md, .html
# On-demand audits (issue #47 item 6): one execution per distinct request per hour (the schedule's period; the
# execution's name is the hour and the request's digest, so the same request again finds it), and at most this many
# distinct ones an hour: each can read up to the CLI's 90-day window of a whole cluster.
RESULT_KEY = re.compile(r"/([0-9a-f]{24})\.json$")  # results/<cluster>/<audit_id>.json
MCP_PREFIX = "mcp-"
MCP_STARTS_PER_PERIOD = 10


@dataclass(frozen=True)
class DiscoveryTag:
    key: str
    value: str


@dataclass
class DeployedBackend:
    session: Any  # boto3.Session of the function's role
    region: str
    table: str
    bucket: str
    state_machine_arn: str
    deployment: DeploymentDocument
    clock: Callable[[], datetime]

    def __post_init__(self) -> None:
        self.ddb = self.session.client("dynamodb", region_name=self.region)
        self.s3 = self.session.client("s3", region_name=self.region)
        self.sfn = self.session.client("stepfunctions", region_name=self.region)

    @contextmanager
    def _read(self, what: str) -> Iterator[None]:
        try:
            yield
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            hint = next_step(code, None)
            raise ToolProblem(f"{what} could not be read: {code}: {exc.response.get('Error', {}).get('Message', '')}"
                              + (f"; {hint}" if hint else "")) from None
        except BotoCoreError as exc:
            raise ToolProblem(f"{what} could not be read: {exc}") from None

    def clusters(self) -> ClusterList:
        rows = [ClusterRow(name=c, kind="configured") for c in self.deployment.clusters]
        gaps: list[str] = []
        if self.deployment.discover:
            tag = DiscoveryTag(**self.deployment.discovery_tag) if self.deployment.discovery_tag else None
            aws = Aws(session=self.session, region=self.region)
            known = {r.name for r in rows}
            rows += [ClusterRow(name=n, kind=k) for n, k in discovered_clusters(aws, tag, gaps) if n not in known]
        said = "the configured clusters" + (" and those discovery finds in the region" if self.deployment.discover
                                             else "")
        return ClusterList(region=self.region, clusters=rows, gaps=gaps, note=f"The deployment audits {said}.")

    def result(self, cluster: str, audit_id: str) -> tuple[Result, str, str | None]:
        key = f"{RESULTS_PREFIX}/{cluster}/{audit_id}"
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=f"{key}.json")["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise ToolProblem(f"no result of audit {audit_id} of {cluster!r} in the results bucket (results are "
                                  "kept for the findings' retention)") from None
            with self._read(f"s3://{self.bucket}/{key}.json"):
                raise
        try:
            result = Result.model_validate_json(body)
        except ValidationError as exc:
            raise ToolProblem(f"s3://{self.bucket}/{key}.json is not a gpuaudit result ({exc.error_count()} "
                              "error(s))") from None
        return result, f"s3://{self.bucket}/{key}.json", f"s3://{self.bucket}/{key}.html"

    def audits(self, cluster: str) -> tuple[list[AuditRow], str]:
        """The cluster's results in the bucket, the latest written first, and where they are kept."""
        prefix = f"{RESULTS_PREFIX}/{cluster}/"
        found: list[tuple[datetime, str, str]] = []
        with self._read(f"s3://{self.bucket}/{prefix}"):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                found += [(o["LastModified"], match.group(1), o["Key"]) for o in page.get("Contents", [])
                          if (match := RESULT_KEY.search(o["Key"])) and o["Key"].count("/") == prefix.count("/")]
        if not found:
            raise ToolProblem(f"no result of an audit of {cluster!r} in the results bucket (results are kept for the "
                              "findings' retention); start_audit, or wait for the scheduled audit")
        found.sort(reverse=True)
        return [AuditRow(audit_id=audit_id, stored_at=when, result_location=f"s3://{self.bucket}/{key}")
                for when, audit_id, key in found], f"s3://{self.bucket}/{RESULTS_PREFIX}/"

    def report(self, cluster: str, audit_id: str) -> str:
        """The audit's HTML report, as the verdict step wrote it beside the result."""
        key = f"{RESULTS_PREFIX}/{cluster}/{audit_id}.html"
        try:
            body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise ToolProblem(f"no report of audit {audit_id} of {cluster!r} in the results bucket") from None
            with self._read(f"s3://{self.bucket}/{key}"):
                raise
        return body.decode("utf-8", errors="replace")

    def latest(self, cluster: str, mode: Mode, offset: int, limit: int) -> LatestFindings:
        with self._read(f"the findings table's latest state of {cluster!r}"):
            state = latest_state(self.ddb, self.table, cluster, mode)
        rows = [LatestRow(instance_id=sk.removeprefix("NODE#"), verdict=_verdict(item.get("verdict")),
                          coverage=item.get("xid_status", "unknown"), audit_id=item.get("audit_id", ""),
                          as_of=item.get("recorded_at", ""),
                          closed=f"no longer in the cluster (audit {item['gone']})" if item.get("gone") else None)
                for sk, item in state.items() if sk.startswith("NODE#")]
        if not rows:
            raise ToolProblem(f"cluster {cluster!r}: the findings table holds no {mode} audit of it")
        return latest_page(rows, cluster, mode, f"dynamodb {self.table}", offset, limit)

    def history(self, cluster: str, node: str, days: int, offset: int, limit: int) -> NodeHistory:
        until = self.clock()
        try:
            read = DynamoHistory(self.ddb, self.table).read(cluster, [node], until - timedelta(days=days), until)
        except HistoryUnreadable as exc:
            raise ToolProblem(str(exc)) from None
        if not read.spans:
            raise ToolProblem(f"node {node}: no audit of it in cluster {cluster!r} in the last {days} day(s) is in "
                              "the findings table")
        return history_page(read, cluster, node, offset, limit)

    def start_audit(self, request: AuditRequest) -> AuditStarted:
        if not self.deployment.discover and request.cluster not in self.deployment.clusters and not request.fleet:
            raise ToolProblem(f"cluster {request.cluster!r} is not audited by this deployment (configured: "
                              f"{', '.join(self.deployment.clusters) or 'none'}); add it to `clusters` in cdk.json")
        now = self.clock()
        try:  # the window the CLI accepts (at most MAX_WINDOW, not in the future, an onset inside it)
            resolve_window(request.mode, now, request.since, request.until, request.last, request.onset)
        except BadWindow as exc:
            raise BadToolInput(tool_wording(str(exc))) from None
        # the console input the state machine's Plan takes (an AuditRequest), without empty fields
        document = {k: v for k, v in request.model_dump(mode="json", exclude_none=True).items() if v != []}
        text = json.dumps(document, sort_keys=True)
        prefix = f"{MCP_PREFIX}{floor_hour(now):%Y%m%dT%H}-"
        name = prefix + hashlib.sha256(text.encode()).hexdigest()[:24]
        this_period = self._started(prefix)
        if name in this_period:
            return self._already(this_period[name], document)
        if len(this_period) >= MCP_STARTS_PER_PERIOD:
            raise ToolProblem(f"{len(this_period)} on-demand audits were started this hour, the most this endpoint "
                              f"starts in one (MCP_STARTS_PER_PERIOD {MCP_STARTS_PER_PERIOD}); the hourly audit "
                              "runs meanwhile: read latest_findings, or start this one next hour")
        try:
            started = self.sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name, input=text)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":  # started meanwhile
                again = self._started(prefix)
                if name in again:
                    return self._already(again[name], document)
            raise ToolProblem(f"the audit could not be started: {exc.response.get('Error', {}).get('Code', '')}: "
                              f"{exc.response.get('Error', {}).get('Message', '')}") from None
        return AuditStarted(execution_arn=started["executionArn"], started_at=started["startDate"], request=document,
                            note="The state machine audits it (minutes for a large cluster); then latest_findings "
                                 f"(mode {request.mode}) and audit_summary read what it wrote. The same request "
                                 "again this hour returns this execution.")

    def _started(self, prefix: str) -> dict[str, dict[str, Any]]:
        """The on-demand executions started this period (their names carry it), by name: one page of the newest
        executions holds them all (at most MCP_STARTS_PER_PERIOD, beside one scheduled execution an hour)."""
        try:
            page = self.sfn.list_executions(stateMachineArn=self.state_machine_arn, maxResults=1000)
        except ClientError as exc:
            raise ToolProblem(f"the on-demand audits of this hour could not be listed: "
                              f"{exc.response.get('Error', {}).get('Code', '')}: "
                              f"{exc.response.get('Error', {}).get('Message', '')}") from None
        return {e["name"]: e for e in page.get("executions", []) if e["name"].startswith(prefix)}

    @staticmethod
    def _already(execution: dict[str, Any], document: dict[str, Any]) -> AuditStarted:
        return AuditStarted(execution_arn=execution["executionArn"], started_at=execution["startDate"],
                            request=document, note=f"The same audit was already started this hour (execution "
                            f"{execution['status']}); no new one was started. Its findings appear in latest_findings "
                            "and audit_summary when it ends.")


def tool_wording(message: str) -> str:
    """A window message in the tool's field names: the CLI's flags (`--since/--until`, `--last`, `--onset`) are
    start_audit's fields of the same names."""
    return re.sub(r"--(since|until|last|onset)\b", r"\1", message)


def _verdict(word: str | None) -> str | None:
    return None if word in (None, "", "none") else word
