"""The karpenter.k8s.aws/v1 EC2NodeClass: how the AWS provider launches a NodePool's nodes
(subnets, security groups, AMIs, IAM role, launch-template settings, kubelet overrides).

Field for field as upstream's CRD (aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass.go`);
the schema's constraints (types, enums, patterns, bounds) live here, the CEL rules in
`shared.api.nodeclass_validation`. The wire names upstream spells with initialisms
(`associatePublicIPAddress`, `kmsKeyID`, `clusterDNS`) are aliased explicitly.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt

from shared.api.base import APIModel
from shared.api.bounds import MAX_INT32, Int64
from shared.api.core import Condition, ObjectMeta
from shared.api.quantity import Quantity

GROUP = "karpenter.k8s.aws"
API_VERSION = f"{GROUP}/v1"
KIND = "EC2NodeClass"
MAX_TERMS = 30
MAX_SELECTOR_TAGS = 20

NonNegativeInt32 = Annotated[StrictInt, Field(ge=0, le=MAX_INT32)]
Percent = Annotated[StrictInt, Field(ge=0, le=100)]
SelectorTags = Annotated[dict[str, str], Field(max_length=MAX_SELECTOR_TAGS)]
"""Tags a selector term matches (`*` matches any value); at most 20, none empty (a rule)."""

EVICTION_PATTERN = (
    r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$"
)
"""An eviction threshold: a percentage (`10%`) or a quantity (`100Mi`), as the kubelet reads it."""
GO_DURATION_PATTERN = r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$"
"""A Go `time.Duration` as `time.ParseDuration` reads it (`1m30s`, `500ms`)."""
VOLUME_SIZE_PATTERN = (
    r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}"
    r"|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
)
"""An EBS volume's size: at most 64 TB (59000Gi), in Gi, G, Ti or T."""


class AMIFamily(StrEnum):
    AL2 = "AL2"
    AL2023 = "AL2023"
    BOTTLEROCKET = "Bottlerocket"
    CUSTOM = "Custom"
    WINDOWS2019 = "Windows2019"
    WINDOWS2022 = "Windows2022"
    WINDOWS2025 = "Windows2025"


class InstanceMatchCriteria(StrEnum):
    OPEN = "open"
    TARGETED = "targeted"


class InstanceStorePolicy(StrEnum):
    RAID0 = "RAID0"


class EnabledDisabled(StrEnum):
    ENABLED = "enabled"
    DISABLED = "disabled"


class HTTPTokens(StrEnum):
    REQUIRED = "required"
    OPTIONAL = "optional"


class VolumeType(StrEnum):
    STANDARD = "standard"
    IO1 = "io1"
    IO2 = "io2"
    GP2 = "gp2"
    SC1 = "sc1"
    ST1 = "st1"
    GP3 = "gp3"


class InterfaceType(StrEnum):
    INTERFACE = "interface"
    EFA_ONLY = "efa-only"


class ReservationType(StrEnum):
    DEFAULT = "default"
    CAPACITY_BLOCK = "capacity-block"


class ReservationState(StrEnum):
    ACTIVE = "active"
    EXPIRING = "expiring"


# --- selector terms -------------------------------------------------------------------------------


class SubnetSelectorTerm(APIModel):
    tags: SelectorTags | None = None
    id: Annotated[str, Field(pattern=r"subnet-[0-9a-z]+")] | None = None


class SecurityGroupSelectorTerm(APIModel):
    tags: SelectorTags | None = None
    id: Annotated[str, Field(pattern=r"sg-[0-9a-z]+")] | None = None
    name: str | None = None


class CapacityReservationSelectorTerm(APIModel):
    tags: SelectorTags | None = None
    id: Annotated[str, Field(pattern=r"^cr-[0-9a-z]+$")] | None = None
    owner_id: Annotated[str, Field(pattern=r"^[0-9]{12}$")] | None = Field(default=None, alias="ownerID")
    instance_match_criteria: InstanceMatchCriteria | None = None


class AMISelectorTerm(APIModel):
    alias: Annotated[str, Field(max_length=30)] | None = None
    tags: SelectorTags | None = None
    id: Annotated[str, Field(pattern=r"ami-[0-9a-z]+")] | None = None
    name: str | None = None
    owner: str | None = None
    ssm_parameter: str | None = None


class PlacementGroupSelector(APIModel):
    name: Annotated[str, Field(min_length=1)] | None = None
    id: Annotated[str, Field(pattern=r"^pg-[0-9a-z]+$")] | None = None


# --- launch settings ------------------------------------------------------------------------------


class KubeletConfiguration(APIModel):
    """The kubelet fields nodewright reads and checks; upstream passes any other
    KubeletConfiguration field through to the node's user data, so they are kept, unchecked."""

    model_config = ConfigDict(extra="allow")

    cluster_dns: list[str] | None = Field(default=None, alias="clusterDNS")
    max_pods: NonNegativeInt32 | None = None
    pods_per_core: NonNegativeInt32 | None = None
    system_reserved: dict[str, Quantity] | None = None
    kube_reserved: dict[str, Quantity] | None = None
    eviction_hard: dict[str, Annotated[str, Field(pattern=EVICTION_PATTERN)]] | None = None
    eviction_soft: dict[str, Annotated[str, Field(pattern=EVICTION_PATTERN)]] | None = None
    eviction_soft_grace_period: dict[str, Annotated[str, Field(pattern=GO_DURATION_PATTERN)]] | None = None
    eviction_max_pod_grace_period: Annotated[StrictInt, Field(ge=-MAX_INT32 - 1, le=MAX_INT32)] | None = None
    image_gc_high_threshold_percent: Percent | None = Field(default=None, alias="imageGCHighThresholdPercent")
    image_gc_low_threshold_percent: Percent | None = Field(default=None, alias="imageGCLowThresholdPercent")
    cpu_cfs_quota: StrictBool | None = Field(default=None, alias="cpuCFSQuota")


