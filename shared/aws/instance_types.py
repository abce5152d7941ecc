"""An EC2 instance type as the scheduler sees it: capacity, overhead, allocatable, labels, offerings.

The rules are upstream's (aws/karpenter-provider-aws `pkg/providers/instancetype/types.go`:
`computeCapacity`, `kubeReservedResources`, `evictionThreshold`, `ENILimitedPods`,
`computeRequirements`; offerings as `offering/base_resolver.go` builds them), written out in
docs/aws.md. Pure: EC2's figures, the prices and the node class come in, a catalog entry goes out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from shared.api.quantity import format_quantity, parse
from shared.aws import labels as L
from shared.aws.ec2 import InstanceTypeInfo
from shared.aws.pricing import PriceBook
from shared.aws.settings import NodeClassSettings

MIB = 2**20
GIB = 2**30
DEFAULT_MAX_PODS = 110
EVICTION_MEMORY = Decimal(100 * MIB)
"""The kubelet's default `evictionHard` `memory.available`: 100Mi."""
EVICTION_NODEFS_PERCENT = 10
KUBE_RESERVED_STORAGE = Decimal(GIB)
_CPU_RANGES = ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025))
"""kube-reserved CPU: this share of each range of millicores (the EKS AMI's and Bottlerocket's)."""
_TYPE_SCHEME = re.compile(r"(^[a-z]+)(-[0-9]+tb)?([0-9]+).*\.")
_BINARY = frozenset({"memory", "ephemeral-storage"})


@dataclass(frozen=True, slots=True)
class Offering:
    zone: str
    capacity_type: str
    price: float
    available: bool


@dataclass(frozen=True, slots=True)
class InstanceTypeEntry:
    name: str
    capacity: Mapping[str, Decimal]
    overhead: Mapping[str, Decimal]
    allocatable: Mapping[str, Decimal]
    labels: Mapping[str, str]
    offerings: tuple[Offering, ...]

    def as_port(self) -> dict[str, Any]:
        """The `CloudProvider.instance_types()` shape the scheduler reads (`instance_option`):
        quantities as text; every offering with its `available` flag, as upstream's: scheduling
        launches only the available ones, drift asks whether any exists at all."""
        return {
            "name": self.name,
            "capacity": _strings(self.capacity),
            "overhead": _strings(self.overhead),
            "allocatable": _strings(self.allocatable),
            "labels": dict(self.labels),
            "offerings": [
                {"zone": o.zone, "capacityType": o.capacity_type, "price": o.price, "available": o.available}
                for o in self.offerings
            ],
        }


def _strings(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: format_quantity(v, binary=k in _BINARY) for k, v in values.items()}


def eni_limited_pods(info: InstanceTypeInfo, reserved_enis: int = 0) -> int:
    """ENIs on the default card, less the reserved ones, times (IPv4 addresses per ENI - 1), + 2."""
    usable = max(info.NetworkInfo.default_card_interfaces() - reserved_enis, 0)
    if usable == 0:
        return 0
    return usable * (info.NetworkInfo.Ipv4AddressesPerInterface - 1) + 2


def max_pods(info: InstanceTypeInfo, settings: NodeClassSettings) -> int:
    kubelet, flags = settings.kubelet, settings.flags
    if kubelet.max_pods is not None:
        count = kubelet.max_pods
    elif flags.supports_eni_limited_pod_density:
        count = eni_limited_pods(info, settings.reservedENIs)
    else:
        count = DEFAULT_MAX_PODS
    if kubelet.pods_per_core and flags.pods_per_core_enabled:
        count = min(kubelet.pods_per_core * info.VCpuInfo.DefaultVCpus, count)
    return count


def memory_capacity(info: InstanceTypeInfo, overhead_percent: float) -> Decimal:
    """EC2's MiB, less 64 MiB Graviton keeps for CMA, less the VM's overhead rounded up to a MiB."""
    mib = info.MemoryInfo.SizeInMiB
    if info.ProcessorInfo.SupportedArchitectures[:1] == ["arm64"]:
        mib -= 64
    overhead_mib = math.ceil(mib * MIB * overhead_percent / 1024 / 1024)
    return Decimal((mib - overhead_mib) * MIB)


def ephemeral_storage(info: InstanceTypeInfo, settings: NodeClassSettings) -> Decimal:
    storage = info.InstanceStorageInfo
    if settings.instanceStorePolicy == "RAID0" and storage is not None and storage.TotalSizeInGB is not None:
        return Decimal(storage.TotalSizeInGB * 10**9)
    return settings.volume_size()


