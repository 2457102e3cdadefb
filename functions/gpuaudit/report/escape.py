"""One escaping boundary per output format. Everything the report quotes comes from the audited account
(log lines, stream and group names, tags, group names): anyone who can write a log line writes into the
report, so nothing reaches a terminal, a Markdown table, an HTML page or an alert raw.

* `visible`: control characters (ANSI/OSC escapes, BEL, backspace, C1, bidi overrides, line separators)
  are shown as `\\xNN` / `\\uNNNN`, never emitted. Used by every other function.
* `md_inline` / `md_cell` / `md_code`: Markdown text, table cells and code spans (CommonMark + GFM tables).
* HTML goes through `html.escape` after `visible` (report/html.py).
* Alerts (report/alert.py) are plain text: `visible` only, so a quoted line stays greppable; Chatbot gets it in a
  code block.
Quoted log lines are cut at QUOTE_LIMIT characters, and the cut is said.
"""

from __future__ import annotations

import re

QUOTE_LIMIT = 300  # characters of one log line quoted in any output
# C0 (except tab and newline), DEL, C1, bidi embeddings/overrides/isolates, line/paragraph separators
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
MD_SPECIAL = re.compile(r"([\\`\[\]<>|*_~#!])")


def _show(match: re.Match[str]) -> str:
    ch = match.group(0)
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def visible(text: str) -> str:
    return CONTROL.sub(_show, text)


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

