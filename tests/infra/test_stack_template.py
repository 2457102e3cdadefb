"""The synthesized template holds what the issue asks for: state machine with a Distributed Map,
the schedule and event rules, the findings table, the encrypted topic, the evidence bucket."""

from __future__ import annotations

import importlib
import json
from typing import Any, get_args

import pytest
from aws_cdk.assertions import Match, Template
from cdk_synth import TEST_CONFIG, Synthesized, state_machine_definition, synthesize, task_states
from handlers import models

from gpuaudit.domain.kube_access import READER_GROUP
from infra.config import DeployConfig
from infra.findings import CACHE_RETENTION_DAYS
from infra.triggers import CAPACITY_WARNING_DETAIL_TYPES, HYPERPOD_DETAIL_TYPES
from tests.helpers.kube_rbac import Rbac


@pytest.fixture(scope="module")
def template(synth: Synthesized) -> Template:
    return Template.from_json(synth.template)


@pytest.fixture(scope="module")
def definition(synth: Synthesized) -> dict[str, Any]:
    return state_machine_definition(synth)


def only(resources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.values()))["Properties"]


def test_one_of_each_resource_the_issue_names(template: Template) -> None:
    for kind, count in {"AWS::StepFunctions::StateMachine": 1, "AWS::Lambda::Function": 6,
                        "AWS::Events::Rule": 6, "AWS::DynamoDB::Table": 1, "AWS::SNS::Topic": 1,
                        "AWS::S3::Bucket": 1, "AWS::KMS::Key": 1, "AWS::Chatbot::SlackChannelConfiguration": 1}.items():
        template.resource_count_is(kind, count)


