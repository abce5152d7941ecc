"""Every event nodewright records, one pydantic model each, with a type name and a schema version.

Events are facts in the past tense. The stream an event belongs to follows from its payload
(`stream_id`), and so does its bus subject (`<deployment>.events.<stream kind>.<Type>`). Payloads
are snake_case JSON; quantities are Kubernetes quantity strings. A decision event carries the
inputs it was taken on (pods, headroom, budgets), so `nodewright audit --explain` can tell why.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.api.nodepool import DisruptionReason
from shared.api.quantity import Quantity

Resources = dict[str, Quantity]

FORCEFUL_REASONS = frozenset({"Expired", "OverLimit"})
"""Reasons that pass budgets (upstream's forceful expiration; the removal above a lowered `limits.nodes`)."""
DISRUPTION_REASONS = frozenset(r.value for r in DisruptionReason) | FORCEFUL_REASONS


def stream_name(kind: str, key: str) -> str:
    """Every stream id is `<kind>-<key>`: `nodeclaim-web-x1`, `pod-default/web-0`."""
    return f"{kind}-{key}"


class Event(BaseModel):
    """The base of every contract; `TYPE` and `SCHEMA_VERSION` name it on the wire."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    TYPE: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int] = 1
    STREAM_KIND: ClassVar[str]

    @property
    def stream_id(self) -> str:
        return stream_name(self.STREAM_KIND, self._stream_key())

    @classmethod
    def stream_of(cls, key: str) -> str:
        """The stream of the object `key` names, for a reader that has no event in hand."""
        return stream_name(cls.STREAM_KIND, key)

    def _stream_key(self) -> str:
        raise TypeError(f"{type(self).__name__} must say which stream it belongs to")

    def payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class NodePoolEvent(Event):
    STREAM_KIND: ClassVar[str] = "nodepool"
    nodepool: str

    def _stream_key(self) -> str:
        return self.nodepool


class NodeClaimEvent(Event):
    STREAM_KIND: ClassVar[str] = "nodeclaim"
    nodeclaim: str
    nodepool: str

    def _stream_key(self) -> str:
        return self.nodeclaim


class NamespacedEvent(Event):
    """About one namespaced object: its stream key is `namespace/name`, as kubectl names it."""

    namespace: str
    name: str

    def _stream_key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        """`namespace/name`, as kubectl and the cluster port name the object."""
        return self._stream_key()


class PodEvent(NamespacedEvent):
    STREAM_KIND: ClassVar[str] = "pod"


class NodeEvent(Event):
    STREAM_KIND: ClassVar[str] = "node"
    node: str

    def _stream_key(self) -> str:
        return self.node


class DisruptionEvent(Event):
    STREAM_KIND: ClassVar[str] = "disruption"
    decision_id: str
    nodepool: str
    reason: str = Field(description="a budget reason (Underutilized, Empty, Drifted), Expired or OverLimit")

    def _stream_key(self) -> str:
        return self.decision_id

    @field_validator("reason")
    @classmethod
    def _known_reason(cls, value: str) -> str:
        if value not in DISRUPTION_REASONS:
            raise ValueError(f"Unsupported value: {value!r}: supported values: {', '.join(sorted(DISRUPTION_REASONS))}")
        return value


# --- NodePools (watcher) -------------------------------------------------------------------------


class NodePoolApplied(NodePoolEvent):
    """A valid NodePool spec is in force from this event on; limits and budgets come from it."""

    TYPE: ClassVar[str] = "NodePoolApplied"
    nodepool_object: dict[str, Any] = Field(description="the NodePool as the API server returns it")
    drift_hash: str | None = Field(
        default=None, description="karpenter.sh/nodepool-hash of the template (`shared.policy.drift`)"
    )
    drift_hash_version: str | None = Field(default=None, description="the hash's own version: compare only equals")
    resource_version: int | None = Field(default=None, description="the cluster's version of the object applied")


class NodePoolRejected(NodePoolEvent):
    """The pool's ValidationSucceeded condition is false: it is never scheduled to."""

    TYPE: ClassVar[str] = "NodePoolRejected"
    errors: list[dict[str, str]] = Field(description="[{path, message}] as `nodewright validate` reports them")
    nodepool_object: dict[str, Any] | None = Field(default=None, description="the object that was refused")
    resource_version: int | None = None


class NodePoolDeleted(NodePoolEvent):
    TYPE: ClassVar[str] = "NodePoolDeleted"


class DisruptionBlocked(NodePoolEvent):
    """Upstream's `DisruptionBlocked` Kubernetes event on the NodePool, with its message."""

    TYPE: ClassVar[str] = "DisruptionBlocked"
    reason: str
    cause: str = Field(description="Budget, NodeHardLimit, DoNotDisrupt, PodDisruptionBudget, Nominated, ...")
    message: str
    nodeclaim: str | None = Field(default=None, description="set when a candidate, not the pool, is blocked")
    node: str | None = None


# --- Pods and nodes (watcher) --------------------------------------------------------------------


class PodPending(PodEvent):
    """The cluster's scheduler could not place the pod: what it asks for, and where it may run."""

    TYPE: ClassVar[str] = "PodPending"
    uid: str | None = None
    requests: Resources = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: dict[str, Any] | None = Field(default=None, description="the pod spec's affinity, API shape")
    topology_spread_constraints: list[dict[str, Any]] = Field(default_factory=list)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_kind: str | None = None
    owner_name: str | None = None
    priority_class_name: str | None = None
    priority: int = 0
    termination_grace_period_seconds: int | None = None
    message: str | None = Field(default=None, description="the scheduler's Unschedulable message")


class PodBound(PodEvent):
    """The pod runs on `node`. Its affinity travels along because required pod anti-affinity is
    symmetric: a running pod's terms keep the pods they select off its topology domain."""

    TYPE: ClassVar[str] = "PodBound"
    node: str
    uid: str | None = None
    requests: Resources = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    owner_kind: str | None = Field(
        default=None, description="a DaemonSet's pod counts against the overhead kept for its DaemonSet"
    )
    affinity: dict[str, Any] | None = Field(
        default=None, description="the pod spec's affinity, API shape (absent from facts recorded before it)"
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="do-not-disrupt, the deletion cost: a pod bound at once was never PodPending",
    )
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    priority_class_name: str | None = None
    priority: int = 0
    termination_grace_period_seconds: int | None = None


class PodDeleted(PodEvent):
    TYPE: ClassVar[str] = "PodDeleted"
    uid: str | None = None
    node: str | None = None


class PodEvicted(PodEvent):
    """A pod drained off a terminating node: evicted through the Eviction API (PDBs respected), or
    `forced` at the claim's termination grace period (PDBs and do-not-disrupt bypassed)."""

    TYPE: ClassVar[str] = "PodEvicted"
    node: str
    nodeclaim: str | None = None
    reason: str = Field(default="", description="why the node goes: the disruption reason, or Manual")
    tier: int | None = Field(default=None, description="the drain tier it was evicted in (0 first)")
    attempt: int = Field(default=1, description="evictions asked for this pod, this one included")
    forced: bool = False
    grace_seconds: int | None = Field(default=None, description="the grace period a forced deletion granted")


class PodEvictionWaiting(PodEvent):
    """A drain could not evict the pod yet: a PodDisruptionBudget refused (429), the pod has more
    than one, or it is `karpenter.sh/do-not-disrupt`. Recorded once per pod, cause and drain."""

    TYPE: ClassVar[str] = "PodEvictionWaiting"
    node: str
    nodeclaim: str
    cause: str = Field(description="PodDisruptionBudget, MultiplePodDisruptionBudgets or DoNotDisrupt")
    message: str = ""


class NodeRegistered(NodeEvent):
    """A node joined the cluster (not Ready yet): what it offers and the taints it carries."""

    TYPE: ClassVar[str] = "NodeRegistered"
    provider_id: str
    nodeclaim: str | None = None
    nodepool: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, Any]] = Field(default_factory=list)
    capacity: Resources = Field(default_factory=dict)
    allocatable: Resources = Field(default_factory=dict)


