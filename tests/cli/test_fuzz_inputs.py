"""Property/fuzz tests (issue #17): hostile text in world files and odd CLI arguments never yield a traceback,
a raw control character, live markup or an account ID in any output. Each test prints how many inputs it tried."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuaudit.cli import app
from tests.helpers.worlds import PClusterWorld, at

ACCOUNT = "444455556666"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LIVE_TAG = re.compile(r"(?<!\\)<\s*(script|img|iframe)", re.I)
PIECES = ["\x1b]0;t\x07", "\x1b[2J", "\x00", "\r", "\u202e", "|", "`", "<script>", "<img src=x onerror=y>",
          "[x](javascript:z)", "\n## fake\n- **REPLACE**", ACCOUNT, "1111-2222-3333", f"bucket-{ACCOUNT}",
          f"arn:aws:iam::{ACCOUNT}:role/x", "NVRM: Xid (PCI:0000:53:00): 79, ", "Xid 13 ", "\\", "*_~#!"]
# pieces joined by a space: an account ID is a 12-digit token, not 12 digits inside a longer number
hostile_text = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), min_size=1, max_size=6).map(" ".join)
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")  # CommonMark: inside a code span, markup is literal
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
TRIED = {"worlds": 0, "args": 0}


def check_outputs(texts: dict[str, str]) -> None:
    for fmt, text in texts.items():
        # as emitted: JSON carries control characters only \u-escaped, the other formats show them visibly
        assert not RAW_CONTROL.search(text.replace("\n", "").replace("\t", "")), fmt
        assert ACCOUNT not in text and "1111-2222-3333" not in text, fmt
        if fmt == "md":
            assert not LIVE_TAG.search(CODE_SPAN.sub("", text)), fmt
        elif fmt == "html":
            assert not LIVE_TAG.search(text), fmt


def run(world: dict[str, Any], tmp: Path, *args: str) -> tuple[int, str]:
    path = tmp / "fuzz.world.json"
    path.write_text(json.dumps(world))
    out = CliRunner().invoke(app, ["audit", "--world", str(path), *args])
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output
    assert out.exit_code in (0, 2, 3), out.output
    return out.exit_code, out.stdout


@settings(SETTINGS, max_examples=20)
@given(line=hostile_text, stream_suffix=hostile_text, group_suffix=hostile_text)
def test_hostile_text_in_a_world_reaches_no_output_raw(line: str, stream_suffix: str, group_suffix: str,
                                                       tmp_path: Path) -> None:
    TRIED["worlds"] += 1
    w = PClusterWorld("fz", n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-2), at(13))
    w.stream(w.group, stream, events=[(at(9), f"{node.hostname} kernel: {line}")])
    other = w.log_group(f"/custom/gpu/{group_suffix}"[:500])
    w.stream(other, f"{node.hostname}.{node.instance_id}.{stream_suffix}"[:500], events=[(at(9, 5), line)])
    texts = {}
    for fmt in ("md", "json", "html"):
        code, stdout = run(w.raw, tmp_path, "--cluster", "fz", "--mode", "incident", "--since", at(8),
                           "--until", at(11), "--format", fmt)
        if code == 0:
            texts[fmt] = stdout
    check_outputs(texts)


number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**6)).map(str)
when = st.one_of(st.sampled_from(["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1990-01-01T00:00:00Z",
                                  at(8), at(11), "yesterday", "", "2026-13-45T99:00:00Z"]), st.text(max_size=12))


@SETTINGS
@given(since=when, until=when, run_hours=number, deadline=number,
       instances=st.lists(st.sampled_from(["i-00000000000000002", "i-0abc", "", "i-00000000000000002"]), max_size=5))
def test_odd_cli_arguments_get_a_result_or_a_named_mistake(since: str, until: str, run_hours: str, deadline: str,
                                                           instances: list[str], tmp_path: Path) -> None:
    TRIED["args"] += 1
    w = PClusterWorld("fz", n_compute=1)
    w.healthy(w.compute[0], at(-2), at(13))
    args = ["--cluster", "fz", "--mode", "preflight", "--since", since, "--until", until, "--run-hours", run_hours,
            "--deadline-seconds", deadline, "--format", "json"]
    if instances:
        args += ["--instances", ",".join(instances)]
    code, stdout = run(w.raw, tmp_path, *args)
    if code == 0:
        check_outputs({"json": stdout})


# an account ID right after a control character: in JSON's escaped form (\u0000444455556666) one long hex run
INVISIBLE_PIECES = ["\x00444455556666", "\x9b444455556666", "\u200b", "\u200d", "\u2060", "\ufeff", "\u00ad",
                    "\U000e0041", "\u2028", "\u2029", "\x9b"]
any_text = st.lists(st.one_of(st.sampled_from(PIECES + INVISIBLE_PIECES), st.text(max_size=8)), min_size=1,
                    max_size=8).map(" ".join)


@given(text=any_text)
@SETTINGS
def test_outward_leaves_no_raw_character_and_no_account_id_and_its_json_form_stays_json(text: str) -> None:
    """The one function every surface uses (issue #48 item 1): on any text, no raw control or invisible character
    and no account ID; its JSON form (a Lambda log line) is still one valid JSON document."""
    from gpuaudit.model.redaction import redact
    from gpuaudit.model.text import CONTROL
    from gpuaudit.report.escape import outward, outward_json

    said = outward(text)
    assert not CONTROL.search(said) and ACCOUNT not in said and "1111-2222-3333" not in said
    line = outward_json(json.dumps({"message": text}, ensure_ascii=False))
    assert not CONTROL.search(line) and ACCOUNT not in line
    assert "\n" not in line and json.loads(line)["message"] == redact(text)  # the value itself, redacted