def test_the_cluster_fan_out_is_a_distributed_map_sized_to_the_logs_insights_quota(definition: dict[str, Any]) -> None:
    clusters = definition["States"]["AuditClusters"]
    assert definition["StartAt"] == "Plan" and definition["States"]["Plan"]["Next"] == "AuditClusters"
    assert clusters["Type"] == "Map" and clusters["ItemsPath"] == "$.targets"
    assert clusters["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    batches = clusters["ItemProcessor"]["States"]["CollectLogBatches"]
    assert batches["ItemProcessor"]["ProcessorConfig"]["Mode"] == "INLINE"
    # 30 concurrent queries / 3 per batch = 10 batches in flight: 5 clusters x 2 batches
    assert (clusters["MaxConcurrency"], batches["MaxConcurrency"]) == (5, 2)
    assert clusters["MaxConcurrency"] * batches["MaxConcurrency"] * 3 <= TEST_CONFIG["logs_insights_concurrent_queries"]


def test_steps_run_in_the_pipeline_order(definition: dict[str, Any]) -> None:
    assert [name for name, _ in task_states(definition)] == ["Plan", "Inventory", "CollectLogs", "Finish", "Verdict"]


def test_every_task_retries_throttling_with_backoff(definition: dict[str, Any]) -> None:
    for name, state in task_states(definition):
        retry, *timed_out = state["Retry"]
        assert {"Lambda.TooManyRequestsException", "ThrottlingException"} <= set(retry["ErrorEquals"]), name
        assert retry["BackoffRate"] > 1 and retry["MaxAttempts"] >= 3 and retry["JitterStrategy"] == "FULL", name
        # a Lambda stopped at its timeout: once more, except Plan (its rerun would find its own burst claims)
        assert [r["ErrorEquals"] for r in timed_out] == ([] if name == "Plan" else [["Sandbox.Timedout"]]), name
        assert all(r["MaxAttempts"] == 1 for r in timed_out), name


def test_every_collector_failure_is_caught_into_a_not_checked_state(definition: dict[str, Any]) -> None:
    states = dict(task_states(definition))
    processor = definition["States"]["AuditClusters"]["ItemProcessor"]["States"]
    inner = processor["CollectLogBatches"]["ItemProcessor"]["States"]
    expected = {"Inventory": ("InventoryNotChecked", processor), "CollectLogs": ("BatchNotChecked", inner),
                "Finish": ("FinishNotChecked", processor)}
    for step, (handler_state, scope) in expected.items():
        (catch,) = states[step]["Catch"]
        assert catch["ErrorEquals"] == ["States.ALL"] and catch["Next"] == handler_state
        assert scope[handler_state]["Type"] == "Pass"
    assert processor["FinishNotChecked"]["Next"] == "Verdict"  # a failed Finish is still judged
    assert "Catch" not in states["Plan"]  # a failed Plan fails the execution: alarmed and notified
    # a failed Inventory or Verdict is the cluster's failed audit: recorded and counted (AuditsFailed)
    (catch,) = states["Verdict"]["Catch"]
    assert catch["ErrorEquals"] == ["States.ALL"] and processor[catch["Next"]]["Next"] == "RecordFailure"
    assert processor["InventoryNotChecked"]["Next"] == "RecordFailure"
    assert processor["RecordFailure"]["Type"] == "Task" and processor["RecordFailure"]["Next"] == "MarkFailedAudit"
    assert processor["MarkFailedAudit"].get("End") is True  # then the end of the cluster's order (rotation.py)


def test_state_machine_is_logged_and_traced_without_execution_data(template: Template) -> None:
    template.has_resource_properties("AWS::StepFunctions::StateMachine", {
        "StateMachineType": "STANDARD", "TracingConfiguration": {"Enabled": True},
        "LoggingConfiguration": {"Level": "ALL", "IncludeExecutionData": False}})


def test_hourly_schedule_and_event_rules_start_the_state_machine(synth: Synthesized) -> None:
    rules = {k: v["Properties"] for k, v in synth.resources("AWS::Events::Rule").items()}
    (machine_id,) = synth.resources("AWS::StepFunctions::StateMachine")
    schedules = [r for r in rules.values() if r.get("ScheduleExpression") == "rate(1 hour)"]
    hyperpod = [r for r in rules.values() if r.get("EventPattern", {}).get("source") == ["aws.sagemaker"]]
    capacity = [r for r in rules.values() if r.get("EventPattern", {}).get("source") == ["aws.ec2"]]
    assert len(schedules) == len(capacity) == 1 and len(hyperpod) == 3
    assert {t for r in hyperpod for t in r["EventPattern"]["detail-type"]} == set(HYPERPOD_DETAIL_TYPES)
    assert {"Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"} == \
        set(capacity[0]["EventPattern"]["detail-type"])
    for rule in [*schedules, *hyperpod, *capacity]:
        (target,) = rule["Targets"]
        assert target["Arn"] == {"Ref": machine_id} and "Input" not in target  # the event itself is the input


def test_rules_match_exactly_what_the_plan_handler_parses() -> None:
    def literal(model: type[Any]) -> set[str]:
        return set(get_args(model.model_fields["detail_type"].annotation))

    assert literal(models.HyperPodEvent) == set(HYPERPOD_DETAIL_TYPES)
    assert literal(models.CapacityBlockWarning) == set(CAPACITY_WARNING_DETAIL_TYPES)


def test_findings_table_is_on_demand_recoverable_encrypted_with_ttl(synth: Synthesized) -> None:
    table = only(synth.resources("AWS::DynamoDB::Table"))
    assert table["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"},
                                  {"AttributeName": "sk", "KeyType": "RANGE"}]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["SSESpecification"]["SSEEnabled"] is True
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_alert_topic_is_kms_encrypted_tls_only_with_email_and_chatbot(synth: Synthesized) -> None:
    topic = only(synth.resources("AWS::SNS::Topic"))
    (key_id,) = synth.resources("AWS::KMS::Key")
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert only(synth.resources("AWS::KMS::Key"))["EnableKeyRotation"] is True
    email = only(synth.resources("AWS::SNS::Subscription"))
    assert (email["Protocol"], email["Endpoint"]) == ("email", "gpu-oncall@example.com")
    policy = only(synth.resources("AWS::SNS::TopicPolicy"))["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in policy)
    slack = only(synth.resources("AWS::Chatbot::SlackChannelConfiguration"))
    assert slack["SlackWorkspaceId"] == "T0123456789" and slack["SlackChannelId"] == "C0123456789"
    assert json.dumps(slack["GuardrailPolicies"]).count("AWSDenyAll") == 1


def test_evidence_bucket_is_private_encrypted_and_expires_its_objects(synth: Synthesized) -> None:
    bucket = only(synth.resources("AWS::S3::Bucket"))
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == \
        {"SSEAlgorithm": "AES256"}
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    expiry = {r["Prefix"]: r["ExpirationInDays"] for r in bucket["LifecycleConfiguration"]["Rules"] if "Prefix" in r}
    assert expiry == {"payloads/": TEST_CONFIG["payload_retention_days"],
                      "results/": TEST_CONFIG["finding_retention_days"], "cache/": CACHE_RETENTION_DAYS}
    statements = only(synth.resources("AWS::S3::BucketPolicy"))["PolicyDocument"]["Statement"]
    assert [s["Effect"] for s in statements] == ["Deny"]  # TLS only, and no one else's access


def test_functions_are_python_312_traced_thin_handlers(synth: Synthesized) -> None:
    functions = [f["Properties"] for f in synth.resources("AWS::Lambda::Function").values()]
    handlers = sorted(f["Handler"] for f in functions)
    assert handlers == ["handlers.collect_logs.handler", "handlers.finish.handler", "handlers.inventory.handler",
                        "handlers.plan.handler", "handlers.record_failure.handler", "handlers.verdict.handler"]
    for function in functions:
        assert function["Runtime"] == "python3.12" and function["TracingConfig"] == {"Mode": "Active"}
        assert function["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == "gpuaudit"
        module = importlib.import_module(function["Handler"].rsplit(".", 1)[0])
        assert callable(module.handler) and callable(module.session_factory) and callable(module.clock)
    by_handler = {f["Handler"]: f["Environment"]["Variables"] for f in functions}
    # the audited set is in the deployment layer (tests/infra/test_config_scale.py), named by GPUAUDIT_DEPLOYMENT
    assert by_handler["handlers.plan.handler"]["GPUAUDIT_DEPLOYMENT"] == "/opt/gpuaudit/deployment.json"
    assert not any(k.startswith(("GPUAUDIT_CLUSTERS", "GPUAUDIT_INSTANCES", "GPUAUDIT_MEMBER")) for v in
                   by_handler.values() for k in v)
    verdict = by_handler["handlers.verdict.handler"]
    assert verdict["FINDING_RETENTION_DAYS"] == "30" and verdict["GPUAUDIT_XID_CLASS_OVERRIDES"] == "31=application"
    assert verdict["GPUAUDIT_HISTORY_DAYS"] == "30"  # fleet memory look-back (history_lookback_days)


def test_offline_synth_ships_the_source_without_the_embedded_backend(synth: Synthesized) -> None:
    (function,) = [f["Properties"] for f in synth.resources("AWS::Lambda::Function").values()
                   if f["Properties"]["Handler"] == "handlers.plan.handler"]
    assert function["Layers"], "bundle=false takes Powertools, pydantic and the X-Ray SDK from the public layer"
    assets = [p for p in synth.outdir.iterdir() if p.name.startswith("asset.")]
    (asset,) = [a for a in assets if (a / "handlers").is_dir()]
    shipped = {p.relative_to(asset).as_posix() for p in asset.rglob("*")}
    assert {"handlers/plan.py", "handlers/verdict.py", "gpuaudit/pipeline.py",
            "gpuaudit/data/xid_catalog.json"} <= shipped
    assert not [p for p in shipped if p.startswith(("gpuaudit/embedded", "gpuaudit/worlds", "gpuaudit/cli/"))
                or "__pycache__" in p]


def test_outputs_name_where_to_start_audits_and_find_results(template: Template) -> None:
    for output in ("StateMachineArn", "FindingsTableName", "AlertTopicArn", "EvidenceBucketName"):
        template.has_output(output, Match.any_value())


def test_configuration_sizes_concurrency_and_refuses_an_empty_audited_set() -> None:
    assert DeployConfig(clusters=["a"]).batches_in_flight == 10
    assert (DeployConfig(clusters=["a"], clusters_in_flight=1).batch_concurrency,
            DeployConfig(clusters=["a"], logs_insights_concurrent_queries=100).cluster_concurrency) == (10, 5)
    with pytest.raises(ValueError, match="clusters"):
        DeployConfig()
    with pytest.raises(ValueError, match="discover"):
        DeployConfig(clusters=["a"], discovery_tag={"key": "team", "value": "ml"})
    assert DeployConfig(discover=True, discovery_tag={"key": "team", "value": "ml"}).discover


def test_the_auditor_alarms_on_itself_to_the_alert_topic(synth: Synthesized) -> None:
    """Failed/timed-out executions, step errors, throttled queries, undelivered triggers, and per configured
    cluster no completed audit in 2 h (missing data breaching): each notifies the alert topic."""
    from cdk_synth import TEST_CONFIG

    alarms = synth.resources("AWS::CloudWatch::Alarm")
    (topic,) = synth.resources("AWS::SNS::Topic")
    by_metric = {a["Properties"].get("MetricName"): a["Properties"] for a in alarms.values()}
    assert {"ExecutionsFailed", "ExecutionsTimedOut", "StepErrors", "ThrottledQueries",
            "ApproximateNumberOfMessagesVisible", "AuditsCompleted"} <= set(by_metric)
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic}]
    age = [a["Properties"] for a in alarms.values() if a["Properties"].get("MetricName") == "AuditsCompleted"
           and len(a["Properties"]["Dimensions"]) == 2]
    assert len(age) == len(TEST_CONFIG["clusters"])
    assert all(p["TreatMissingData"] == "breaching" and p["Period"] == 7200 for p in age)


