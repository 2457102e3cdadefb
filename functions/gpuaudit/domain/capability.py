"""NVSwitch and Fabric Manager expectations per instance type (RULES §2 table).

NVSwitch is in no API: this table is the EC2 accelerated-computing page's GPU peer to peer
column. Unknown types are unverified, never inferred from the GPU name.
"""

from __future__ import annotations

from gpuaudit.model.evidence import CapabilityProfile, Evidence, NodeInfo

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


UNKNOWN_TYPE = "unverified (type unknown)"


def fabric_class(instance_type: str | None, profile: CapabilityProfile | None) -> tuple[str, bool]:
    """(wording, Fabric Manager expected) of a node's type: its profile's, else the table by the type's name alone
    (NVSwitch is in no API, RULES §2: DescribeInstanceTypes unread does not make a p5.48xlarge unknown). A type the
    table places only by its GPU count stays unverified without one."""
    if profile is not None:
        return profile.nvswitch, profile.fabric_manager_expected
    wording, expected = nvswitch_class(instance_type, None) if instance_type else (UNKNOWN_TYPE, False)
    return (wording, True) if expected else (UNKNOWN_TYPE, False)


ULTRASERVER_PREFIXES = ("p6e-gb200", "u-p6e")


def is_ultraserver(instance_type: str | None) -> bool:
    return bool(instance_type) and str(instance_type).startswith(ULTRASERVER_PREFIXES)


# EC2 instance families (the letters before the generation digit): accelerated ones carry GPUs (p, g, gr),
# Trainium (trn), Inferentia (inf) or Gaudi (dl); general purpose, compute, memory and storage families do not.
ACCELERATED_FAMILIES = ("p", "g", "gr", "trn", "inf", "dl")
PLAIN_FAMILIES = ("t", "m", "c", "r", "x", "z", "i", "im", "is", "d", "h", "hpc", "u", "a", "mac", "vt", "f")


def family_letters(instance_type: str) -> str:
    head = instance_type.split(".", 1)[0]
    letters = ""
    for ch in head:
        if not ch.isalpha():
            break
        letters += ch
    return letters


def accelerated_by_family(instance_type: str | None) -> bool | None:
    """When DescribeInstanceTypes could not describe a type: accelerated or not by its family; None: unknown."""
    if not instance_type:
        return None
    letters = family_letters(instance_type)
    if letters in ACCELERATED_FAMILIES:
        return True
    if letters in PLAIN_FAMILIES:
        return False
    return None


def family_classification(instance_types: list[str]) -> str:
    """The words a gap uses for types classified by family instead of by DescribeInstanceTypes."""
    words = {True: "accelerated", False: "not accelerated", None: "unknown (audited as accelerated)"}
    return ", ".join(f"{t} {words[accelerated_by_family(t)]}" for t in instance_types)


def is_accelerated(node: NodeInfo, evidence: Evidence) -> bool:
    """GPU or Trainium node; an undescribed type goes by its family, an unknown one is audited as accelerated."""
    if node.instance_type is None:
        return True
    if node.instance_type.startswith(("trn", "inf")):
        return True
    profile = evidence.profiles.get(node.instance_type)
    if profile is None:
        return accelerated_by_family(node.instance_type) is not False
    return (profile.gpu_count or 0) > 0
