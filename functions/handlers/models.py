"""The events each handler accepts and the states it returns (Powertools Parser models).

Triggers are the real EventBridge shapes (scheduled event, SageMaker HyperPod events, EC2
Capacity Block expiration warnings) or, from the Step Functions console, an AuditRequest.
Between steps, evidence travels inline or by S3 reference (see payload.py): those fields
are plain JSON objects here and are validated as Evidence/BatchEvidence once loaded.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuaudit.collectors.logs import log_batches
from gpuaudit.model.evidence import AuditRequest, CallCount, WindowSource
from handlers.runtime import StepFailure

HYPERPOD_DETAIL_TYPES = ("SageMaker HyperPod Cluster Event", "SageMaker HyperPod Cluster Node Health Event",
                         "SageMaker HyperPod Cluster State Change")
# EC2 documents the warning under both names; match either.
CAPACITY_WARNING_DETAIL_TYPES = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")


# -- triggers ---------------------------------------------------------------------------------------
class ScheduledEvent(EventBridgeModel):
    """The hourly EventBridge schedule: a coverage audit of every audited cluster."""

    detail_type: Literal["Scheduled Event"] = Field(alias="detail-type")
    source: Literal["aws.events", "aws.scheduler"]


class HyperPodEventDetails(BaseModel):
    """`detail.EventDetails` of a "SageMaker HyperPod Cluster Event"."""

    model_config = ConfigDict(extra="allow")

    ClusterName: str | None = None
    ClusterArn: str | None = None
    EventLevel: str | None = None
    InstanceId: str | None = None


class HyperPodDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    ClusterName: str | None = None
    ClusterArn: str | None = None
    ClusterStatus: str | None = None  # "SageMaker HyperPod Cluster State Change"
    EventDetails: HyperPodEventDetails | None = None

    @property
    def cluster(self) -> str | None:
        inner = self.EventDetails
        return self.ClusterName or (inner.ClusterName if inner else None) or self.ClusterArn or \
            (inner.ClusterArn if inner else None)

    @property
    def level(self) -> str | None:
        return self.EventDetails.EventLevel if self.EventDetails else None


class HyperPodEvent(EventBridgeModel):
    """A HyperPod cluster, cluster-state or node-health event: an incident audit of that cluster."""

    detail_type: Literal[HYPERPOD_DETAIL_TYPES] = Field(alias="detail-type")  # type: ignore[valid-type]
    source: Literal["aws.sagemaker"]
    detail: HyperPodDetail

    @model_validator(mode="after")
    def _names_a_cluster(self) -> HyperPodEvent:
        if not self.detail.cluster:
            raise ValueError("detail names no cluster (ClusterName / ClusterArn, or EventDetails.ClusterName)")
        return self


class CapacityBlockDetail(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    capacity_reservation_id: str = Field(alias="capacity-reservation-id", pattern=r"^cr-[0-9a-f]+$")
    end_date: datetime | None = Field(default=None, alias="end-date")


class CapacityBlockWarning(EventBridgeModel):
    """A Capacity Block ends in 40 minutes: a preflight audit of the clusters running on it."""

    detail_type: Literal[CAPACITY_WARNING_DETAIL_TYPES] = Field(alias="detail-type")  # type: ignore[valid-type]
    source: Literal["aws.ec2"]
    detail: CapacityBlockDetail


class AlarmState(BaseModel):
    model_config = ConfigDict(extra="allow")

    value: str


class AlarmDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    alarmName: str = Field(min_length=1, max_length=255)  # CloudWatch's limit on an alarm name
    state: AlarmState


class XidWatchAlarm(EventBridgeModel):
    """The Xid watch's alarm changed state (issue #51, infra/xid_watch.py): an incident audit of its cluster."""

    detail_type: Literal["CloudWatch Alarm State Change"] = Field(alias="detail-type")
    source: Literal["aws.cloudwatch"]
    detail: AlarmDetail


