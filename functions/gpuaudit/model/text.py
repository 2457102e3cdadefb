"""The characters no output carries raw and no name may hold: one definition, for the escaping of every output
(report/escape.py) and the names a request accepts (model/evidence.py)."""

from __future__ import annotations

import re

# C0 (except tab and newline), DEL, C1, bidi embeddings/overrides/isolates, line/paragraph separators; and what
# shows nothing yet changes what a reader or a model reads: soft hyphen, zero-width space/joiners, word joiner and
# invisible operators, deprecated format characters, BOM, interlinear annotations, tag characters (hidden text).
# Written as escapes, so a message quoting the class shows no raw character.
CONTROL_CLASS = (r"\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
                 r"\u2066-\u206f\u2028\u2029\ufeff\ufff9-\ufffb\U000e0000-\U000e007f")
CONTROL = re.compile(f"[{CONTROL_CLASS}]")
# A name (cluster, fleet label): one line, and nothing a reader cannot see
NOT_IN_A_NAME = re.compile(f"[\\t\\n{CONTROL_CLASS}]")


def printable_name(value: str) -> str:
    """The name as given, or ValueError naming the first character no name may hold (shown as an escape)."""
    found = NOT_IN_A_NAME.search(value)
    if found is not None:
        raise ValueError(f"holds a control or invisible character ({found.group(0)!r} at position {found.start()}); "
                         "a name is one line of visible characters")
    return value


ECHO_MAX = 120  # characters of a refused value quoted back in a message


def echoed(value: object) -> str:
    """A refused value as a message quotes it: its repr (escapes, never raw), cut to ECHO_MAX characters with the
    cut said, so a 10-million-character input is not sent back whole."""
    text = repr(value)
    return text if len(text) <= ECHO_MAX else f"{text[:ECHO_MAX]}… [{len(text) - ECHO_MAX:,} more characters]"
