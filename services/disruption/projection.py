"""What disruption knows of the world, folded from the log: the scheduler's own view (pools, nodes
and their room, pods bound and pending, claims in flight: what a consolidation simulates on),
and beside it each claim's life (when it was created and initialized, what it launched as, its
drift stamp, its last pod event, the last log position that touched it), the pods' disruption
facts, the PodDisruptionBudgets, the commands under way and the `DisruptionBlocked` already said.
Which pod runs where is the shared cluster fold's (`shared.projections.cluster`), which the
scheduling view applies: disruption reads its pods there.

Pure: `apply` takes recorded events in position order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.api.labels import DO_NOT_DISRUPT_ANNOTATION
from shared.api.nodepool import NodePool
from shared.api.pod import LabelSelector
from shared.disruption.drift import Stamp
from shared.disruption.pdbs import Pdb
from shared.events import contracts as c
from shared.events.decode import Step, dispatch, handled
from shared.events.envelope import RecordedEvent
from shared.policy.drift import DRIFT_HASH_VERSION, drift_hash
from shared.projections.cluster import STEPS as CLUSTER_STEPS
from shared.projections.cluster import PodState
from shared.scheduling.values import PendingPod
from shared.scheduling.view import VIEW_STEPS, SchedulingView, pending_pod

_UNSTAMPED = Stamp(None, None)


@dataclass(slots=True)
class Claim:
    nodepool: str
    created_at: datetime
    stamp: Stamp
    expire_after: timedelta | None
    do_not_disrupt: str | None
    grace_period: bool
    replacement_for: str | None = None
    launched: bool = False
    instance_type: str | None = None
    capacity_type: str | None = None
    zone: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    image_id: str | None = None  # what the cloud launched it on (AWS), for drift
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] | None = None
    node: str | None = None
    initialized_at: datetime | None = None
    deleting: bool = False
    last_pod_event: datetime | None = None
    touched: int = 0
    not_ready: tuple[str, datetime] | None = None
    """Its node's Ready condition while not True (False or Unknown), and since when: node repair."""
    conditions: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    """Its node's other conditions while not True (a node monitoring agent's), and since when."""


_OVERLAID = ("uid", "requests", "labels", "owner_kind", "affinity", "annotations", "tolerations", "priority")
"""The fields a PodBound lays over its pod's PodPending when it sets them (not empty)."""


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as disruption reads it: its last PodPending, each PodBound's fields laid over it."""

    state: PodState

    @property
    def namespace(self) -> str:
        return self.state.namespace

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def key(self) -> str:
        return self.state.key

    @property
    def node(self) -> str | None:
        return self.state.node

    @property
    def started_at(self) -> datetime | None:
        return self.state.started_at

    @property
    def owner_kind(self) -> str | None:
        return self.state.owner_kind

    def _fact(self, name: str) -> Any:
        """The last non-empty value a PodBound set, else its PodPending's (None: neither)."""
        for bound in reversed(self.state.bound):
            if value := getattr(bound, name):
                return value
        return getattr(self.state.pending, name) if self.state.pending is not None else None

    @property
    def annotations(self) -> Mapping[str, str]:
        return self._fact("annotations") or {}

    @property
    def labels(self) -> Mapping[str, str]:
        return self._fact("labels") or {}

    @property
    def tolerations(self) -> list[dict[str, Any]]:
        return self._fact("tolerations") or []

    @property
    def priority(self) -> int | None:
        return self._fact("priority")

    def pending(self) -> PendingPod:
        """The pod as a scheduling pass takes it: what a simulation moves elsewhere."""
        base = self.state.pending or c.PodPending(namespace=self.namespace, name=self.name)
        update = {name: value for name in _OVERLAID if (value := self._fact(name))}
        return pending_pod(base.model_copy(update=update), self.started_at or datetime.min)


@dataclass(slots=True)
class Command:
    """A command as the log tells it (`DisruptionDecided` and what followed)."""

    decision_id: str
    nodepool: str
    reason: str
    candidates: list[str]
    replacements: list[str]
    decided_at: datetime
    observed: int
    consolidation_type: str
    forceful: bool
    savings: float | None
    replacement_pools: list[str] = field(default_factory=list)
    """The pool each replacement goes to (upstream's: wherever the simulation put it)."""
    parts: list[str] = field(default_factory=list)
    """The decision ids of the command this is part of, the first first (itself alone, mostly)."""
    condition: str | None = None
    """Node repair's: the condition that made the candidate unhealthy."""
    version: int = 1
    """Events on the command's stream: an append expects it, so two leaders never both act."""
    kept: list[str] | None = None
    """Set once validated."""
    created: list[str] = field(default_factory=list)
    """Replacements created so far."""
    completed: bool = False
    """Cancelled commands leave the projection at once; completed ones once their candidates end."""

    @property
    def done(self) -> bool:
        return self.completed


