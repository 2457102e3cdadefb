"""NVSwitch and Fabric Manager expectations per instance type (RULES §2 table).

NVSwitch is in no API: this table is the EC2 accelerated-computing page's GPU peer to peer
column. Unknown types are unverified, never inferred from the GPU name.
"""

from __future__ import annotations

from gpuaudit.model.evidence import Evidence, NodeInfo

NVSWITCH_TYPES = {
    "p4d.24xlarge": "NVSwitch (600 GB/s)",
    "p4de.24xlarge": "NVSwitch (600 GB/s)",
    "p5.48xlarge": "NVSwitch (900 GB/s)",
    "p5e.48xlarge": "NVSwitch (900 GB/s)",
    "p5en.48xlarge": "NVSwitch (900 GB/s)",
    "p6-b200.48xlarge": "NVSwitch (1800 GB/s)",
    "p6-b300.48xlarge": "NVSwitch (1800 GB/s)",
}
PCIE_FAMILIES = ("g7", "g7e")
UNVERIFIED_FAMILIES = ("g4dn", "g5", "g6", "g6e")


def nvswitch_class(instance_type: str, gpu_count: int | None) -> tuple[str, bool]:
    """(wording for the report, whether Fabric Manager must be running)."""
    if instance_type in NVSWITCH_TYPES:
        return NVSWITCH_TYPES[instance_type], True
    if instance_type.startswith("p6e-gb200"):
        return "NVSwitch (1800 GB/s; P6e domain spans the UltraServer)", True
    if gpu_count == 0:
        return "no GPU", False
    if gpu_count == 1:
        return "single GPU: no intra-node GPU traffic", False
    family = instance_type.split(".", 1)[0]
    if family in PCIE_FAMILIES:
        return "PCIe peer to peer, no NVSwitch", False
    if family in UNVERIFIED_FAMILIES:
        return "NVSwitch presence unverified; no Fabric Manager expected", False
    return "unverified (type not in the NVSwitch table)", False


ULTRASERVER_PREFIXES = ("p6e-gb200", "u-p6e")


def is_ultraserver(instance_type: str | None) -> bool:
    return bool(instance_type) and str(instance_type).startswith(ULTRASERVER_PREFIXES)


def is_accelerated(node: NodeInfo, evidence: Evidence) -> bool:
    """GPU or Trainium node; an unknown type (a vanished node) is audited as one."""
    if node.instance_type is None:
        return True
    if node.instance_type.startswith(("trn", "inf")):
        return True
    profile = evidence.profiles.get(node.instance_type)
    return profile is None or (profile.gpu_count or 0) > 0
