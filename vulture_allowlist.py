"""Names vulture (`make lint`) cannot see used, each with who reads it. Never executed: vulture reads it as source.

vulture looks for code nothing reads, by name. What it cannot see: a pydantic model's fields are read by validation
and serialization (the world file, the evidence and result JSON, the MCP schemas), not by attribute access; a
framework calls some methods by protocol; the embedded account keeps counters only tests and benchmarks read.
Commands, MCP tools, responders and validators are registered by decorator and ignored by `[tool.vulture]` in
pyproject.toml, as is `model_config`. Anything else vulture reports is dead: remove it rather than list it here.
tests/unit/test_dead_code.py keeps this list from going stale (every name here is still defined).
"""

from typing import Any

_: Any = None

# --- Pydantic fields: validated from and serialized to JSON, never read by attribute --------------------------------

# The world file (embedded/world_schema.py): AWS's own field names, checked on load, served as AWS answers them.
_.InstanceGroupName  # ClusterNode, ClusterEvent, InstanceGroup
_.InstanceType  # ClusterNode, InstanceGroup, Instance, InstanceTypeInfo, CapacityReservation
_.LaunchTime  # ClusterNode, Instance
_.PrivateIpAddress  # Instance (the compact form's templates read it from the dumped instance, not by attribute)
_.EventTime  # ClusterEvent, TrailEvent
_.EventId  # ClusterEvent, TrailEvent
_.ResourceType  # ClusterEvent, TrailResource
_.CurrentCount  # InstanceGroup
_.TargetCount  # InstanceGroup
_.SlurmConfig  # InstanceGroup
_.OnStartDeepHealthChecks  # InstanceGroup
_.TrainingPlanArn  # InstanceGroup, TrainingPlan
_.CreationTime  # Cluster, FileSystem
_.NodeProvisioningMode  # Cluster
_.InstanceGroups  # Cluster
_.Nodes  # Cluster
_.Events  # Cluster
_.TrainingPlanName  # TrainingPlan
_.StartTime  # TrainingPlan
_.EndTime  # TrainingPlan
_.State  # Instance, CapacityReservation, EventRule
_.PrivateDnsName  # Instance
_.VpcId  # Instance, RouteTable
_.SubnetId  # Instance, Subnet, RouteTableAssociation
_.Tags  # Instance, CapacityReservation, SecurityGroup, Subnet, RouteTable
_.CapacityReservationId  # CapacityReservation, CapacityBlockExtensionOffering
_.ReservationType  # CapacityReservation
_.StartDate  # CapacityReservation, CapacityBlockExtensionOffering
_.EndDate  # CapacityReservation
_.CreateDate  # CapacityReservation
_.CapacityBlockExtensionStartDate  # CapacityBlockExtensionOffering
_.CapacityBlockExtensionEndDate  # CapacityBlockExtensionOffering
_.GroupId  # SecurityGroup
_.RouteTableId  # RouteTable
_.Associations  # RouteTable
_.capacity_block_extension_offerings  # Ec2
_.ResourceName  # TrailResource
_.EventName  # TrailEvent
_.EventSource  # TrailEvent
_.Username  # TrailEvent
_.Resources  # TrailEvent
_.MetricName  # MetricSeries
_.Dimensions  # MetricSeries, MetricAlarm
_.Unit  # MetricSeries
_.Datapoints  # MetricSeries
_.AlarmName  # MetricAlarm
_.StateValue  # MetricAlarm
_.entityValue  # HealthEntity
_.eventTypeCode  # HealthEvent
_.startTime  # HealthEvent
_.endTime  # HealthEvent
_.lastUpdatedTime  # HealthEvent
_.AffectedEntities  # HealthEvent
_.ServiceCode  # ServiceQuota
_.QuotaCode  # ServiceQuota
_.QuotaName  # ServiceQuota
_.firstEventTimestamp  # LogStream
_.lastEventTimestamp  # LogStream
_.lastIngestionTime  # LogStream
_.storedBytes  # LogStream, LogGroup
_.uploadSequenceToken  # LogStream
_.retentionInDays  # LogGroup
_.metricFilterCount  # LogGroup
_.logGroupArn  # LogGroup
_.logGroupClass  # LogGroup
_.kmsKeyId  # LogGroup
_.dataProtectionStatus  # LogGroup
_.servicequotas  # WorldFile

