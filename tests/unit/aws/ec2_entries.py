"""Real DescribeInstanceTypes entries, trimmed to the fields the catalog reads (figures as EC2
publishes them; p3.2xlarge's from EC2's documentation, moto no longer lists it)."""

from __future__ import annotations

from typing import Any


def entry(
    name: str,
    vcpus: int,
    mib: int,
    arch: str,
    enis: int,
    ipv4_per_eni: int,
    *,
    manufacturer: str = "Intel",
    ghz: float | None = None,
    hypervisor: str = "nitro",
    bandwidth_gbps: float | None = None,
    ebs_mbps: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    card: dict[str, Any] = {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": enis}
    if bandwidth_gbps is not None:
        card["BaselineBandwidthInGbps"] = bandwidth_gbps
    out: dict[str, Any] = {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": mib},
        "ProcessorInfo": {"SupportedArchitectures": [arch], "Manufacturer": manufacturer},
        "NetworkInfo": {
            "MaximumNetworkInterfaces": enis,
            "Ipv4AddressesPerInterface": ipv4_per_eni,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [card],
            "EncryptionInTransitSupported": False,
        },
        "Hypervisor": hypervisor,
        "SupportedUsageClasses": ["on-demand", "spot"],
        "NitroEnclavesSupport": "unsupported",
    }
    if ghz is not None:
        out["ProcessorInfo"]["SustainedClockSpeedInGhz"] = ghz
    if ebs_mbps is not None:
        out["EbsInfo"] = {"EbsOptimizedSupport": "default", "EbsOptimizedInfo": {"MaximumBandwidthInMbps": ebs_mbps}}
    out.update(extra)
    return out


M5_LARGE = entry("m5.large", 2, 8192, "x86_64", 3, 10, ghz=3.1, bandwidth_gbps=0.75, ebs_mbps=4750)
T3_MICRO = entry("t3.micro", 2, 1024, "x86_64", 2, 2, ghz=2.5, bandwidth_gbps=0.064, ebs_mbps=2085)
C6G_XLARGE = entry(
    "c6g.xlarge",
    4,
    8192,
    "arm64",
    4,
    15,
    manufacturer="AWS",
    ghz=2.5,
    bandwidth_gbps=1.25,
    ebs_mbps=4750,
    NitroEnclavesSupport="supported",
)
P3_2XLARGE = entry(
    "p3.2xlarge",
    8,
    62464,
    "x86_64",
    4,
    15,
    ghz=2.3,
    hypervisor="xen",
    ebs_mbps=1750,
    GpuInfo={"Gpus": [{"Name": "V100", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 16384}}]},
)
INF2_XLARGE = entry(
    "inf2.xlarge",
    4,
    16384,
    "x86_64",
    4,
    15,
    manufacturer="AMD",
    ghz=2.9,
    bandwidth_gbps=2.083,
    NeuronInfo={"NeuronDevices": [{"Name": "Inferentia2", "Count": 1, "CoreInfo": {"Count": 2}}]},
    InferenceAcceleratorInfo={"Accelerators": [{"Name": "Inferentia2", "Manufacturer": "AWS", "Count": 1}]},
)
G4DN_XLARGE = entry(
    "g4dn.xlarge",
    4,
    16384,
    "x86_64",
    3,
    10,
    ghz=2.5,
    bandwidth_gbps=5.0,
    ebs_mbps=3500,
    GpuInfo={"Gpus": [{"Name": "T4", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 16384}}]},
    InstanceStorageInfo={"TotalSizeInGB": 125, "NvmeSupport": "required"},
)
P4D_24XLARGE = entry(
    "p4d.24xlarge",
    96,
    1179648,
    "x86_64",
    15,
    50,
    ghz=3.0,
    bandwidth_gbps=100.0,
    ebs_mbps=19000,
    GpuInfo={"Gpus": [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8, "MemoryInfo": {"SizeInMiB": 40960}}]},
    InstanceStorageInfo={"TotalSizeInGB": 8000, "NvmeSupport": "required"},
    SupportedUsageClasses=["capacity-block", "on-demand", "spot"],
)
P4D_24XLARGE["NetworkInfo"]["EfaInfo"] = {"MaximumEfaInterfaces": 4}
P4D_24XLARGE["NetworkInfo"]["MaximumNetworkInterfaces"] = 60  # 4 cards x 15; the CNI uses card 0's 15
