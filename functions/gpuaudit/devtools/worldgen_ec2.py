"""The EC2 side of a generated world: the GPU instance types it runs, their DescribeInstanceTypes entries, the
network, and each node as DescribeInstances returns it (tags, network interfaces, EBS volumes)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuaudit.devtools.worldgen_fleet import ACCOUNT, Node
from gpuaudit.embedded.interface_templates import derived_hex, derived_mac
from gpuaudit.model.timeutil import iso


@dataclass(frozen=True)
class GpuType:
    name: str
    gpu: str
    gpu_count: int
    gpu_mib: int
    vcpus: int
    memory_mib: int
    efa_max: int
    network_cards: int
    card_gbps: float
    network: str
    disks: tuple[int, int]  # (count, size GB)
    cpu: str


GPU_TYPES: dict[str, GpuType] = {
    "p5.48xlarge": GpuType("p5.48xlarge", "H100", 8, 81559, 192, 2097152, 32, 32, 100.0, "3200 Gigabit",
                           (8, 3800), "AMD"),
    "p5en.48xlarge": GpuType("p5en.48xlarge", "H200", 8, 143771, 192, 2097152, 16, 16, 200.0, "3200 Gigabit",
                             (8, 3800), "Intel"),
    "p4d.24xlarge": GpuType("p4d.24xlarge", "A100", 8, 40960, 96, 1179648, 4, 4, 100.0, "4x 100 Gigabit",
                            (8, 1000), "Intel"),
}


def gpu_instance_type(t: GpuType) -> dict[str, Any]:
    count, size = t.disks
    return {
        "InstanceType": t.name, "CurrentGeneration": True,
        "SupportedUsageClasses": ["capacity-block", "on-demand", "spot"],
        "SupportedRootDeviceTypes": ["ebs"], "SupportedVirtualizationTypes": ["hvm"], "BareMetal": False,
        "Hypervisor": "nitro",
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": t.cpu},
        "VCpuInfo": {"DefaultVCpus": t.vcpus, "DefaultCores": t.vcpus // 2, "DefaultThreadsPerCore": 2},
        "MemoryInfo": {"SizeInMiB": t.memory_mib},
        "InstanceStorageSupported": True,
        "InstanceStorageInfo": {"TotalSizeInGB": count * size, "Disks": [{"SizeInGB": size, "Count": count,
                                                                          "Type": "ssd"}],
                                "NvmeSupport": "required", "EncryptionSupport": "required"},
        "NetworkInfo": {
            "NetworkPerformance": t.network, "MaximumNetworkInterfaces": 2 * t.network_cards,
            "MaximumNetworkCards": t.network_cards, "DefaultNetworkCardIndex": 0,
            "NetworkCards": [{"NetworkCardIndex": i, "NetworkPerformance": f"{t.card_gbps:g} Gigabit",
                              "MaximumNetworkInterfaces": 2, "BaselineBandwidthInGbps": t.card_gbps,
                              "PeakBandwidthInGbps": t.card_gbps} for i in range(t.network_cards)],
            "Ipv4AddressesPerInterface": 50, "Ipv6Supported": True, "EnaSupport": "required",
            "EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": t.efa_max},
            "EncryptionInTransitSupported": True, "EnaSrdSupported": True},
        "GpuInfo": {"Gpus": [{"Name": t.gpu, "Manufacturer": "NVIDIA", "Count": t.gpu_count,
                              "MemoryInfo": {"SizeInMiB": t.gpu_mib}}],
                    "TotalGpuMemoryInMiB": t.gpu_count * t.gpu_mib},
        "PlacementGroupInfo": {"SupportedStrategies": ["cluster", "partition", "spread"]},
        "SupportedBootModes": ["legacy-bios", "uefi"],
    }


def cpu_instance_type(name: str) -> dict[str, Any]:
    return {"InstanceType": name, "CurrentGeneration": True, "Hypervisor": "nitro",
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "Intel"},
            "VCpuInfo": {"DefaultVCpus": 8, "DefaultCores": 4, "DefaultThreadsPerCore": 2},
            "MemoryInfo": {"SizeInMiB": 32768}, "InstanceStorageSupported": False,
            "NetworkInfo": {"NetworkPerformance": "Up to 10 Gigabit", "MaximumNetworkInterfaces": 4,
                            "MaximumNetworkCards": 1, "Ipv4AddressesPerInterface": 15, "EnaSupport": "required",
                            "EfaSupported": False}}


VPC = "vpc-0a1b2c3d4e5f60718"
SUBNET_HEAD = "subnet-0e6170b86449c2d45"
SUBNET_COMPUTE = "subnet-024dbe437aef9d7eb"
SG = "sg-0c6c57aa6bccdbb0d"


def derived(kind: str, seed: str, digits: int = 17) -> str:
    """An identifier derived from the instance's own (hash, not the generator's random stream): the attributes
    DescribeInstances adds per interface and volume leave the rest of a seeded world byte for byte as it was."""
    return hashlib.blake2b(f"{kind}/{seed}".encode(), digest_size=16).hexdigest()[:digits]


@dataclass(frozen=True)
class InterfaceValues:
    """What varies from one instance's interfaces to another's: the values themselves (the per-instance form), or
    the placeholders a template fills with them when served (the compact form, embedded/interface_templates.py)."""

    instance_id: str
    launch: str
    subnet: str
    ip: str
    dns: str
    attachment_id: Callable[[int], str]
    mac: Callable[[int], str]
    eni: Callable[[int], str]


PLACEHOLDER_VALUES = InterfaceValues(
    "{InstanceId}", "{LaunchTime}", "{SubnetId}", "{PrivateIpAddress}", "{PrivateDnsName}",
    lambda _card: "eni-attach-{hex}", lambda _card: "{mac}", lambda _card: "eni-{hex}")


def instance_values(node: Node, subnet: str) -> InterfaceValues:
    """The values a template's placeholders stand for on this node, derived as the backend derives them."""
    iid = node.instance_id
    return InterfaceValues(
        iid, iso(node.launch), subnet, node.ip, node.dns,
        lambda card: f"eni-attach-{derived_hex(iid, card, 'Attachment.AttachmentId')}",
        lambda card: derived_mac(iid, card, "MacAddress"),
        lambda card: f"eni-{derived_hex(iid, card, 'NetworkInterfaceId')}")


