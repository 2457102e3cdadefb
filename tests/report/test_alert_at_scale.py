"""Issue #49 item 5: the alert at fleet scale says who and what. The subject is `[gpuaudit] <cluster>: …` within
SNS's 100 characters; the body counts every node by verdict, gives each grouped action with its node count and
where its IDs file is, names the nodes' IDs compactly per verdict (the first few, then a count and the IDs file),
and carries the report link in every channel (email, Chatbot, SMS); the Chatbot custom notification puts the
actions in `nextSteps` and the cluster, report and IDs files in `relatedResources`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.worlds import ACCOUNT, REGION, HyperPodWorld, at
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sns.models import sns_backends

from gpuaudit.devtools.demo import ensure_findings_table
from gpuaudit.embedded.backend import WorldBackend
from gpuaudit.model.result import Result
from gpuaudit.report import alert
from gpuaudit.report.ids import placed
from gpuaudit.writes.sinks import write_and_alert

REPLACED, REBOOTED = 12, 14  # each past alert.NAMED_IDS: the alert names some and says where the rest are
BUCKET_KEY = "s3://evidence/results/hp-slurm/a1"
LINK = "https://console.aws.amazon.com/s3/object/evidence?region=us-west-2&prefix=results/hp-slurm/a1.html · " \
       "s3://evidence/results/hp-slurm/a1.html"


def fleet() -> tuple[HyperPodWorld, list[str], list[str]]:
    """RULES §6/§7 on a HyperPod fleet: Xid 64 (DRAM retirement failure, hardware) → REPLACE on 12 nodes, Xid 79
    (fallen off the bus) → REBOOT on 14, each on a live kernel stream."""
    w = HyperPodWorld(gpu_nodes=REPLACED + REBOOTED)
    codes = [64] * REPLACED + [79] * REBOOTED
    for node, code in zip(w.gpu, codes, strict=True):
        stream = w.kernel_stream(w.group, f"{node.instance_id}/kernel", at(-10), at(12, 25), host=node.hostname)
        w.stream(w.group, stream, events=[(at(9), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): {code}, "
                                                  "pid=0, name=python")])
    ids = [n.instance_id for n in w.gpu]
    return w, ids[:REPLACED], ids[REPLACED:]


@pytest.fixture(scope="module")
def sent() -> Iterator[tuple[Result, dict[str, Any], list[str], list[str]]]:
    w, replaced, rebooted = fleet()
    result = placed(w.audit(w.cluster, since=at(6), until=at(10)), BUCKET_KEY)
    with mock_aws():
        session = WorldBackend(w.world()).session()
        ddb, sns = session.client("dynamodb"), session.client("sns")
        ensure_findings_table(ddb)
        topic = sns.create_topic(Name="gpuaudit-alerts")["TopicArn"]
        write_and_alert(ddb, "gpuaudit-findings", sns, topic, result, 1_790_000_000, report_link=LINK)
        (notification,) = sns_backends[DEFAULT_ACCOUNT_ID][REGION].topics[topic].sent_notifications
        yield result, {"message": json.loads(notification[1]), "subject": notification[2]}, replaced, rebooted


def test_the_subject_names_the_product_and_the_cluster_within_the_sns_limit(sent: Any) -> None:
    _, published, _, _ = sent
    assert published["subject"] == f"[gpuaudit] hp-slurm: {REPLACED} REPLACE, {REBOOTED} REBOOT (coverage)"
    assert len(published["subject"]) <= alert.SUBJECT_MAX


def test_the_body_counts_verdicts_and_gives_each_grouped_action_with_its_count_and_ids_file(sent: Any) -> None:
    result, published, replaced, rebooted = sent
    body = published["message"]["default"]
    assert len(body) <= alert.ALERT_MAX_CHARS
    assert f"Verdicts: {REPLACED} REPLACE · {REBOOTED} REBOOT" in body
    replace_ids, reboot_ids = f"{BUCKET_KEY}.replace-ids.txt", f"{BUCKET_KEY}.reboot-ids.txt"
    actions = body.split("Actions (not executed):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert actions == [
        f"1. Replace {REPLACED} nodes (REPLACE): `aws s3 cp {replace_ids} - | xargs -n 25 aws sagemaker "
        "batch-replace-cluster-nodes --cluster-name hp-slurm --node-ids` (25 IDs per call, the API's limit; Slurm: "
        "`scontrol update node=<node> state=fail reason=\"Action:Replace\"` for each) "
        f"[{REPLACED} nodes; IDs: {replace_ids}]",
        f"2. Reboot {REBOOTED} nodes (REBOOT): `aws s3 cp {reboot_ids} - | xargs -n 25 aws sagemaker "
        "batch-reboot-cluster-nodes --cluster-name hp-slurm --node-ids` (25 IDs per call, the API's limit; Slurm: "
        "`scontrol update node=<node> state=fail reason=\"Action:Reboot\"` for each) "
        f"[{REBOOTED} nodes; IDs: {reboot_ids}]"]
    # the node IDs compactly per verdict: the first NAMED_IDS, then how many more and where all of them are
    nodes = body.split("Nodes:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert nodes == [
        f"REPLACE ({REPLACED}): {', '.join(replaced[:alert.NAMED_IDS])} +{REPLACED - alert.NAMED_IDS} more "
        f"(all in {replace_ids})",
        f"REBOOT ({REBOOTED}): {', '.join(rebooted[:alert.NAMED_IDS])} +{REBOOTED - alert.NAMED_IDS} more "
        f"(all in {reboot_ids})"]
    assert body.splitlines()[-2] == f"Report: {LINK}"


def test_every_channel_carries_the_report_link(sent: Any) -> None:
    _, published, _, _ = sent
    message = published["message"]
    assert LINK in message["default"] and LINK in message["email"]
    assert message["sms"].endswith("s3://evidence/results/hp-slurm/a1.html")
    assert message["sms"].startswith("[gpuaudit] hp-slurm: ")
    chatbot = json.loads(message["https"])
    assert chatbot == json.loads(message["chatbot"])
    assert LINK in chatbot["content"]["description"]
    assert chatbot["content"]["nextSteps"][-1] == f"Open the report: {LINK}"


def test_the_chatbot_notification_gives_next_steps_and_related_resources(sent: Any) -> None:
    result, published, _, _ = sent
    chatbot = json.loads(published["message"]["https"])
    steps = chatbot["content"]["nextSteps"]
    assert [re.match(r"(Replace|Reboot) (\d+) nodes", s).groups() for s in steps[:2]] == [  # type: ignore[union-attr]
        ("Replace", str(REPLACED)), ("Reboot", str(REBOOTED))]
    assert all("@" not in s or "@\u200b" in s for s in steps)
    related = chatbot["metadata"]["relatedResources"]
    assert related[0] == f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/k3m9x2pq7wla" == result.cluster.arn
    assert f"{BUCKET_KEY}.replace-ids.txt" in related and f"{BUCKET_KEY}.reboot-ids.txt" in related
    assert "s3://evidence/results/hp-slurm/a1.html" in related


def test_a_long_fleet_stays_within_one_message_and_keeps_the_link() -> None:
    # Given many changed nodes with long lines: the change lines and then the named IDs give way, never the tail
    w, _, _ = fleet()
    result = placed(w.audit(w.cluster, since=at(6), until=at(10)), BUCKET_KEY)
    many = [alert.Change(1, "REBOOT", "new verdict REBOOT", node=f"i-{i + 1_000:017x}", detail="word " * 60)
            for i in range(2_000)]
    body = alert.message(result, many, LINK)
    assert len(body) <= alert.ALERT_MAX_CHARS
    assert body.splitlines()[-2] == f"Report: {LINK}" and "REBOOT (2,000): " in body
    assert "… and " in body and "more (see the report)" in body
