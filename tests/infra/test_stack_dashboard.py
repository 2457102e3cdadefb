"""The CloudWatch dashboard: the Verdict's EMF metrics (nodes by xid_status per cluster, verdicts, gaps,
alerts), step errors and the state machine's ExecutionTime, named in the stack's outputs."""

from __future__ import annotations

import json
from typing import Any

from cdk_synth import TEST_CONFIG, Synthesized


def dashboard_body(synth: Synthesized) -> dict[str, Any]:
    """The dashboard's JSON body, its deploy-time tokens (region, state machine ARN) replaced by `TOKEN`."""
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    body: Any = dashboard["Properties"]["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))


def test_the_dashboard_graphs_the_handlers_metrics(synth: Synthesized) -> None:
    widgets = {w["properties"]["title"]: json.dumps(w["properties"]["metrics"])
               for w in dashboard_body(synth)["widgets"]}
    everything = " ".join(widgets.values())
    for metric in ("Nodes", "Verdicts", "VisibilityGaps", "AlertsPublished", "StepErrors", "ExecutionTime"):
        assert metric in everything, metric
    for cluster in TEST_CONFIG["clusters"]:  # one nodes-by-xid_status graph per configured cluster
        graph = widgets[f"Nodes by xid_status: {cluster}"]
        assert "{gpuaudit,cluster,service,xid_status}" in graph and f'cluster=\\"{cluster}\\"' in graph
    assert "{gpuaudit,cluster,service,verdict}" in everything and "{gpuaudit,cluster,service}" in everything


def test_the_dashboard_name_is_a_stack_output(synth: Synthesized) -> None:
    (logical_id,) = synth.resources("AWS::CloudWatch::Dashboard")
    assert synth.template["Outputs"]["DashboardName"]["Value"] == {"Ref": logical_id}
