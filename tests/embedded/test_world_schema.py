"""The world schema (issue #17 item 3): every shipped world passes it; every kind of violation is bad input (exit 2)
whose message names the key path; a valid world mutated at random (keys dropped, values of the wrong type) gives a
result or a named mistake, never a traceback. Each check prints how many worlds or mutations it tried."""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuaudit.cli import app
from gpuaudit.devtools.worldgen import WorldSpec, generate
from gpuaudit.embedded import world as world_module
from gpuaudit.embedded import world_schema as schema
from gpuaudit.embedded.backend import RESPONDERS
from gpuaudit.embedded.world import WorldError, load_world, parse_world
from gpuaudit.rules import consistency
from gpuaudit.rules import judge as judge_module
from tests.helpers.worlds import ACCOUNT, HyperPodWorld, at, ms

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "worlds"
TRIED = {"shipped": 0, "mutations": 0, "mutated audits": 0, "audited to a result": 0, "self-check failed": 0}


@pytest.fixture(autouse=True, scope="module")
def _print_how_many_were_tried(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nworld schema: {TRIED['shipped']} shipped world files, {TRIED['mutations']} mutated worlds parsed, "
              f"{TRIED['mutated audits']} mutated worlds audited through the CLI "
              f"({TRIED['audited to a result']} passed the schema and got a result, "
              f"{TRIED['self-check failed']} of them with a failed self-check)")


# -- every shipped world passes the schema ------------------------------------------------------------------
def shipped_world_files() -> list[Path]:
    found = [*(ROOT / "functions").rglob("worlds/*.world.json"), *(ROOT / "tests").rglob("worlds/*.json"),
             *SHARED.glob("*.world.json"), *SHARED.glob("*/world*.json")]
    return sorted(set(found))


def test_every_shipped_world_passes_the_schema() -> None:
    files = shipped_world_files()
    assert len([f for f in files if f.is_relative_to(ROOT)]) >= 4, files  # the packaged demo worlds at least
    for path in files:
        checked = schema.validate_world(json.loads(path.read_text(encoding="utf-8")))
        assert checked.format == schema.FORMAT
        assert load_world(path).account_id == checked.account_id
        TRIED["shipped"] += 1
    generated = [generate(WorldSpec(kind=kind, nodes=6, days=1.0, silent_fraction=0.5, xid_rate=2.0, seed=7))
                 for kind in ("parallelcluster", "hyperpod")]
    for raw in generated:
        assert parse_world(raw).log_groups


def test_the_fault_services_are_the_services_the_backend_serves() -> None:
    # plus "kubernetes": the EKS clusters' API, answered by EmbeddedKubeApi rather than a boto3 responder
    assert set(schema.SERVED_SERVICES) == {service for service, _ in RESPONDERS} | {"kubernetes"}


# -- one bad world per kind of violation: exit 2, the key path named ---------------------------------------------
def base_world() -> dict[str, Any]:
    """A valid HyperPod world with something in every typed place the cases below break."""
    w = HyperPodWorld("hp", gpu_nodes=2)
    w.cluster_metrics(at(-2), at(12))
    w.stream(w.group, "ClusterMetrics/slurm", events=[(at(7, 1), '{"level":"INFO","msg":"node joined"}')])
    w.hma_detection(w.gpu[0], at(9), code=79, reason="XidHardwareFailure")
    w.section("cloudtrail", "events").append({
        "EventId": "e1", "EventName": "UpdateClusterSoftware", "EventTime": at(8), "EventSource":
        "sagemaker.amazonaws.com", "Resources": [{"ResourceName": "hp"}],
        "CloudTrailEvent": json.dumps({"requestParameters": {"clusterName": "hp"}})})
    w.section("cloudwatch", "metrics").append({
        "Namespace": "AWS/FSx", "MetricName": "DataReadBytes", "Dimensions": [{"Name": "FileSystemId",
                                                                              "Value": "fs-1"}],
        "Datapoints": [[at(9), 1.0e9]]})
    w.section("servicequotas", "quotas").append({"ServiceCode": "ec2", "QuotaCode": "L-1", "Value": 5.0})
    w.fault("logs", "StartQuery", "ThrottlingException", times=1)
    return copy.deepcopy(w.raw)