EventBridgeTrigger = Annotated[ScheduledEvent | HyperPodEvent | CapacityBlockWarning | XidWatchAlarm,
                               Field(discriminator="detail_type")]
Trigger = ScheduledEvent | HyperPodEvent | CapacityBlockWarning | XidWatchAlarm | AuditRequest
TriggerKind = Literal["schedule", "hyperpod-event", "capacity-block-warning", "xid-watch", "console"]


# -- between steps ----------------------------------------------------------------------------------
class AuditTarget(BaseModel):
    """One item of the cluster Map (Plan's output): the audit to run and what asked for it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request: AuditRequest
    trigger: TriggerKind
    window_source: WindowSource | None = None  # stamped on the evidence window (schedule / event)
    # "deployment": the request's configured scope (log groups, instance IDs, file systems of the deployment document)
    # is left out of Plan's output and added back by Inventory, so Plan's output stays small at any fleet size.
    scope: Literal["request", "deployment"] = "request"


class Plan(BaseModel):
    trigger: TriggerKind
    targets: list[AuditTarget]
    skipped: list[str] = Field(default_factory=list)
    gaps: list[str] = Field(default_factory=list)


class LogBatch(BaseModel):
    """One item of the log-batch Map. By reference: Inventory hands out only `index` and `of`, and CollectLogs cuts
    the batch's groups from the evidence's log groups (pipeline.log_batches, deterministic), so the state never
    carries the group list (up to 50 × 512 characters a batch). `groups` given inline is still honoured."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    of: int = Field(ge=1)
    groups: list[str] = Field(default_factory=list, max_length=50)

    def groups_of(self, log_groups: list[Any]) -> list[str]:
        """This batch's group names: inline, else cut from the evidence's log groups."""
        if self.groups:
            return self.groups
        batches = log_batches(log_groups)
        if self.index >= len(batches):
            raise ValueError(f"log batch {self.index} of {self.of}: the evidence has {len(batches)} batches")
        return batches[self.index]


class InventoryOutput(BaseModel):
    evidence: dict[str, Any]
    batches: list[LogBatch]
    request: AuditRequest  # the audit as run, with its configured scope: what Finish and Verdict are handed


class CollectLogsInput(BaseModel):
    """One item of the log-batch Map: the cluster's evidence (inline or by reference) and its batch."""

    model_config = ConfigDict(extra="forbid")

    evidence: dict[str, Any]
    batch: LogBatch
    pending: bool = False  # set by CollectLogs itself when it asks to be invoked again after a Wait
    journal: dict[str, Any] | None = None  # QueryJournal, inline or by reference: the queries already started
    # The (child) execution's ID, from the state machine's context object: names the batch's query leases, so every
    # attempt of this CollectLogs holds the same ones (handlers/collect_logs.holder_of).
    execution: str | None = Field(default=None, min_length=1, max_length=2048)


class CollectedBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch: dict[str, Any]  # BatchEvidence, inline or by reference
    calls: list[CallCount]
    pending: bool = False  # the state machine's Choice reads it: False, the batch is done


class FailedBatch(BaseModel):
    """What the CollectLogs Catch leaves in the batch's place."""

    model_config = ConfigDict(extra="forbid")

    failed: StepFailure


class FinishInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request: AuditRequest
    evidence: dict[str, Any]
    batches: list[CollectedBatch | FailedBatch]


class VerdictInput(BaseModel):
    """Finish's output, or the Finish Catch's (inventory evidence plus the failure)."""

    model_config = ConfigDict(extra="forbid")

    request: AuditRequest
    evidence: dict[str, Any]
    failure: StepFailure | None = None


class FailedAudit(BaseModel):
    """A cluster's audit that did not finish, as the Verdict's or the Inventory's Catch hands it to RecordFailure."""

    model_config = ConfigDict(extra="ignore")

    cluster: str = Field(min_length=1)
    mode: str = Field(min_length=1)
    failure: StepFailure
