"""Confidence and its basis, written from RULES §8 and §11.

§8: "Confidence is High only when the root-cause signal is on the affected node, precedes the failure, and nothing
competes." §11: the report contains the "verdict headline labelled Proven or Hypothesis; … confidence with its basis".

The world: a ParallelCluster on two p6-b200 nodes whose kernel logs are live and clean (both Measured), every source
read (no visibility gap). In incident mode nothing is Proven (the leading branch is a Hypothesis), so confidence cannot
be High; in coverage mode, proven coverage on every node with nothing unread is High. Either way the report says why.
"""

from __future__ import annotations

from gpuaudit.report.html import render_html
from gpuaudit.report.markdown import render
from tests.unit.test_preflight import audit, pcluster


def _confidence_line(markdown: str) -> str:
    return next(line for line in markdown.splitlines() if line.startswith("Confidence:"))


def test_an_incident_without_a_proven_root_cause_is_never_high_confidence_and_says_why() -> None:
    result = audit(pcluster(mode="incident"))
    assert not any(b.status == "Root cause" for b in result.branches)
    assert result.visibility_gaps == []  # the coverage and the reads are complete: only the cause is unproven
    assert result.confidence != "High"
    line = _confidence_line(render(result))
    assert "no Proven root cause" in line and "2 of 2 GPU node(s) Measured" in line, line
    assert "no Proven root cause" in render_html(result)


def test_proven_coverage_on_every_node_with_nothing_unread_is_high_and_the_basis_is_stated() -> None:
    result = audit(pcluster(mode="coverage"))
    assert result.confidence == "High"
    line = _confidence_line(render(result))
    assert "2 of 2 GPU node(s) Measured" in line and "every source read" in line, line


def test_a_blind_node_lowers_confidence_and_the_basis_names_the_count() -> None:
    result = audit(pcluster(mode="coverage", stream_activity=[]))
    assert result.confidence in ("Medium", "Low")
    line = _confidence_line(render(result))
    assert "Not observable" in line, line


def test_an_incident_report_has_its_timeline_section_even_when_no_event_was_read() -> None:
    """RULES §11: the report contains, in order, … "timeline (UTC)"; §1: incident mode produces a timeline. An
    incident where nothing timed was read says so under the heading rather than dropping the section."""
    result = audit(pcluster(mode="incident"))
    assert result.timeline == []
    markdown = render(result)
    section = markdown.split("## Timeline (UTC)", 1)[1].split("\n## ", 1)[0]
    assert "no timed event" in section
    assert markdown.index("## Node verdicts") < markdown.index("## Timeline (UTC)") < markdown.index(
        "## Node capability and fabric")
    assert "Timeline (UTC)" in render_html(result)


def test_ready_yes_with_risks_names_the_checks_that_make_it_even_without_a_risk() -> None:
    """RULES §10: Ready = `Yes with risks` on any RISK/UNVERIFIED. On ParallelCluster P5 is UNVERIFIED (deep health
    checks are a HyperPod setting) and every other check passes: the answer names P5, as it names a FAIL or a RISK."""
    result = audit(pcluster(mode="preflight"), run_hours=48)
    assert result.ready == "Yes with risks"
    assert [c.id for c in result.checks if c.result != "PASS"] == ["P5"]
    assert "UNVERIFIED P5" in result.headline
    assert "## Ready: Yes with risks — UNVERIFIED P5" in render(result)


def test_the_terminal_summary_gives_the_confidence_basis_too() -> None:
    from gpuaudit.report.terminal import summary

    result = audit(pcluster(mode="incident"))
    text = "\n".join(line.plain for line in summary(result))
    assert f"confidence: {result.confidence} — {result.confidence_basis}" in text
