"""EC2's DescribeInstanceTypes entry, read into typed values.

Only the fields the catalog uses, under EC2's own names (the API's PascalCase), so an entry from
botocore validates as it comes; anything else in it is ignored. A malformed entry fails with a
pydantic error naming the field, never with a KeyError deep in the arithmetic.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt


class _Ec2(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class VCpu(_Ec2):
    DefaultVCpus: NonNegativeInt


class Memory(_Ec2):
    SizeInMiB: NonNegativeInt


class Processor(_Ec2):
    SupportedArchitectures: list[str] = Field(default_factory=list)
    Manufacturer: str | None = None
    SustainedClockSpeedInGhz: NonNegativeFloat | None = None


class NetworkCard(_Ec2):
    NetworkCardIndex: NonNegativeInt = 0
    MaximumNetworkInterfaces: NonNegativeInt
    BaselineBandwidthInGbps: NonNegativeFloat | None = None


class Efa(_Ec2):
    MaximumEfaInterfaces: NonNegativeInt | None = None


class Network(_Ec2):
    MaximumNetworkInterfaces: NonNegativeInt
    Ipv4AddressesPerInterface: NonNegativeInt
    DefaultNetworkCardIndex: NonNegativeInt | None = None
    NetworkCards: list[NetworkCard] = Field(default_factory=list)
    EncryptionInTransitSupported: bool = False
    EfaInfo: Efa | None = None

    def default_card_interfaces(self) -> int:
        """ENIs on the default network card: the VPC CNI uses only that card (upstream's
        `ENILimitedPods`); an entry without cards falls back to the instance's maximum."""
        index = self.DefaultNetworkCardIndex or 0
        for card in self.NetworkCards:
            if card.NetworkCardIndex == index:
                return card.MaximumNetworkInterfaces
        return self.MaximumNetworkInterfaces

    def baseline_bandwidth_mbps(self) -> int | None:
        index = self.DefaultNetworkCardIndex or 0
        for card in self.NetworkCards:
            if card.NetworkCardIndex == index and card.BaselineBandwidthInGbps is not None:
                return round(card.BaselineBandwidthInGbps * 1000)
        return None


class DeviceMemory(_Ec2):
    SizeInMiB: NonNegativeInt = 0


class Gpu(_Ec2):
    Name: str = ""
    Manufacturer: str = ""
    Count: NonNegativeInt = 0
    MemoryInfo: DeviceMemory = DeviceMemory()


class Gpus(_Ec2):
    Gpus: list[Gpu] = Field(default_factory=list)


class Accelerator(_Ec2):
    Name: str = ""
    Manufacturer: str = ""
    Count: NonNegativeInt = 0


class Accelerators(_Ec2):
    Accelerators: list[Accelerator] = Field(default_factory=list)


class NeuronCores(_Ec2):
    Count: NonNegativeInt = 0


class NeuronDevice(_Ec2):
    Name: str = ""
    Count: NonNegativeInt = 0
    CoreInfo: NeuronCores = NeuronCores()


class Neuron(_Ec2):
    NeuronDevices: list[NeuronDevice] = Field(default_factory=list)


class InstanceStorage(_Ec2):
    TotalSizeInGB: NonNegativeInt | None = None
    NvmeSupport: str | None = None


class EbsOptimized(_Ec2):
    MaximumBandwidthInMbps: NonNegativeInt | None = None


class Ebs(_Ec2):
    EbsOptimizedSupport: str | None = None
    EbsOptimizedInfo: EbsOptimized | None = None


class InstanceTypeInfo(_Ec2):
    """One entry of DescribeInstanceTypes' `InstanceTypes`."""

    InstanceType: str = Field(min_length=1)
    VCpuInfo: VCpu
    MemoryInfo: Memory
    ProcessorInfo: Processor
    NetworkInfo: Network
    Hypervisor: str | None = None
    SupportedUsageClasses: list[str] = Field(default_factory=list)
    NitroEnclavesSupport: str | None = None
    GpuInfo: Gpus | None = None
    InferenceAcceleratorInfo: Accelerators | None = None
    NeuronInfo: Neuron | None = None
    InstanceStorageInfo: InstanceStorage | None = None
    EbsInfo: Ebs | None = None