def test_triggers_keep_undeliverable_events_and_one_cluster_never_aborts_the_others(synth: Synthesized) -> None:
    rules = synth.resources("AWS::Events::Rule")
    assert rules and all(t["DeadLetterConfig"]["Arn"] for r in rules.values() for t in r["Properties"]["Targets"])
    definition = json.dumps(synth.resources("AWS::StepFunctions::StateMachine"))
    assert '\\"ToleratedFailurePercentage\\":100' in definition
    for function in synth.resources("AWS::Lambda::Function").values():
        assert function["Properties"]["Environment"]["Variables"]["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"


def _cluster_map(synth: Synthesized) -> dict[str, Any]:
    definition = state_machine_definition(synth)
    return next(s for s in definition["States"].values() if s["Type"] == "Map")  # type: ignore[no-any-return]


def test_many_clusters_write_the_map_results_to_s3_not_the_execution_output(synth: Synthesized) -> None:
    """#14 item 4: the cluster Map's output passes Step Functions' 256 KB near 200 clusters; with discovery
    (unbounded) or 50+ configured clusters it goes through a ResultWriter to the stack's own bucket."""
    assert "ResultWriter" not in _cluster_map(synth)  # two configured clusters: the output stays inline
    many = synthesize(config={**TEST_CONFIG, "clusters": [], "discover": True})
    writer = _cluster_map(many)["ResultWriter"]
    assert writer["Resource"] == "arn:aws:states:::s3:putObject"
    assert writer["Parameters"]["Prefix"] == "map-results/"
    # a bucket of its own, expiring its objects: the state machine's write grant reaches nothing else
    (bucket_id,) = [b for b in many.resources("AWS::S3::Bucket") if "MapResults" in b]
    assert bucket_id in json.dumps(writer["Parameters"]["Bucket"])
    rules = many.resources("AWS::S3::Bucket")[bucket_id]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert all(r.get("ExpirationInDays") for r in rules)
    assert len(synth.resources("AWS::S3::Bucket")) == len(many.resources("AWS::S3::Bucket")) - 1


def test_functions_run_on_arm64_with_the_matching_layer_and_wheels(synth: Synthesized) -> None:
    """#14 item 4: Graviton, with the Powertools layer and the bundled wheels of the same architecture."""
    functions = synth.resources("AWS::Lambda::Function").values()
    assert {tuple(f["Properties"]["Architectures"]) for f in functions} == {("arm64",)}
    parameters = synth.template["Parameters"]
    layer_paths = {parameters[layer["Ref"]]["Default"] for f in functions for layer in f["Properties"]["Layers"]
                   if layer["Ref"] in parameters}
    assert len(layer_paths) == 1
    assert next(iter(layer_paths)).startswith("/aws/service/powertools/python/arm64/python3.12/")
    for layer in synth.resources("AWS::Lambda::LayerVersion").values():  # the deployment document's layer
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]


