"""The service's own word counts as read (RULES §7 precedence; issue #35 items 1, 2, 11), on worlds written from
RULES and the operator's question ("HyperPod says this node is faulty: what do I do?"):

- a failed deep health check (`Encountered FaultyInstance. Replace the Instance` in `DeepHealthCheckResults/…` or
  `LifecycleConfig/…`, or the EKS label `sagemaker.amazonaws.com/deep-health-check-status=Failed`) is REPLACE;
- HMA's replace recommendation (`NvidiaErrorTerminate`, "Please Replace the Faulty Node") is REPLACE, as the agent
  writes it (the condition inside the detection's message);
- a node the service already replaced or rebooted gets no command to do it again: its line says what the service
  did and what to check on the replacement;
- an application-class Xid from the node's own live HMA stream is LEAVE ALONE with the kernel gap stated; with
  nothing read from the node it is NOT OBSERVABLE; the process name and PID go to the application owner either way.
"""

from __future__ import annotations

import json

from gpuaudit.model.result import Result
from tests.helpers.worlds import ACCOUNT, REGION, HyperPodWorld, Node, PClusterWorld, at, node_of

SINCE, UNTIL = at(6), at(10)
COMMANDS = ("batch-replace-cluster-nodes", "batch-reboot-cluster-nodes", "reboot-instances", "scontrol update")
FAULTY = ('{"level":"error","ts":"2026-10-01T07:15:22Z","msg":"Encountered FaultyInstance. Replace the Instance. '
          'Region: us-west-2, InstanceType: ml.p5.48xlarge. ERROR:Bandwidth has less than threshold: Expected '
          'minimum threshold :80,NCCL Test output Bw: 30"}')


def hyperpod(gpu_nodes: int = 2) -> HyperPodWorld:
    w = HyperPodWorld(gpu_nodes=gpu_nodes, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(12, 25))
    return w


def audited(w: HyperPodWorld | PClusterWorld, cluster: str | None = None) -> Result:
    return w.audit(cluster or w.cluster, mode="incident", since=SINCE, until=UNTIL)


def commands_for(result: Result, instance_id: str) -> list[str]:
    return [a for a in result.actions if instance_id in a and any(c in a for c in COMMANDS)]


# -- item 1: a failed deep health check -------------------------------------------------------------------------


def test_a_failed_deep_health_check_in_its_results_stream_is_replace() -> None:
    w = hyperpod()
    sick = w.gpu[0]
    stream = w.stream(w.group, f"DeepHealthCheckResults/{sick.instance_id}", events=[(at(7, 15), FAULTY)])
    result = audited(w)
    n = node_of(result, sick.instance_id)
    assert n.verdict == "REPLACE"
    evidence = n.verdict_evidence or ""
    assert "Encountered FaultyInstance. Replace the Instance" in evidence
    assert f"{w.group} / {stream}" in evidence and "deep health check" in evidence
    assert any(e.log_stream == stream and e.code is None for e in n.gpu_errors)  # the line it rests on
    assert any(a.startswith(f"Replace {sick.instance_id}") for a in result.actions)
    assert node_of(result, w.gpu[1].instance_id).verdict is None
    assert not result.invariants_broken


def test_a_results_stream_not_named_by_instance_is_read_for_the_instance_it_names() -> None:
    w = hyperpod()
    sick = w.gpu[1]
    line = FAULTY.replace("Region:", f"InstanceId: {sick.instance_id}, Region:")
    w.stream(w.group, "DeepHealthCheckResults/7f3c2a9e-cluster-check", events=[(at(7, 15), line)])
    result = audited(w)
    assert node_of(result, sick.instance_id).verdict == "REPLACE"
    assert node_of(result, w.gpu[0].instance_id).verdict is None


def test_a_lifecycle_log_saying_faulty_instance_is_replace() -> None:
    w = hyperpod()
    sick = w.gpu[0]
    w.stream(w.group, f"LifecycleConfig/gpu-workers/{sick.instance_id}",
             events=[(at(7, 20), "[ERROR] Deep health check: Encountered FaultyInstance. Replace the Instance.")])
    assert node_of(audited(w), sick.instance_id).verdict == "REPLACE"


def test_a_passing_deep_health_check_asks_for_nothing() -> None:
    w = hyperpod()
    w.stream(w.group, f"DeepHealthCheckResults/{w.gpu[0].instance_id}",
             events=[(at(7, 15), '{"level":"info","msg":"EFA Loopback check passed for device: rdmap0s29"}')])
    assert node_of(audited(w), w.gpu[0].instance_id).verdict is None


DHC_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"