def stream0(raw: dict[str, Any]) -> dict[str, Any]:
    return raw["logs"]["groups"][0]["streams"][0]  # type: ignore[no-any-return]


Mutation = Callable[[dict[str, Any]], None]
S0 = "logs.groups[0].streams[0]"
CASES: list[tuple[str, Mutation, str]] = [
    # wrong type
    ("region of the wrong type", lambda r: r.update(region=42), "world: region: must be a string, got 42"),
    ("region that is no region", lambda r: r.update(region=""),
     "world: region: must be an AWS region name such as 'us-west-2', got ''"),
    ("a cluster that is null", lambda r: r["sagemaker"]["clusters"].append(None),
     "world: sagemaker.clusters[1]: must be an object, got None"),
    ("a section that is a list", lambda r: r.update(ec2=[]), "world: ec2: must be an object, got []"),
    ("a served list that is null", lambda r: r["sagemaker"]["clusters"][0].update(Nodes=None),
     "world: sagemaker.clusters[0].Nodes: must be a list, got None"),
    ("a tag value of the wrong type", lambda r: r["ec2"].setdefault("instances", []).append(
        {"InstanceId": "i-1", "Tags": [{"Key": "k", "Value": 7}]}),
     "world: ec2.instances[0].Tags[0].Value: must be a string, got 7"),
    ("a log line that is not a pair", lambda r: stream0(r)["events"].append(["2026-10-01T09:00:00Z"]),
     f"world: {S0}.events[1]: must be a JSON array of two: [timestamp, message]"),
    ("a log message that is a number", lambda r: stream0(r)["events"].append([at(9), 5]),
     f"world: {S0}.events[1][1]: must be a string, got 5"),
    ("a datapoint value that is not finite", lambda r: r["cloudwatch"]["metrics"][0]["Datapoints"].append(
        [at(9), math.nan]), "world: cloudwatch.metrics[0].Datapoints[1][1]: must be a finite number, got nan"),
    ("CloudTrailEvent that is not an object", lambda r: r["cloudtrail"]["events"][0].update(CloudTrailEvent="[1]"),
     "world: cloudtrail.events[0].CloudTrailEvent: must be a JSON object written as a string, not a JSON list"),
    ("a concurrent-query quota of 0", lambda r: r.update(logs_concurrent_queries=0),
     "world: logs_concurrent_queries: must be >= 1, got 0"),
    # missing required key
    ("a node without InstanceId", lambda r: r["sagemaker"]["clusters"][0]["Nodes"][1].pop("InstanceId"),
     "world: sagemaker.clusters[0].Nodes[1].InstanceId: missing required key"),
    ("no account_id", lambda r: r.pop("account_id"), "world: account_id: missing required key"),
    ("a cluster event without EventTime", lambda r: r["sagemaker"]["clusters"][0].update(Events=[{"EventId": "x"}]),
     "world: sagemaker.clusters[0].Events[0].EventTime: missing required key"),
    ("a periodic entry without message", lambda r: stream0(r)["periodic"][0].pop("message"),
     f"world: {S0}.periodic[0].message: missing required key"),
    ("a metric dimension without Value", lambda r: r["cloudwatch"]["metrics"][0]["Dimensions"][0].pop("Value"),
     "world: cloudwatch.metrics[0].Dimensions[0].Value: missing required key"),
    # out of range
    ("every_s of 0.0001", lambda r: stream0(r)["periodic"][0].update(every_s=0.0001),
     f"world: {S0}.periodic[0].every_s: must be >= 0.1, got 0.0001"),
    ("every_s of 1e308 (found by the mutation test: an OverflowError before)",
     lambda r: stream0(r)["periodic"][0].update(every_s=1e308),
     f"world: {S0}.periodic[0].every_s: must be <= 31622400.0, got 1e+308"),
    ("a periodic entry of more than 50 M lines", lambda r: stream0(r)["periodic"][0].update(
        **{"from": "2000-01-01T00:00:00Z", "to": "2099-01-01T00:00:00Z", "every_s": 1}),
     f"world: {S0}.periodic[0]: {(ms('2099-01-01T00:00:00Z') - ms('2000-01-01T00:00:00Z')) // 1000:,} lines, "
     "more than 50,000,000 in one periodic entry"),
    ("a periodic entry that ends before it starts", lambda r: stream0(r)["periodic"][0].update(to=at(-5)),
     f"world: {S0}.periodic[0]: 'to' is before 'from'"),
    ("a line in 2101", lambda r: stream0(r)["events"].append(["2101-01-01T00:00:00Z", "late"]),
     f"world: {S0}.events[1][0]: is outside the years 1970-2100, got '2101-01-01T00:00:00Z'"),
    ("a negative epoch", lambda r: stream0(r).update(creationTime=-1),
     f"world: {S0}.creationTime: is outside the years 1970-2100, got -1"),
    ("LaunchTime 'yesterday'", lambda r: r["sagemaker"]["clusters"][0]["Nodes"][0].update(LaunchTime="yesterday"),
     "world: sagemaker.clusters[0].Nodes[0].LaunchTime: bad timestamp 'yesterday' (Invalid isoformat string: "
     "'yesterday')"),
    ("a timestamp that is true", lambda r: r.update(now=True),
     "world: now: must be an ISO-8601 UTC time or epoch milliseconds, got True"),
    ("an account ID of 11 digits", lambda r: r.update(account_id="11112222333"),
     "world: account_id: must be a 12-digit AWS account ID, got '11112222333'"),
    ("a log line over 1 MiB", lambda r: stream0(r)["events"].append([at(9), "x" * (schema.MAX_MESSAGE_CHARS + 1)]),
     f"world: {S0}.events[1][1]: must have 1 to 1,048,576 characters, got 1,048,577"),
    ("a stream name of 513 characters", lambda r: stream0(r).update(logStreamName="s" * 513),
     f"world: {S0}.logStreamName: must have 1 to 512 characters, got 513"),
    ("fault times of -1", lambda r: r["faults"][0].update(times=-1), "world: faults[0].times: must be >= 0, got -1"),
    ("fault times 'two'", lambda r: r["faults"][0].update(times="two"),
     "world: faults[0].times: must be an integer, got 'two'"),
    # unknown keys and kinds
    ("an unknown top-level key", lambda r: r.update(ec3={}),
     "world: ec3: unknown key; allowed here: account_id, cloudtrail"),
    ("an unknown key in a stream", lambda r: stream0(r).update(evnts=[]),
     f"world: {S0}.evnts: unknown key; allowed here: arn, creationTime, events,"),
    ("an unknown key in a periodic entry", lambda r: stream0(r)["periodic"][0].update(every=5),
     f"world: {S0}.periodic[0].every: unknown key; allowed here: every_s, from, message, to"),
    ("a fault of no kind", lambda r: r["faults"].append({"service": "logs", "operation": "StartQuery"}),
     "world: faults[1]: a fault names exactly one of 'error' (an AWS error code) or 'status'"),
    ("a query-status fault on another call", lambda r: r["faults"].append(
        {"service": "logs", "operation": "StartQuery", "status": "Running"}),
     "world: faults[1]: 'status' applies to logs GetQueryResults only"),
    ("a fault on a service the backend does not serve", lambda r: r["faults"][0].update(service="log"),
     "world: faults[0].service: must be one of 'sagemaker', 'ec2', 'logs'"),
    ("a fault with an unknown query status", lambda r: r["faults"].append(
        {"service": "logs", "operation": "GetQueryResults", "status": "Done"}),
     "world: faults[1].status: must be one of 'Scheduled', 'Running'"),
    ("a fault on a lower-case operation", lambda r: r["faults"][0].update(operation="startQuery"),
     "world: faults[0].operation: must be an API operation name such as 'StartQuery', or '*'"),
    ("the same stream twice", lambda r: r["logs"]["groups"][0]["streams"].append(copy.deepcopy(stream0(r))),
     "world: logs.groups[0]: streams[2]: log stream 'ClusterMetrics/slurm' appears twice (first at streams[0])"),
    ("an instance naming a missing interface template", lambda r: r["ec2"].setdefault("instances", []).append(
        {"InstanceId": "i-0abc", "network_interfaces_template": "p5.48xlarge"}),
     "world: ec2.instances[0].network_interfaces_template: no template named 'p5.48xlarge' in "
     "ec2.network_interface_templates"),
    ("the wrong format", lambda r: r.update(format="gpu-audit-world/2"),
     "world: format: must be 'gpu-audit-world/1', got 'gpu-audit-world/2'"),
]


