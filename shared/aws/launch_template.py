"""A launch's resolved configuration (AMI, security groups, instance profile, user data, block
devices, metadata options, tags), its launch template and the tags of the instance: pure.

As upstream (aws/karpenter-provider-aws `pkg/providers/launchtemplate/launchtemplate.go`,
`pkg/utils/utils.go` `GetTags`): a launch template per distinct configuration, named
`karpenter.k8s.aws/<hash of the configuration>`, so equal configurations share one and a change
makes a new one; the node class's own tags may not set the keys Karpenter owns.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.api.core import Requirement, Taint
from shared.api.ec2nodeclass import AMI, BlockDeviceMapping, EC2NodeClass
from shared.api.quantity import parse
from shared.aws.settings import ami_family
from shared.aws.userdata import ClusterBootstrap, UserDataError, user_data
from shared.scheduling.requirements import Requirements

GROUP = "karpenter.k8s.aws"
TEMPLATE_PREFIX = GROUP
NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NODECLASS_TAG = f"{GROUP}/ec2nodeclass"
EKS_CLUSTER_TAG = "eks:eks-cluster-name"
NAME_TAG = "Name"
RESTRICTED_TAGS = (NODEPOOL_TAG, EKS_CLUSTER_TAG, NODECLASS_TAG, NODECLAIM_TAG)
"""Keys a node class's `tags` may not set (upstream's `RestrictedTagPatterns`), with the
cluster's own `kubernetes.io/cluster/<name>`."""
GIB = 2**30


class NodeClassNotUsable(ValueError):
    """A node class that cannot launch: not ready, or tags it may not set."""


def cluster_tag(cluster: str) -> str:
    return f"kubernetes.io/cluster/{cluster}"


def check_tags(node_class: EC2NodeClass, cluster: str) -> None:
    restricted = sorted(
        k for k in (node_class.spec.tags or {}) if k in RESTRICTED_TAGS or k.startswith("kubernetes.io/cluster/")
    )
    if restricted:
        raise NodeClassNotUsable(
            f"EC2NodeClass {node_class.name}: spec.tags may not set {', '.join(map(repr, restricted))}"
            " (Karpenter sets those keys itself)"
        )


def cluster_tags(node_class: EC2NodeClass, cluster: str) -> dict[str, str]:
    """The node class's tags with the cluster's and the node class's (upstream's static tags)."""
    check_tags(node_class, cluster)
    return {
        **(node_class.spec.tags or {}),
        cluster_tag(cluster): "owned",
        EKS_CLUSTER_TAG: cluster,
        NODECLASS_TAG: node_class.name,
    }


def instance_tags(node_class: EC2NodeClass, cluster: str, nodepool: str, nodeclaim: str) -> dict[str, str]:
    """The tags of a claim's instance, its volumes and its fleet: the cluster's, its pool, its
    claim (which `list` and the idempotency check find it by) and `Name`, the claim's name until
    its node registers."""
    return {
        **cluster_tags(node_class, cluster),
        NODEPOOL_TAG: nodepool,
        NODECLAIM_TAG: nodeclaim,
        NAME_TAG: nodeclaim,
    }


def ami_for(labels: Mapping[str, str], amis: Iterable[AMI]) -> str | None:
    """The first AMI of the resolved list whose requirements the type's labels meet (the
    nodeclass controller lists them newest first), as upstream maps AMIs to instance types. A
    label the type lacks meets only DoesNotExist and NotIn, as upstream's types say DoesNotExist
    for it: a type without GPUs never takes the nvidia variant."""
    for ami in amis:
        wanted = Requirements.of(_requirement(r.key, r.operator, r.values) for r in ami.requirements)
        if wanted.labels_allowed(labels):
            return ami.id
    return None


