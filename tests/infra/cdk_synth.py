"""Synthesize the app once per configuration per test process, the way CI does: app.py's build, offline, no bundling.

Shared by tests/infra and the tests of the deployed stack (which put this folder on sys.path). Each synthesis is
app.py's own (infra/app.py's `build_app`, then `synth`) with the test configuration as its context, run by
synth_server.py: one process kept for the whole test process, so the CDK's Node.js runtime and cdk-nag start once
(~10 s of CPU) rather than once per configuration. cdk-nag runs as a validation plugin: an unacknowledged finding
fails the synth. tests/infra/test_stack_nag.py checks the server's template is the one `python app.py` writes.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STACK = "GpuAudit"
READ_ONLY_ROLE_STACK = "GpuAuditReadOnlyRole"
TEST_CONFIG: dict[str, Any] = {
    "clusters": ["research-hp-slurm", "llm-pretrain-b200"],
    "schedule": "rate(1 hour)",
    "alert_emails": ["gpu-oncall@example.com"],
    "slack": {"workspace_id": "T0123456789", "channel_id": "C0123456789"},
    "finding_retention_days": 30,
    "payload_retention_days": 2,
    "logs_insights_concurrent_queries": 30,
    "clusters_in_flight": 5,
    "xid_class_overrides": ["31=application"],
}
TEST_CONTEXT = {"bundle": False, "gpuaudit": TEST_CONFIG}


@dataclass(frozen=True)
class Synthesized:
    outdir: Path
    template: dict[str, Any]
    report: dict[str, Any]  # CDK's policy validation report (cdk-nag's findings and acknowledgments)
    stderr: str

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == kind}


def synthesize(member_account: bool = False, config: dict[str, Any] | None = None) -> Synthesized:
    """The auditor's app; with `member_account`, the app a member account deploys (the read-only role); `config`
    replaces TEST_CONFIG (cdk.json's `gpuaudit` context). Synthesized once per distinct input."""
    return _synthesize(member_account, json.dumps(config or TEST_CONFIG, sort_keys=True))


class _Server:
    """synth_server.py, started on first use and kept for the test process: the CDK's Node.js runtime and cdk-nag
    load once per process, not once per configuration. Its environment is `python app.py`'s as CI runs it."""

    def __init__(self) -> None:
        env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true"}
        for offline in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION", "AWS_PROFILE", "CDK_OUTDIR", "CDK_CONTEXT_JSON"):
            env.pop(offline, None)
        self.log = tempfile.NamedTemporaryFile(prefix="gpuaudit-synth-", suffix=".log", delete=False)  # noqa: SIM115
        atexit.register(os.unlink, self.log.name)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("synth_server.py"))], cwd=ROOT,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True)
        atexit.register(self.close)

    def synth(self, context: dict[str, Any], outdir: Path) -> tuple[dict[str, Any], str]:
        """The server's reply, and what it wrote to stderr meanwhile."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        start = Path(self.log.name).stat().st_size
        self.proc.stdin.write(json.dumps({"context": context, "outdir": str(outdir)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        with open(self.log.name, encoding="utf-8", errors="replace") as log:
            log.seek(start)
            stderr = log.read()
        if not line:
            raise AssertionError(f"synth_server.py exited ({self.proc.wait()}):\n{stderr[-6000:]}")
        return json.loads(line), stderr

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@functools.cache
def _server() -> _Server:
    return _Server()


@functools.cache
def _synthesize(member_account: bool, config_json: str) -> Synthesized:
    outdir = Path(tempfile.mkdtemp(prefix="gpuaudit-cdk-"))
    atexit.register(shutil.rmtree, outdir, True)
    context = {**TEST_CONTEXT, "member_account": member_account, "gpuaudit": json.loads(config_json)}
    reply, stderr = _server().synth(context, outdir)
    if not reply["ok"]:
        raise AssertionError(f"synth failed:\n{reply['error'][-6000:]}\n{stderr[-3000:]}")
    return _read(outdir, member_account, stderr)


def refusal(config: dict[str, Any], outdir: Path) -> str | None:
    """What the synthesis of this configuration says when it refuses it (app.py's own `gpuaudit: …` message, or the
    traceback of any other failure), through the shared server; None when it synthesized."""
    reply, _stderr = _server().synth({**TEST_CONTEXT, "gpuaudit": config}, outdir)
    return None if reply["ok"] else str(reply["error"])


def synthesize_with_app_py(member_account: bool = False, config: dict[str, Any] | None = None) -> Synthesized:
    """The same synthesis through `python app.py` itself, in a process of its own, as CI runs it (context in
    CDK_CONTEXT_JSON, output to CDK_OUTDIR): what the server's answers are checked against."""
    outdir = Path(tempfile.mkdtemp(prefix="gpuaudit-cdk-"))
    atexit.register(shutil.rmtree, outdir, True)
    context = {**TEST_CONTEXT, "member_account": member_account, "gpuaudit": config or TEST_CONFIG}
    env = {**os.environ, "CDK_OUTDIR": str(outdir), "CDK_CONTEXT_JSON": json.dumps(context),
           "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true"}
    for offline in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION", "AWS_PROFILE"):
        env.pop(offline, None)
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise AssertionError(f"python app.py failed ({done.returncode}):\n{done.stderr[-6000:]}")
    return _read(outdir, member_account, done.stderr)


