"""Where an audit's outputs go and in which format (the CLI's `--format`, `--out`, `--out-dir`).

Rules (aws-cli/kubectl where they have one): `--out -` is stdout; the format follows `--out`'s extension unless
`--format` names one, and a `--format` that contradicts the extension is an error; a name without a known
extension needs `--format`. With neither, stdout gets the terminal summary on a terminal and Markdown otherwise
(a pipe or a file gets the report, not a screen layout). `--out-dir DIR` writes every format in one run.
`events` is what the deployed auditor would put on its event bus for this audit (report/events.py), one PutEvents
entry per line, against the local history (`--history`) as the previous state; its files end in `.events.ndjson`.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from gpuaudit.model.history import HistoryRead
from gpuaudit.model.result import NodeResult, Result
from gpuaudit.report.records import records, to_csv, to_ndjson

FORMATS = ("table", "md", "json", "html", "ndjson", "csv", "events")
EXTENSIONS = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html",
              ".ndjson": "ndjson", ".jsonl": "ndjson", ".csv": "csv", ".txt": "table",
              ".events.ndjson": "events", ".events.jsonl": "events"}
# --out-dir: one file per format (the table is the terminal's; the report's files carry it all)
DIR_FILES = (("md", "report.md"), ("json", "result.json"), ("html", "report.html"),
             ("ndjson", "findings.ndjson"), ("csv", "findings.csv"), ("events", "findings.events.ndjson"))
REPORTS = ("md", "html")
Keep = Callable[[NodeResult], bool]  # the formats "full report: FILE" points at, best first


class BadOutput(ValueError):
    pass


@dataclass(frozen=True)
class Output:
    fmt: str
    path: Path | None  # None: stdout


def plan(fmt: str | None, out: str | None, out_dir: Path | None, stdout_is_terminal: bool) -> list[Output]:
    """The outputs of one run, files first, stdout last (at most once)."""
    if fmt is not None and fmt not in FORMATS:
        raise BadOutput(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    screen = "table" if stdout_is_terminal else "md"
    planned: list[Output] = []
    if out_dir is not None:
        planned += [Output(f, out_dir / name) for f, name in DIR_FILES]
    if out is not None and out != "-":
        path = Path(out)
        by_name = format_of(path)
        if by_name is None and fmt is None:
            hint = f"; did you mean --format {out}?" if out in FORMATS else ""
            raise BadOutput(f"--out {out}: cannot tell the format from the name (known extensions: "
                            f"{' '.join(EXTENSIONS)}); add one or pass --format{hint}")
        if by_name is not None and fmt is not None and by_name != fmt:
            raise BadOutput(f"--format {fmt} conflicts with --out {out} (a {path.suffix} file is {by_name}): "
                            "drop one, or make them agree")
        planned.append(Output(fmt or by_name or screen, path))
    elif out == "-":
        planned.append(Output(fmt or screen, None))
    elif out_dir is None or fmt is not None or stdout_is_terminal:
        # nothing named stdout: it gets --format, else the screen default (with --out-dir, only on a terminal)
        planned.append(Output(fmt or screen, None))
    if out is not None and out != "-" and fmt is None and stdout_is_terminal:
        planned.append(Output("table", None))  # a terminal still sees the summary, pointing at the file
    return planned


def format_of(path: Path) -> str | None:
    """The format a file name says: its two last suffixes first (`.events.ndjson`), then its last."""
    return EXTENSIONS.get("".join(path.suffixes[-2:]).lower()) or EXTENSIONS.get(path.suffix.lower())


def report_file(planned: Sequence[Output]) -> Path | None:
    """The full report this run writes to a file, for the summary's last line."""
    for wanted in REPORTS:
        for o in planned:
            if o.fmt == wanted and o.path is not None:
                return o.path
    return None


def ids_stem(planned: Sequence[Output], audit_id: str) -> Path:
    """Where a grouped command's IDs files go (`<stem>.reboot-ids.txt`): beside the report this run writes (its name
    without the format's extension), else beside any file it writes; a run that writes only to stdout puts them in
    the temporary directory under the audit's ID, so the command it prints still reads a file that exists."""
    written = report_file(planned) or next((o.path for o in planned if o.path is not None), None)
    if written is None:
        return Path(tempfile.gettempdir()).resolve() / "gpuaudit" / audit_id
    name = written.name
    for extension in sorted(EXTENSIONS, key=len, reverse=True):
        if name.lower().endswith(extension) and len(name) > len(extension):
            name = name[: -len(extension)]
            break
    return written.resolve().parent / name


def write_ids_files(result: Result, stem: Path) -> tuple[Result, list[tuple[Path, int]]]:
    """The IDs files of the result's grouped commands written at `stem`, and the result naming them there; each
    file's path with its count of IDs."""
    from gpuaudit.report.ids import ids_location, placed, unplaced

    files = unplaced(result)
    if not files:
        return result, []
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for name, ids in files.items():
        path = Path(ids_location(str(stem), name))
        path.write_text(ids, encoding="utf-8")
        written.append((path, ids.count("\n")))
    return placed(result, str(stem)), written


def render(result: Result, fmt: str, *, keep: Keep | None = None, filtered: str | None = None,
           full_report: Path | None = None, width: int = 10_000, history: HistoryRead | None = None) -> str:
    """One output's text. The table rendered here is plain (a file, a pipe): no colour, no wrapping. `keep`
    (--verdict, --only-exceptions) chooses the nodes of the table and the records; the result JSON and the
    Markdown/HTML reports stay whole: they are the audit's evidence, and a report without some nodes would read as
    if they had not been audited. The events are the changes against `history` (what the audit read of the local
    history before it), whole too: they are what a bus would carry."""
    nodes = [n for n in result.nodes if keep(n)] if keep is not None else None
    if fmt == "json":
        return result.to_json() + "\n"
    if fmt == "md":
        return result.report_markdown.rstrip("\n") + "\n"
    if fmt == "html":
        from gpuaudit.report.html import render_html

        return render_html(result).rstrip("\n") + "\n"
    if fmt == "ndjson":
        return to_ndjson(records(result, nodes))
    if fmt == "csv":
        return to_csv(records(result, nodes))
    if fmt == "events":
        from gpuaudit.report.events import to_ndjson as events_ndjson
        from gpuaudit.writes.eventbus import local_entries

        return events_ndjson(local_entries(result, history))
    buffer = io.StringIO()
    print_table(Console(file=buffer, no_color=True, color_system=None, width=width, highlight=False), result,
                keep=keep, filtered=filtered, full_report=full_report, terminal=False)
    return buffer.getvalue()


def print_table(console: Console, result: Result, *, keep: Keep | None = None,
                filtered: str | None = None, full_report: Path | None = None, terminal: bool = True) -> None:
    """The summary on `console`; `terminal`: it is a screen of `console.width` columns (a narrow one drops the node
    table's wide columns), else a file or a pipe (every column)."""
    from gpuaudit.report.escape import one_line
    from gpuaudit.report.terminal import shown_nodes, summary

    nodes = [n for n in shown_nodes(result) if keep(n)] if keep is not None else None
    named = one_line(str(full_report)) if full_report is not None else None
    for line in summary(result, nodes, named, filtered, console.width if terminal else None):
        console.print(line, soft_wrap=True, highlight=False)
