"""The cluster's facts as the watcher records them: NodePools, pods, nodes, budgets, DaemonSets
and node classes."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from shared.events.contracts.base import Event, NamespacedEvent, NodeEvent, NodePoolEvent, PodEvent, Resources

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


class Unconsolidatable(NodePoolEvent):
    """Upstream's `Unconsolidatable` Kubernetes event on a node and its claim: why consolidation
    keeps it (its pods would not schedule, no cheaper replacement...), recorded when that changes."""

    TYPE: ClassVar[str] = "Unconsolidatable"
    nodeclaim: str
    node: str | None = None
    message: str


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


class NodeOverlayEvent(Event):
    STREAM_KIND: ClassVar[str] = "nodeoverlay"
    nodeoverlay: str

    def _stream_key(self) -> str:
        return self.nodeoverlay


class NodeOverlayApplied(NodeOverlayEvent):
    """A valid NodeOverlay spec is in force from this event on (recorded only while the
    `NodeOverlay` gate is on): the catalogs the scheduler and disruption plan with follow it."""

    TYPE: ClassVar[str] = "NodeOverlayApplied"
    nodeoverlay_object: dict[str, Any] = Field(description="the NodeOverlay as the API server returns it")
    resource_version: int | None = None


class NodeOverlayDeleted(NodeOverlayEvent):
    """The NodeOverlay is gone (or no longer valid): it changes no catalog from this event on."""

    TYPE: ClassVar[str] = "NodeOverlayDeleted"


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