def eks_with_deep_health(statuses: list[str]) -> HyperPodWorld:
    """HyperPod EKS; node i carries the deep-health-check label statuses[i] (the AWS label name, its values
    InProgress, Passed, Failed) and a Schedulable node-health label."""
    w = hyperpod(gpu_nodes=len(statuses))
    w.described["Orchestrator"] = {"Eks": {"ClusterArn": f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/hp-eks"}}
    for group in w.described["InstanceGroups"]:
        group.pop("SlurmConfig", None)
    nodes = [{"metadata": {"name": f"hyperpod-{n.instance_id}",
                           "labels": {DHC_LABEL: status, "sagemaker.amazonaws.com/node-health-status": "Schedulable"}},
              "spec": {"providerID": f"aws:///{REGION}a/{n.instance_id}", "taints": []},
              "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at(-30)}]}}
             for n, status in zip(w.gpu, statuses, strict=True)]
    w.raw["eks"] = {"clusters": [{"name": "hp-eks", "endpoint": "https://example.gr7.us-west-2.eks.amazonaws.com",
                                  "certificateAuthority": {"data": "LS0tLS1CRUdJTg=="},
                                  "kubernetes": {"nodes": nodes}}]}
    return w


def test_an_eks_node_whose_deep_health_check_label_reads_failed_is_replace() -> None:
    w = eks_with_deep_health(["Failed", "Passed", "InProgress"])
    result = audited(w)
    failed, passed, running = (node_of(result, n.instance_id) for n in w.gpu)
    assert failed.verdict == "REPLACE"
    assert f"{DHC_LABEL}=Failed" in (failed.verdict_evidence or "")
    assert any(e.message == f"{DHC_LABEL}=Failed" for e in failed.gpu_errors)
    assert (passed.verdict, running.verdict) == (None, None)
    assert not result.invariants_broken


# -- item 2: HMA's replace recommendation, and a node the service already acted on -----------------------------

TERMINATE = ('Node condition NvidiaErrorTerminate is now: True, reason: XidHardwareFailure, message: "NVRM: Xid '
             '(PCI:0000:b9:00): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus."')


def test_terminate_condition_inside_the_detection_message_is_replace_not_reboot() -> None:
    """The agent writes the condition into the detection's message (`Node condition NvidiaErrorTerminate is now:
    True, …`): the Xid it carries (79, a first occurrence → REBOOT alone) does not lower HMA's own word."""
    w = hyperpod()
    w.hma_detection(w.gpu[0], at(7, 3), code=None, reason="XidHardwareFailure", message=TERMINATE)
    result = audited(w)
    n = node_of(result, w.gpu[0].instance_id)
    assert n.verdict == "REPLACE"
    assert "NvidiaErrorTerminate" in (n.verdict_evidence or "")
    assert any("batch-replace-cluster-nodes" in a for a in commands_for(result, w.gpu[0].instance_id))
    assert not any("batch-reboot-cluster-nodes" in a for a in result.actions)


def test_please_replace_recommendation_with_repair_action_none_is_replace() -> None:
    w = hyperpod()
    w.hma_detection(w.gpu[0], at(7, 3), code=79, reason="XidHardwareFailure",
                    recommendation="Please Replace the Faulty Node.")
    assert node_of(audited(w), w.gpu[0].instance_id).verdict == "REPLACE"


def test_a_node_hyperpod_already_replaced_gets_what_it_did_and_what_to_check_never_a_command() -> None:
    w = hyperpod(gpu_nodes=1)
    old = w.gpu[0]
    w.hma_detection(old, at(7, 3), code=None, reason="XidHardwareFailure", message=TERMINATE)
    w.described["Nodes"] = [n for n in w.described["Nodes"] if n["InstanceId"] != old.instance_id]
    new = w.add_node("gpu-workers", "ml.p5.48xlarge", launch=at(7, 40))  # HyperPod's replacement, a new ID
    result = audited(w)
    gone = node_of(result, old.instance_id)
    assert gone.verdict == "REPLACE"  # the bar met on what was read
    assert commands_for(result, old.instance_id) == []  # nothing to run again
    (line,) = [a for a in result.actions if a.startswith(old.instance_id)]
    assert "already replaced" in line and new.instance_id in line  # what the service did
    assert f"LifecycleConfig/gpu-workers/{new.instance_id}" in line and "deep health check" in line  # what to check


def _rebooted_by_the_operator_after_an_xid_79() -> tuple[HyperPodWorld, Node]:
    """One HyperPod GPU node: HMA's Xid 79 (NvidiaErrorReboot) at 07:03, then a user's (`ops`)
    BatchRebootClusterNodes of it at 07:20."""
    w = hyperpod(gpu_nodes=1)
    sick = w.gpu[0]
    w.hma_detection(sick, at(7, 3), code=79, reason="XidHardwareFailure", condition="NvidiaErrorReboot")
    w.section("cloudtrail", "events").append({
        "EventId": "e1", "EventName": "BatchRebootClusterNodes", "EventTime": at(7, 20),
        "EventSource": "sagemaker.amazonaws.com", "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": {"clusterName": w.cluster,
                                                             "nodeIds": [sick.instance_id]}})})
    return w, sick


def test_a_node_already_rebooted_after_its_xid_gets_no_reboot_command() -> None:
    w, sick = _rebooted_by_the_operator_after_an_xid_79()
    result = audited(w)
    n = node_of(result, sick.instance_id)
    assert n.verdict == "REBOOT"
    assert commands_for(result, sick.instance_id) == []
    (line,) = [a for a in result.actions if a.startswith(sick.instance_id)]
    assert "already rebooted" in line and "BatchRebootClusterNodes" in line
    assert "0000:b9:00" not in line or "returns" in line  # what to check: the Xid not returning


def test_a_terminated_parallelcluster_node_gets_no_reboot_instances_command() -> None:
    w = PClusterWorld("train", n_compute=2)
    sick, well = w.compute
    for node in w.compute:
        w.healthy(node, at(-48), at(7, 30) if node is sick else at(12, 25))
    w.stream(w.group, w.stream_name(sick),
             events=[(at(7, 2), f"{sick.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=<unknown>, "
                                "name=<unknown>, GPU has fallen off the bus.")])
    for instance in w.section("ec2", "instances"):
        if instance["InstanceId"] == sick.instance_id:
            instance["State"] = {"Code": 48, "Name": "terminated"}
    result = audited(w, "train")
    n = node_of(result, sick.instance_id)
    assert n.verdict == "REBOOT"
    assert commands_for(result, sick.instance_id) == []
    (line,) = [a for a in result.actions if a.startswith(sick.instance_id)]
    assert "terminated" in line and "replacement" in line


# -- item 11: LEAVE ALONE vs NOT OBSERVABLE ----------------------------------------------------------------------


def test_an_app_xid_from_the_nodes_own_live_hma_stream_is_leave_alone_with_the_kernel_gap_stated() -> None:
    """The cluster log group's other streams have a gap (so HMA absence proves nothing there), but this node's own
    HMA stream wrote inside the window: the agent ran on the node and judged the Xid application-caused."""
    w = HyperPodWorld(gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.cluster_metrics(at(-10), at(6, 30))  # ClusterMetrics stops inside the window
    w.hma_detection(w.gpu[0], at(7, 3), code=31, reason="XidUserAppError")
    result = audited(w)
    n = node_of(result, w.gpu[0].instance_id)
    assert n.verdict == "LEAVE ALONE"
    evidence = n.verdict_evidence or ""
    assert f"SagemakerHealthMonitoringAgent/gpu-workers/{w.gpu[0].instance_id}" in evidence  # the live stream
    assert "kernel" in evidence and "dmesg -T | grep -i nvrm" in evidence  # the gap and the direct check
    (line,) = [a for a in result.actions if w.gpu[0].instance_id in a]
    assert "process python, PID 14760" in line and "application owner" in line
    assert not result.invariants_broken


def test_a_leave_alone_on_hma_alone_states_that_the_kernel_log_is_not_read() -> None:
    w = hyperpod(gpu_nodes=1)  # the cluster log group is live; HyperPod ships no kernel log
    w.hma_detection(w.gpu[0], at(7, 3), code=31, reason="XidUserAppError")
    n = node_of(audited(w), w.gpu[0].instance_id)
    assert n.verdict == "LEAVE ALONE" and n.xid_status == "Measured"
    assert "dmesg -T | grep -i nvrm" in (n.verdict_evidence or "")


def test_an_app_xid_with_nothing_live_from_the_node_is_not_observable_and_still_hands_over() -> None:
    w = PClusterWorld("train", n_compute=1)
    node = w.compute[0]
    stream = w.healthy(node, at(-48), at(7, 10))  # the kernel stream dies inside the window
    w.stream(w.group, stream, events=[(at(7, 5), f"{node.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 31, pid=4242, "
                                                 "name=python3, channel 0x00000008, intr 00000000. MMU Fault")])
    result = audited(w, "train")
    n = node_of(result, node.instance_id)
    assert n.verdict == "NOT OBSERVABLE"
    assert "Xid 31" in (n.verdict_evidence or "") and "application" in (n.verdict_evidence or "")
    (line,) = [a for a in result.actions if node.instance_id in a]
    assert "dmesg -T | grep -i nvrm" in line
    assert "process python3, PID 4242" in line and "application owner" in line


def test_an_operators_batch_reboot_is_not_what_the_service_itself_did() -> None:
    # RULES §7: the result says what the service itself did to the node, distinct from the operator's action; a
    # BatchRebootClusterNodes call made by a user (CloudTrail Username) is the operator's act
    w, sick = _rebooted_by_the_operator_after_an_xid_79()
    said = node_of(audited(w), sick.instance_id).service_action or ""
    assert "HMA flagged hardware failure" in said  # the service's own act stays
    assert "BatchRebootClusterNodes" not in said
    assert "no reboot or replacement of this node seen" not in said  # the operator's reboot was seen
