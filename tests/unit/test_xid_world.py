"""RULES §6 Xid-less "fallen off the bus" lines end to end: the GPU-lines Logs Insights query (run by the
embedded evaluator, which applies `filter`) returns every line of the split message, and the node's
verdict is Xid 79's."""

from __future__ import annotations

from helpers.worlds import PClusterWorld, at, ms

from gpuaudit.collectors.log_queries import GPU_QUERY

FALLEN = (
    "kernel: [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "kernel: [ 1843.308145] NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "kernel: [ 1843.308145] NVRM: fallen off the bus and is not responding to commands.",
)


def world_with_lost_gpu() -> tuple[PClusterWorld, str, str]:
    w = PClusterWorld("train", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    w.stream(w.group, stream, events=[(at(10, 5), f"{gpu.hostname} {line}") for line in FALLEN])
    return w, gpu.instance_id, stream


def test_gpu_lines_query_returns_every_line_of_the_split_message_and_no_filler() -> None:
    # Given the node's stream with the split message among its ordinary kernel lines
    w, _, stream = world_with_lost_gpu()
    # When the GPU-lines query runs over the window, through the API the collectors call
    logs = w.aws().client("logs")
    qid = logs.start_query(logGroupNames=[w.group], startTime=ms(at(10)) // 1000, endTime=ms(at(11)) // 1000,
                           queryString=GPU_QUERY)["queryId"]
    out = logs.get_query_results(queryId=qid)
    rows = [{c["field"]: c["value"] for c in row} for row in out["results"]]
    # Then the three lines come back, in order, and nothing else of the stream (the filter applied)
    assert out["status"] == "Complete"
    assert [r["@message"].split(" ", 1)[1] for r in rows if r["@logStream"] == stream] == list(FALLEN)


def test_xid_less_fallen_off_the_bus_reboots_the_node_like_xid_79() -> None:
    w, iid, _ = world_with_lost_gpu()
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    node = next(n for n in result.nodes if n.instance_id == iid)
    assert node.verdict == "REBOOT"
    assert [(e.code, e.pci) for e in node.gpu_errors] == [(79, "0000:b3:00.0")]
    assert "fallen off the bus" in (node.verdict_evidence or "")


def test_gsp_fault_recurring_after_a_reboot_on_an_h100_node_is_leave_alone_with_gsp_deactivated() -> None:
    # Given a p5 (H100, GSP can be turned off) node with Xid 119 before and after a reboot
    w = PClusterWorld("train", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    gsp = "NVRM: Xid (PCI:0000:53:00): 119, pid=1346198, name=nvidia-smi, Timeout waiting for RPC from GSP!"
    w.stream(w.group, stream, events=[(at(9, 10), f"{gpu.hostname} kernel: {gsp}"),
                                      (at(9, 40), f"{gpu.hostname} kernel: Linux version 6.8.0-1024-aws"),
                                      (at(10, 20), f"{gpu.hostname} kernel: {gsp}")])
    # When the incident is audited
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    node = next(n for n in result.nodes if n.instance_id == gpu.instance_id)
    # Then it is a driver/firmware fault: never REPLACE; deactivate GSP
    assert node.verdict == "LEAVE ALONE"
    assert "NVreg_EnableGpuFirmware=0" in (node.verdict_evidence or "")