def _read(outdir: Path, member_account: bool, stderr: str) -> Synthesized:
    report_path = outdir / "validation-report.json"
    stack = READ_ONLY_ROLE_STACK if member_account else STACK
    return Synthesized(outdir=outdir, template=json.loads((outdir / f"{stack}.template.json").read_text()),
                       report=json.loads(report_path.read_text()) if report_path.exists() else {},
                       stderr=stderr)


def resolve_arns(value: Any, region: str = "us-west-2", account: str = "123456789012") -> Any:
    """A template value with its intrinsics replaced: functions become fake Lambda ARNs named by logical ID."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [resolve_arns(v, region, account) for v in value]
    if "Fn::Join" in value:
        delimiter, parts = value["Fn::Join"]
        return delimiter.join(resolve_arns(p, region, account) for p in parts)
    if "Fn::GetAtt" in value:
        return f"arn:aws:lambda:{region}:{account}:function:{value['Fn::GetAtt'][0]}"
    if "Ref" in value:
        # a pseudo parameter, else a resource of the stack: its logical ID stands for its name
        pseudo = {"AWS::Partition": "aws", "AWS::Region": region, "AWS::AccountId": account}
        return pseudo.get(value["Ref"], value["Ref"])
    raise ValueError(f"cannot resolve {value!r}")


def state_machine_definition(synth: Synthesized) -> dict[str, Any]:
    (machine,) = synth.resources("AWS::StepFunctions::StateMachine").values()
    return json.loads(resolve_arns(machine["Properties"]["DefinitionString"]))


def task_states(definition: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Lambda task states in execution order, walking Next and into Map item processors (the state machine's own
    DynamoDB update, MarkAudited, is not a step of the pipeline)."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(states: dict[str, Any], start: str) -> None:
        name: str | None = start
        while name is not None:
            state = states[name]
            if state["Type"] == "Task" and state["Resource"].endswith(":states:::lambda:invoke"):
                found.append((name, state))
            if state["Type"] == "Map":
                processor = state["ItemProcessor"]
                walk(processor["States"], processor["StartAt"])
            name = state.get("Next")

    walk(definition["States"], definition["StartAt"])
    return found


LAMBDA_ENV_LIMIT = 4096  # bytes: "the total size of all environment variables doesn't exceed 4 KB"


def physical_value(value: Any) -> str:
    """A template value as CloudFormation would render it, at its generated length: a resource's name is
    `<stack>-<logical ID>-<13 characters>` (CloudFormation's generated physical names), an ARN carries it after
    the region and account."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        delimiter, parts = value["Fn::Join"]
        return str(delimiter).join(physical_value(p) for p in parts)
    if "Ref" in value:
        pseudo = {"AWS::Partition": "aws", "AWS::Region": "us-west-2", "AWS::AccountId": "123456789012",
                  "AWS::URLSuffix": "amazonaws.com"}
        return pseudo.get(value["Ref"]) or f"{STACK}-{value['Ref']}-ABCDEFGHIJKLM"
    if "Fn::GetAtt" in value:
        logical, _attribute = value["Fn::GetAtt"]
        return f"arn:aws:service:us-west-2:123456789012:{STACK}-{logical}-ABCDEFGHIJKLM"
    raise ValueError(f"cannot render {value!r}")


def environment_bytes(function: dict[str, Any]) -> int:
    """A function's environment as Lambda measures it against the 4 KB limit: the variables map serialized as JSON
    (Lambda's own error quotes the string measured, `{"KEY":"value",…}`), in UTF-8 bytes."""
    variables = (function["Properties"].get("Environment") or {}).get("Variables") or {}
    rendered = {k: physical_value(v) for k, v in variables.items()}
    return len(json.dumps(rendered, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def scale_config(clusters: int = 200, member_roles: int = 50, instances: int = 500) -> dict[str, Any]:
    """A large fleet's cdk.json: `clusters` HyperPod names, `member_roles` of them in member accounts (one role
    each, the organization's external ID in one SecureString), and `instances` self-managed instance IDs spread
    over ten fleets."""
    names = [f"gpu-training-cluster-{i:03d}" for i in range(clusters)]
    fleets = names[:10]
    return {**TEST_CONFIG, "clusters": names,
            "instances": {fleet: [f"i-{(j * 10 + k):017x}" for j in range(instances // len(fleets))]
                          for k, fleet in enumerate(fleets)},
            "external_id_parameter": "/gpuaudit/member-external-id",
            # distinct synthetic member accounts: the documented example account's first eight digits, then i
            "member_roles": {name: {"role_arn": f"arn:aws:iam::44445555{i:04d}:role/gpuaudit-read-only"}
                             for i, name in enumerate(names[-member_roles:])}}


PRIVATE_EKS = "train-private-eks"
PRIVATE_EKS_WHERE = {"subnet_ids": ["subnet-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60719"],
                     "security_group_ids": ["sg-0123456789abcdef0"]}
MCP_AGENT = "arn:aws:iam::111122223333:role/devops-agent"


def production_config() -> dict[str, Any]:
    """The shape a real fleet deploys (issue #47 item 2): discovery on, 200 clusters (so the Distributed Map writes
    its results to S3), 50 of them in member accounts, ten self-managed fleets, EKS access entries including one
    private endpoint (its KubeRead reader), the MCP endpoint, e-mail and Slack (TEST_CONFIG's)."""
    return {**scale_config(clusters=200, member_roles=50, instances=500), "discover": True,
            "eks_access_entries": [PRIVATE_EKS, "train-public-eks"],
            "eks_private_endpoints": {PRIVATE_EKS: PRIVATE_EKS_WHERE},
            "mcp_endpoint": {"agent_principal": MCP_AGENT}}
