"""cdk-nag AwsSolutions: zero unacknowledged findings; every acknowledgment carries a reason and is
made on the construct it covers (or its parent), never blanket at the stack or app."""

from __future__ import annotations

from pathlib import Path

import pytest
from cdk_synth import STACK, Synthesized, synthesize_with_app_py

from infra.nag import flatten, reason_for

EXPECTED_RULES = {"AwsSolutions-IAM5", "AwsSolutions-L1", "AwsSolutions-S1", "AwsSolutions-SQS3"}


def test_aws_solutions_checks_pass(synth: Synthesized) -> None:
    (report,) = [r for r in synth.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert report["conclusion"] == "success"
    assert report["violations"] == []


def test_every_acknowledgment_is_justified_where_it_is_made(synth: Synthesized) -> None:
    (report,) = [r for r in synth.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    suppressed = report["suppressedViolations"]
    assert {s["ruleName"].split("[", 1)[0] for s in suppressed} == EXPECTED_RULES
    for finding in suppressed:
        assert len(finding["reason"]) > 60, finding["ruleName"]
        where = finding["acknowledgedAt"]
        assert where not in ("", STACK), f"{finding['ruleName']} acknowledged for the whole stack"
        for construct in finding["violatingConstructs"]:
            assert construct["constructPath"].startswith(where + "/"), (finding["ruleName"], where)
    wildcards = [s for s in suppressed if s["ruleName"].startswith("AwsSolutions-IAM5")]
    assert wildcards and all("[Resource::" in s["ruleName"] for s in wildcards), "one acknowledgment per wildcard"


def test_the_synthesis_the_tests_read_is_the_one_python_app_py_writes(synth: Synthesized) -> None:
    """The tests' syntheses share one process (tests/infra/synth_server.py); `python app.py` on its own, as CI and
    the deploy run it (context in CDK_CONTEXT_JSON, cdk.json's merged in), writes the same template and report."""
    own = synthesize_with_app_py()
    assert own.template == synth.template
    assert own.report == synth.report
    def written(outdir: Path) -> list[str]:  # the manifests, templates and assets (by content hash)
        return sorted(p.name for p in outdir.iterdir() if p.suffix == ".json" or p.name.startswith("asset."))

    assert written(own.outdir) == written(synth.outdir)


def test_a_wildcard_without_a_reason_fails_the_synth() -> None:
    reasons = {"Resource::*": "x-ray", "/payloads/*": "payloads"}
    assert reason_for("Resource::*", reasons, "p") == "x-ray"
    assert reason_for("Resource::<Bucket.Arn>/payloads/*", reasons, "p") == "payloads"
    with pytest.raises(ValueError, match="no justification"):
        reason_for("Resource::arn:aws:s3:::*", reasons, "GpuAudit/Some/Policy")


def test_finding_ids_are_flattened_like_cdk_nag() -> None:
    assert flatten({"Fn::Join": ["",
        [{"Fn::GetAtt": ["Bucket1", "Arn"]}, "/payloads/*"]]}) == "<Bucket1.Arn>/payloads/*"
    assert flatten({"Fn::Join": [":", ["arn", {"Ref": "AWS::Partition"}, {"Fn::Select": [0, ["a"]]}]]}) == \
        'arn:<AWS::Partition>:{"Fn::Select":[0,["a"]]}'