# What was read, recorded in the evidence JSON (model/evidence.py, model/planned_reads.py).
_.image_id  # NodeInfo
_.creation_time  # LogGroupInfo
_.stored_bytes  # LogGroupInfo
_.event_source  # CloudTrailEvent
_.response_elements  # CloudTrailEvent
_.resource_type  # ClusterEvent
_.scheduled_events  # InstanceStatusInfo
_.dns_name  # FileSystemInfo
_.from_port  # SgRule
_.to_port  # SgRule
_.ipv6_cidrs  # SgRule
_.prefix_list_ids  # SgRule
_.cidr  # SubnetInfo
_.map_public_ip_on_launch  # SubnetInfo
_.state_reason  # AlarmInfo

# The result JSON (model/result.py) and the MCP tools' answers (agent/schema.py).
_.reboots_between  # GpuError
_.given_in  # AskedAction
_.schema_  # Result (serialized as "schema")
_.nodes_total  # AuditSummary
_.worst_nodes  # AuditSummary
_.next_node_offset  # AuditSummary
_.gaps_total  # AuditSummary
_.next_steps  # AuditSummary
_.next_steps_total  # AuditSummary
_.as_of  # LatestRow
_.execution_arn  # AuditStarted
_.started_at  # AuditStarted

# The Xid catalog (data/xid_catalog.json, rules/xid_catalog.py) and the routing shown per node (rules/xid_routing.py).
_.rules_override  # CatalogEntry
_.catalog_version  # XidCatalog
_.reference_sha256  # XidCatalog
_.decoded_action  # XidClassification
_.routed_as  # XidClassification
_.cause_class  # NodeRouting

# The deployed settings, validated from the environment (settings.py).
_.evidence_bucket  # Settings
_.findings_table  # Settings
_.aws_region  # Settings

_.stored_at  # AuditRow (agent/schema.py list_audits)

# The evidence JSON (the deployed steps' payloads): a collector's part sets it, merged by name
# (model/evidence_parts.py::merged); no rule reads it by attribute.
_.job_figure_groups  # Evidence, LogsPart: the job groups whose figures were read whole

# --- Read by a library, by protocol -----------------------------------------------------------------------------------

_.maxstring  # reprlib.Repr's limits (embedded/world_schema.py _SHOWN)
_.maxother
_.maxlist
_.maxdict
_.maxlevel
_.__signature__  # inspect.signature, read by the MCP SDK for a tool's parameters (agent/server.py _flat)
_.__annotations__
_.try_bundle  # CDK's ILocalBundling, called by jsii (infra/bundling.py)
_.bind  # CDK's IRuleTarget, called by jsii (infra/operations.py NotifyTopic)

# --- Instruments read by tests and benchmarks only ----------------------------------------------------------------

_.serve_s  # WorldBackend: AWS's side of a wire-mode call (tests/benchmarks/step_memory.py)
_.unprocessed_returned  # DynamoLimits: items handed back unprocessed (tests/writes/test_dynamo_batch.py)
_.refuse_next  # EventBridgeStandIn: a refusal injected (tests/writes/test_events.py)
_.iam_action  # infra/permissions.py: an operation's IAM action (tests/infra/test_stack_iam.py)

# --- Dead, removal deferred -------------------------------------------------------------------------------------------

# SinkOutcome.latest_kept is written and read by nobody; sinks.py is being split (issue #52 items 2-3), so it goes
# with that move (or the Verdict summary says it) rather than in a conflicting edit beside it.
_.latest_kept

# --- Added at the merge of issues #47-#53 (stop 46) -----------------------------------------------------------------
_.run_stdio_async  # agent/server.py AuditorServer: FastMCP.run("stdio") calls it (the override answers bad lines)
_.isatty  # launcher.py ClosedStream: io and click ask a stream whether it is a terminal
_.periods_in_window  # model/planned_reads.py EfaCounterSeries: a pydantic field, written to the evidence JSON
_.already_published  # sinks.py SinkOutcome: the Verdict's summary and tests/writes/test_sinks.py read it
_.events_already_sent  # sinks.py SinkOutcome: the same for the events
_.serve_cpu_s  # embedded/backend.py WorldBackend: tests/benchmarks/step_memory.py subtracts the stand-in's answering
