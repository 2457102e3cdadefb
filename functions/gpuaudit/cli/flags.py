"""What each flag accepts: every value is checked before anything is read, and a bad one is named by its flag
(exit 2, through UserError)."""

from __future__ import annotations

import errno
import math
import os
import re
from datetime import date, datetime
from pathlib import Path

from pydantic import ValidationError

from gpuaudit.access import UserError
from gpuaudit.collectors.cache import FORMAT as CACHE_FORMAT
from gpuaudit.model.evidence import TIME_TEXT_MAX
from gpuaudit.model.result import parse_verdict
from gpuaudit.model.text import echoed
from gpuaudit.model.timeutil import parse_time
from gpuaudit.report.order import COVERAGE_WORDS, VERDICT_SEVERITY, coverage_status
from gpuaudit.writes.history import SQLITE_FILE

MODES = ("coverage", "incident", "preflight")
FORMATS = ("md", "json", "html", "table")  # `history --format`
SCOPE, WINDOW, OUTPUT, GATES, ACCESS, PREFLIGHT, ADVANCED = (
    "Scope", "Window", "Output", "Filters and CI gates", "AWS access", "Preflight", "Advanced")
DEVELOPER = "Developer tools"


DATE_PREFIX = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")


def _time_arg(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    if len(value) > TIME_TEXT_MAX:
        raise UserError(f"{flag}: not an ISO-8601 time: {echoed(value)} is {len(value):,} characters long")
    calendar = DATE_PREFIX.match(value.strip())
    if calendar is not None:
        try:
            date(*(int(part) for part in calendar.groups()))
        except ValueError:
            raise UserError(f"{flag}: {calendar.group(0)} is not a date") from None
    try:
        parsed = parse_time(value)
    except (ValueError, OverflowError):
        lengths = " or a length" if flag == "--since" else ""
        example = ", or 2h for two hours ago" if lengths else ""
        raise UserError(
            f"{flag}: not an ISO-8601 time{lengths}: {echoed(value)} (e.g. 2026-09-27T10:00:00Z{example})"
        ) from None
    if not 1970 <= parsed.year <= 2100:
        raise UserError(f"{flag}: {value!r} is outside the years 1970-2100")
    return parsed


def _positive(value: float | None, flag: str) -> float | None:
    """A finite number above zero, or None when the flag was not given."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UserError(f"{flag} must be a finite number above 0; got {value}")
    return value


def _cache_path(path: Path | None) -> Path | None:
    """--cache names a file of its own format (or a new file): never a directory, a world or anything else."""
    if path is None:
        return None
    if path.is_dir():
        raise UserError(f"--cache {path}: is a directory; give a file path")
    if path.exists():
        try:
            with path.open("rb") as f:
                head = f.read(4096).decode("utf-8", "replace")
        except OSError as exc:
            raise UserError(f"--cache {path}: cannot be read: {exc.strerror}") from None
        if f'"format":"{CACHE_FORMAT}"' not in head.replace(" ", "") and head.strip():
            raise UserError(f"--cache {path}: exists and is not a gpuaudit cache ({CACHE_FORMAT}); refusing to "
                            "overwrite it")
    return path


def _history_dir(path: Path | None, must_exist: bool = False) -> Path | None:
    """--history DIR: a directory for the local history (created when absent, unless reading it)."""
    if path is None:
        return None
    if path.exists() and not path.is_dir():
        raise UserError(f"--history {path}: is not a directory (the history is kept as {SQLITE_FILE} inside it)")
    if not path.exists():
        if must_exist:
            raise UserError(f"--history {path}: no such directory (no audit has written a history there)")
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise UserError(f"--history {path}: cannot create the directory: {exc.strerror}") from None
    if not os.access(path, os.R_OK | (0 if must_exist else os.W_OK)):
        raise UserError(f"--history {path}: not readable/writable")
    return path


def _out_path(path: Path | None, flag: str = "--out") -> Path | None:
    if path is not None and (path.is_dir() or not path.parent.is_dir() or not os.access(path.parent, os.W_OK)):
        raise UserError(f"{flag} {path}: cannot write there (directory, or a folder that does not exist or is not "
                        "writable)")
    if path is not None and path.is_fifo():
        _reader_waiting(path, flag)
    return path


def _reader_waiting(fifo: Path, flag: str) -> None:
    """A named pipe is written only when something reads it: opening one with no reader blocks for ever, so it is
    tried without blocking first (a pipe from `>(…)` has its reader and passes)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserError(f"{flag} {fifo}: a named pipe that nothing reads; start its reader first, or write to a "
                            "file") from None
        raise UserError(f"{flag} {fifo}: cannot write there: {exc.strerror}") from None


def _out_dir(path: Path | None) -> Path | None:
    """--out-dir DIR: created when absent (its parent must exist), never a file."""
    if path is None:
        return None
    if path.exists() and not path.is_dir():
        raise UserError(f"--out-dir {path}: is a file; give a directory")
    if not path.exists():
        try:
            path.mkdir()
        except OSError as exc:
            raise UserError(f"--out-dir {path}: cannot create the directory: {exc.strerror}") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"--out-dir {path}: not writable")
    return path


def _verdicts(value: str | None, flag: str) -> set[str]:
    """A comma-separated verdict list, as typed: REPLACE,REBOOT; NOT_OBSERVABLE or not-observable for the spaced
    ones."""
    if value is None:
        return set()
    chosen: set[str] = set()
    for word in (w.strip() for w in value.split(",")):
        if not word:
            continue
        verdict = parse_verdict(word)
        if verdict is None:
            named = ", ".join(v.replace(" ", "_") for v in VERDICT_SEVERITY)
            raise UserError(f"{flag}: {word!r} is not a verdict; use {named}")
        chosen.add(verdict)
    if not chosen:
        raise UserError(f"{flag}: name at least one verdict")
    return chosen


def _coverage_statuses(value: str | None, flag: str) -> set[str]:
    """A comma-separated list of GPU-evidence statuses, as typed: MEASURED, NOT_OBSERVABLE, NO_HMA_DETECTIONS (any case,
    `_`, `-` or a space between words) or GAP (a node with any empty hour, or not observable): report/order.py's
    coverage_status, which MCP audit_nodes reads too."""
    if value is None:
        return set()
    chosen: set[str] = set()
    for word in (w.strip() for w in value.split(",") if w.strip()):
        status = coverage_status(word)
        if status is None:
            raise UserError(f"{flag}: {word!r} is not a coverage status; use {', '.join(COVERAGE_WORDS)}")
        chosen.add(status)
    if not chosen:
        raise UserError(f"{flag}: name at least one coverage status")
    return chosen


FLAGS = {
    "log_groups": "--log-group",
    "instance_ids": "--instances",
    "file_system_ids": "--filesystem",
}  # request fields whose flag is named otherwise


def _validation_message(exc: ValidationError) -> str:
    def flag(loc: tuple[int | str, ...]) -> str:
        head = FLAGS.get(str(loc[0]), "--" + str(loc[0]).replace("_", "-")) if loc else "--?"
        return head + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])

    return "bad input: " + "; ".join(f"{flag(e['loc'])}: {e['msg']} (got {echoed(e.get('input'))})"
                                     for e in exc.errors())