def _interface(v: InterfaceValues, card: int, kind: str, group: dict[str, str]) -> dict[str, Any]:
    """One network interface as DescribeInstances returns it (a p5.48xlarge carries 32, one per network card):
    card 0 carries the node's address; the other cards' EFA-only interfaces carry RDMA traffic alone."""
    interface: dict[str, Any] = {
        "Attachment": {"AttachTime": v.launch, "AttachmentId": v.attachment_id(card),
                       "DeleteOnTermination": True, "DeviceIndex": 0 if card == 0 else 1, "Status": "attached",
                       "NetworkCardIndex": card, "EnaQueueCount": 32 if card == 0 else 8},
        "Description": "" if card == 0 else f"EFA interface {card} of {v.instance_id}",
        "Groups": [group], "Ipv6Addresses": [], "MacAddress": v.mac(card), "NetworkInterfaceId": v.eni(card),
        "OwnerId": ACCOUNT, "SourceDestCheck": True, "Status": "in-use", "SubnetId": v.subnet, "VpcId": VPC,
        "InterfaceType": kind, "Operator": {"Managed": False}}
    if card == 0:
        interface.update({"PrivateDnsName": v.dns, "PrivateIpAddress": v.ip, "PrivateIpAddresses": [
            {"Primary": True, "PrivateDnsName": v.dns, "PrivateIpAddress": v.ip}]})
    return interface


def interfaces(v: InterfaceValues, instance_type: str, cluster: str) -> list[dict[str, Any]]:
    """A node's interfaces: one EFA interface per network card of a GPU node, one plain interface otherwise."""
    group = {"GroupId": SG, "GroupName": f"{cluster}-sg"}
    gpu = GPU_TYPES.get(instance_type)
    if gpu is None:
        return [_interface(v, 0, "interface", group)]
    return [_interface(v, card, "efa" if card == 0 else "efa-only", group) for card in range(gpu.efa_max)]


def interface_template(instance_type: str, cluster: str) -> dict[str, Any]:
    """The compact form's ec2.network_interface_templates entry for one instance type of this cluster."""
    return {"name": instance_type, "interfaces": interfaces(PLACEHOLDER_VALUES, instance_type, cluster)}


def _block_devices(node: Node, head: bool) -> list[dict[str, Any]]:
    """The EBS volumes (root, and a shared /home on the head node); instance-store NVMe disks are not listed."""
    names = ["/dev/xvda", "/dev/sdb"] if head else ["/dev/xvda"]
    return [{"DeviceName": name, "Ebs": {"AttachTime": iso(node.launch), "DeleteOnTermination": name == "/dev/xvda",
                                         "Status": "attached",
                                         "VolumeId": f"vol-0{derived('vol', f'{node.instance_id}/{name}', 16)}"}}
            for name in names]