def audit_file(path: Path | str, *extra: str) -> tuple[int, str, str]:
    """`gpuaudit audit` on a world file (cluster `hp` unless `extra` names another): exit code, stdout, stderr."""
    cluster = () if "--cluster" in extra else ("--cluster", "hp")
    out = CliRunner().invoke(app, ["audit", "--world", str(path), *cluster, *extra])
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output
    return out.exit_code, out.stdout, " ".join(out.stderr.split())  # Rich wraps long lines: compare words


@pytest.mark.parametrize(("mutate", "expected"), [(m, e) for _, m, e in CASES], ids=[c[0] for c in CASES])
def test_each_kind_of_violation_exits_2_naming_the_key_path(mutate: Mutation, expected: str, tmp_path: Path) -> None:
    raw = base_world()
    mutate(raw)
    path = tmp_path / "bad.world.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    code, _, stderr = audit_file(path)
    assert code == 2, stderr
    assert f"gpuaudit: {' '.join(expected.split())}" in stderr


def test_the_base_world_of_those_cases_is_valid_and_audits(tmp_path: Path) -> None:
    """Guards the cases above: each fails by its own mutation, not by something already wrong in the base."""
    path = tmp_path / "base.world.json"
    path.write_text(json.dumps(base_world()), encoding="utf-8")
    code, _, stderr = audit_file(path, "--format", "json")
    assert code == 0, stderr


