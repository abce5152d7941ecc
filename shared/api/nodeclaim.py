"""The karpenter.sh/v1 NodeClaim: one requested node, from request to termination."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from shared.api.base import APIModel
from shared.api.core import Condition, ConditionStatus, NodeClassReference, ObjectMeta, Requirement, Taint
from shared.api.duration import DURATION_PATTERN, NILLABLE_DURATION_PATTERN, parse_nillable
from shared.api.quantity import Quantity


class NodeClaimConditionType(StrEnum):
    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    INITIALIZED = "Initialized"
    CONSOLIDATABLE = "Consolidatable"
    DRIFTED = "Drifted"
    DRAINED = "Drained"
    VOLUMES_DETACHED = "VolumesDetached"
    INSTANCE_TERMINATING = "InstanceTerminating"
    CONSISTENT_STATE_FOUND = "ConsistentStateFound"
    DISRUPTION_REASON = "DisruptionReason"


class ResourceRequirements(APIModel):
    requests: dict[str, Quantity] | None = None


class NodeClaimSpec(APIModel):
    taints: list[Taint] | None = None
    startup_taints: list[Taint] | None = None
    requirements: Annotated[list[Requirement], Field(max_length=100)]
    resources: ResourceRequirements | None = None
    node_class_ref: NodeClassReference
    termination_grace_period: Annotated[str, Field(pattern=DURATION_PATTERN)] | None = None
    expire_after: Annotated[str, Field(pattern=NILLABLE_DURATION_PATTERN)] = "720h"

    @property
    def expire_after_timedelta(self) -> timedelta | None:
        return parse_nillable(self.expire_after)


class NodeClaimStatus(APIModel):
    node_name: str | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    image_id: str | None = Field(default=None, alias="imageID")
    capacity: dict[str, Quantity] | None = None
    allocatable: dict[str, Quantity] | None = None
    conditions: list[Condition] | None = None
    last_pod_event_time: datetime | None = None

    def condition(self, kind: NodeClaimConditionType) -> Condition | None:
        return next((c for c in self.conditions or [] if c.type == kind), None)

    def is_true(self, kind: NodeClaimConditionType) -> bool:
        cond = self.condition(kind)
        return cond is not None and cond.status == ConditionStatus.TRUE


class NodeClaim(APIModel):
    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta
    spec: NodeClaimSpec
    status: NodeClaimStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def launched(self) -> bool:
        return bool(self.status and self.status.provider_id)
