"""RULES §6 rule 154 and §7 across a reboot, each from a world written from the rule:

- Xid 154 states the recovery action another Xid needs ("seen in conjunction with other Xids and summarizes the
  recovery action required for other Xids", NVIDIA): it is not itself a hardware-class Xid recurring, so a GSP fault
  and its 154 back after a reboot is the GSP rule (never REPLACE), and a 154 printed before the Xid it summarizes
  does not take that Xid's place as the cause;
- a node whose signal came back after a reboot was not "already rebooted after the signal": it is asked again;
- a reboot HyperPod itself reports (a cluster event naming the node) separates two occurrences like a boot banner:
  Xid 79 back on the same bus after it is REPLACE.
"""

from __future__ import annotations

from helpers.worlds import HyperPodWorld, Node, PClusterWorld, at, node_of

from gpuaudit.model.result import NodeResult, Result

BANNER = "Linux version 6.8.0-1024-aws (buildd@lcy02-amd64-059) #25-Ubuntu SMP"
GSP_119 = ("NVRM: Xid (PCI:0000:53:00): 119, pid=2211, name=python3, Timeout after 6s of waiting for RPC response "
           "from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).")
RESET_154 = "NVRM: Xid (PCI:0000:53:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"


def incident(*events: tuple[str, str]) -> tuple[Result, NodeResult]:
    """One live p5 (H100) node of a ParallelCluster cluster with `events` in its kernel stream, audited 09:00–11:00."""
    w = PClusterWorld("train", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    w.stream(w.group, stream, events=[(t, f"{gpu.hostname} kernel: {m}") for t, m in events])
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    return result, node_of(result, gpu.instance_id)


def test_a_gsp_fault_and_its_154_back_after_a_reboot_is_the_gsp_rule_never_replace() -> None:
    # Given a GSP timeout and the 154 asking for a GPU reset, a reboot, then both again on the same bus (an H100)
    _, node = incident((at(9, 10), GSP_119), (at(9, 10, 1), RESET_154), (at(9, 40), BANNER),
                       (at(10, 20), GSP_119), (at(10, 20, 1), RESET_154))
    # Then RULES §6 119/120: recurring after reboots is a driver/firmware fault, never REPLACE; before Blackwell,
    # LEAVE ALONE with GSP deactivated — the 154 only restates the reset the 119 needs
    assert node.verdict == "LEAVE ALONE", node.verdict_evidence
    assert node.deciding_xid == 119
    assert "NVreg_EnableGpuFirmware=0" in (node.verdict_evidence or "")


def test_a_recurring_gsp_fault_and_its_154_are_not_a_gpu_hardware_hypothesis() -> None:
    # Given the same recurring GSP fault with its 154s (an H100)
    result, node = incident((at(9, 10), GSP_119), (at(9, 10, 1), RESET_154), (at(9, 40), BANNER),
                            (at(10, 20), GSP_119), (at(10, 20, 1), RESET_154))
    # Then RULES §6: "a driver/firmware fault, not the GPU" — the 154s restating its reset are no hardware signal for
    # branch A (it led as "hardware-class signal below the bar" on the 154 alone), and the result is self-consistent
    a = next(b for b in result.branches if b.branch == "A")
    assert node.verdict == "LEAVE ALONE" and a.status == "Ruled out", a.evidence
    assert not result.invariants_broken


def test_a_154_printed_before_the_nvlink5_xid_it_summarizes_leaves_that_xid_the_cause() -> None:
    # Given the driver's order in a real capture: the 154 (Drain and Reset), then the NVLink5 fatal it summarizes
    _, node = incident(
        (at(9, 10), "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 "
                    "(Drain and Reset)"),
        (at(9, 10, 1), "NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 "
                       "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"))
    # Then REBOOT, resting on the 149, whose rule (NVLink5) reports sub-component, fatal flag and link number
    assert node.verdict == "REBOOT"
    assert node.deciding_xid == 149
    assert "NETIR_LINK_EVT" in (node.verdict_evidence or "") and "link 1" in (node.verdict_evidence or "")


def test_a_pending_remap_back_after_the_reboot_is_asked_again_not_called_already_rebooted() -> None:
    remap = ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to "
             "activate.")
    # Given a remap pending activation, a reboot, then a new remap pending activation on the same GPU
    result, node = incident((at(9, 10), remap), (at(9, 40), BANNER), (at(10, 20), remap))
    # Then REBOOT, and the reboot at 09:40 is not "after the signal": the 10:20 remap waits for a reset (RULES §7)
    assert node.verdict == "REBOOT"
    (action,) = [a for a in result.actions if node.instance_id in a]
    assert action.startswith(f"Reboot {node.instance_id}"), action
    assert "already rebooted" not in action