def test_every_violation_is_listed_up_to_a_bound(tmp_path: Path) -> None:
    raw = base_world()
    nodes = raw["sagemaker"]["clusters"][0]["Nodes"]
    nodes.extend({"InstanceGroupName": "gpu-workers"} for _ in range(30))  # 30 nodes without an InstanceId
    raw["region"] = 7
    with pytest.raises(WorldError) as raised:
        parse_world(raw)
    lines = str(raised.value).splitlines()
    assert lines[0] == "world: region: must be a string, got 7"
    assert lines[1] == "world: sagemaker.clusters[0].Nodes[3].InstanceId: missing required key"
    assert len(lines) == schema.MAX_ERRORS_SHOWN + 1
    assert lines[-1] == f"world: … and {31 - schema.MAX_ERRORS_SHOWN} more violation(s)"


# -- the file itself: regular, bounded in size and depth ------------------------------------------------------
def test_a_directory_a_device_and_a_fifo_are_not_world_files(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (tmp_path, Path("/dev/zero"), fifo):
        code, _, stderr = audit_file(path)
        assert code == 2 and f"cannot read world file {path}: not a regular file" in stderr


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.world.json"
    path.write_text(json.dumps(base_world()), encoding="utf-8")
    monkeypatch.setattr(world_module, "MAX_WORLD_BYTES", 1024)
    code, _, stderr = audit_file(path)
    assert code == 2 and f"world file {path}: larger than 0 MiB" in stderr


@pytest.mark.parametrize("depth", [100_000, 5_000])
def test_json_nested_past_the_parser_depth_is_bad_input(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "deep.world.json"
    path.write_text('{"format": "gpu-audit-world/1", "x": ' + "[" * depth + "]" * depth + "}", encoding="utf-8")
    code, _, stderr = audit_file(path)
    assert code == 2 and "JSON nested too deeply" in stderr


def test_nested_json_inside_a_json_string_is_bad_input() -> None:
    raw = base_world()
    raw["cloudtrail"]["events"][0]["CloudTrailEvent"] = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(WorldError, match=r"world: cloudtrail.events\[0\].CloudTrailEvent: must be a JSON object"):
        parse_world(raw)


# -- random mutations of a valid world: a result or a named mistake, never a traceback ----------------------------
ODD_VALUES = [None, True, 0, -1, 7, 2.5, 1e308, math.inf, "", "x", "2101-01-01T00:00:00Z", "yesterday", [], [None],
              {}, {"x": 1}, [[1, "m"]], "A" * 600]


def paths_of(value: Any, here: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield here
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*here, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:4]):  # a few items of each list: the shapes repeat
            yield from paths_of(item, (*here, i))


def mutated(raw: dict[str, Any], picks: list[tuple[int, int, int]]) -> dict[str, Any]:
    """Up to three edits at pseudo-random places: drop the key or item, put an odd value there, or add a key."""
    world = copy.deepcopy(raw)
    for where, how, what in picks:
        paths = [p for p in paths_of(world) if p]
        path = paths[where % len(paths)]
        parent: Any = world
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if how % 3 == 0:
            del parent[last]
        elif how % 3 == 1:
            parent[last] = copy.deepcopy(ODD_VALUES[what % len(ODD_VALUES)])
        elif isinstance(parent[last], dict):
            parent[last][f"extra{what}"] = ODD_VALUES[what % len(ODD_VALUES)]
        else:
            parent[last] = [parent[last]]
    return world


picks = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 2), st.integers(0, 10**3)), min_size=1, max_size=3)
SETTINGS = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
BASE = base_world()
PACKAGED = ROOT / "functions" / "gpuaudit" / "worlds"
# (world, cluster, audit arguments): the small world above, and two shipped worlds for preflight and ParallelCluster
AUDITED = [
    (BASE, "hp", ("--mode", "incident", "--since", at(8), "--until", at(11))),
    (json.loads((PACKAGED / "hyperpod-preflight-risks.world.json").read_text()), "train-hp-p5",
     ("--mode", "preflight", "--run-hours", "48")),
    (json.loads((PACKAGED / "pcluster-capacity-block-expiry.world.json").read_text()), "llm-pretrain-b200",
     ("--mode", "incident", "--since", "2026-09-27T10:00:00Z", "--until", "2026-09-27T12:00:00Z")),
]


