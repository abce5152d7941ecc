"""What shapes an instance type's capacity and overhead besides EC2's figures.

The EC2NodeClass fields upstream reads for it (`amiFamily`, `kubelet`, `blockDeviceMappings`,
`instanceStorePolicy`, under their upstream names) and the controller's options
(`--vm-memory-overhead-percent`, `--reserved-enis`). Values are checked here, so the arithmetic
never meets a bad one: a wrong value fails naming its field and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator

from shared.api.quantity import Quantity, parse

AMI_FAMILIES = ("AL2023", "AL2", "Bottlerocket", "Custom")
RESERVED_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pid"})
EVICTION_SIGNALS = frozenset(
    {
        "memory.available",
        "nodefs.available",
        "nodefs.inodesFree",
        "imagefs.available",
        "imagefs.inodesFree",
        "pid.available",
    }
)
DEFAULT_VOLUME_SIZE = Quantity("20Gi")
"""Upstream's `DefaultEBS` volume size: the ephemeral storage a node has unless told otherwise."""


@dataclass(frozen=True, slots=True)
class FamilyFlags:
    """Upstream's per-AMI-family `FeatureFlags` that touch capacity and overhead."""

    uses_eni_limited_memory_overhead: bool
    pods_per_core_enabled: bool
    supports_eni_limited_pod_density: bool
    ephemeral_device: str


FAMILY_FLAGS = {
    "AL2023": FamilyFlags(True, True, True, "/dev/xvda"),
    "AL2": FamilyFlags(True, True, True, "/dev/xvda"),
    "Bottlerocket": FamilyFlags(False, False, True, "/dev/xvdb"),
    "Custom": FamilyFlags(True, True, True, "/dev/xvda"),
}


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _reserved(values: dict[str, Quantity]) -> dict[str, Quantity]:
    unknown = sorted(set(values) - RESERVED_RESOURCES)
    if unknown:
        raise ValueError(f"{unknown} not among the reservable resources {sorted(RESERVED_RESOURCES)}")
    negative = sorted(k for k, v in values.items() if v.value < 0)
    if negative:
        raise ValueError(f"{negative} must not be negative")
    return values


class KubeletConfiguration(_Spec):
    """`EC2NodeClass.spec.kubelet`: the fields that change capacity or what the kubelet keeps."""

    maxPods: NonNegativeInt | None = None
    podsPerCore: NonNegativeInt | None = None
    kubeReserved: dict[str, Quantity] = Field(default_factory=dict)
    systemReserved: dict[str, Quantity] = Field(default_factory=dict)
    evictionHard: dict[str, str] = Field(default_factory=dict)

    _check_kube = field_validator("kubeReserved")(_reserved)
    _check_system = field_validator("systemReserved")(_reserved)

    @field_validator("evictionHard")
    @classmethod
    def _signals(cls, values: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(values) - EVICTION_SIGNALS)
        if unknown:
            raise ValueError(f"{unknown} not among the eviction signals {sorted(EVICTION_SIGNALS)}")
        for key, value in values.items():
            if value.endswith("%"):
                try:
                    percent = Decimal(value[:-1])
                except ArithmeticError:
                    raise ValueError(f"{key}: {value!r} is not a percentage") from None
                if not 0 <= percent <= 100:
                    raise ValueError(f"{key}: {value!r} must lie between 0% and 100%")
            else:
                try:
                    parse(value)
                except ValueError:
                    raise ValueError(f"{key}: {value!r} is neither a quantity nor a percentage") from None
        return values


class BlockDevice(_Spec):
    volumeSize: Quantity | None = None


class BlockDeviceMapping(_Spec):
    deviceName: str | None = None
    rootVolume: bool = False
    ebs: BlockDevice | None = None


class NodeClassSettings(_Spec):
    """What the catalog reads of an EC2NodeClass and of the controller's options."""

    amiFamily: Literal["AL2023", "AL2", "Bottlerocket", "Custom"] = "AL2023"
    kubelet: KubeletConfiguration = KubeletConfiguration()
    blockDeviceMappings: list[BlockDeviceMapping] = Field(default_factory=list)
    instanceStorePolicy: Literal["RAID0"] | None = None
    vmMemoryOverheadPercent: float = Field(default=0.075, ge=0, lt=1)
    reservedENIs: NonNegativeInt = 0

    @property
    def flags(self) -> FamilyFlags:
        return FAMILY_FLAGS[self.amiFamily]

    def volume_size(self) -> Decimal:
        """The EBS volume that holds ephemeral storage, as upstream's `ephemeralStorage` picks it:
        the root volume's size, else (Custom) the last mapping's, else the mapping on the family's
        ephemeral device, else the 20Gi default."""
        mappings = self.blockDeviceMappings
        root = next((m for m in mappings if m.rootVolume), None)
        if root is not None and root.ebs is not None and root.ebs.volumeSize is not None:
            return root.ebs.volumeSize.value
        if mappings and self.amiFamily == "Custom":
            last = mappings[-1].ebs
            return (
                last.volumeSize.value if last is not None and last.volumeSize is not None else DEFAULT_VOLUME_SIZE.value
            )
        device = next((m for m in mappings if m.deviceName == self.flags.ephemeral_device), None)
        if device is not None and device.ebs is not None and device.ebs.volumeSize is not None:
            return device.ebs.volumeSize.value
        return DEFAULT_VOLUME_SIZE.value
