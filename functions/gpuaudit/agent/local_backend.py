"""`gpuaudit mcp`'s backend: audits run in this process against an account (the CLI's AWS access rules) or a world
file, results written under a directory, the local history (`--history DIR`) for latest findings and timelines.

CLI-side (packaging.DEV_ONLY keeps it out of Lambda, like cli/): it reuses the CLI's access and error handling so
a tool error says exactly what `gpuaudit audit` would print (exit 2 bad input, exit 3 unreachable).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from gpuaudit.access import UserError, aws_for, did_you_mean
from gpuaudit.agent.schema import (
    AuditRow,
    ClusterList,
    ClusterRow,
    LatestFindings,
    NodeHistory,
    ToolProblem,
    history_page,
    latest_from_history,
    validation_message,
)
from gpuaudit.collectors.aws import DEFAULT_DEADLINE_S, Aws, CallFailed
from gpuaudit.collectors.cache import FileCache
from gpuaudit.collectors.discovery import discovered_clusters
from gpuaudit.collectors.inventory import UnknownCluster
from gpuaudit.collectors.session import next_step
from gpuaudit.domain.window import BadWindow
from gpuaudit.files import write_atomically
from gpuaudit.model.evidence import AuditRequest, Mode
from gpuaudit.model.result import Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.outputs import write_ids_files
from gpuaudit.pipeline import run_audit
from gpuaudit.progress import ProgressHook
from gpuaudit.report.html import render_html
from gpuaudit.rules.context import BadOverride
from gpuaudit.rules.judge import JudgeConfig
from gpuaudit.settings import Settings
from gpuaudit.writes.history import SQLITE_FILE, HistoryUnreadable, SqliteHistory

RESULT_FILE = re.compile(r"^[0-9a-f]{24}\.json$")  # <audit_id>.json; the IDs files beside it are named otherwise


@dataclass(frozen=True)
class LocalBackend:
    results_dir: Path
    world: Path | None = None
    profile: str | None = None
    region: str | None = None
    role_arn: str | None = None
    external_id: str | None = None
    history_dir: Path | None = None
    cache: Path | None = None

    def _aws(self) -> Aws:
        return aws_for(self.world, self.region, self.role_arn, self.external_id, self.profile)

    @contextmanager
    def _messages(self) -> Iterator[None]:
        """The CLI's exit-2/exit-3 messages (cli.audit) as tool errors."""
        try:
            yield
        except UserError as exc:
            raise ToolProblem(str(exc)) from None
        except (BadWindow, UnknownCluster, BadOverride) as exc:
            raise ToolProblem(str(exc)) from None
        except ValidationError as exc:
            raise ToolProblem(validation_message(exc)) from None
        except CallFailed as exc:
            hint = next_step(exc.code, self.profile or os.environ.get("AWS_PROFILE"))
            raise ToolProblem(f"the account could not be read: {exc}" + (f"; {hint}" if hint else "")) from None
        except OSError as exc:
            raise ToolProblem(f"cannot write the result under {self.results_dir}: {exc}") from None
        except Exception as exc:  # the world loader's errors (embedded is imported lazily, as in the CLI)
            if type(exc).__name__ == "WorldError":
                raise ToolProblem(str(exc)) from None
            raise

    def run_audit(self, request: AuditRequest, progress: ProgressHook) -> tuple[Result, str, str | None]:
        with self._messages():
            settings = Settings.from_env(os.environ)
            aws = self._aws()
            aws.deadline = time.monotonic() + DEFAULT_DEADLINE_S  # as the CLI's audit without --deadline-seconds
            aws.watcher = progress
            try:
                result = run_audit(aws, request, JudgeConfig.from_request(request, settings.xid_overrides),
                                   FileCache(self.cache) if self.cache is not None else None,
                                   SqliteHistory(self.history_dir) if self.history_dir is not None else None,
                                   settings.history_lookback_days, progress)
            except UnknownCluster as exc:
                raise UserError(str(exc) + (did_you_mean(aws, request.cluster) if not request.instance_ids
                                            and not request.eks_cluster else "")) from None
            progress.phase("rendering")
            folder = self._folder(result.cluster.name)
            folder.mkdir(parents=True, exist_ok=True)
            result, _ = write_ids_files(result, folder / result.audit_id)  # beside the result a command names
            stored = folder / f"{result.audit_id}.json"
            write_atomically(stored, result.to_json() + "\n")  # a failed write leaves the earlier result whole
            report = folder / f"{result.audit_id}.html"
            write_atomically(report, render_html(result))
            return result, str(stored), str(report)

    def _folder(self, cluster: str) -> Path:
        try:
            folder = (self.results_dir / cluster).resolve()
        except ValueError:  # a NUL: no file system takes it in a name
            raise ToolProblem(f"cluster {cluster!r}: not a name a result is stored under") from None
        if folder.parent != self.results_dir.resolve():  # a name like `..` would leave the results directory
            raise ToolProblem(f"cluster {cluster!r}: not a name a result is stored under")
        return folder

    def result(self, cluster: str, audit_id: str) -> tuple[Result, str, str | None]:
        stored = self._folder(cluster) / f"{audit_id}.json"
        try:
            text = stored.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ToolProblem(f"no result of audit {audit_id} of {cluster!r} under {self.results_dir} (results of "
                              "audits this server ran are kept there)") from None
        except OSError as exc:
            raise ToolProblem(f"cannot read {stored}: {exc.strerror}") from None
        try:
            result = Result.model_validate_json(text)
        except ValidationError as exc:
            raise ToolProblem(f"{stored} is not a gpuaudit result JSON ({exc.error_count()} error(s))") from None
        report = stored.with_suffix(".html")
        return result, str(stored), str(report) if report.is_file() else None

    def audits(self, cluster: str) -> tuple[list[AuditRow], str]:
        """The cluster's stored results, the latest written first, and where they are kept."""
        folder = self._folder(cluster)
        try:
            found = [(entry.stat().st_mtime, entry) for entry in folder.iterdir() if RESULT_FILE.match(entry.name)]
        except FileNotFoundError:
            found = []
        except OSError as exc:
            raise ToolProblem(f"cannot list {folder}: {exc.strerror}") from None
        if not found:
            raise ToolProblem(f"no result of an audit of {cluster!r} under {self.results_dir} (results of audits this "
                              "server ran are kept there); run_audit first")
        found.sort(key=lambda f: (f[0], f[1].name), reverse=True)
        return [AuditRow(audit_id=entry.stem, stored_at=datetime.fromtimestamp(mtime, UTC), result_location=str(entry))
                for mtime, entry in found], str(self.results_dir)

    def report(self, cluster: str, audit_id: str) -> str:
        """The audit's HTML report, as run_audit wrote it beside the result."""
        stored = self._folder(cluster) / f"{audit_id}.html"
        try:
            return stored.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ToolProblem(f"no report of audit {audit_id} of {cluster!r} under {self.results_dir}") from None
        except OSError as exc:
            raise ToolProblem(f"cannot read {stored}: {exc.strerror}") from None

    def clusters(self) -> ClusterList:
        with self._messages():
            aws = self._aws()
            gaps: list[str] = []
            found = discovered_clusters(aws, None, gaps)
        return ClusterList(region=aws.region, clusters=[ClusterRow(name=n, kind=k) for n, k in found], gaps=gaps,
                           note="HyperPod clusters (ListClusters) and ParallelClusters with a live instance (their "
                                "parallelcluster:cluster-name tag); self-managed fleets are audited by instance IDs "
                                "or EKS cluster name")

    def _store(self) -> SqliteHistory:
        if self.history_dir is None:
            raise ToolProblem("no history: start the server with --history DIR (the directory `gpuaudit audit "
                              "--history DIR` writes) to read latest findings and node timelines")
        if not (self.history_dir / SQLITE_FILE).is_file():
            raise ToolProblem(f"--history {self.history_dir}: holds no gpuaudit history yet ({SQLITE_FILE} not "
                              "found); run an audit first")
        return SqliteHistory(self.history_dir)

    def latest(self, cluster: str, mode: Mode, offset: int, limit: int) -> LatestFindings:
        store = self._store()
        try:
            read = store.read(cluster, None, parse_time("1970-01-01T00:00:00Z"), parse_time("2100-01-01T00:00:00Z"))
        except HistoryUnreadable as exc:
            raise ToolProblem(f"--history {self.history_dir}: {exc}") from None
        if not read.spans:
            raise ToolProblem(f"cluster {cluster!r}: no audit of it is recorded in --history {self.history_dir}")
        return latest_from_history(read, cluster, mode, offset, limit)

    def history(self, cluster: str, node: str, days: int, offset: int, limit: int) -> NodeHistory:
        store = self._store()
        try:
            everything = store.read(cluster, [node], parse_time("1970-01-01T00:00:00Z"),
                                    parse_time("2100-01-01T00:00:00Z"))
        except HistoryUnreadable as exc:
            raise ToolProblem(f"--history {self.history_dir}: {exc}") from None
        if not everything.spans:
            raise ToolProblem(f"node {node}: no audit of it in cluster {cluster!r} is recorded in --history "
                              f"{self.history_dir}")
        until = max(s.through for s in everything.spans)  # as `gpuaudit history`: back from the latest audit
        since = until - timedelta(days=days)
        read = everything.model_copy(update={"since": since, "until": until,
                                             "spans": [s for s in everything.spans if s.through >= since]})
        return history_page(read, cluster, node, offset, limit)

