"""A world-backed account for the Lambda handlers, shared by tests/handlers and tests/deployed/test_state_machine.py.

moto holds the product's own resources (evidence bucket, findings table, alert topic); the embedded
backend serves every read from a shared world; each handler module's `session_factory` and `clock`
hooks point at that world, so its `now` freezes every handler's clock. The handlers' AWS port waits as a world
audit's does (the backend's `sleep` moves the account's rate clock, no real wait): CloudTrail's 2 calls a second
are kept without 0.5 s of wall time per LookupEvents.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from handlers import collect_logs, finish, inventory, plan, record_failure, runtime, verdict
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sns.models import sns_backends

from gpuaudit.collectors.aws import Aws
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.embedded.world import World, load_world
from gpuaudit.model.timeutil import iso
from gpuaudit.settings import DEPLOYMENT_ENV

WORLDS = Path("/work/shared/worlds")
if not WORLDS.exists():  # a checkout without the shared folder: the copies shipped with the package
    WORLDS = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "worlds"
HYPERPOD_WORLD = WORLDS / "hyperpod-xid31-app-error.world.json"
PCLUSTER_WORLD = WORLDS / "pcluster-capacity-block-expiry.world.json"

HANDLER_MODULES: tuple[ModuleType, ...] = (plan, inventory, collect_logs, finish, verdict, record_failure)
BUCKET = "gpuaudit-evidence-test"
TABLE = "gpuaudit-findings-test"
TOPIC = "gpuaudit-alerts-test"
EVENT_ACCOUNT = "111122223333"


@dataclass
class LambdaContext:
    function_name: str = "gpuaudit-test"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:us-west-2:{DEFAULT_ACCOUNT_ID}:function:gpuaudit-test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"


@dataclass
class Account:
    world: World
    backend: WorldBackend
    session: boto3.Session
    topic_arn: str

    def findings(self) -> list[dict[str, Any]]:
        """Every item of the findings table, its values plain; a binary value (a piece of the history snapshot,
        zlib-compressed JSON) as the text it holds, so what it stores can be read and checked too."""
        items = self.session.client("dynamodb").scan(TableName=TABLE)["Items"]
        return sorted(({k: _plain(v) for k, v in i.items()} for i in items), key=lambda i: (i["pk"], i["sk"]))

    def published(self) -> list[dict[str, Any]]:
        topic = sns_backends[DEFAULT_ACCOUNT_ID][self.world.region].topics[self.topic_arn]
        return [{"subject": subject, "message": json.loads(message)}
                for _id, message, subject, _attrs, _group in topic.sent_notifications]

    def object_keys(self) -> list[str]:
        listed = self.session.client("s3").list_objects_v2(Bucket=BUCKET)
        return sorted(o["Key"] for o in listed.get("Contents", []))

    def read_json(self, key: str) -> dict[str, Any]:
        return json.loads(self.session.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read())


def _plain(value: dict[str, Any]) -> Any:
    kind, inner = next(iter(value.items()))
    if kind != "B":
        return inner
    try:
        return zlib.decompress(bytes(inner)).decode()
    except zlib.error:  # one piece of a snapshot cut in several: not readable alone
        return bytes(inner).hex()


def deploy_configuration(monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> Path:
    """The deployment document the stack would ship for this cdk.json configuration (infra/config.py's own
    deployment_document), written where GPUAUDIT_DEPLOYMENT points, as the functions find it under /opt."""
    from infra.config import DeployConfig, deployment_document

    folder = Path(tempfile.mkdtemp(prefix="gpuaudit-deployment-"))
    atexit.register(shutil.rmtree, folder, True)  # the test process's lifetime: a step may read it until then
    path = folder / "deployment.json"
    path.write_text(json.dumps(deployment_document(DeployConfig.model_validate(config))), encoding="utf-8")
    monkeypatch.setenv(DEPLOYMENT_ENV, str(path))
    return path


@contextmanager
def world_account(monkeypatch: pytest.MonkeyPatch, world_path: Path = HYPERPOD_WORLD,
                  clusters: tuple[str, ...] = ("research-hp-slurm",), mock_config: dict[str, Any] | None = None,
                  faults: list[dict[str, Any]] | None = None, wire: bool = False) -> Iterator[Account]:
    """`wire`: the backend answers with AWS's HTTP responses, parsed by botocore (embedded/wire.py)."""
    world = load_world(world_path)
    world.faults.extend(faults or [])
    for name, value in {"AWS_REGION": world.region, "AWS_DEFAULT_REGION": world.region,
                        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "EVIDENCE_BUCKET": BUCKET, "FINDINGS_TABLE": TABLE,
                        "POWERTOOLS_METRICS_NAMESPACE": "gpuaudit"}.items():
        monkeypatch.setenv(name, value)
    deploy_configuration(monkeypatch, {"clusters": list(clusters)})
    with mock_aws(config=mock_config or {}):
        backend = WorldBackend(world, wire=wire)
        session = backend.session()
        session.client("s3").create_bucket(Bucket=BUCKET,
                                           CreateBucketConfiguration={"LocationConstraint": world.region})
        session.client("dynamodb").create_table(  # the schema infra/findings.py declares
            TableName=TABLE, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                  {"AttributeName": "sk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}])
        topic_arn = session.client("sns").create_topic(Name=TOPIC)["TopicArn"]
        monkeypatch.setenv("ALERT_TOPIC_ARN", topic_arn)
        # the stack's default: the account's default event bus (infra/functions.event_bus_arn)
        monkeypatch.setenv("EVENT_BUS", f"arn:aws:events:{world.region}:{topic_arn.split(':')[4]}:event-bus/default")
        # looked up at each wait, so a test may make the backend's sleep fail
        monkeypatch.setattr(runtime, "Aws", functools.partial(Aws, sleep=lambda s: backend.sleep(s),
                                                              monotonic=backend.monotonic))
        for module in HANDLER_MODULES:
            monkeypatch.setattr(module, "session_factory", backend.session)
            monkeypatch.setattr(module, "clock", lambda w=world: w.now)
        yield Account(world=world, backend=backend, session=session, topic_arn=topic_arn)


# -- real-shaped trigger events ---------------------------------------------------------------------
def _event(detail_type: str, source: str, time: datetime | str, detail: dict[str, Any],
           resources: list[str] | None = None) -> dict[str, Any]:
    return {"version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718", "detail-type": detail_type,
            "source": source, "account": EVENT_ACCOUNT, "time": time if isinstance(time, str) else iso(time),
            "region": "us-west-2", "resources": resources or [], "detail": detail}


def scheduled_event(time: str) -> dict[str, Any]:
    return _event("Scheduled Event", "aws.events", time, {},
                  [f"arn:aws:events:us-west-2:{EVENT_ACCOUNT}:rule/GpuAudit-TriggersSchedule"])


def hyperpod_cluster_event(cluster: str, time: str, level: str = "Error") -> dict[str, Any]:
    arn = f"arn:aws:sagemaker:us-west-2:{EVENT_ACCOUNT}:cluster/k3m9x2pq7wla"
    return _event("SageMaker HyperPod Cluster Event", "aws.sagemaker", time, {"EventDetails": {
        "EventId": "83ea0bb5-be77-45e8-a458-0a87f778a205", "ClusterArn": arn, "ClusterName": cluster,
        "InstanceGroupName": "gpu-g5-xl", "InstanceId": "i-0cc3fc1626e53a130", "ResourceType": "Instance",
        "EventTime": 1759341600000, "EventLevel": level,
        "Description": f"Instance i-0cc3fc1626e53a130 in Cluster {cluster} failed a health check",
        "EventDetails": {"EventMetadata": {"Instance": {"NodeLogicalId": "df268d19-f035-4f28-9b80-b956b92ae21e"}}}}},
        [arn])


def hyperpod_node_health_event(cluster: str, time: str) -> dict[str, Any]:
    arn = f"arn:aws:sagemaker:us-west-2:{EVENT_ACCOUNT}:cluster/k3m9x2pq7wla"
    return _event("SageMaker HyperPod Cluster Node Health Event", "aws.sagemaker", time, {
        "ClusterArn": arn, "ClusterName": cluster, "InstanceGroupName": "gpu-g5-xl",
        "InstanceId": "i-0cc3fc1626e53a130",
        "HealthSummary": {"HealthStatus": "Unhealthy", "HealthStatusReason": "GPU Xid detected",
                          "RepairAction": "Replace"}}, [arn])


def hyperpod_state_change(cluster: str, time: str, status: str) -> dict[str, Any]:
    arn = f"arn:aws:sagemaker:us-west-2:{EVENT_ACCOUNT}:cluster/k3m9x2pq7wla"
    return _event("SageMaker HyperPod Cluster State Change", "aws.sagemaker", time, {
        "ClusterArn": arn, "ClusterName": cluster, "ClusterStatus": status, "CreationTime": 1745858447412,
        "FailureMessage": "", "InstanceGroups": []}, [arn])


def capacity_block_warning(reservation_id: str, time: str, detail_type: str = "Capacity Block Expiration Warning",
                           end_date: str = "2026-10-03T11:30:00Z") -> dict[str, Any]:
    return _event(detail_type, "aws.ec2", time, {"capacity-reservation-id": reservation_id, "end-date": end_date},
                  [f"arn:aws:ec2:us-west-2:{EVENT_ACCOUNT}:capacity-reservation/{reservation_id}"])


def through_steps(target: dict[str, Any]) -> dict[str, Any]:
    """Inventory → CollectLogs (each batch) → Finish, as the state machine chains them: the Verdict's input."""
    found = inventory.handler(target, LambdaContext())
    batches = [collect_logs.handler({"evidence": found["evidence"], "batch": batch}, LambdaContext())
               for batch in found["batches"]]
    # the Inventory's request (its configured scope added back), as the state machine hands Finish
    return finish.handler({"request": found["request"], "evidence": found["evidence"], "batches": batches},  # type: ignore[no-any-return]
                          LambdaContext())


def console_target(request: dict[str, Any]) -> dict[str, Any]:
    (target,) = plan.handler(request, LambdaContext())["targets"]
    return target  # type: ignore[no-any-return]