class NodeInitialized(NodeEvent):
    """The node is Ready and its startup taints are gone: it can take pods."""

    TYPE: ClassVar[str] = "NodeInitialized"
    nodeclaim: str | None = None
    nodepool: str | None = None


class NodeDeleted(NodeEvent):
    TYPE: ClassVar[str] = "NodeDeleted"
    nodeclaim: str | None = None


class PodDisruptionBudgetEvent(NamespacedEvent):
    STREAM_KIND: ClassVar[str] = "pdb"


class PodDisruptionBudgetApplied(PodDisruptionBudgetEvent):
    TYPE: ClassVar[str] = "PodDisruptionBudgetApplied"
    selector: dict[str, Any] = Field(default_factory=dict)
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    resource_version: int | None = None


class PodDisruptionBudgetDeleted(PodDisruptionBudgetEvent):
    TYPE: ClassVar[str] = "PodDisruptionBudgetDeleted"


class NodeClassStatusChanged(Event):
    """An EC2NodeClass's readiness (or what it resolved to) changed: the NodePools on it launch
    only while it is ready, and claims launched on what it no longer resolves to are drifted."""

    TYPE: ClassVar[str] = "NodeClassStatusChanged"
    STREAM_KIND: ClassVar[str] = "nodeclass"
    nodeclass: str
    ready: bool
    reason: str = Field(description="Ready, or the first failing condition's reason (SubnetsNotFound...)")
    message: str = ""
    subnets: list[str] = Field(default_factory=list, description="status.subnets ids, in order")
    security_groups: list[str] = Field(default_factory=list, description="status.securityGroups ids")
    amis: list[str] = Field(default_factory=list, description="status.amis ids")

    def _stream_key(self) -> str:
        return self.nodeclass


