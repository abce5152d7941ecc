"""The sim cloud's instance catalog: generated, deterministic from a seed, AWS-shaped.

Families `c` (1 vCPU : 2 GiB), `m` (1:4), `r` (1:8) in amd64 and arm64 (`g` suffix, 20% cheaper)
and a GPU family `g` carrying `nvidia.com/gpu`; sizes from 1 to 192 vCPU; one generation after
another until the catalog has the types asked for. Every type is offered in every zone, on demand
and as spot; spot is cheaper by 30-70%, drawn per type and zone from the seed. Allocatable is
capacity minus what the kubelet keeps (the EKS AMI's kube-reserved formula and eviction threshold).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from shared.api.labels import (
    ARCH_LABEL,
    CAPACITY_TYPE_LABEL,
    INSTANCE_TYPE_LABEL,
    OS_LABEL,
    ZONE_LABEL,
)
from shared.api.quantity import format_quantity
from shared.api.scenario import DEFAULT_INSTANCE_TYPES, DEFAULT_ZONES

SIM_DOMAIN = "sim.nodewright.dev"
FAMILY_LABEL = f"{SIM_DOMAIN}/instance-family"
CATEGORY_LABEL = f"{SIM_DOMAIN}/instance-category"
GENERATION_LABEL = f"{SIM_DOMAIN}/instance-generation"
SIZE_LABEL = f"{SIM_DOMAIN}/instance-size"
CPU_LABEL = f"{SIM_DOMAIN}/instance-cpu"
MEMORY_LABEL = f"{SIM_DOMAIN}/instance-memory"
GPU_COUNT_LABEL = f"{SIM_DOMAIN}/instance-gpu-count"
GPU_RESOURCE = "nvidia.com/gpu"

ON_DEMAND, SPOT = "on-demand", "spot"

_SIZES = {
    1: "medium",
    2: "large",
    4: "xlarge",
    8: "2xlarge",
    12: "3xlarge",
    16: "4xlarge",
    24: "6xlarge",
    32: "8xlarge",
    48: "12xlarge",
    64: "16xlarge",
    96: "24xlarge",
    128: "32xlarge",
    192: "48xlarge",
}
_GPU_SIZES = {4: 1, 8: 1, 16: 1, 32: 2, 48: 4, 64: 4, 96: 8, 192: 8}  # vCPU -> GPUs
_GIB_PER_CPU = {"c": 2, "m": 4, "r": 8, "g": 4}
_PRICE_PER_CPU = {"c": 0.0425, "m": 0.048, "r": 0.063, "g": 0.06}  # USD per vCPU-hour, on demand
_PRICE_PER_GPU = 0.50
_FIRST_GENERATION = 5
_MIB = 2**20


@dataclass(frozen=True, slots=True)
class Offering:
    zone: str
    capacity_type: str
    price: float  # USD per hour


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    family: str
    category: str
    generation: int
    arch: str
    cpu: int
    memory_mib: int
    gpus: int
    capacity: Mapping[str, Decimal]
    allocatable: Mapping[str, Decimal]
    offerings: tuple[Offering, ...]
    labels: Mapping[str, str] = field(default_factory=dict)

    def capacity_strings(self) -> dict[str, str]:
        return _strings(self.capacity)

    def allocatable_strings(self) -> dict[str, str]:
        return _strings(self.allocatable)

    def offering(self, zone: str, capacity_type: str) -> Offering | None:
        return next((o for o in self.offerings if o.zone == zone and o.capacity_type == capacity_type), None)


def _strings(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: format_quantity(v, binary=k in ("memory", "ephemeral-storage")) for k, v in values.items()}


def generate_catalog(
    seed: int, count: int = DEFAULT_INSTANCE_TYPES, zones: Sequence[str] = DEFAULT_ZONES
) -> list[InstanceType]:
    """`count` instance types, the same ones for the same seed, count and zones."""
    if count < 1:
        raise ValueError("a catalog needs at least one instance type")
    if not zones:
        raise ValueError("a catalog needs at least one zone")
    out: list[InstanceType] = []
    generation = _FIRST_GENERATION
    while len(out) < count:
        for cpu in _SIZES:
            for category in ("c", "m", "r", "g"):
                if category == "g" and cpu not in _GPU_SIZES:
                    continue
                for arch in ("amd64",) if category == "g" else ("amd64", "arm64"):
                    out.append(_instance_type(seed, category, generation, arch, cpu, zones))
                    if len(out) == count:
                        return out
        generation += 1
    return out


def _instance_type(
    seed: int, category: str, generation: int, arch: str, cpu: int, zones: Sequence[str]
) -> InstanceType:
    family = f"{category}{generation}{'g' if arch == 'arm64' else ''}"
    name = f"{family}.{_SIZES[cpu]}"
    memory_mib = cpu * _GIB_PER_CPU[category] * 1024
    gpus = _GPU_SIZES[cpu] if category == "g" else 0
    pods = 110 if cpu < 32 else 250
    capacity = {
        "cpu": Decimal(cpu),
        "memory": Decimal(memory_mib * _MIB),
        "ephemeral-storage": Decimal(20 * 1024 * _MIB),
        "pods": Decimal(pods),
    }
    if gpus:
        capacity[GPU_RESOURCE] = Decimal(gpus)
    allocatable = dict(capacity)
    allocatable["cpu"] = Decimal(cpu * 1000 - _reserved_millicores(cpu)) / 1000
    allocatable["memory"] = Decimal((memory_mib - 11 * pods - 255 - 100) * _MIB)
    on_demand = _on_demand_price(seed, name, category, generation, arch, cpu, gpus)
    offerings = []
    for zone in zones:
        discount = random.Random(f"{seed}:{name}:{zone}:spot").uniform(0.30, 0.70)
        offerings.append(Offering(zone, ON_DEMAND, on_demand))
        offerings.append(Offering(zone, SPOT, round(on_demand * (1 - discount), 5)))
    labels = {
        INSTANCE_TYPE_LABEL: name,
        ARCH_LABEL: arch,
        OS_LABEL: "linux",
        FAMILY_LABEL: family,
        CATEGORY_LABEL: category,
        GENERATION_LABEL: str(generation),
        SIZE_LABEL: _SIZES[cpu],
        CPU_LABEL: str(cpu),
        MEMORY_LABEL: str(memory_mib),
        GPU_COUNT_LABEL: str(gpus),
    }
    return InstanceType(
        name, family, category, generation, arch, cpu, memory_mib, gpus, capacity, allocatable, tuple(offerings), labels
    )


def _reserved_millicores(cpu: int) -> int:
    """6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest."""
    reserved = 60.0
    if cpu > 1:
        reserved += 10
    if cpu > 2:
        reserved += 5 * min(cpu - 2, 2)
    if cpu > 4:
        reserved += 2.5 * (cpu - 4)
    return int(reserved)


def _on_demand_price(seed: int, name: str, category: str, generation: int, arch: str, cpu: int, gpus: int) -> float:
    price = cpu * _PRICE_PER_CPU[category] + gpus * _PRICE_PER_GPU
    price *= 0.8 if arch == "arm64" else 1.0
    price *= 1 - 0.02 * (generation - _FIRST_GENERATION)  # newer generations cost a little less
    price *= random.Random(f"{seed}:{name}:on-demand").uniform(0.97, 1.03)
    return round(price, 5)


def offering_labels(instance_type: InstanceType, offering: Offering) -> dict[str, str]:
    """The labels a node of this type and offering carries."""
    return {**instance_type.labels, ZONE_LABEL: offering.zone, CAPACITY_TYPE_LABEL: offering.capacity_type}
