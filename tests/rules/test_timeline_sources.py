"""RULES §5.2: every HMA detection (`HealthMonitoringAgentDetectionEvent`) is a timeline entry with its node, reason,
node condition (`NvidiaErrorReboot`, `NvidiaErrorTerminate`) and Xid text — including a detection that names a
condition and no reason, with or without an Xid line."""

from __future__ import annotations

import json

from helpers.worlds import HyperPodWorld, at


def test_an_hma_detection_naming_only_its_node_condition_is_in_the_timeline_with_it() -> None:
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-2), at(13))
    node = w.gpu[0]
    w.hma_detection(node, at(10, 5), code=None, reason=None, condition="NvidiaErrorTerminate")
    w.hma_detection(node, at(10, 7), code=79, reason=None, condition="NvidiaErrorReboot")
    result = w.audit(w.cluster, mode="incident", since=at(9), until=at(11))
    hma = [t for t in result.timeline
           if t.resource == node.instance_id and "SagemakerHealthMonitoringAgent" in t.source]
    terminate = [t for t in hma if "NvidiaErrorTerminate" in t.event]
    reboot = [t for t in hma if "NvidiaErrorReboot" in t.event]
    assert [t.time.isoformat()[:16] for t in terminate] == [at(10, 5)[:16]]
    assert [t.time.isoformat()[:16] for t in reboot] == [at(10, 7)[:16]]
    assert "Xid (PCI:0000:00:1e): 79" in reboot[0].event  # the Xid text the detection carries


def test_an_hma_detection_quotes_both_its_repair_action_and_its_recommendation() -> None:
    w = HyperPodWorld(gpu_nodes=1)
    w.cluster_metrics(at(-2), at(13))
    node = w.gpu[0]
    details = {"severity": "warn", "reason": "XidHardwareFailure", "condition": "NvidiaErrorTerminate",
               "message": "NVRM: Xid (PCI:0000:00:1e): 79, pid=0, GPU has fallen off the bus.",
               "repairAction": "Replace", "recommendation": "Replace the node"}
    line = json.dumps({"level": "info", "msg": "NPD caught event: %v", "details: ": details,
                       "HealthMonitoringAgentDetectionEvent": "HealthEvent"})
    w.stream(w.group, w.hma_stream_name(node), events=[(at(10, 5), line)])
    result = w.audit(w.cluster, mode="incident", since=at(9), until=at(11))
    said = [t.event for t in result.timeline if t.resource == node.instance_id and "HMA detection" in t.event]
    assert len(said) == 1
    for word in ('RepairAction "Replace"', 'Recommendation "Replace the node"', "NvidiaErrorTerminate", "Xid"):
        assert word in said[0]
