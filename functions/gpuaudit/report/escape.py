"""One escaping boundary per output format. Everything the report quotes comes from the audited account
(log lines, stream and group names, tags, group names): anyone who can write a log line writes into the
report, so nothing reaches a terminal, a Markdown table, an HTML page or an alert raw.

* `visible`: control characters (ANSI/OSC escapes, BEL, backspace, C1, bidi overrides, line separators) and
  invisible format characters (zero-width, BOM, soft hyphen, tag characters) are shown as `\\xNN` / `\\uNNNN` /
  `\\UNNNNNNNN`, never emitted. Used by every other function.
* `outward`: account IDs redacted, then `visible`: the one function every surface that is not a rendered report
  applies to text it did not write itself (CLI errors, MCP answers and errors, Lambda log lines, Step Functions
  error causes); `outward_json` is its form for a JSON document already serialised (the escapes stay valid JSON).
* `md_inline` / `md_cell` / `md_code`: Markdown text, table cells and code spans (CommonMark + GFM tables).
* HTML goes through `html.escape` after `visible` (report/html.py).
* Alerts (report/alert.py) are plain text: `visible` only, so a quoted line stays greppable; Chatbot gets it in a
  code block.
Quoted log lines are cut at QUOTE_LIMIT characters, and the cut is said.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpuaudit.model.redaction import redact
from gpuaudit.model.text import CONTROL

QUOTE_LIMIT = 300  # characters of one log line quoted in any output
# `_` between two letters or digits is left as written: CommonMark never opens or closes emphasis on an intraword
# underscore, so escaping it changes nothing rendered and only breaks the raw text (an event type
# AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED or a stream name must stay searchable as the service spells it).
MD_SPECIAL = re.compile(r"([\\`\[\]<>|*~#!]|(?<![^\W_])_|_(?![^\W_]))")


def _show(match: re.Match[str]) -> str:
    ch = match.group(0)
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    return CONTROL.sub(_show, text)


def outward(text: str, accounts: set[str] | frozenset[str] = frozenset()) -> str:
    """Text leaving the auditor anywhere but a rendered report: account IDs redacted, control and invisible
    characters shown as escapes (one line stays one line only where the caller asks: `one_line`)."""
    return visible(redact(text, accounts))


def outward_tree(value: Any, keep: frozenset[str] = frozenset(), path: str = "") -> Any:
    """`outward` on every string of a JSON-like document, except the dotted paths in `keep`, which are escaped
    but keep their account ID (a handle the caller passes back, e.g. an execution ARN)."""
    if isinstance(value, str):
        return visible(value) if path in keep else outward(value)
    if isinstance(value, list):
        return [outward_tree(v, keep, path) for v in value]
    if isinstance(value, dict):
        return {k: outward_tree(v, keep, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    return value


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON spells an astral character as its UTF-16 surrogate pair
    return f"\\u{0xd800 + high:04x}\\u{0xdc00 + low:04x}"


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    return value


def outward_json(serialised: str) -> str:
    """`outward` for a JSON document already serialised (a log line): account IDs redacted in each string as it
    reads (not in its escaped form, where `\u0000` before an ID makes one long hex run), and every control or
    invisible character written as a JSON escape, so the line stays one valid JSON document."""
    try:
        document = json.loads(serialised)
    except ValueError:  # not JSON after all: redacted and escaped as text
        return CONTROL.sub(_json_escape, redact(serialised))
    return CONTROL.sub(_json_escape, json.dumps(_redacted(document), ensure_ascii=False))


def one_line(text: str) -> str:
    return visible(text.replace("\r\n", "\n").replace("\n", " ").replace("\t", " "))


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """A log line as quoted anywhere: at most `limit` characters, the cut said."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [cut: {len(text) - limit} more characters]"


def md_inline(text: object) -> str:
    """Account text inside Markdown prose: no raw HTML, link, code span, table pipe or new line."""
    return MD_SPECIAL.sub(r"\\\1", one_line(str(text)))


def md_cell(text: object) -> str:
    return md_inline(text) if text not in (None, "") else "—"


def md_code(text: object) -> str:
    """A code span that the text cannot close: a fence longer than any backtick run inside (CommonMark),
    pipes escaped (GFM tables split on them even inside code spans)."""
    body = one_line(str(text)).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"

