"""Where results go: the findings table (DynamoDB), the alert topic (SNS, KMS-encrypted, with
email and AWS Chatbot subscribers) and the evidence bucket (S3: payloads by reference, results)."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_chatbot as chatbot
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.config import DeployConfig

PAYLOADS_PREFIX = "payloads/"  # handlers/payload.py
RESULTS_PREFIX = "results/"  # handlers/verdict.py
CACHE_PREFIX = "cache/"  # handlers/coverage_cache.py: proven hourly bins of incremental audits
MAP_RESULTS_PREFIX = "map-results/"  # the cluster Map's ResultWriter, when many clusters are audited
CACHE_RETENTION_DAYS = 9  # a little over the bins' own 8-day retention (collectors/cache.py)


class FindingsStore(Construct):
    def __init__(self, scope: Construct, construct_id: str, config: DeployConfig) -> None:
        super().__init__(scope, construct_id)
        # Keys as gpuaudit/writes/sinks.py writes them: AUDIT#<audit_id> / SUMMARY | NODE#…,
        # LATEST#<cluster>#<mode> / NODE#… | CHECK#… | SELFCHECK
        self.table = dynamodb.Table(
            self, "Table", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True),
            time_to_live_attribute="expires_at", removal_policy=RemovalPolicy.RETAIN)

        self.alert_key = kms.Key(self, "AlertKey", enable_key_rotation=True,
                                 description="gpuaudit: encrypts the alert topic")
        self.topic = sns.Topic(self, "Alerts", display_name="gpuaudit alerts", master_key=self.alert_key,
                               enforce_ssl=True)
        for address in config.alert_emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(address))
        if config.slack is not None:
            chatbot.SlackChannelConfiguration(
                self, "Slack", slack_channel_configuration_name="gpuaudit-alerts",
                slack_workspace_id=config.slack.workspace_id, slack_channel_id=config.slack.channel_id,
                notification_topics=[self.topic],
                # Notifications only: nobody acts on AWS from the channel.
                guardrail_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AWSDenyAll")])

        self.bucket = s3.Bucket(
            self, "Evidence", encryption=s3.BucketEncryption.S3_MANAGED, enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(id="payloads", prefix=PAYLOADS_PREFIX,
                                 expiration=Duration.days(config.payload_retention_days)),
                s3.LifecycleRule(id="results", prefix=RESULTS_PREFIX,
                                 expiration=Duration.days(config.finding_retention_days)),
                s3.LifecycleRule(id="coverage-cache", prefix=CACHE_PREFIX,
                                 expiration=Duration.days(CACHE_RETENTION_DAYS)),

                s3.LifecycleRule(id="uploads", abort_incomplete_multipart_upload_after=Duration.days(1)),
            ])
        Validations.of(self.bucket).acknowledge(Acknowledgment(
            id="AwsSolutions::AwsSolutions-S1",
            reason="The bucket holds transient step payloads (expired after days) and audit results already "
                   "indexed in the findings table; every writer is one of the stack's own roles. An access-log "
                   "bucket would double the storage for no reader; enable CloudTrail S3 data events if required."))
        # The cluster Map's results when many clusters are audited (DeployConfig.writes_map_results): a bucket of
        # their own, so the state machine's write grant reaches nothing else.
        self.map_results: s3.Bucket | None = None
        if config.writes_map_results:
            self.map_results = s3.Bucket(
                self, "MapResults", encryption=s3.BucketEncryption.S3_MANAGED, enforce_ssl=True,
                block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
                object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED, removal_policy=RemovalPolicy.DESTROY,
                auto_delete_objects=False,
                lifecycle_rules=[s3.LifecycleRule(id="map-results",
                                                  expiration=Duration.days(config.payload_retention_days),
                                                  abort_incomplete_multipart_upload_after=Duration.days(1))])
            Validations.of(self.map_results).acknowledge(Acknowledgment(
                id="AwsSolutions::AwsSolutions-S1",
                reason="Holds only the Distributed Map's per-cluster summaries, expired after days; the findings "
                       "table and results/ keep what is read later. No access-log reader."))
