"""Untrusted text and hostile input (issue #17): whatever the account writes (log lines, stream, group and
node names) reaches no terminal, table, page or alert raw, and no account ID survives in any form."""

from __future__ import annotations

import csv
import io
import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.model.redaction import redact
from gpuaudit.report.alert import chatbot_payload
from gpuaudit.report.alert import subject as alert_subject
from gpuaudit.report.escape import QUOTE_LIMIT, md_code, md_inline, visible
from gpuaudit.writes.sinks import Change, alert_message
from tests.helpers.worlds import PClusterWorld, at

ESC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
HOSTILE = f"{ESC_TITLE}{CLEAR}a|b|c`x` <script>alert(1)</script> <img src=x onerror=alert(2)> [x](javascript:alert(3))"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
ACCOUNT_FORMS = ["arn:aws:sts::444455556666:assumed-role/r/s", "sagemaker-us-west-2-444455556666",
                 "1111-2222-3333", "acct444455556666", "444455556666x"]


def hostile_world() -> PClusterWorld:
    w = PClusterWorld("evil", n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-2), at(13))
    w.stream(w.group, stream, events=[(at(9), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, {HOSTILE} "
                                              + " ".join(ACCOUNT_FORMS) + " " + "A" * 5000)])
    return w


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    w = hostile_world()
    path = tmp_path_factory.mktemp("w") / "evil.world.json"
    path.write_text(json.dumps(w.raw))
    runner = CliRunner()
    found = {}
    for fmt in ("md", "json", "html"):
        out = runner.invoke(app, ["audit", "--world", str(path), "--cluster", "evil", "--mode", "incident",
                                  "--since", at(8), "--until", at(11), "--format", fmt])
        assert out.exit_code == 0, out.output
        found[fmt] = out.stdout
    result = w.audit("evil", mode="incident", since=at(8), until=at(11))
    said = [Change(1, "REBOOT", f"new verdict {HOSTILE}", node=result.nodes[0].instance_id)]
    found["alert"] = alert_message(result, said)
    found["chatbot"] = json.loads(chatbot_payload(result, said, found["alert"]))["content"]["description"]
    return found


@pytest.mark.parametrize("fmt", ["md", "json", "html", "alert", "chatbot"])
def test_no_raw_control_character_reaches_any_output(outputs: dict[str, str], fmt: str) -> None:
    text = outputs[fmt] if fmt != "json" else json.dumps(json.loads(outputs[fmt]), ensure_ascii=False)
    assert not RAW_CONTROL.search(text.replace("\n", "").replace("\t", ""))


LIVE_TAG = re.compile(r"(?<!\\)<\s*/?\s*(script|img)", re.I)
LIVE_LINK = re.compile(r"(?<!\\)\]\(javascript:", re.I)
CELL_SPLIT = re.compile(r"(?<!\\)\|")


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_no_markup_from_the_account_is_live(outputs: dict[str, str], fmt: str) -> None:
    text = outputs[fmt]
    assert not LIVE_TAG.search(text), LIVE_TAG.search(text)
    if fmt != "html":  # in HTML a Markdown link is inert text
        assert not LIVE_LINK.search(text)
    assert "HOSTILE" not in text


def test_the_alert_email_quotes_account_text_as_written_and_chatbot_shows_it_in_one_code_block(
        outputs: dict[str, str]) -> None:
    # Plain text (SNS email): no Markdown escape, so grepping the logs for the quoted text finds it; only the
    # control characters are shown as \xNN
    assert visible(HOSTILE) in outputs["alert"] and "\\|" not in outputs["alert"] and "\\<" not in outputs["alert"]
    # Chatbot renders client-markdown: the text sits in one code block it cannot close, and mentions no one
    block = outputs["chatbot"]
    assert block.startswith("```\n") and block.endswith("\n```") and "```" not in block[4:-4]
    assert visible(HOSTILE) in block


def test_a_pipe_in_a_logged_line_adds_no_table_cell(outputs: dict[str, str]) -> None:
    width = None
    for line in outputs["md"].splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(CELL_SPLIT.split(line))
        width = width or cells
        assert cells == width, line


@pytest.mark.parametrize("fmt", ["md", "json", "html", "alert", "chatbot"])
def test_no_account_id_in_any_form(outputs: dict[str, str], fmt: str) -> None:
    text = outputs[fmt]
    for form in ("444455556666", "1111-2222-3333"):
        assert form not in text, (fmt, form)


def test_quoted_log_lines_are_cut_and_say_so(outputs: dict[str, str]) -> None:
    assert "A" * (QUOTE_LIMIT + 1) not in outputs["md"] and "A" * (QUOTE_LIMIT + 1) not in outputs["html"]
    assert "[cut:" in outputs["md"]


def test_escaping_functions_never_let_text_escape_its_span() -> None:
    assert md_code("a`b``c|d") == "```a`b``c\\|d```"
    assert md_inline("x\n## fake heading\n- **REPLACE** i-1") == "x \\#\\# fake heading \\- \\*\\*REPLACE\\*\\* i-1" \
        or "\n" not in md_inline("x\n## fake")
    assert "\x1b" not in md_inline(ESC_TITLE)


def test_redaction_keeps_timestamps_and_resource_ids() -> None:
    kept = "/aws/parallelcluster/llm-202608261551 i-0123456789012abcd 123e4567-e89b-12d3-a456-426614174000"
    assert redact(kept) == kept
    for form in ACCOUNT_FORMS:
        assert "444455556666" not in redact(form) and "1111-2222-3333" not in redact(form)


