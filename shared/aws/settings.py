"""What shapes an instance type's capacity and overhead besides EC2's figures.

The EC2NodeClass fields upstream reads for it (`amiFamily`, `kubelet`, `blockDeviceMappings`,
`instanceStorePolicy`, under their upstream names) and the controller's options
(`--vm-memory-overhead-percent`, `--reserved-enis`). The kubelet is the API's model, checked by
the API's rules (`shared.api.nodeclass_validation.kubelet_errors`), so the arithmetic never
meets a bad value and the rules are written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator

from shared.api.ec2nodeclass import EC2NodeClass, KubeletConfiguration
from shared.api.nodeclass_validation import kubelet_errors
from shared.api.quantity import Quantity

AMI_FAMILIES = ("AL2023", "AL2", "Bottlerocket", "Custom")
ALIAS_FAMILIES = {"al2023": "AL2023", "al2": "AL2", "bottlerocket": "Bottlerocket"}
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


def ami_family(nodeclass: EC2NodeClass) -> str:
    """The class's AMI family: its `amiFamily`, else its alias's (`al2023@latest`: AL2023), else
    AL2023. One rule for the capacity model and the bootstrap user data."""
    spec = nodeclass.spec
    if spec.ami_family is not None:
        return spec.ami_family.value
    if spec.alias is not None:
        family = ALIAS_FAMILIES.get(spec.alias.partition("@")[0].lower())
        if family is not None:
            return family
    return "AL2023"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _no_empty() -> KubeletConfiguration:
    return KubeletConfiguration()


class BlockDevice(_Spec):
    volumeSize: Quantity | None = None


class BlockDeviceMapping(_Spec):
    deviceName: str | None = None
    rootVolume: bool = False
    ebs: BlockDevice | None = None


class NodeClassSettings(_Spec):
    """What the catalog reads of an EC2NodeClass and of the controller's options."""

    amiFamily: Literal["AL2023", "AL2", "Bottlerocket", "Custom"] = "AL2023"
    kubelet: KubeletConfiguration = Field(default_factory=_no_empty)
    blockDeviceMappings: list[BlockDeviceMapping] = Field(default_factory=list)
    instanceStorePolicy: Literal["RAID0"] | None = None
    vmMemoryOverheadPercent: float = Field(default=0.075, ge=0, lt=1)
    reservedENIs: NonNegativeInt = 0

    @field_validator("kubelet")
    @classmethod
    def _kubelet_rules(cls, kubelet: KubeletConfiguration) -> KubeletConfiguration:
        """The CRD's kubelet rules, the API's own (`kubelet_errors`): one place checks them."""
        errors = [str(e) for e in kubelet_errors(kubelet)]
        if errors:
            raise ValueError("; ".join(errors))
        return kubelet

    @classmethod
    def from_nodeclass(
        cls, nodeclass: EC2NodeClass, *, vm_memory_overhead_percent: float = 0.075, reserved_enis: int = 0
    ) -> NodeClassSettings:
        """What the catalog reads of an admitted EC2NodeClass: its amiFamily (or its alias's),
        kubelet, block devices and instance store policy, with the controller's options."""
        spec = nodeclass.spec
        family = ami_family(nodeclass)
        if family not in FAMILY_FLAGS:
            raise ValueError(f"spec.amiFamily: {family} has no capacity model here (one of {list(FAMILY_FLAGS)})")
        mappings = [
            BlockDeviceMapping(
                deviceName=m.device_name,
                rootVolume=bool(m.root_volume),
                ebs=BlockDevice(volumeSize=Quantity(m.ebs.volume_size))
                if m.ebs is not None and m.ebs.volume_size is not None
                else None,
            )
            for m in spec.block_device_mappings or []
        ]
        return cls(
            amiFamily=family,  # type: ignore[arg-type]
            kubelet=spec.kubelet or KubeletConfiguration(),
            blockDeviceMappings=mappings,
            instanceStorePolicy=spec.instance_store_policy.value if spec.instance_store_policy else None,
            vmMemoryOverheadPercent=vm_memory_overhead_percent,
            reservedENIs=reserved_enis,
        )

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