def _requirement(key: str, operator: str, values: list[str] | None) -> Requirement:
    return Requirement.model_validate({"key": key, "operator": operator, "values": values})


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """What one launch template holds."""

    cluster: str
    node_class: str
    image_id: str
    security_groups: tuple[str, ...]
    instance_profile: str | None
    user_data: str | None
    block_devices: tuple[dict[str, Any], ...]
    metadata: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    associate_public_ip: bool | None = None
    """The class's `associatePublicIPAddress`; None: the subnet's own default."""

    def identity(self) -> str:
        """A digest of the configuration, security groups as a set (upstream's SlicesAsSets)."""
        shape = {
            "cluster": self.cluster,
            "nodeClass": self.node_class,
            "imageId": self.image_id,
            "securityGroups": sorted(self.security_groups),
            "instanceProfile": self.instance_profile,
            "userData": self.user_data,
            "blockDevices": list(self.block_devices),
            "metadata": self.metadata,
            "tags": self.tags,
        }
        if self.associate_public_ip is not None:  # absent when unset: earlier templates keep their names
            shape["associatePublicIPAddress"] = self.associate_public_ip
        text = json.dumps(shape, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def name(self) -> str:
        return f"{TEMPLATE_PREFIX}/{self.identity()}"

    def template_data(self) -> dict[str, Any]:
        """CreateLaunchTemplate's LaunchTemplateData. With `associatePublicIPAddress` set, the
        primary interface (device 0) carries it and the security groups, as upstream's; EC2
        refuses groups at the top level beside an interface's."""
        data: dict[str, Any] = {
            "ImageId": self.image_id,
            "MetadataOptions": self.metadata,
            "BlockDeviceMappings": list(self.block_devices),
            "TagSpecifications": [
                {
                    "ResourceType": "network-interface",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())],
                }
            ],
        }
        if self.associate_public_ip is None:
            data["SecurityGroupIds"] = sorted(self.security_groups)
        else:
            data["NetworkInterfaces"] = [
                {
                    "DeviceIndex": 0,
                    "AssociatePublicIpAddress": self.associate_public_ip,
                    "Groups": sorted(self.security_groups),
                }
            ]
        if self.instance_profile:
            data["IamInstanceProfile"] = {"Name": self.instance_profile}
        if self.user_data:
            data["UserData"] = base64.b64encode(self.user_data.encode()).decode()
        return data

    def template_tags(self) -> list[dict[str, str]]:
        """The template's own tags: the cluster's, so its templates can be found and cleaned up."""
        return [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())]


def launch_config(
    node_class: EC2NodeClass,
    cluster: str,
    image_id: str,
    bootstrap: ClusterBootstrap | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint | Mapping[str, Any]] = (),
) -> LaunchConfig:
    """The resolved configuration for one AMI of a Ready node class (its status filled), for a
    node with these labels and taints (the claim's, startup taints included): its user data is
    the class's AMI family's bootstrap (`shared.aws.userdata`) with the class's userData merged,
    so a template is per (AMI, labels and taints, kubelet), as upstream's are."""
    status = node_class.status
    if status is None or not status.security_groups:
        raise NodeClassNotUsable(f"EC2NodeClass {node_class.name}: status.securityGroups is empty (not resolved)")
    facts = bootstrap if bootstrap is not None else ClusterBootstrap(cluster)
    if facts.name != cluster:
        raise ValueError(f"bootstrap facts are for cluster {facts.name!r}, the launch for {cluster!r}")
    spec = node_class.spec
    try:
        data = user_data(
            ami_family(node_class),
            facts,
            kubelet=spec.kubelet,
            labels=labels or {},
            taints=[t if isinstance(t, Taint) else Taint.model_validate(t) for t in taints],
            custom=spec.user_data,
            instance_store_policy=spec.instance_store_policy.value if spec.instance_store_policy else None,
        )
    except UserDataError as exc:
        raise NodeClassNotUsable(f"EC2NodeClass {node_class.name}: {exc}") from None
    mappings = spec.block_device_mappings or [_default_root()]
    return LaunchConfig(
        cluster=cluster,
        node_class=node_class.name,
        image_id=image_id,
        security_groups=tuple(sorted(g.id for g in status.security_groups)),
        instance_profile=status.instance_profile,
        user_data=data,
        block_devices=tuple(block_device(m) for m in mappings),
        metadata={
            "HttpEndpoint": spec.metadata_options.http_endpoint.value,
            "HttpProtocolIpv6": spec.metadata_options.http_protocol_ipv6.value,
            "HttpPutResponseHopLimit": spec.metadata_options.http_put_response_hop_limit,
            "HttpTokens": spec.metadata_options.http_tokens.value,
        },
        tags=cluster_tags(node_class, cluster),
        associate_public_ip=spec.associate_public_ip_address,
    )


def _default_root() -> BlockDeviceMapping:
    """Upstream's default root volume for the EKS-optimised Linux AMIs: 20Gi gp3, encrypted."""
    return BlockDeviceMapping.model_validate(
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True}}
    )


def block_device(mapping: BlockDeviceMapping) -> dict[str, Any]:
    """An EC2 block device mapping; the size in whole GiB, rounded up."""
    out: dict[str, Any] = {"DeviceName": mapping.device_name}
    ebs = mapping.ebs
    if ebs is not None:
        fields: dict[str, Any] = {
            "DeleteOnTermination": ebs.delete_on_termination,
            "Encrypted": ebs.encrypted,
            "Iops": ebs.iops,
            "KmsKeyId": ebs.kms_key_id,
            "SnapshotId": ebs.snapshot_id,
            "Throughput": ebs.throughput,
            "VolumeType": ebs.volume_type.value if ebs.volume_type else None,
            "VolumeSize": math.ceil(parse(ebs.volume_size) / GIB) if ebs.volume_size else None,
        }
        out["Ebs"] = {k: v for k, v in fields.items() if v is not None}
    return out
