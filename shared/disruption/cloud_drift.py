"""Drift from the cloud: a launched claim whose instance no longer matches what the cloud offers
or what its EC2NodeClass resolves to.

- `InstanceTypeNotFound` (kubernetes-sigs/karpenter `nodeclaim/disruption/drift.go`): its
  instance type is no longer in the catalog, or no offering of it has the claim's zone and
  capacity type, available or not (one without capacity or a spot price now still exists).
  Asked only an hour after the claim was created (upstream spares the cloud the question
  before), and never of an empty catalog (one not loaded says nothing).
- `AMIDrift`, `SecurityGroupDrift`, `SubnetDrift` (aws/karpenter-provider-aws
  `pkg/cloudprovider/drift.go`), in that order: the image it runs is not among its class's
  resolved AMIs; its security groups are not exactly its class's; its subnet is not among its
  class's. A class that resolved none of a kind, or a launch that did not record one (the sim's),
  says nothing about that kind: upstream errs there rather than drift.

Pure: the disruption world hands in the claim's launch facts, its class's last status and the
catalog.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.scheduling.nodeclasses import NodeClassState
from shared.scheduling.offerings import InstanceOption

INSTANCE_TYPE_NOT_FOUND = "InstanceTypeNotFound"
AMI_DRIFT = "AMIDrift"
SECURITY_GROUP_DRIFT = "SecurityGroupDrift"
SUBNET_DRIFT = "SubnetDrift"
CLOUD_REASONS = frozenset({AMI_DRIFT, SECURITY_GROUP_DRIFT, SUBNET_DRIFT})
"""The reasons that follow the class's status (not the pool's spec, nor the catalog)."""

INSTANCE_TYPE_CHECK_AFTER = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Launch:
    """What a claim launched as (its `NodeClaimLaunched`)."""

    created_at: datetime
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    image_id: str | None = None
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] | None = None


def instance_type_drift(launch: Launch, catalog: Sequence[InstanceOption], now: datetime) -> str | None:
    if not catalog or now - launch.created_at <= INSTANCE_TYPE_CHECK_AFTER:
        return None
    option = next((o for o in catalog if o.name == launch.instance_type), None)
    if option is None:
        return INSTANCE_TYPE_NOT_FOUND
    for offer in (*option.offers, *option.unavailable):  # one merely unavailable now still exists
        if launch.zone not in (None, offer.zone) or launch.capacity_type not in (None, offer.capacity_type):
            continue
        return None
    return INSTANCE_TYPE_NOT_FOUND


def nodeclass_drift(launch: Launch, nodeclass: NodeClassState | None) -> str | None:
    if nodeclass is None:
        return None
    if nodeclass.amis and launch.image_id and launch.image_id not in nodeclass.amis:
        return AMI_DRIFT
    groups = launch.security_group_ids
    if nodeclass.security_groups and groups is not None and set(groups) != set(nodeclass.security_groups):
        return SECURITY_GROUP_DRIFT
    if nodeclass.subnets and launch.subnet_id and launch.subnet_id not in nodeclass.subnets:
        return SUBNET_DRIFT
    return None


def cloud_drift(
    launch: Launch, nodeclass: NodeClassState | None, catalog: Sequence[InstanceOption], now: datetime
) -> str | None:
    """Why the launched claim drifted from the cloud, or None: the catalog's reason first, then
    the class's (upstream asks its core reasons before the provider's)."""
    return instance_type_drift(launch, catalog, now) or nodeclass_drift(launch, nodeclass)