def capacity(info: InstanceTypeInfo, settings: NodeClassSettings) -> dict[str, Decimal]:
    """What the node reports; extended resources only where the type has them."""
    out = {
        "cpu": Decimal(info.VCpuInfo.DefaultVCpus),
        "memory": memory_capacity(info, settings.vmMemoryOverheadPercent),
        "ephemeral-storage": ephemeral_storage(info, settings),
        "pods": Decimal(max_pods(info, settings)),
    }
    gpus = info.GpuInfo.Gpus if info.GpuInfo is not None else []
    for resource, maker in ((L.NVIDIA_GPU, "NVIDIA"), (L.AMD_GPU, "AMD"), (L.HABANA_GAUDI, "Habana")):
        out[resource] = Decimal(sum(g.Count for g in gpus if g.Manufacturer == maker))
    devices = info.NeuronInfo.NeuronDevices if info.NeuronInfo is not None else []
    out[L.AWS_NEURON] = Decimal(sum(d.Count for d in devices))
    out[L.AWS_NEURON_CORE] = Decimal(devices[0].Count * devices[0].CoreInfo.Count) if devices else Decimal(0)
    efa = info.NetworkInfo.EfaInfo
    out[L.EFA] = Decimal(efa.MaximumEfaInterfaces or 0) if efa is not None else Decimal(0)
    return {k: v for k, v in out.items() if v > 0 or k in ("cpu", "memory", "ephemeral-storage", "pods")}


def kube_reserved(cpus: int, pods: int, overrides: Mapping[str, Any]) -> dict[str, Decimal]:
    """11Mi per pod + 255Mi of memory, 1Gi of storage, and a share of each range of CPU."""
    millis = 0
    cpu_milli = cpus * 1000
    for start, end, share in _CPU_RANGES:
        if cpu_milli >= start:
            width = min(cpu_milli, end) - start
            millis += int(width * share)
    out = {
        "cpu": Decimal(millis) / 1000,
        "memory": Decimal((11 * pods + 255) * MIB),
        "ephemeral-storage": KUBE_RESERVED_STORAGE,
    }
    out.update({k: v.value for k, v in overrides.items()})
    return out


def _signal(capacity: Decimal, value: str) -> Decimal:
    if value.endswith("%"):
        percent = Decimal(value[:-1])
        if percent == 100:  # 100% disables the threshold (kubelet's rule)
            percent = Decimal(0)
        return Decimal(math.ceil(capacity / 100 * percent))
    return parse(value)


def eviction_threshold(memory: Decimal, storage: Decimal, eviction_hard: Mapping[str, str]) -> dict[str, Decimal]:
    """100Mi of memory and 10% of ephemeral storage, unless `evictionHard` says otherwise."""
    out = {
        "memory": EVICTION_MEMORY,
        "ephemeral-storage": Decimal(math.ceil(storage / 100 * EVICTION_NODEFS_PERCENT)),
    }
    if "memory.available" in eviction_hard:
        out["memory"] = _signal(memory, eviction_hard["memory.available"])
    if "nodefs.available" in eviction_hard:
        out["ephemeral-storage"] = _signal(storage, eviction_hard["nodefs.available"])
    return out


def overhead(info: InstanceTypeInfo, settings: NodeClassSettings, cap: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """kube-reserved + system-reserved + the hard eviction threshold, per resource."""
    kubelet = settings.kubelet
    pods_for_memory = eni_limited_pods(info, 0) if settings.flags.uses_eni_limited_memory_overhead else int(cap["pods"])
    parts = (
        kube_reserved(info.VCpuInfo.DefaultVCpus, pods_for_memory, kubelet.kube_reserved or {}),
        {k: v.value for k, v in (kubelet.system_reserved or {}).items()},
        eviction_threshold(cap["memory"], cap["ephemeral-storage"], kubelet.eviction_hard or {}),
    )
    total: dict[str, Decimal] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, Decimal(0)) + value
    return total


def allocatable(cap: Mapping[str, Decimal], over: Mapping[str, Decimal]) -> dict[str, Decimal]:
    return {k: max(v - over.get(k, Decimal(0)), Decimal(0)) for k, v in cap.items()}


def _kebab(text: str) -> str:
    return text.replace(" ", "-").lower()


def kube_architecture(info: InstanceTypeInfo) -> str | None:
    """`amd64` or `arm64`; None for a type no Kubernetes node can run on (a Mac's `x86_64_mac`)."""
    archs = info.ProcessorInfo.SupportedArchitectures
    return next((L.AWS_TO_KUBE_ARCHITECTURES[a] for a in archs if a in L.AWS_TO_KUBE_ARCHITECTURES), None)