FELL = "NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def hyperpod_rebooted(*xid79_at: str) -> tuple[Result, NodeResult]:
    """A HyperPod (Continuous) node whose health agent reports Xid 79 at each of `xid79_at`, and HyperPod's cluster
    event saying it rebooted the node at 09:15."""
    w = HyperPodWorld("hp", gpu_nodes=1, gpu_type="ml.p5.48xlarge", provisioning_mode="Continuous")
    w.instance_type("p5.48xlarge")
    w.cluster_metrics(at(-2), at(13))
    gpu = w.gpu[0]
    for t in xid79_at:
        w.hma_detection(gpu, t, reason="XidHardwareFailure", condition="NvidiaErrorReboot", message=FELL)
    w.described["Events"] = [{"EventId": "e-1", "ClusterArn": w.described["ClusterArn"], "ClusterName": "hp",
                              "InstanceGroupName": gpu.group, "InstanceId": gpu.instance_id, "EventTime": at(9, 15),
                              "ResourceType": "Instance", "Description": f"Instance {gpu.instance_id} rebooted"}]
    result = w.audit("hp", mode="incident", since=at(9), until=at(11))
    return result, node_of(result, gpu.instance_id)


def test_a_reboot_hyperpod_reported_that_cleared_the_xid_is_not_asked_again_and_named_as_hyperpods() -> None:
    # Given Xid 79, then HyperPod's own reboot of the node, and no Xid after it
    result, node = hyperpod_rebooted(at(9, 10))
    # Then REBOOT was the bar, already met by the service: no command to run again, and what it did is named as
    # its event (HyperPod ships no kernel log: no kernel banner was read)
    assert node.verdict == "REBOOT"
    (action,) = [a for a in result.actions if node.instance_id in a]
    assert "already rebooted" in action and "cluster event at 2026-10-01T09:15:00Z" in action, action
    assert "kernel banner" not in action


def test_xid_79_back_on_its_bus_after_hyperpod_rebooted_the_node_is_replace() -> None:
    # Given a HyperPod node whose health agent reports Xid 79, HyperPod's cluster event saying it rebooted the node,
    # then Xid 79 again on the same bus
    result, node = hyperpod_rebooted(at(9, 10), at(10, 20))
    gpu_id = node.instance_id
    # Then Xid 79 persisted after a reboot: REPLACE (RULES §7), said with the reboot HyperPod reported
    assert node.verdict == "REPLACE", node.verdict_evidence
    assert "before the reboot at 2026-10-01T09:15:00Z" in (node.verdict_evidence or "")
    assert any(a.startswith(f"Replace {gpu_id}") for a in result.actions), result.actions


def test_driver_diagnostics_around_an_xid_are_in_the_timeline_never_classified() -> None:
    # Given the driver's own diagnostics printed with a GSP timeout (a real capture's shape), and one hours away
    rpc = ("NVRM: GPU0 GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data 0x000000002080a097 "
           "0x0000000000000490.")
    result, node = incident((at(9, 50), "NVRM: GPU0 nvAssertFailedNoLog: Assertion failed: lone line @ mem.c:1312"),
                            (at(10, 20), GSP_119), (at(10, 20, 1), rpc),
                            (at(10, 20, 2), "NVRM: GPU0 RPC history (CPU -> GSP):"))
    # Then RULES §6: the diagnostics clustered around the failure are listed in the timeline, with their source
    events = [t.event for t in result.timeline if t.resource == node.instance_id]
    assert any("GSP RPC buffer contains function 76" in e for e in events), events
    assert any("RPC history (CPU -> GSP)" in e for e in events), events
    # the lone one far from any failure is not, and none is classified: the only GPU error row is the Xid 119
    assert not any("lone line" in e for e in events), events
    assert [e.code for e in node.gpu_errors] == [119]



