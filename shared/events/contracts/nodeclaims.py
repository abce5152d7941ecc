"""The NodeClaim lifecycle: created (reserved), launched, registered, initialized, its readiness,
its deletion, drain and end."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.events.contracts.base import NodeClaimEvent, Resources

# --- The NodeClaim lifecycle ---------------------------------------------------------------------


class InstanceTypeOption(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    capacity: Resources
    price: float | None = None


class LimitCheck(BaseModel):
    """What the reservation saw when it granted a launch: usage before it, the limits, the headroom."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    usage: Resources
    limits: Resources
    headroom: Resources


class NodeClaimCreated(NodeClaimEvent):
    """Capacity reserved against the pool's limits: the largest capacity among `instance_types`,
    and one `nodes`. `limit_check` is filled in by the store inside the reserving transaction."""

    TYPE: ClassVar[str] = "NodeClaimCreated"
    instance_types: list[InstanceTypeOption] = Field(min_length=1)
    pods: list[str] = Field(default_factory=list, description="namespace/name of the pods it is for")
    requirements: list[dict[str, Any]] = Field(default_factory=list)
    requests: Resources = Field(
        default_factory=dict, description="what its pods ask for in all (upstream's spec.resources.requests)"
    )
    replacement_for: str | None = Field(default=None, description="the DisruptionDecided it replaces for")
    replacement_from: str | None = Field(
        default=None,
        description="a replacement in another pool than its candidates': their pool (the decision's); it is "
        "reserved against its own pool's limits exactly as a launch is",
    )
    limit_check: LimitCheck | None = None
    min_values_relaxed: bool | None = Field(
        default=None,
        description="BestEffort lowered a minValues its types could not meet (absent from claims recorded before it)",
    )


class NodeClaimLaunched(NodeClaimEvent):
    """The cloud gave an instance; the reservation settles to this type's capacity."""

    TYPE: ClassVar[str] = "NodeClaimLaunched"
    instance_type: str
    capacity: Resources
    provider_id: str
    capacity_type: str | None = None
    zone: str | None = None
    allocatable: Resources = Field(default_factory=dict, description="what the node will offer pods")
    labels: dict[str, str] = Field(default_factory=dict, description="the labels the instance gives its node")
    image_id: str | None = Field(default=None, description="the AMI the instance runs (AWS), for drift")
    subnet_id: str | None = Field(default=None, description="the subnet it was launched in (AWS), for drift")
    security_group_ids: list[str] | None = Field(default=None, description="its security groups (AWS), for drift")


class NodeClaimLaunchFailed(NodeClaimEvent):
    """The launch failed (insufficient capacity, ...); the reservation is released."""

    TYPE: ClassVar[str] = "NodeClaimLaunchFailed"
    reason: str
    message: str = ""


class NodeClaimRegistered(NodeClaimEvent):
    TYPE: ClassVar[str] = "NodeClaimRegistered"
    node: str


class NodeClaimInitialized(NodeClaimEvent):
    TYPE: ClassVar[str] = "NodeClaimInitialized"


class NodeClaimNotReady(NodeClaimEvent):
    """The initialized node of the claim stopped being Ready: it consumes its pool's disruption
    budget until it is Ready again or ends, as upstream counts a NotReady node (docs/budgets.md, B21)."""

    TYPE: ClassVar[str] = "NodeClaimNotReady"
    node: str
    status: Literal["False", "Unknown"] = Field(default="False", description="the node's Ready condition")
    since: str | None = Field(
        default=None, description="the condition's lastTransitionTime (RFC 3339); node repair counts from it"
    )


class NodeClaimReady(NodeClaimEvent):
    """The node is Ready again after `NodeClaimNotReady`: it no longer consumes the budget."""

    TYPE: ClassVar[str] = "NodeClaimReady"
    node: str


class NodeClaimConditionChanged(NodeClaimEvent):
    """A condition of the claim's node other than Ready changed (a node monitoring agent's, such
    as `KernelReady`): node repair holds it against the cloud provider's repair policies. Unlike
    NotReady it takes nothing from the budget, as upstream counts only the Ready condition."""

    TYPE: ClassVar[str] = "NodeClaimConditionChanged"
    node: str
    condition: str = Field(description="the node condition's type, such as KernelReady")
    status: Literal["True", "False", "Unknown"]
    since: str | None = Field(default=None, description="the condition's lastTransitionTime (RFC 3339)")


class NodeClaimDeletionRequested(NodeClaimEvent):
    """Someone asked for the claim to go (`nodewright delete nodeclaim`, a scenario, a disruption
    whose replacements are ready): termination drains it gracefully and deletes its instance."""

    TYPE: ClassVar[str] = "NodeClaimDeletionRequested"
    reason: str = Field(default="Manual", description="Manual, or the disruption reason")
    decision_id: str | None = None


class NodeClaimDraining(NodeClaimEvent):
    """Its node is tainted `karpenter.sh/disrupted:NoSchedule` and its pods are being evicted."""

    TYPE: ClassVar[str] = "NodeClaimDraining"
    decision_id: str | None = None
    node: str | None = None
    termination_time: str | None = Field(
        default=None, description="RFC 3339: when every pod is deleted at the latest (terminationGracePeriod)"
    )


class NodeClaimTerminated(NodeClaimEvent):
    """The instance is gone; the claim no longer counts anywhere."""

    TYPE: ClassVar[str] = "NodeClaimTerminated"
    reason: str = ""


class InstanceInterrupted(NodeClaimEvent):
    """AWS warned, through the interruption queue, that the claim's instance is going (a spot
    interruption, a scheduled change, a stopping or terminating instance): its deletion follows
    with `kind` as the reason. Recorded once per queue message and claim."""

    TYPE: ClassVar[str] = "InstanceInterrupted"
    kind: str = Field(description="upstream's message kind: spot_interrupted, scheduled_change, instance_stopped...")
    instance_id: str
    message_id: str = Field(description="the EventBridge event's id (else the SQS message's)")
    reason: str = Field(description="the Kubernetes event's reason: SpotInterrupted, InstanceStopping...")