@dataclass(slots=True)
class Projection:
    view: SchedulingView = field(default_factory=SchedulingView)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # pool -> the NodePool object in force
    pools: dict[str, NodePool] = field(default_factory=dict)
    applied_at: dict[str, datetime] = field(default_factory=dict)  # pool -> when its spec last changed
    stamps: dict[str, Stamp] = field(default_factory=dict)  # pool -> its template's drift hash, once per spec
    claims: dict[str, Claim] = field(default_factory=dict)
    node_claims: dict[str, str] = field(default_factory=dict)  # node -> claim
    pdbs: dict[str, Pdb] = field(default_factory=dict)
    commands: dict[str, Command] = field(default_factory=dict)
    initialized: set[str] = field(default_factory=set)  # claims whose NodeClaimInitialized is in the log
    said: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(pool or claim, reason, cause) -> the message of the DisruptionBlocked last recorded."""
    unconsolidatable: dict[str, str] = field(default_factory=dict)
    """NodeClaim -> the message of its Unconsolidatable last recorded."""
    resolved: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)  # class -> its resolved ids
    resolved_at: dict[str, datetime] = field(default_factory=dict)  # class -> when they last changed
    position: int = 0

    def apply(self, event: RecordedEvent) -> None:
        self.position = max(self.position, event.position)
        self.view.apply((event,))
        dispatch(self, _STEPS, event)

    def live_commands(self) -> list[Command]:
        return [cmd for cmd in self.commands.values() if not cmd.done]

    def pods_on(self, node: str | None) -> list[Pod]:
        if node is None:
            return []
        return [Pod(state) for state in self.view.cluster.pods_on(node)]

    def all_pods(self) -> list[Pod]:
        return [Pod(state) for state in self.view.cluster.pods.values()]

    def _touch(self, claim: str | None, position: int) -> None:
        known = self.claims.get(claim or "")
        if known is not None:
            known.touched = position

    def _touch_node(self, node: str | None, position: int, at: datetime | None = None) -> None:
        """A pod event on the node: its claim moved, and (for a pod event) consolidateAfter restarts."""
        claim = self.claims.get(self.node_claims.get(node or "", ""))
        if claim is not None:
            claim.touched = position
            if at is not None:
                claim.last_pod_event = at


def _pool_applied(p: Projection, e: c.NodePoolApplied, r: RecordedEvent) -> None:
    pool = p.view.pools.get(e.nodepool)  # the scheduling view validated it
    if pool is not None:
        if p.specs.get(e.nodepool) != e.nodepool_object:
            p.applied_at[e.nodepool] = r.occurred_at
            p.stamps[e.nodepool] = Stamp(drift_hash(pool), DRIFT_HASH_VERSION)
        p.pools[e.nodepool] = pool
        p.specs[e.nodepool] = e.nodepool_object


def _pool_gone(p: Projection, e: c.NodePoolDeleted | c.NodePoolRejected, r: RecordedEvent) -> None:
    p.pools.pop(e.nodepool, None)
    p.specs.pop(e.nodepool, None)
    p.stamps.pop(e.nodepool, None)


def _claim_created(p: Projection, e: c.NodeClaimCreated, r: RecordedEvent) -> None:
    pool = p.pools.get(e.nodepool)
    template = pool.spec.template if pool is not None else None
    annotations = (template.metadata.annotations or {}) if template is not None and template.metadata else {}
    p.claims[e.nodeclaim] = Claim(
        nodepool=e.nodepool,
        created_at=r.occurred_at,
        stamp=p.stamps.get(e.nodepool, _UNSTAMPED),
        expire_after=template.spec.expire_after_timedelta if template is not None else None,
        do_not_disrupt=annotations.get(DO_NOT_DISRUPT_ANNOTATION),
        grace_period=template is not None and template.spec.termination_grace_period_timedelta is not None,
        replacement_for=e.replacement_for,
        touched=r.position,
    )
    decision = p.commands.get(e.replacement_for or "")
    if decision is not None and e.nodeclaim not in decision.created:
        decision.created.append(e.nodeclaim)


def _claim_launched(p: Projection, e: c.NodeClaimLaunched, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.launched, claim.touched = True, r.position
        claim.instance_type, claim.capacity_type = e.instance_type, e.capacity_type
        claim.zone = e.zone
        claim.labels = dict(e.labels)
        claim.image_id, claim.subnet_id = e.image_id, e.subnet_id
        claim.security_group_ids = tuple(e.security_group_ids) if e.security_group_ids is not None else None


def _nodeclass_status(p: Projection, e: c.NodeClassStatusChanged, r: RecordedEvent) -> None:
    """When what the class resolves to last changed: a claim it drifts is drifted since then (the
    class itself is the scheduling view's)."""
    ids = (tuple(e.amis), tuple(e.security_groups), tuple(e.subnets))
    if p.resolved.get(e.nodeclass) != ids:
        p.resolved[e.nodeclass], p.resolved_at[e.nodeclass] = ids, r.occurred_at


def _claim_registered(p: Projection, e: c.NodeClaimRegistered, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.node, claim.touched = e.node, r.position
        p.node_claims[e.node] = e.nodeclaim


def _claim_initialized(p: Projection, e: c.NodeClaimInitialized, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    p.initialized.add(e.nodeclaim)
    if claim is not None and claim.initialized_at is None:
        claim.initialized_at, claim.touched = r.occurred_at, r.position


def _claim_not_ready(p: Projection, e: c.NodeClaimNotReady, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        since = datetime.fromisoformat(e.since) if e.since else r.occurred_at
        claim.not_ready = (e.status, since)


def _claim_ready(p: Projection, e: c.NodeClaimReady, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.not_ready = None


def _claim_condition(p: Projection, e: c.NodeClaimConditionChanged, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is None:
        return
    if e.status == "True":
        claim.conditions.pop(e.condition, None)
    else:
        claim.conditions[e.condition] = (e.status, datetime.fromisoformat(e.since) if e.since else r.occurred_at)


def _claim_deleting(p: Projection, e: c.NodeClaimDeletionRequested, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.deleting, claim.touched = True, r.position


def _claim_ended(p: Projection, e: c.NodeClaimLaunchFailed | c.NodeClaimTerminated, r: RecordedEvent) -> None:
    claim = p.claims.pop(e.nodeclaim, None)
    p.initialized.discard(e.nodeclaim)
    if claim is not None and claim.node is not None and p.node_claims.get(claim.node) == e.nodeclaim:
        del p.node_claims[claim.node]
    for key in [k for k in p.said if k[0] == e.nodeclaim]:
        del p.said[key]
    p.unconsolidatable.pop(e.nodeclaim, None)
    _forget_finished(p)


def _forget_finished(p: Projection) -> None:
    """A completed command matters while its candidates drain (its replacements count as
    nominated); once they are gone, nothing reads it: a long run keeps only live commands."""
    for name in [
        n for n, cmd in p.commands.items() if cmd.completed and not any(k in p.claims for k in cmd.candidates)
    ]:
        del p.commands[name]


def _node_registered(p: Projection, e: c.NodeRegistered, r: RecordedEvent) -> None:
    name = e.nodeclaim
    claim = p.claims.get(name or "")
    if claim is not None and name is not None:
        claim.node = e.node
        claim.labels = {**claim.labels, **e.labels}
        p.node_claims[e.node] = name
    p._touch(name, r.position)


def _node_changed(p: Projection, e: c.NodeInitialized, r: RecordedEvent) -> None:
    p._touch_node(e.node, r.position)


def _node_deleted(p: Projection, e: c.NodeDeleted, r: RecordedEvent) -> None:
    """Its pods are unbound by the cluster fold; its claim moved."""
    p._touch_node(e.node, r.position)
    p.node_claims.pop(e.node, None)


def _pod_bound(p: Projection, e: c.PodBound, r: RecordedEvent) -> None:
    pod = p.view.cluster.pods[f"{e.namespace}/{e.name}"]
    p._touch_node(e.node, r.position, None if pod.owner_kind == "DaemonSet" else r.occurred_at)


def _pod_gone(p: Projection, e: c.PodDeleted, r: RecordedEvent) -> None:
    for pod in p.view.cluster.gone:
        if pod.node is not None:
            p._touch_node(pod.node, r.position, None if pod.owner_kind == "DaemonSet" else r.occurred_at)


def _pod_evicted(p: Projection, e: c.PodEvicted, r: RecordedEvent) -> None:
    p._touch_node(e.node, r.position, r.occurred_at)


def _pdb_applied(p: Projection, e: c.PodDisruptionBudgetApplied, r: RecordedEvent) -> None:
    p.pdbs[f"{e.namespace}/{e.name}"] = Pdb(
        e.namespace,
        e.name,
        LabelSelector.model_validate(e.selector),
        e.min_available,
        e.max_unavailable,
    )


def _pdb_deleted(p: Projection, e: c.PodDisruptionBudgetDeleted, r: RecordedEvent) -> None:
    p.pdbs.pop(f"{e.namespace}/{e.name}", None)


def _decided(p: Projection, e: c.DisruptionDecided, r: RecordedEvent) -> None:
    p.commands[e.decision_id] = Command(
        decision_id=e.decision_id,
        nodepool=e.nodepool,
        reason=e.reason,
        candidates=list(e.candidates),
        replacements=list(e.replacements),
        replacement_pools=[e.pool_of(name) for name in e.replacements],
        decided_at=r.occurred_at,
        observed=e.observed_position,
        consolidation_type=e.consolidation_type,
        forceful=e.forceful,
        savings=e.savings,
        parts=e.parts,
        condition=e.unhealthy.condition if e.unhealthy is not None else None,
    )


def _validated(p: Projection, e: c.DisruptionValidated, r: RecordedEvent) -> None:
    command = p.commands.get(e.decision_id)
    if command is not None:
        command.kept, command.version = list(e.kept), command.version + 1


def _cancelled(p: Projection, e: c.DisruptionCancelled, r: RecordedEvent) -> None:
    p.commands.pop(e.decision_id, None)  # nothing reads a cancelled command


def _completed(p: Projection, e: c.DisruptionCompleted, r: RecordedEvent) -> None:
    command = p.commands.get(e.decision_id)
    if command is not None:
        command.completed, command.version = True, command.version + 1
        _forget_finished(p)


def _blocked(p: Projection, e: c.DisruptionBlocked, r: RecordedEvent) -> None:
    p.said[(e.nodeclaim or e.nodepool, e.reason, e.cause or "")] = e.message


def _unconsolidatable(p: Projection, e: c.Unconsolidatable, r: RecordedEvent) -> None:
    if e.nodeclaim in p.claims:
        p.unconsolidatable[e.nodeclaim] = e.message


_STEPS: Mapping[type[c.Event], Step[Projection]] = {
    c.NodePoolApplied: _pool_applied,
    c.NodePoolDeleted: _pool_gone,
    c.NodePoolRejected: _pool_gone,
    c.NodeClassStatusChanged: _nodeclass_status,
    c.NodeClaimCreated: _claim_created,
    c.NodeClaimLaunched: _claim_launched,
    c.NodeClaimLaunchFailed: _claim_ended,
    c.NodeClaimRegistered: _claim_registered,
    c.NodeClaimInitialized: _claim_initialized,
    c.NodeClaimDeletionRequested: _claim_deleting,
    c.NodeClaimNotReady: _claim_not_ready,
    c.NodeClaimReady: _claim_ready,
    c.NodeClaimConditionChanged: _claim_condition,
    c.NodeClaimTerminated: _claim_ended,
    c.NodeRegistered: _node_registered,
    c.NodeInitialized: _node_changed,
    c.NodeDeleted: _node_deleted,
    c.PodBound: _pod_bound,
    c.PodDeleted: _pod_gone,
    c.PodEvicted: _pod_evicted,
    c.PodDisruptionBudgetApplied: _pdb_applied,
    c.PodDisruptionBudgetDeleted: _pdb_deleted,
    c.DisruptionDecided: _decided,
    c.DisruptionValidated: _validated,
    c.DisruptionCancelled: _cancelled,
    c.DisruptionCompleted: _completed,
    c.DisruptionBlocked: _blocked,
    c.Unconsolidatable: _unconsolidatable,
}
PROJECTED = handled(_STEPS) | handled(VIEW_STEPS) | handled(CLUSTER_STEPS)
"""The events the projection reads (its own, the scheduling view's and the cluster fold's)."""