class MetadataOptions(APIModel):
    """The instance metadata service (IMDS) options of the launch template; upstream's defaults
    require IMDSv2 tokens and one hop, so pods cannot reach the node's credentials."""

    http_endpoint: EnabledDisabled = EnabledDisabled.ENABLED
    http_protocol_ipv6: EnabledDisabled = Field(default=EnabledDisabled.DISABLED, alias="httpProtocolIPv6")
    http_put_response_hop_limit: Annotated[Int64, Field(ge=1, le=64)] = 1
    http_tokens: HTTPTokens = HTTPTokens.REQUIRED


class BlockDevice(APIModel):
    delete_on_termination: StrictBool | None = None
    encrypted: StrictBool | None = None
    iops: Int64 | None = None
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    throughput: Int64 | None = None
    volume_initialization_rate: Annotated[StrictInt, Field(ge=100, le=300)] | None = None
    volume_size: Annotated[str, Field(pattern=VOLUME_SIZE_PATTERN)] | None = None
    volume_type: VolumeType | None = None


class BlockDeviceMapping(APIModel):
    device_name: str | None = None
    ebs: BlockDevice | None = None
    root_volume: StrictBool | None = None


class ConnectionTracking(APIModel):
    tcp_established_timeout: Annotated[StrictInt, Field(ge=60, le=432000)] | None = None
    udp_stream_timeout: Annotated[StrictInt, Field(ge=60, le=180)] | None = None
    udp_timeout: Annotated[StrictInt, Field(ge=30, le=60)] | None = None


class CPUOptions(APIModel):
    nested_virtualization: EnabledDisabled | None = None


class NetworkInterface(APIModel):
    network_card_index: NonNegativeInt32
    device_index: NonNegativeInt32
    interface_type: InterfaceType


def _default_metadata_options() -> MetadataOptions:
    return MetadataOptions()


class EC2NodeClassSpec(APIModel):
    subnet_selector_terms: Annotated[list[SubnetSelectorTerm], Field(max_length=MAX_TERMS)]
    security_group_selector_terms: Annotated[list[SecurityGroupSelectorTerm], Field(max_length=MAX_TERMS)]
    capacity_reservation_selector_terms: (
        Annotated[list[CapacityReservationSelectorTerm], Field(max_length=MAX_TERMS)] | None
    ) = None
    ami_selector_terms: Annotated[list[AMISelectorTerm], Field(min_length=1, max_length=MAX_TERMS)]
    ami_family: AMIFamily | None = None
    placement_group_selector: PlacementGroupSelector | None = None
    associate_public_ip_address: StrictBool | None = Field(default=None, alias="associatePublicIPAddress")
    ip_prefix_count: NonNegativeInt32 | None = None
    user_data: str | None = None
    role: str | None = None
    instance_profile: str | None = None
    tags: dict[str, str] | None = None
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: Annotated[list[BlockDeviceMapping], Field(max_length=50)] | None = None
    network_interfaces: Annotated[list[NetworkInterface], Field(max_length=150)] | None = None
    instance_store_policy: InstanceStorePolicy | None = None
    detailed_monitoring: StrictBool | None = None
    metadata_options: MetadataOptions = Field(default_factory=_default_metadata_options)
    context: str | None = None
    connection_tracking: ConnectionTracking | None = None
    cpu_options: CPUOptions | None = None

    @property
    def alias(self) -> str | None:
        """The AMI alias (`al2023@latest`), when the AMIs are chosen by one."""
        return next((t.alias for t in self.ami_selector_terms if t.alias is not None), None)


# --- status ---------------------------------------------------------------------------------------


class Subnet(APIModel):
    id: str
    zone: str
    zone_id: str | None = Field(default=None, alias="zoneID")


class SecurityGroup(APIModel):
    id: str
    name: str | None = None


class AMIRequirement(APIModel):
    """A requirement an AMI places on instance types (its architecture, say): upstream stores a
    plain node selector requirement here, unconstrained."""

    key: str
    operator: str
    values: list[str] | None = None


class AMI(APIModel):
    id: str
    name: str | None = None
    requirements: list[AMIRequirement]
    deprecated: StrictBool | None = None


class CapacityReservation(APIModel):
    availability_zone: str
    id: Annotated[str, Field(pattern=r"^cr-[0-9a-z]+$")]
    instance_match_criteria: InstanceMatchCriteria
    instance_type: str
    owner_id: Annotated[str, Field(pattern=r"^[0-9]{12}$")] = Field(alias="ownerID")
    end_time: datetime | None = None
    interruptible: StrictBool | None = None
    reservation_type: ReservationType = ReservationType.DEFAULT
    state: ReservationState = ReservationState.ACTIVE


class EC2NodeClassStatus(APIModel):
    subnets: list[Subnet] | None = None
    security_groups: list[SecurityGroup] | None = None
    capacity_reservations: list[CapacityReservation] | None = None
    amis: list[AMI] | None = None
    instance_profile: str | None = None
    conditions: list[Condition] | None = None


class EC2NodeClass(APIModel):
    api_version: Literal["karpenter.k8s.aws/v1"] = API_VERSION
    kind: Literal["EC2NodeClass"] = KIND
    metadata: ObjectMeta
    spec: EC2NodeClassSpec
    status: EC2NodeClassStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""