class DaemonSetEvent(NamespacedEvent):
    STREAM_KIND: ClassVar[str] = "daemonset"


class DaemonSetApplied(DaemonSetEvent):
    """A DaemonSet's pod template, as it stands from this event on: Karpenter counts the requests
    of its pod on every node it would run on (where the selector, affinity and tolerations let it)
    when sizing a new node."""

    TYPE: ClassVar[str] = "DaemonSetApplied"
    requests: Resources = Field(default_factory=dict, description="the pod template's requests")
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: dict[str, Any] | None = Field(default=None, description="the pod template's affinity, API shape")
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    resource_version: int | None = None


class DaemonSetDeleted(DaemonSetEvent):
    TYPE: ClassVar[str] = "DaemonSetDeleted"


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
    limit_check: LimitCheck | None = None


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


class NodeClaimReady(NodeClaimEvent):
    """The node is Ready again after `NodeClaimNotReady`: it no longer consumes the budget."""

    TYPE: ClassVar[str] = "NodeClaimReady"
    node: str


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


# --- Disruption ----------------------------------------------------------------------------------


class BudgetCheck(BaseModel):
    """What the reservation saw when it granted a disruption, for replay and `--explain`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    nodes: int
    disrupting: int
    allowed: int | None
    remaining: int | None
    node_limit: int | None
    pool_nodes: int
    active_budgets: list[int] = Field(default_factory=list, description="indexes of budgets active then")


class DisruptionDecided(DisruptionEvent):
    """Candidates are marked for `reason`; `replacements` are created in the same transaction.
    `budget_check` is filled in by the store inside the reserving transaction."""

    TYPE: ClassVar[str] = "DisruptionDecided"
    candidates: list[str] = Field(min_length=1)
    replacements: list[str] = Field(default_factory=list, description="names the replacements will be created with")
    forceful: bool = False
    command: str = Field(default="", description="upstream's `<Reason>/<id>: <decision>: ...` text")
    decision: str = Field(default="delete", description="delete or replace")
    consolidation_type: str = Field(default="", description="empty, single, multi, or empty for other methods")
    savings: float | None = Field(default=None, description="estimated hourly savings of a consolidation")
    observed_position: int = Field(
        default=0, description="the log position the decision saw: a candidate touched after it is stale"
    )
    budget_check: BudgetCheck | None = None


class DisruptionValidated(DisruptionEvent):
    """The command passed its re-check: `kept` go ahead, `dropped` (candidate -> why) no longer
    count as disrupting. A replace command's replacements are created in the same append."""

    TYPE: ClassVar[str] = "DisruptionValidated"
    kept: list[str] = Field(min_length=1)
    dropped: dict[str, str] = Field(default_factory=dict)


class DisruptionCancelled(DisruptionEvent):
    TYPE: ClassVar[str] = "DisruptionCancelled"
    candidates: list[str]
    why: str = ""


class DisruptionCompleted(DisruptionEvent):
    """The candidates are handed to termination (their NodeClaimDeletionRequested are in the same
    append); they count as disrupting until they are terminated."""

    TYPE: ClassVar[str] = "DisruptionCompleted"


CONTRACTS: tuple[type[Event], ...] = (
    NodePoolApplied,
    NodePoolRejected,
    NodePoolDeleted,
    DisruptionBlocked,
    PodPending,
    PodBound,
    PodDeleted,
    PodEvicted,
    PodEvictionWaiting,
    NodeRegistered,
    NodeInitialized,
    NodeDeleted,
    PodDisruptionBudgetApplied,
    PodDisruptionBudgetDeleted,
    DaemonSetApplied,
    DaemonSetDeleted,
    NodeClassStatusChanged,
    NodeClaimCreated,
    NodeClaimLaunched,
    NodeClaimLaunchFailed,
    NodeClaimRegistered,
    NodeClaimInitialized,
    NodeClaimNotReady,
    NodeClaimReady,
    NodeClaimDeletionRequested,
    NodeClaimDraining,
    NodeClaimTerminated,
    DisruptionDecided,
    DisruptionValidated,
    DisruptionCancelled,
    DisruptionCompleted,
    InstanceInterrupted,
)