def _matching_rules(synth: Synthesized, event: dict[str, Any]) -> list[str]:
    """Rules whose pattern matches the event, by moto's EventBridge pattern matcher (AWS's own TestEventPattern
    is not available offline; moto implements the same literal, anything-but and exists semantics)."""
    from moto.events.models import EventPattern, EventPatternParser

    return [rule_id for rule_id, r in synth.resources("AWS::Events::Rule").items() if "EventPattern" in r["Properties"]
            and EventPattern(None, EventPatternParser(json.dumps(r["Properties"]["EventPattern"])).parse())
            .matches_event(event)]


def test_only_events_the_plan_audits_start_an_execution(synth: Synthesized) -> None:
    """#14 item 2: informational cluster events and state changes to a healthy status start no execution (Plan
    would skip them anyway); every other HyperPod event, and both Capacity Block warnings, start exactly one."""
    from tests.handlers.lambda_harness import (
        capacity_block_warning,
        hyperpod_cluster_event,
        hyperpod_node_health_event,
        hyperpod_state_change,
    )

    started = {
        "node health": hyperpod_node_health_event("c", "2026-10-01T18:00:00Z"),
        "cluster event Error": hyperpod_cluster_event("c", "2026-10-01T18:00:00Z", level="Error"),
        "cluster event without a level": {**hyperpod_cluster_event("c", "2026-10-01T18:00:00Z"),
                                          "detail": {"EventDetails": {"ClusterName": "c"}}},
        "state Failed": hyperpod_state_change("c", "2026-10-01T18:00:00Z", "Failed"),
        "state RollingBack": hyperpod_state_change("c", "2026-10-01T18:00:00Z", "RollingBack"),
        "capacity warning": capacity_block_warning("cr-0123456789abcdef0", "2026-10-01T10:50:00Z"),
    }
    skipped = {
        "cluster event Info": hyperpod_cluster_event("c", "2026-10-01T18:00:00Z", level="Info"),
        "state InService": hyperpod_state_change("c", "2026-10-01T18:00:00Z", "InService"),
        "state Updating": hyperpod_state_change("c", "2026-10-01T18:00:00Z", "Updating"),
    }
    assert {name: len(_matching_rules(synth, e)) for name, e in started.items()} == dict.fromkeys(started, 1)
    assert {name: _matching_rules(synth, e) for name, e in skipped.items()} == dict.fromkeys(skipped, [])


