"""The audit state machine: the CLI's pipeline, step by step, fanned out.

    Plan ─▶ AuditClusters (Distributed Map, one child execution per cluster)
              Inventory ─▶ CollectLogBatches (Map over ≤50-group log batches: CollectLogs, looped through
                           a Wait state while its Logs Insights queries run)
                        ─▶ Finish ─▶ Verdict

Every task retries throttling and transient Lambda errors with exponential backoff and jitter.
Every collector step has a Catch: its failure becomes a `Not checked` gap that the Verdict puts
in the result (a failed Inventory leaves the cluster's line in the execution output instead),
so a failing collector never fails the execution. A failed Inventory or Verdict goes to RecordFailure, which
records the cluster's failed audit and counts it (AuditsFailed); an Inventory that found no cluster of that name
(UnknownCluster: deleted between runs) also has the cluster's standing verdicts closed in the history there. A step
Lambda stopped at its timeout
(`Sandbox.Timedout`) is retried once, except Plan.

Concurrency is sized to the account's Logs Insights concurrent-query quota: each log batch
runs 3 queries at once, so clusters in flight × batches per cluster × 3 ≤ the quota
(30 → 10 batches: 5 clusters × 2 batches by default). Across overlapping executions, CollectLogs leases each
query from one account-wide budget in the findings table (`logs_insights_budget_share` of the quota); a batch
that finds it full waits in WaitForQueries like one whose queries still run.

Timeouts follow the Logs Insights deadline (`logs_insights_deadline_minutes`): a cluster's log reads end by the
deadline after its audit started (CollectLogs stops what still runs, a `timed-out` gap), so one cluster's audit
takes at most `cluster_audit_bound` (its steps' Lambda timeouts plus the deadline and one wait), and the execution's
timeout is that plus Plan's and a margin: a cluster started in the execution's first wave is never cut off.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct
from handlers.rotation import AUDITED_PREFIX

from infra.config import DeployConfig
from infra.findings import MAP_RESULTS_PREFIX
from infra.functions import RETENTION, SPECS, AuditFunctions
from infra.nag import acknowledge_wildcards, default_policy

# Lambda's own throttling and transient faults, and a handler's ThrottlingException (AWS throttled
# a call past the in-process retries: handlers/runtime.py).
RETRIED_ERRORS = ["Lambda.TooManyRequestsException", "Lambda.ServiceException", "Lambda.AWSLambdaException",
                  "Lambda.SdkClientException", "Lambda.ClientExecutionTimeoutException", "ThrottlingException"]
# What Step Functions reports for a Lambda stopped at its timeout. Retried once for every step but Plan: a Plan
# rerun would find the burst claims of its own first attempt (handlers/coalesce.py) and skip every audit.
TIMED_OUT = "Sandbox.Timedout"
ALL = [sfn.Errors.ALL]
# The cluster Distributed Map's label: its child executions emit AWS/States metrics under the labelled ARN
# `stateMachine:<name>/<label>` (infra/operations.py alarms on it).
CLUSTER_MAP_LABEL = "AuditClusters"
EXECUTION_MARGIN = Duration.minutes(4)


def cluster_audit_bound(config: DeployConfig) -> Duration:
    """The longest one cluster's audit (one child execution) can take: Inventory, the log reads up to their
    deadline, one wait and the CollectLogs invocation that meets it, Finish, Verdict (each at its Lambda timeout)."""
    steps = sum(SPECS[name].timeout.to_seconds() for name in ("Inventory", "CollectLogs", "Finish", "Verdict"))
    return Duration.seconds(steps + config.logs_insights_deadline_minutes * 60 + config.query_wait_seconds)


def execution_timeout(config: DeployConfig) -> Duration:
    return Duration.seconds(SPECS["Plan"].timeout.to_seconds() + cluster_audit_bound(config).to_seconds()
                            + EXECUTION_MARGIN.to_seconds())


def execution_budget(config: DeployConfig) -> Duration:
    """The audit time per Map lane Plan may plan into one execution (handlers/execution_share.py): the schedule
    period less Plan's timeout and the margin, so a healthy fleet's execution ends before the next one starts and
    far before its timeout (the timeout alarm then means something went wrong). At least one minute: Plan always
    keeps the first target."""
    left = config.schedule_period_s - SPECS["Plan"].timeout.to_seconds() - EXECUTION_MARGIN.to_seconds()
    return Duration.seconds(max(60, left))


at = sfn.JsonPath.string_at
obj = sfn.JsonPath.object_at


class AuditWorkflow(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig, functions: AuditFunctions,
                 map_results: s3.IBucket | None, table: dynamodb.ITable) -> None:
        super().__init__(scope, construct_id)
        fns = functions.functions

        def invoke(name: str, retry_timeout: bool = True, **props: object) -> tasks.LambdaInvoke:
            task = tasks.LambdaInvoke(self, name, lambda_function=fns[name], retry_on_service_exceptions=False,
                                      **props)  # type: ignore[arg-type]
            task.add_retry(errors=RETRIED_ERRORS, interval=Duration.seconds(2), backoff_rate=2.0, max_attempts=6,
                           max_delay=Duration.seconds(60), jitter_strategy=sfn.JitterType.FULL)
            if retry_timeout:
                # A step Lambda stopped at its timeout (no EMF flushed): tried once more where a rerun is safe.
                task.add_retry(errors=[TIMED_OUT], interval=Duration.seconds(1), max_attempts=1)
            return task

        def failure(step: str) -> dict[str, object]:
            return {"step": step, "error": at("$.error.Error"), "cause": at("$.error.Cause")}

        # Plan gets the execution's ID beside its input: it claims the clusters it plans under that name.
        plan = invoke("Plan", retry_timeout=False, output_path="$.Payload", payload=sfn.TaskInput.from_object(
            {"trigger": obj("$"), "execution": at("$$.Execution.Id")}))
        # A cluster whose audit did not finish (Inventory or Verdict failed after its retries) is recorded and
        # counted (handlers/record_failure.py): the AuditsFailed alarm sees it, discovered clusters included.
        record_failure = invoke("RecordFailure", output_path="$.Payload")

        inventory = invoke("Inventory", result_selector={"evidence": obj("$.Payload.evidence"),
                                                         "batches": obj("$.Payload.batches"),
                                                         # the request with its configured scope added back
                                                         "request": obj("$.Payload.request")},
                           result_path="$.inventory")
        inventory.add_catch(sfn.Pass(self, "InventoryNotChecked", parameters={
            "cluster": at("$.request.cluster"), "mode": at("$.request.mode"), "audited": False,
            "failure": failure("Inventory")}).next(record_failure), errors=ALL, result_path="$.error")

        collect = invoke("CollectLogs", output_path="$.Payload")
        collect.add_catch(sfn.Pass(self, "BatchNotChecked", parameters={
            # the batch by reference: Finish names its groups from the evidence
            "failed": {**failure("CollectLogs"), "batch": sfn.JsonPath.number_at("$.batch.index")}}),
            errors=ALL, result_path="$.error")
        batches = sfn.Map(self, "CollectLogBatches", items_path="$.inventory.batches",
                          item_selector={"evidence": obj("$.inventory.evidence"), "batch": obj("$$.Map.Item.Value"),
                                         # names the batch's query leases across CollectLogs' attempts
                                         "execution": at("$$.Execution.Id")},
                          max_concurrency=config.batch_concurrency, result_path="$.batches")
        # A Logs Insights query still running ends the CollectLogs invocation (pending: true, its journal of
        # started queries kept in the payload); the state machine waits, not a Lambda, then invokes it again.
        wait = sfn.Wait(self, "WaitForQueries", time=sfn.WaitTime.duration(Duration.seconds(config.query_wait_seconds)))
        running = sfn.Choice(self, "QueriesStillRunning").when(
            sfn.Condition.boolean_equals("$.pending", True), wait.next(collect)).otherwise(
            sfn.Pass(self, "BatchCollected"))
        batches.item_processor(collect.next(running))

        finish = invoke("Finish", payload=sfn.TaskInput.from_object({
            "request": obj("$.inventory.request"), "evidence": obj("$.inventory.evidence"),
            "batches": obj("$.batches")}),
            output_path="$.Payload")
        verdict = invoke("Verdict", output_path="$.Payload")
        verdict.add_catch(sfn.Pass(self, "VerdictFailed", parameters={
            "cluster": at("$.request.cluster"), "mode": at("$.request.mode"), "failure": failure("Verdict")})
            .next(record_failure), errors=ALL, result_path="$.error")
        finish.add_catch(
            sfn.Pass(
                self,
                "FinishNotChecked",
                parameters={
                    "request": obj("$.inventory.request"),
                    "evidence": obj("$.inventory.evidence"),
                    "failure": failure("Finish"),
                },
            ).next(verdict),
            errors=ALL,
            result_path="$.error",
        )

        # When this cluster's audit ended (audited or recorded as failed): Plan puts the least recently audited first
        # (handlers/rotation.py), so an execution cut off by its timeout leaves a different tail each time. A mark
        # not written changes only the order: the audit itself stands.
        def mark_audited(name: str, measured: bool) -> tasks.DynamoUpdateItem:
            values = {":at": tasks.DynamoAttributeValue.from_string(at("$$.State.EnteredTime"))}
            if measured:  # the Verdict's line says how long the audit took; a failed audit keeps the last measure
                values[":took"] = tasks.DynamoAttributeValue.number_from_string(at("$.audit_s"))
            else:
                values[":none"] = tasks.DynamoAttributeValue.from_number(0)
                values[":one"] = tasks.DynamoAttributeValue.from_number(1)
            mark = tasks.DynamoUpdateItem(
                self, name, table=table, key={
                    "pk": tasks.DynamoAttributeValue.from_string(
                        sfn.JsonPath.format(f"{AUDITED_PREFIX}{{}}", at("$.mode"))),
                    "sk": tasks.DynamoAttributeValue.from_string(at("$.cluster"))},
                # audit_s: how long this audit took (Plan fits the next executions to the period with it); a failed
                # audit keeps audited_at and counts itself, so one failure is retried first next period and a cluster
                # that keeps failing takes its turn (handlers/rotation.py AuditMark.turn); the REMOVE ends this
                # execution's in-flight claim (handlers/execution_share.py)
                update_expression=("SET audited_at = :at, audit_s = :took REMOVE failed_at, failures, " if measured
                                   else "SET failed_at = :at, failures = if_not_exists(failures, :none) + :one REMOVE ")
                + "in_flight_by, in_flight_until",
                expression_attribute_values=values,
                result_path=sfn.JsonPath.DISCARD)
            mark.add_retry(errors=ALL, interval=Duration.seconds(1), backoff_rate=2.0, max_attempts=3,
                           jitter_strategy=sfn.JitterType.FULL)
            mark.add_catch(sfn.Pass(self, f"{name}NotRecorded"), errors=ALL, result_path=sfn.JsonPath.DISCARD)
            return mark

        verdict.next(mark_audited("MarkAudited", measured=True))
        marked_failed = mark_audited("MarkFailedAudit", measured=False)
        record_failure.next(marked_failed)
        # RecordFailure itself failing (after its retries; e.g. killed while closing a deleted cluster's history):
        # the failure item and AuditsFailed are written before that part (handlers/record_failure.py), the
        # function's Errors alarm sees the rest; the cluster still takes its turn in the rotation.
        record_failure.add_catch(sfn.Pass(self, "FailureNotRecorded", parameters={
            "cluster": at("$.cluster"), "mode": at("$.mode"), "audited": False, "recorded": False,
            "failure": failure("RecordFailure")}).next(marked_failed), errors=ALL, result_path="$.error")

        clusters = sfn.DistributedMap(self, "AuditClusters", items_path="$.targets", result_path="$.audits",
                                      max_concurrency=config.cluster_concurrency, label=CLUSTER_MAP_LABEL,
                                      # One cluster's failed audit never aborts the others (alarmed instead).
                                      tolerated_failure_percentage=100,
                                      map_execution_type=sfn.StateMachineType.STANDARD,
                                      result_writer_v2=sfn.ResultWriterV2(bucket=map_results, prefix=MAP_RESULTS_PREFIX)
                                      if map_results is not None else None)
        clusters.item_processor(inventory.next(batches).next(finish).next(verdict))

        log_group = logs.LogGroup(self, "Logs", retention=RETENTION[config.log_retention_days],
                                  removal_policy=RemovalPolicy.DESTROY)
        self.state_machine = sfn.StateMachine(
            self, "StateMachine", definition_body=sfn.DefinitionBody.from_chainable(plan.next(clusters)),
            state_machine_type=sfn.StateMachineType.STANDARD, timeout=execution_timeout(config), tracing_enabled=True,
            # Execution data holds EventBridge events, which carry the account ID: not logged.
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
            comment="gpuaudit: Plan -> per cluster Inventory -> CollectLogs (per log batch) -> Finish -> Verdict")
        acknowledge_wildcards(default_policy(self.state_machine.role), {
            "Resource::*": "Vended log delivery (logs:*LogDelivery, PutResourcePolicy, DescribeResourcePolicies, "
                           "DescribeLogGroups) and X-Ray, generated by CDK for logging and tracing: these actions "
                           "take no resource.",
            ".Arn>:*": "lambda:InvokeFunction on versions and aliases of the stack's own five functions "
                       "(<function ARN>:*), generated by CDK's LambdaInvoke.",
            "MapResults": "The Distributed Map's ResultWriter (many clusters): its own bucket, holding nothing but "
                          "the Map's results, expired after days; CDK grants its object actions on bucket/*.",
        })
        # Plan asks whether the execution holding an in-flight claim still runs (handlers/execution_share.py): a policy
        # of its own, since the Plan function cannot depend on the state machine that invokes it.
        holders = iam.Policy(
            self,
            "PlanReadsClaimHolders",
            roles=[functions.roles["Plan"]],
            statements=[
                iam.PolicyStatement(
                    sid="ClaimHolders",
                    actions=["states:DescribeExecution"],
                    resources=[
                        Stack.of(self).format_arn(
                            service="states",
                            resource="execution",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                            resource_name=f"{self.state_machine.state_machine_name}:*",
                        )
                    ],
                )
            ],
        )
        acknowledge_wildcards(holders, {
            ":execution:": "DescribeExecution of this state machine's own executions (execution:<this state "
                           "machine>:*): Plan reads whether the holder of an in-flight claim still runs.",
        })
        map_policy = self.state_machine.node.try_find_child("DistributedMapPolicy")
        if isinstance(map_policy, iam.Policy):
            acknowledge_wildcards(map_policy, {
                ":execution:": "The Distributed Map's child executions of this state machine "
                               "(execution:<this state machine>:*), generated by CDK's DistributedMap.",
            })
