"""The IDs files grouped commands read (RULES §11: one command over every node's ID, chunked with `xargs -n`), and
the result's text pointing at where they were written.

A rule cannot know where the audit's outputs go: its command reads `<report>.reboot-ids.txt` (model.result.IDS_AT).
Whoever writes the report writes the IDs files beside it (`<report stem>.<ids_file>`: the CLI's `--out`/`--out-dir`,
the MCP server's results directory, the deployed auditor's S3 prefix) and calls `placed` so every output (the JSON
result, the Markdown and HTML reports, the table's next steps) names the real path, or for S3 the URI piped in
through `aws s3 cp URI -` (a shell cannot redirect from an S3 URI)."""

from __future__ import annotations

import re
import shlex

from gpuaudit.model.redaction import redact
from gpuaudit.model.result import IDS_AT, ActionGroup, Result
from gpuaudit.report.markdown import ids_files, render

__all__ = ["ids_files", "ids_location", "placed", "unplaced"]


def unplaced(result: Result) -> dict[str, str]:
    """The IDs files not written yet (`ids_files` of the groups whose text still reads `<report>.…`): a result
    read back from its JSON was placed when it was first written, and its commands keep pointing there."""
    waiting = {g.ids_file for g in result.action_groups if g.ids_file and not g.ids_at}
    return {name: ids for name, ids in ids_files(result).items() if name in waiting}


def ids_location(stem: str, name: str) -> str:
    """Where the IDs file `name` of the outputs at `stem` (a path without its extension, or an S3 URI) is."""
    return f"{stem}.{name}"


def _placed_text(text: str, name: str, where: str) -> str:
    token = f"{IDS_AT}.{name}"
    if where.startswith("s3://"):
        # `xargs … < <report>.x` reads a local file; from S3 the IDs come in on a pipe
        text = re.sub(rf"`xargs ([^`]*?) < {re.escape(token)}`", lambda m: f"`aws s3 cp {where} - | xargs {m[1]}`",
                      text)
        return text.replace(token, where)
    return text.replace(token, shlex.quote(where))


def placed(result: Result, stem: str) -> Result:
    """The result with every grouped action's IDs file named where it is written: `stem.<ids_file>`. The Markdown
    report is rendered again from the placed actions (redacted as `finalize` redacted it)."""
    if not unplaced(result):
        return result
    groups: list[ActionGroup] = []
    actions = list(result.actions)
    for g in result.action_groups:
        if not g.ids_file or g.ids_at:  # no file, or already written where its text says (a saved result)
            groups.append(g)
            continue
        where = ids_location(stem, g.ids_file)
        action = _placed_text(g.action, g.ids_file, where)
        actions = [action if a == g.action else a for a in actions]
        groups.append(g.model_copy(update={"action": action, "ids_at": where}))
    moved = result.model_copy(update={"actions": actions, "action_groups": groups})
    return moved.model_copy(update={"report_markdown": redact(render(moved), result.account_ids)})