def ec2_instance(node: Node, cluster: str, reservation: str | None, compact: bool = True) -> dict[str, Any]:
    """The node as DescribeInstances returns it; `compact`: its interfaces named by template, not written out."""
    head = node.role == "head"
    subnet = SUBNET_HEAD if head else SUBNET_COMPUTE
    tags = [{"Key": "parallelcluster:cluster-name", "Value": cluster},
            {"Key": "parallelcluster:node-type", "Value": "HeadNode" if head else "Compute"},
            {"Key": "parallelcluster:version", "Value": "3.13.0"},
            {"Key": "parallelcluster:attributes", "Value": "alinux2023, slurm, 3.13.0, x86_64"},
            {"Key": "Name", "Value": "HeadNode" if head else "Compute"},
            {"Key": "aws:ec2launchtemplate:id", "Value": f"lt-0{derived('lt', cluster + str(head), 16)}"},
            {"Key": "aws:ec2launchtemplate:version", "Value": "1"},
            {"Key": "parallelcluster:filesystem", "Value": "efs=0, multiebs=0, raid=0, fsxlustre=1, fsxontap=0, "
                                                          "fsxopenzfs=0, filecache=0"}]
    if not head:
        tags += [{"Key": "parallelcluster:queue-name", "Value": "gpu"},
                 {"Key": "parallelcluster:compute-resource-name", "Value": node.group or "compute-p5"},
                 {"Key": "aws:ec2:fleet-id", "Value": f"fleet-{derived('fleet', cluster, 8)}-"
                                                       f"{derived('fleet', cluster + '/1', 4)}-"
                                                       f"{derived('fleet', cluster + '/2', 12)}"}]
    group = {"GroupId": SG, "GroupName": f"{cluster}-sg"}
    nics: dict[str, Any] = (
        {"network_interfaces_template": node.instance_type} if compact
        else {"NetworkInterfaces": interfaces(instance_values(node, subnet), node.instance_type, cluster)})
    instance: dict[str, Any] = {
        "AmiLaunchIndex": 0, "ImageId": "ami-0732881584d8c4fa2", "InstanceId": node.instance_id,
        "InstanceType": node.instance_type, "LaunchTime": iso(node.launch),
        "Monitoring": {"State": "disabled"},
        "Placement": {"AvailabilityZone": "us-west-2b", "AvailabilityZoneId": "usw2-az2", "Tenancy": "default",
                      "GroupName": "" if head else f"{cluster}-gpu-placement"},
        "PrivateDnsName": node.dns, "PrivateIpAddress": node.ip, "ProductCodes": [], "PublicDnsName": "",
        "State": {"Code": 16, "Name": "running"}, "StateTransitionReason": "", "SubnetId": subnet, "VpcId": VPC,
        "Architecture": "x86_64", "BlockDeviceMappings": _block_devices(node, head),
        "ClientToken": f"fleet-{derived('token', node.instance_id, 32)}", "EbsOptimized": not head,
        "EnaSupport": True, "Hypervisor": "nitro" if not head else "xen",
        "IamInstanceProfile": {"Arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/parallelcluster/{cluster}/"
                                      f"{cluster}-{'HeadNode' if head else 'ComputeNode'}",
                               "Id": "AIPA" + derived("profile", cluster + str(head), 17).upper()},
        **nics, "RootDeviceName": "/dev/xvda", "RootDeviceType": "ebs",
        "SecurityGroups": [group], "SourceDestCheck": True, "Tags": tags, "VirtualizationType": "hvm",
        "CpuOptions": {"CoreCount": 48 if not head else 4, "ThreadsPerCore": 2},
        "CapacityReservationSpecification": {"CapacityReservationPreference": "open"},
        "HibernationOptions": {"Configured": False},
        "MetadataOptions": {"State": "applied", "HttpTokens": "required", "HttpPutResponseHopLimit": 1,
                            "HttpEndpoint": "enabled", "HttpProtocolIpv6": "disabled",
                            "InstanceMetadataTags": "disabled"},
        "EnclaveOptions": {"Enabled": False}, "BootMode": "uefi-preferred", "PlatformDetails": "Linux/UNIX",
        "UsageOperation": "RunInstances", "UsageOperationUpdateTime": iso(node.launch),
        "PrivateDnsNameOptions": {"HostnameType": "ip-name", "EnableResourceNameDnsARecord": False,
                                  "EnableResourceNameDnsAAAARecord": False},
        "MaintenanceOptions": {"AutoRecovery": "default"}, "CurrentInstanceBootMode": "uefi"}
    if reservation and not head:
        instance["CapacityReservationId"] = reservation
        instance["CapacityReservationSpecification"] = {"CapacityReservationTarget": {
            "CapacityReservationId": reservation}}
        instance["InstanceLifecycle"] = "capacity-block"
    return instance