def test_configured_eks_clusters_get_read_only_access_entries_for_the_collectors(synth: Synthesized) -> None:
    """#19 item 3, #33 item 4: the stack gives Inventory, CollectLogs and Finish an access entry on each configured
    EKS cluster that puts them in the Kubernetes group the shipped ClusterRoleBinding names, and no EKS access policy
    (AmazonEKSViewPolicy cannot list nodes); none without configuration."""
    assert not synth.resources("AWS::EKS::AccessEntry")
    with_eks = synthesize(config={**TEST_CONFIG, "eks_access_entries": ["train-hp-eks-orchestrator"]})
    entries = with_eks.resources("AWS::EKS::AccessEntry").values()
    principals = {json.dumps(e["Properties"]["PrincipalArn"]) for e in entries}
    roles = {f["Properties"]["Handler"].split(".")[1]: f["Properties"]["Role"]["Fn::GetAtt"][0]
             for f in with_eks.resources("AWS::Lambda::Function").values()}
    assert len(entries) == 3 and all(e["Properties"]["ClusterName"] == "train-hp-eks-orchestrator" for e in entries)
    assert {r for r in (roles["inventory"], roles["collect_logs"], roles["finish"])} == {
        next(role for role in roles.values() if role in p) for p in principals}
    bound = {name for _kind, _role, namespace, subjects in Rbac.from_manifest().bindings if not namespace
             for kind, name in subjects if kind == "Group"}
    for e in entries:
        assert "AccessPolicies" not in e["Properties"] and e["Properties"]["Type"] == "STANDARD"
        assert e["Properties"]["KubernetesGroups"] == [READER_GROUP] and READER_GROUP in bound