@settings(SETTINGS, max_examples=400)
@given(edits=picks)
def test_a_mutated_world_parses_or_names_every_violation_by_key_path(edits: list[tuple[int, int, int]]) -> None:
    TRIED["mutations"] += 1
    try:
        parse_world(mutated(BASE, edits))
    except WorldError as exc:
        lines = str(exc).splitlines()
        assert lines and all(line.startswith("world: ") for line in lines), lines
        # anything else (TypeError, KeyError, RecursionError...) fails the test with its traceback


@settings(SETTINGS, max_examples=60)
@given(which=st.integers(0, len(AUDITED) - 1), edits=picks)
def test_a_mutated_world_audits_or_exits_2_never_a_traceback(which: int, edits: list[tuple[int, int, int]],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This test is about input handling: a broken invariant is reported in the result as the product does (its
    # Self-check line), counted here, and left to the rules' own tests, instead of failing the run (conftest).
    monkeypatch.setattr(judge_module, "check_consistency", consistency.check_consistency)
    TRIED["mutated audits"] += 1
    world, cluster, args = AUDITED[which]
    path = tmp_path / "mutated.world.json"
    path.write_text(json.dumps(mutated(world, edits)), encoding="utf-8")
    code, stdout, stderr = audit_file(path, "--cluster", cluster, *args, "--format", "json")
    assert code in (0, 2, 3), stderr
    assert ACCOUNT not in stderr
    if code == 0:
        TRIED["audited to a result"] += 1
        TRIED["self-check failed"] += bool(json.loads(stdout)["invariants_broken"])
