"""The strings the rules recognise in GPU log lines, and the Logs Insights GPU-lines query built from them.

A rule matches a marker defined here; the query filters on every marker here, so a marker added for a rule
cannot be missing from what the collectors read (tests/unit/test_architecture.py checks both ways).
"""

from __future__ import annotations

import re

XID_MARKER = "NVRM"  # `NVRM: Xid …` and the driver's own lines (version, load)
HMA_MARKER = "HealthMonitoringAgentDetectionEvent"
NCCL_MARKER = "NCCL (INFO|WARN)"
# A collective that hung: PyTorch's NCCL watchdog line, and NCCL's own timeout (RULES §8 D, a hang).
NCCL_TIMEOUT_MARKERS = ("collective operation timeout", "NCCL timeout")
# Boot-time lines (RULES §2, §10 P11): Fabric Manager started, and the driver banner with its version. Logged once at
# boot, often before the window, so they are searched since the node's launch (collectors/kernel_lookback.py, bounded).
FABRIC_MANAGER_STARTED = ('Started "Nvidia Fabric Manager"', "Started NVIDIA fabric manager",
                          "is usable for NVLink subnet management",
                          "Started nvidia-fabricmanager")  # newer systemd: the unit's name before its description
DRIVER_BANNER = "NVRM: loading NVIDIA UNIX"
# systemd names the unit by its description too (`Failed to start NVIDIA fabric manager service.`): lower case.
FABRIC_MANAGER_MARKERS = ("Fabric ?Manager", "nvidia-fabricmanager", "fabric manager")
# Every Fabric Manager line, not its start alone: a failure or restart of the current boot logged before the window is
# as much a boot-time line as the start, and RULES §10 P12 fails on it (rules/fabric_manager.py reads which it is).
BOOT_LINE_MARKERS = (*FABRIC_MANAGER_STARTED, *FABRIC_MANAGER_MARKERS, DRIVER_BANNER)
# ParallelCluster / HyperPod lifecycle strings of RULES §8 that decide between hardware, capacity and bootstrap.
# The kernel's boot banner in both forms it is shipped in: `kernel: Linux version …` (journald, no uptime) and
# `kernel: [    0.000000] Linux version …` (syslog, behind the uptime stamp). A regex: the query and the rules match it.
BOOT_LINE = r"kernel: (\[ *[0-9]+\.[0-9]+\] )?Linux version"
BOOT_BANNER = re.compile(BOOT_LINE)
# Capacity-class launch errors as EC2, ParallelCluster (clustermgtd, slurm_resume) and HyperPod word them (RULES §8 B;
# rules/capacity.py CAPACITY_ERROR decides which lines are one): plain substrings, so the query can hint them.
CAPACITY_ERROR_MARKERS = ("InsufficientInstanceCapacity", "InsufficientCapacity", "ReservationCapacityExceeded",
                          "InsufficientFreeAddressesInSubnet", "NetworkInterfaceLimitExceeded", "Capacity Reservation",
                          "Capacity Block", "nsufficient capacity")
LIFECYCLE_MARKERS = (*CAPACITY_ERROR_MARKERS, "bootstrap failure", "Node bootstrap error", "protected mode",
                     "FaultyInstance", "Interruption Warning", BOOT_LINE)
# The driver's Xid-less "GPU has fallen off the bus" message, read as Xid 79 (RULES §6).
FALLEN_OFF_BUS_MARKER = "fallen off the bus"
# nvidia-smi / driver memory health lines of RULES §6 (row remapping, SRAM, page retirement).
MEMORY_MARKERS = ("infoROM is corrupted", "Remapping Failure Occurred", "SRAM Threshold Exceeded",
                  "Unrepairable Memory", "Pending Page Blacklist", "Repair Pending", "Remapped Rows",
                  "Bank Remap Availability")
GPU_LINE_MARKERS = (
    XID_MARKER,
    HMA_MARKER,
    NCCL_MARKER,
    *NCCL_TIMEOUT_MARKERS,
    *FABRIC_MANAGER_MARKERS,
    *LIFECYCLE_MARKERS,
    *MEMORY_MARKERS,
    FALLEN_OFF_BUS_MARKER,
)
# HyperPod lifecycle-script and deep-health-check streams: their error lines are read whatever they say.
HYPERPOD_STATUS_STREAMS = ("LifecycleConfig/", "DeepHealthCheckResults/")
STATUS_STREAM_WORDS = ("ERROR", "FAIL", "Xid", "EFA", "NCCL")


# Plain substrings, at least one of which every line `gpu_lines_query` matches holds (its regex markers spelled out:
# "NCCL (INFO|WARN)" as both, "Fabric ?Manager" as both spellings), and for the status streams the words they are
# read for. A Logs Insights query can count `strcontains` per line but cannot test a regex per line, so the stream
# summary counts these per stream (collectors/log_queries.py GPU_HINT): a stream with none in a range has no GPU
# line there, and an hourly read asks only the others for their lines (tests/unit/test_gpu_hints.py).
GPU_HINTS = tuple(dict.fromkeys(
    h for marker in GPU_LINE_MARKERS
    for h in ({"NCCL (INFO|WARN)": ("NCCL INFO", "NCCL WARN"),
               "Fabric ?Manager": ("Fabric Manager", "FabricManager"),
               BOOT_LINE: ("Linux version",)}.get(marker, (marker,)))))


def gpu_lines_query(limit: int) -> str:
    """The Logs Insights query of the GPU lines: every marker, plus the status streams' error lines."""
    streams = "|".join(s.rstrip("/") for s in HYPERPOD_STATUS_STREAMS)
    return (f"filter @message like /{'|'.join(GPU_LINE_MARKERS)}/ "
            f"or (@logStream like /^({streams})\\// and @message like /{'|'.join(STATUS_STREAM_WORDS)}/) "
            f"| fields @timestamp, @log, @logStream, @message | sort @timestamp asc | limit {limit}")


def boot_lines_query(instance_ids: list[str], limit: int) -> str:
    """The boot-time lines of the named nodes' streams, newest first: the query names only nodes whose window held
    no such line, and its time range ends where the GPU-lines query began (collectors/kernel_lookback.py)."""
    return (f"filter @logStream like /{'|'.join(instance_ids)}/ "
            f"| filter @message like /{'|'.join(BOOT_LINE_MARKERS)}/ "
            f"| fields @timestamp, @log, @logStream, @message | sort @timestamp desc | limit {limit}")