def test_the_timeouts_follow_the_logs_insights_deadline(synth: Synthesized, definition: dict[str, Any]) -> None:
    """#34 item 4: a cluster's queries may run `logs_insights_deadline_minutes` (default 30; AWS stops a query at
    60), waited for in the state machine; the execution's timeout is derived from it, so a cluster whose reads take
    the whole deadline is still judged."""
    from infra.functions import SPECS
    from infra.workflow import cluster_audit_bound, execution_timeout

    config = DeployConfig.model_validate(TEST_CONFIG)
    assert config.logs_insights_deadline_minutes == 30 and config.logs_insights_budget_share == 0.7
    steps = sum(SPECS[n].timeout.to_seconds() for n in ("Inventory", "CollectLogs", "Finish", "Verdict"))
    assert cluster_audit_bound(config).to_seconds() == steps + 30 * 60 + config.query_wait_seconds
    assert definition["TimeoutSeconds"] == execution_timeout(config).to_seconds() == \
        SPECS["Plan"].timeout.to_seconds() + cluster_audit_bound(config).to_seconds() + 240
    longer = DeployConfig.model_validate({**TEST_CONFIG, "logs_insights_deadline_minutes": 45})
    assert execution_timeout(longer).to_seconds() - execution_timeout(config).to_seconds() == 15 * 60
    (collect,) = [f["Properties"] for f in synth.resources("AWS::Lambda::Function").values()
                  if f["Properties"]["Handler"] == "handlers.collect_logs.handler"]
    variables = collect["Environment"]["Variables"]
    # 70 % of the 30-query quota, for every execution of the deployment together
    assert (variables["GPUAUDIT_QUERY_DEADLINE_S"], variables["GPUAUDIT_QUERY_SLOTS"]) == ("1800", "21")
    for bad in ({"logs_insights_deadline_minutes": 60}, {"logs_insights_budget_share": 0}):
        with pytest.raises(ValueError):
            DeployConfig.model_validate({**TEST_CONFIG, **bad})


def test_plan_fits_each_execution_to_the_schedule_and_claims_for_its_timeout(synth: Synthesized) -> None:
    """The schedule and the execution timeout agree (issue #47 item 4): Plan plans at most the schedule period less
    its own timeout and the margin on each of the Map's lanes, and its in-flight claims last as long as the state
    machine lets an execution run."""
    (plan_env,) = [f["Properties"]["Environment"]["Variables"] for f in synth.resources("AWS::Lambda::Function")
                   .values() if f["Properties"]["Handler"] == "handlers.plan.handler"]
    definition = state_machine_definition(synth)
    lanes = definition["States"]["AuditClusters"]["MaxConcurrency"]
    assert plan_env["GPUAUDIT_CLUSTER_LANES"] == str(lanes)
    assert plan_env["GPUAUDIT_SCHEDULE_PERIOD_S"] == "3600"  # rate(1 hour)
    assert plan_env["GPUAUDIT_EXECUTION_BUDGET_S"] == str(3600 - 60 - 240)  # less Plan's 1 min and 4 min of margin
    assert int(plan_env["GPUAUDIT_IN_FLIGHT_S"]) == definition["TimeoutSeconds"]