def instance_labels(info: InstanceTypeInfo, region: str) -> dict[str, str]:
    """The single-valued labels a node of this type carries (zone and capacity type come with the
    offering). A label upstream leaves out (`DoesNotExist`) for this type is absent here."""
    name = info.InstanceType
    arch = kube_architecture(info)
    if arch is None:
        raise ValueError(
            f"{name}: ProcessorInfo.SupportedArchitectures {info.ProcessorInfo.SupportedArchitectures}"
            " names no architecture Kubernetes knows (x86_64, arm64)"
        )
    out = {
        L.INSTANCE_TYPE_LABEL: name,
        L.ARCH_LABEL: arch,
        L.OS_LABEL: "linux",
        L.REGION_LABEL: region,
        L.INSTANCE_CPU: str(info.VCpuInfo.DefaultVCpus),
        L.INSTANCE_MEMORY: str(info.MemoryInfo.SizeInMiB),
        L.INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: str(info.NetworkInfo.EncryptionInTransitSupported).lower(),
        L.INSTANCE_NITRO_ENCLAVES_SUPPORTED: str(info.NitroEnclavesSupport == "supported").lower(),
    }
    if info.Hypervisor:
        out[L.INSTANCE_HYPERVISOR] = info.Hypervisor
    if (scheme := _TYPE_SCHEME.match(name)) is not None:
        out[L.INSTANCE_CATEGORY], out[L.INSTANCE_GENERATION] = scheme[1], scheme[3]
    parts = name.split(".")
    if len(parts) == 2:
        out[L.INSTANCE_FAMILY], out[L.INSTANCE_SIZE] = parts
    out[L.INSTANCE_CAPABILITY_FLEX] = str("-flex" in parts[0]).lower()
    storage = info.InstanceStorageInfo
    if storage is not None and storage.NvmeSupport != "unsupported" and storage.TotalSizeInGB is not None:
        out[L.INSTANCE_LOCAL_NVME] = str(storage.TotalSizeInGB)
    if (bandwidth := info.NetworkInfo.baseline_bandwidth_mbps()) is not None:
        out[L.INSTANCE_NETWORK_BANDWIDTH] = str(bandwidth)
    if info.GpuInfo is not None and len(info.GpuInfo.Gpus) == 1:
        gpu = info.GpuInfo.Gpus[0]
        out[L.INSTANCE_GPU_NAME] = _kebab(gpu.Name)
        out[L.INSTANCE_GPU_MANUFACTURER] = _kebab(gpu.Manufacturer)
        out[L.INSTANCE_GPU_COUNT] = str(gpu.Count)
        out[L.INSTANCE_GPU_MEMORY] = str(gpu.MemoryInfo.SizeInMiB)
    accelerators = info.InferenceAcceleratorInfo
    if accelerators is not None and len(accelerators.Accelerators) == 1 and info.NeuronInfo is None:
        accelerator = accelerators.Accelerators[0]
        out[L.INSTANCE_ACCELERATOR_NAME] = _kebab(accelerator.Name)
        out[L.INSTANCE_ACCELERATOR_MANUFACTURER] = _kebab(accelerator.Manufacturer)
        out[L.INSTANCE_ACCELERATOR_COUNT] = str(accelerator.Count)
    if info.NeuronInfo is not None and len(info.NeuronInfo.NeuronDevices) == 1:
        device = info.NeuronInfo.NeuronDevices[0]
        out[L.INSTANCE_ACCELERATOR_NAME] = _kebab(device.Name)
        out[L.INSTANCE_ACCELERATOR_MANUFACTURER] = "aws"
        out[L.INSTANCE_ACCELERATOR_COUNT] = str(device.Count)
    processor = info.ProcessorInfo
    if processor.Manufacturer:
        out[L.INSTANCE_CPU_MANUFACTURER] = _kebab(processor.Manufacturer)
    if processor.SustainedClockSpeedInGhz is not None:
        out[L.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ] = str(round(processor.SustainedClockSpeedInGhz * 1000))
    ebs = info.EbsInfo
    optimized = ebs.EbsOptimizedInfo if ebs is not None and ebs.EbsOptimizedSupport == "default" else None
    if optimized is not None and optimized.MaximumBandwidthInMbps is not None:
        out[L.INSTANCE_EBS_BANDWIDTH] = str(optimized.MaximumBandwidthInMbps)
    return out


def offerings(
    info: InstanceTypeInfo, offered_zones: Collection[str], all_zones: Iterable[str], prices: PriceBook
) -> tuple[Offering, ...]:
    """One offering per zone of the region and capacity type EC2 sells the type as (on-demand,
    spot); available where the type is offered in that zone and has a price."""
    kinds = [c for c in (L.ON_DEMAND, L.SPOT) if c in info.SupportedUsageClasses]
    out = []
    for zone in sorted(set(all_zones)):
        for kind in kinds:
            price = (
                prices.on_demand_price(info.InstanceType)
                if kind == L.ON_DEMAND
                else prices.spot_price(info.InstanceType, zone)
            )
            out.append(Offering(zone, kind, price or 0.0, price is not None and zone in offered_zones))
    return tuple(out)


def instance_type_entry(
    raw: Mapping[str, Any] | InstanceTypeInfo,
    *,
    region: str,
    offered_zones: Collection[str],
    all_zones: Sequence[str],
    prices: PriceBook,
    settings: NodeClassSettings | None = None,
) -> InstanceTypeEntry:
    """One DescribeInstanceTypes entry (and where it is offered, what it costs, the node class)
    -> its catalog entry."""
    info = raw if isinstance(raw, InstanceTypeInfo) else InstanceTypeInfo.model_validate(raw)
    settings = settings or NodeClassSettings()
    cap = capacity(info, settings)
    over = overhead(info, settings, cap)
    return InstanceTypeEntry(
        info.InstanceType,
        cap,
        over,
        allocatable(cap, over),
        instance_labels(info, region),
        offerings(info, offered_zones, all_zones, prices),
    )