def test_exit_3_on_stderr_redacts_the_assumed_role_arn_and_shows_controls(tmp_path: Path) -> None:
    w = hostile_world()
    w.fault("ec2", "DescribeInstances", "UnauthorizedOperation",
            message="User: arn:aws:sts::444455556666:assumed-role/audit/s is not authorized \x1b[2J")
    path = tmp_path / "denied.world.json"
    path.write_text(json.dumps(w.raw))
    out = CliRunner().invoke(app, ["audit", "--world", str(path), "--cluster", "evil"])
    assert out.exit_code == 3, out.output
    assert "could not be read" in out.output
    assert "444455556666" not in out.output and "\x1b[" not in out.output



def test_redaction_keeps_exactly_the_protected_spans_at_any_size() -> None:
    # The protected-span lookup is a bisection; the linear scan it replaced is the reference it must equal, on
    # texts where 12-digit numbers sit inside, beside and between instance IDs, UUIDs, digests and timestamps.
    from gpuaudit.model.redaction import DASHED, MASK, PROTECTED, TWELVE, _timestamp

    def reference(text: str) -> str:
        text = DASHED.sub(MASK, text)
        protected = [m.span() for m in PROTECTED.finditer(text)]
        out, last = [], 0
        for m in TWELVE.finditer(text):
            start, end = m.span()
            if any(a <= start and end <= b for a, b in protected):
                continue
            if start and text[start - 1] == "-" and _timestamp(m.group(0)):
                continue
            out.append(text[last:start] + MASK)
            last = end
        return "".join(out) + text[last:]

    rng = random.Random(7)
    pieces = ["111122223333", "i-0123456789012abcd", "0123456789abcdef0123", " ", "/", "x", "-", "444455556666",
              "a1b2c3d4-0000-1111-2222-333344445555", "sg-012345678901", "9", "-202609271800", "1111-2222-3333"]
    for _ in range(500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))
        assert redact(text) == reference(text), text


# -- every character (issue #48 item 8) ------------------------------------------------------------------------------
INVISIBLE = "\u200b\u200d\u2060\ufeff\u00ad\U000e0041\U000e0042\u2028\u2029"
RAW_ANY = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u2028\u2029\u2060-\u2064\ufeff"
                     "\U000e0000-\U000e007f]")


@pytest.fixture(scope="module")
def invisible_world(tmp_path_factory: pytest.TempPathFactory) -> tuple[PClusterWorld, Path]:
    w = PClusterWorld("quiet", n_compute=1)
    node = w.compute[0]
    w.add_instance(queue=f"q{INVISIBLE}")
    w.stream(w.group, w.healthy(node, at(-2), at(13)), events=[
        (at(9), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, hidden{INVISIBLE}text\x1b[31m")])
    path = tmp_path_factory.mktemp("w") / "quiet.world.json"
    path.write_text(json.dumps(w.raw))
    return w, path


@pytest.mark.parametrize("fmt", ["md", "html", "csv", "table"])
def test_zero_width_bom_tag_and_line_separators_are_never_raw(invisible_world: tuple[PClusterWorld, Path],
                                                               fmt: str) -> None:
    _, path = invisible_world
    out = CliRunner().invoke(app, ["audit", "--world", str(path), "--cluster", "quiet", "--mode", "incident",
                                   "--since", at(8), "--until", at(11), "--format", fmt])
    assert out.exit_code == 0, out.output
    assert "\\u200b" in out.stdout or "\\\\u200b" in out.stdout  # said, as an escape
    assert not RAW_ANY.search(out.stdout.replace("\r\n", "").replace("\n", "").replace("\t", ""))


def test_report_csv_escapes_a_tampered_result_and_neutralises_every_list_item(
        invisible_world: tuple[PClusterWorld, Path], tmp_path: Path) -> None:
    """`report` reads a result file anyone may have edited: it is as untrusted as the account."""
    w, _ = invisible_world
    result = w.audit("quiet", mode="incident", since=at(8), until=at(11))
    node = result.nodes[0]
    tampered = result.model_copy(update={
        "actions": [f"{node.instance_id} \x1b]0;pwned\x07 first", f"=HYPERLINK(\"http://x\") {node.instance_id}"],
        "nodes": [node.model_copy(update={"verdict_evidence": "evil\x1b[2J\u2028line"}), *result.nodes[1:]]})
    path = tmp_path / "result.json"
    path.write_text(tampered.to_json(), encoding="utf-8")
    out = CliRunner().invoke(app, ["report", str(path), "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert not RAW_ANY.search(out.stdout.replace("\r\n", ""))
    row = next(r for r in csv.DictReader(io.StringIO(out.stdout)) if r["id"] == node.instance_id)
    items = row["actions"].split(";")
    assert len(items) >= 2 and not any(i.startswith(("=", "+", "-", "@")) for i in items), items
    assert "\\x1b[2J\\u2028line" in row["reason"]


HTML_NAME = "<img src=x onerror=alert(1)>*bold*[x](javascript:alert(2))`code`@channel"


def test_alert_subject_body_and_chatbot_title_carry_no_markup_from_a_cluster_name(
        outputs: dict[str, str]) -> None:
    result = hostile_world().audit("evil", mode="incident", since=at(8), until=at(11))
    named = result.model_copy(update={"cluster": result.cluster.model_copy(update={"name": HTML_NAME})})
    said = [Change(1, "REBOOT", "new verdict", node=result.nodes[0].instance_id)]
    subject = alert_subject(named, said)
    body = alert_message(named, said)
    chat = json.loads(chatbot_payload(named, said, body))
    for text in (subject, body.splitlines()[1], chat["content"]["title"], chat["metadata"]["threadId"]):
        # the product's own subject prefix (`[gpuaudit] `, issue #49 item 5) is not account text
        assert not re.search(r"[<>\[\]`*@]", text.replace("<account>", "").removeprefix("[gpuaudit] ")), text
    assert "img src=x onerror=alert?1?" in subject  # the name stays readable
