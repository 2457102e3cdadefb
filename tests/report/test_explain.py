"""Reports cite a section users can open (#37 item 6): every report ends with how to look a word up, and
`gpuaudit explain` answers for each verdict, label and `RULES §N` a report may cite, from the glossary shipped
with the package (docs/VERDICTS.md), and for an Xid code from the catalog."""

from __future__ import annotations

import re

from helpers.worlds import PClusterWorld, at
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.report.html import render_html
from gpuaudit.report.markdown import GLOSSARY_LINE


def explain(term: str) -> tuple[int, str]:
    """The exit code and the words printed (explain wraps at the terminal's width: compare words, not breaks)."""
    outcome = CliRunner().invoke(app, ["explain", term])
    return outcome.exit_code, " ".join(outcome.output.split())


def test_explain_wraps_at_the_width_and_never_splits_a_word() -> None:
    # issue #49 item 10: at 60 columns every line fits, and the words are the unwrapped text's, each whole
    narrow = CliRunner().invoke(app, ["explain", "REBOOT"], env={"COLUMNS": "60"})
    wide = CliRunner().invoke(app, ["explain", "REBOOT"], env={"COLUMNS": "2000"})
    assert narrow.exit_code == wide.exit_code == 0
    lines = narrow.output.splitlines()
    assert len(lines) > 3 and all(len(line) <= 60 for line in lines)
    assert narrow.output.split() == wide.output.split() and len(wide.output.splitlines()) < len(lines)


def test_each_verdict_and_label_explains_its_bar_and_meaning() -> None:
    code, out = explain("REBOOT")
    assert code == 0 and "RULES §7" in out and "hardware-class Xid" in out
    code, out = explain("not_observable")  # as --verdict spells it
    assert code == 0 and out.startswith("NOT OBSERVABLE")
    code, out = explain("Hypothesis (to validate)")
    assert code == 0 and ("Proven" in out or "measurement" in out)


def test_every_rules_section_a_report_cites_can_be_opened() -> None:
    w = PClusterWorld(n_compute=2)
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    w.stream(w.group, w.stream_name(w.compute[0]), events=[
        (at(9), f"{w.compute[0].hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=python3")])
    result = w.audit(w.cluster, mode="incident", since=at(6), until=at(10))
    md, page = result.report_markdown, render_html(result)
    assert md.rstrip().endswith(GLOSSARY_LINE) and "gpuaudit explain &lt;term&gt;" in page
    cited = set(re.findall(r"RULES §\d+(?:\.\d+)?", md + " ".join(n.verdict_evidence or "" for n in result.nodes)))
    assert cited
    for section in sorted(cited):
        code, out = explain(section)
        assert code == 0 and out.startswith(section), (section, out)


def test_an_xid_code_explains_from_the_catalog_and_an_unknown_word_is_exit_2_listing_the_terms() -> None:
    code, out = explain("79")
    assert code == 0 and "Xid 79" in out and "REBOOT" in out
    code, out = explain("healthy-ish")
    assert code == 2 and "not in the glossary" in out and "REPLACE" in out and "Traceback" not in out
