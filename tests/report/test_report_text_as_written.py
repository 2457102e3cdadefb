"""The report keeps account and service text searchable as written (RULES §0.4 "as the service writes them", §11):
an intraword underscore is not escaped (CommonMark gives it no meaning), and the coverage table's `Xids in window`
belongs to the row's own log group and stream."""

from __future__ import annotations

from markdown_it import MarkdownIt

from gpuaudit.model.result import CoverageRow, GpuError, NodeResult
from gpuaudit.report.escape import md_inline
from gpuaudit.report.fleet import xids_in_row


def test_an_intraword_underscore_stays_as_written_and_an_emphasis_underscore_is_escaped() -> None:
    # Given a Health event type and text whose underscores could open emphasis
    text = "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED and _not emphasis_ nor __bold__ efa_*"
    # When it is written into Markdown prose
    written = md_inline(text)
    # Then the event type reads as AWS spells it, and the rendered HTML has no emphasis and the original words
    assert "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED" in written
    html = MarkdownIt("commonmark").render(written)
    assert "<em>" not in html and "<strong>" not in html
    assert "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED and _not emphasis_ nor __bold__ efa_*" in html


def _xid(stream: str) -> GpuError:
    return GpuError.model_validate({"time": "2026-12-07T09:40:52Z", "code": 95, "class": "hardware",
                                    "log_group": "/ec2/fleet/var/log/messages", "log_stream": stream,
                                    "message": "NVRM: Xid (PCI:0000:3a:00): 95, pid=1, Uncontained: LTC TAG"})


def test_xids_in_window_counts_only_the_rows_own_stream() -> None:
    # Given a node whose kernel stream carried an Xid and whose application stream carried none
    kernel = CoverageRow(log_group="/ec2/fleet/var/log/messages", log_stream="i-0a3f5c81e2d94b7c1", status="Measured")
    app = CoverageRow(log_group="/ec2/fleet/app", log_stream="i-0a3f5c81e2d94b7c1-triton", status="Not observable")
    node = NodeResult(instance_id="i-0a3f5c81e2d94b7c1", status="running", xid_status="Measured",
                      coverage=[kernel, app], gpu_errors=[_xid("i-0a3f5c81e2d94b7c1")])
    # Then each row counts the Xids of its own stream
    assert (xids_in_row(node, kernel), xids_in_row(node, app)) == (1, 0)