def _hyperpod_eks_p5() -> tuple[HyperPodWorld, Node]:
    """A HyperPod cluster orchestrated by EKS (`hp-eks-orch`), one p5 GPU node, its cluster log live throughout."""
    w = HyperPodWorld("hp-eks", gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.instance_type("p5.48xlarge")
    w.described["Orchestrator"] = {"Eks": {"ClusterArn": "arn:aws:eks:us-west-2:111122223333:cluster/hp-eks-orch"}}
    for group in w.described["InstanceGroups"]:
        group.pop("SlurmConfig", None)
    w.cluster_metrics(at(-2), at(13))
    return w, w.gpu[0]

def test_xid_79_back_on_its_bus_after_kubelet_reported_the_eks_node_rebooted_is_replace() -> None:
    # Given a HyperPod EKS node: Xid 79 from its health agent, the kubelet's `Rebooted` event on the node, then Xid 79
    # again on the same bus (HyperPod ships no kernel log: the node's own Kubernetes event is the reboot read)
    w, gpu = _hyperpod_eks_p5()
    name = f"hyperpod-{gpu.instance_id}"
    for t in (at(9, 10), at(10, 20)):
        w.hma_detection(gpu, t, reason="XidHardwareFailure", message=FELL)
    w.raw["eks"] = {"clusters": [{"name": "hp-eks-orch", "endpoint": "https://example.gr7.us-west-2.eks.amazonaws.com",
                                  "certificateAuthority": {"data": "LS0tLS1CRUdJTg=="}, "kubernetes": {
        "nodes": [{"metadata": {"name": name, "labels": {"sagemaker.amazonaws.com/compute-type": "hyperpod"}},
                   "spec": {"providerID": f"aws:///us-west-2a/{gpu.instance_id}", "taints": []},
                   "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at(9, 32)}]}}],
        "events": [{"involvedObject": {"kind": "Node", "name": name}, "reason": "Rebooted", "type": "Warning",
                    "message": f"Node {name} has been rebooted, boot id: 6c1a3e0e-0a7b-4a4e-9d0f-2f1f0c0b9a11",
                    "lastTimestamp": at(9, 30)}]}}]}
    result = w.audit("hp-eks", mode="incident", since=at(9), until=at(11))
    node = node_of(result, gpu.instance_id)
    # Then Xid 79 persisted after a reboot: REPLACE (RULES §7), said with the reboot the kubelet reported
    assert node.verdict == "REPLACE", node.verdict_evidence
    assert "before the reboot at 2026-10-01T09:30:00Z" in (node.verdict_evidence or "")


def test_an_xid_nvidia_does_not_list_never_rules_hardware_out() -> None:
    # Given the node's only GPU signal is a code NVIDIA's catalog does not list
    result, node = incident((at(9, 10), "NVRM: Xid (PCI:0000:53:00): 173, pid=2211, name=python3, new fault text"))
    branches = {b.branch: b for b in result.branches}
    # Then RULES §6 `unverified`: no verdict guessed (MONITOR with the catalog to read), and no claim either way:
    # hardware is not "Ruled out" on a line whose meaning was not read (RULES §0 fail closed)
    assert node.verdict == "MONITOR" and node.deciding_xid == 173
    assert branches["A"].status != "Ruled out", branches["A"].evidence
    assert "173" in branches["A"].evidence


def test_an_unlisted_code_beside_an_application_xid_does_not_outrank_it_in_the_headline() -> None:
    # Given an application Xid and an unlisted code on the same node
    result, node = incident((at(9, 10), "NVRM: Xid (PCI:0000:53:00): 31, pid=2211, name=python3, MMU Fault"),
                            (at(9, 11), "NVRM: Xid (PCI:0000:53:00): 173, pid=2211, name=python3, new fault text"))
    # Then the application reading stands (RULES §6: unverified never outranks it), and hardware is not ruled out
    assert node.verdict == "LEAVE ALONE"
    assert {b.branch: b.status for b in result.branches}["A"] != "Ruled out"
    assert "branch A" not in result.headline


def test_what_hyperpods_agent_did_names_each_of_its_judgements_not_only_the_first() -> None:
    # Given a HyperPod node whose health agent first judged an Xid 31 application-caused, then flagged an Xid 79 as a
    # hardware failure with the condition that makes HyperPod replace the node
    w = HyperPodWorld("hp", gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.instance_type("p5.48xlarge")
    w.cluster_metrics(at(-2), at(13))
    gpu = w.gpu[0]
    w.hma_detection(gpu, at(9, 10), code=31, reason="XidUserAppError")
    w.hma_detection(gpu, at(10), reason="XidHardwareFailure", condition="NvidiaErrorTerminate", message=FELL)
    node = node_of(w.audit("hp", mode="incident", since=at(9), until=at(11)), gpu.instance_id)
    # Then REPLACE (the service's own word), and what the service did says both judgements, the later one included
    # (RULES §7: the result says what the service itself did, distinct from the operator's action)
    assert node.verdict == "REPLACE"
    said = node.service_action or ""
    assert "XidUserAppError" in said and "XidHardwareFailure" in said and "NvidiaErrorTerminate" in said, said


ROW_REMAPPER = ("nvidia-smi -q -d ROW_REMAPPER\n==============NVSMI LOG==============\nGPU 00000000:53:00.0\n"
                "    Remapped Rows\n        Correctable Error                 : 0\n"
                "        Uncorrectable Error               : 1\n        Pending                           : {pending}\n"
                "        Remapping Failure Occurred        : No\n        Bank Remap Availability Histogram\n"
                "            Max                           : 639 bank(s)\n            High                          : "
                "1 bank(s)\n            Partial                       : 0 bank(s)\n            Low                   "
                "        : 0 bank(s)\n            None                          : 0 bank(s)\n")


def test_nvidia_smis_row_remapper_section_as_it_prints_it_one_field_a_line_is_read() -> None:
    # Given nvidia-smi's row-remapper section shipped as one message, one field a line, as nvidia-smi prints it
    _, pending = incident((at(10, 5), ROW_REMAPPER.format(pending="Yes")))
    _, clean = incident((at(10, 5), ROW_REMAPPER.format(pending="No")))
    # Then `Remapped Rows … Pending: Yes` is a pending row remap: REBOOT (RULES §6, §7); `Pending: No` is no signal
    assert pending.verdict == "REBOOT", pending.verdict_evidence
    assert clean.verdict is None, clean.verdict_evidence


def test_a_gsp_fault_left_alone_is_a_driver_action_not_a_hand_off_to_the_application_owner() -> None:
    # Given a GSP fault recurring after a reboot on an H100 node
    result, node = incident((at(9, 10), GSP_119), (at(9, 40), BANNER), (at(10, 20), GSP_119))
    # Then LEAVE ALONE with GSP deactivated (RULES §6 119/120): a driver/firmware fault, so its action is the
    # driver setting, and the process the line names is not handed to the application owner as its cause
    assert node.verdict == "LEAVE ALONE"
    (action,) = [a for a in result.actions if node.instance_id in a]
    assert "NVreg_EnableGpuFirmware=0" in action, action
    assert "application owner" not in action, action


def test_a_gsp_fault_hyperpods_agent_flags_as_hardware_is_rebooted_on_its_first_occurrence() -> None:
    # Given HyperPod's agent reporting a first GSP timeout as XidHardwareFailure, with no recommendation
    w = HyperPodWorld("hp", gpu_nodes=1, gpu_type="ml.p5.48xlarge")
    w.instance_type("p5.48xlarge")
    w.cluster_metrics(at(-2), at(13))
    gpu = w.gpu[0]
    w.hma_detection(gpu, at(9, 10), reason="XidHardwareFailure", message=GSP_119)
    node = node_of(w.audit("hp", mode="incident", since=at(9), until=at(11)), gpu.instance_id)
    # Then RULES §6 119/120 and the §7 REBOOT bar: a first GSP fault is REBOOT (a GPU reset); the agent calling it
    # hardware and the catalog calling it a driver/firmware fault both ask for the node action, so no verdict is held
    assert node.verdict == "REBOOT", node.verdict_evidence
    assert node.deciding_xid == 119


def test_a_63_asking_for_a_reboot_to_activate_its_retirement_is_pending_activation() -> None:
    # Given an Xid 63 whose message asks for a reboot (a GPU reset) to activate what it recorded
    _, node = incident((at(9, 10), "NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Dynamic Page "
                                   "Retirement: New page retired, reboot to activate. (0x0000000000123456)"))
    # Then RULES §6 row 63: pending activation → REBOOT, not the MONITOR of a 63 alone
    assert node.verdict == "REBOOT", node.verdict_evidence


def test_an_eks_label_asking_for_less_than_the_logs_is_said_beside_the_stronger_verdict() -> None:
    # Given HyperPod's label asking for a reboot while the node's agent reports a row-remap failure (Xid 64)
    w, gpu = _hyperpod_eks_p5()
    name = f"hyperpod-{gpu.instance_id}"
    w.hma_detection(gpu, at(9, 10), reason="XidHardwareFailure",
                    message="NVRM: Xid (PCI:0000:53:00): 64, pid='<unknown>', Row Remapper: Failed to remap row")
    label = "UnschedulablePendingReboot"
    w.raw["eks"] = {"clusters": [{"name": "hp-eks-orch", "endpoint": "https://example.gr7.us-west-2.eks.amazonaws.com",
                                  "certificateAuthority": {"data": "LS0tLS1CRUdJTg=="}, "kubernetes": {"nodes": [
        {"metadata": {"name": name, "labels": {"sagemaker.amazonaws.com/node-health-status": label}},
         "spec": {"providerID": f"aws:///us-west-2a/{gpu.instance_id}", "taints": []},
         "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at(9, 12)}]}}]}}]}
    node = node_of(w.audit("hp-eks", mode="incident", since=at(9), until=at(11)), gpu.instance_id)
    # Then REPLACE (Xid 64, RULES §7), and the label's weaker ask is said, never silently dropped
    assert node.verdict == "REPLACE"
    assert label in (node.verdict_evidence or ""), node.verdict_evidence


def test_xid_64_is_replace_on_its_own_bar_not_called_a_first_occurrence() -> None:
    # Given one row-remap failure
    _, node = incident((at(9, 10), "NVRM: Xid (PCI:0000:65:00): 64, pid='N/A', Row Remapper: Failed to remap row"))
    # Then REPLACE on RULES §7's first bar (Xid 64), not said as the REBOOT bar's "first occurrence" of an Xid
    assert node.verdict == "REPLACE"
    assert "first occurrence" not in (node.verdict_evidence or ""), node.verdict_evidence
    assert "Xid 64" in (node.verdict_evidence or "")


def test_an_xid_back_on_its_bus_after_a_reboot_is_in_the_timeline_once_per_boot() -> None:
    # Given Xid 79 on a bus, a reboot, then Xid 79 twice more on the same bus
    fell = "NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus."
    result, node = incident((at(9, 10), fell), (at(9, 12), fell), (at(9, 40), BANNER), (at(10, 20), fell),
                            (at(10, 25), fell))
    # Then RULES §5.1 lists the first occurrence, and the recurrence the verdict rests on (§7: REPLACE if it recurs)
    # is listed too, at its first line after the reboot; the repeats within one boot are not
    xid_rows = [t for t in result.timeline if t.resource == node.instance_id and "Xid 79" in t.event]
    assert [t.time.strftime("%H:%M") for t in xid_rows] == ["09:10", "10:20"]
    assert "after the reboot" in xid_rows[1].event and node.verdict == "REPLACE"
