"""What starts an audit: the hourly schedule, SageMaker HyperPod cluster and node events, and EC2
Capacity Block expiration warnings, each delivering its event unchanged to the state machine
(the Plan function turns it into audits). The console starts executions directly."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from gpuaudit.model.evidence import FAILED_CLUSTER_STATES
from infra.config import DeployConfig

# handlers/models.py parses exactly these (tests/infra pins the two lists together).
HYPERPOD_DETAIL_TYPES = ["SageMaker HyperPod Cluster Event", "SageMaker HyperPod Cluster Node Health Event",
                         "SageMaker HyperPod Cluster State Change"]
CAPACITY_WARNING_DETAIL_TYPES = ["Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"]


class AuditTriggers(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig,
                 state_machine: sfn.IStateMachine) -> None:
        super().__init__(scope, construct_id)
        # Events EventBridge could not deliver (throttled StartExecution, a deleted machine) are kept, and alarmed.
        self.dead_letters = sqs.Queue(self, "DeadLetters", retention_period=Duration.days(14), enforce_ssl=True,
                                      encryption=sqs.QueueEncryption.SQS_MANAGED)
        self.start = start = targets.SfnStateMachine(state_machine, retry_attempts=4, max_event_age=Duration.hours(1),
                                        dead_letter_queue=self.dead_letters)
        Validations.of(self.dead_letters).acknowledge(Acknowledgment(
            id="AwsSolutions::AwsSolutions-SQS3",
            reason="This queue is itself the dead-letter queue of the EventBridge targets (cdk-nag sees only "
                   "SQS-to-SQS redrive); an alarm on its depth notifies the alert topic."))
        self.schedule = events.Rule(
            self, "Schedule", schedule=events.Schedule.expression(config.schedule), targets=[start],
            description="gpuaudit: coverage audit of every audited cluster, window ending at the last whole hour")
        # Only the events Plan audits start an execution (handlers/targets.py says why the others are skipped):
        # every node-health event, cluster events above Info, state changes to a failed state.
        self.hyperpod = [
            events.Rule(self, "HyperPodNodeHealth", targets=[start], event_pattern=events.EventPattern(
                source=["aws.sagemaker"], detail_type=["SageMaker HyperPod Cluster Node Health Event"]),
                description="gpuaudit: incident audit of a HyperPod cluster on a node-health event"),
            events.Rule(self, "HyperPodClusterEvents", targets=[start], event_pattern=events.EventPattern(
                source=["aws.sagemaker"], detail_type=["SageMaker HyperPod Cluster Event"],
                detail={"EventDetails": {"EventLevel": events.Match.any_of(
                    events.Match.anything_but("Info"), events.Match.does_not_exist())}}),
                description="gpuaudit: incident audit of a HyperPod cluster on a cluster event above Info"),
            events.Rule(self, "HyperPodFailedStates", targets=[start], event_pattern=events.EventPattern(
                source=["aws.sagemaker"], detail_type=["SageMaker HyperPod Cluster State Change"],
                detail={"ClusterStatus": list(FAILED_CLUSTER_STATES)}),
                description="gpuaudit: incident audit of a HyperPod cluster entering a failed state"),
        ]
        self.capacity = events.Rule(
            self, "CapacityBlockWarnings", targets=[start],
            event_pattern=events.EventPattern(source=["aws.ec2"], detail_type=CAPACITY_WARNING_DETAIL_TYPES),
            description="gpuaudit: preflight audit of the clusters on a Capacity Block 40 minutes before it ends")
