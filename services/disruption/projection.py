"""What disruption knows of the world, folded from the log: the scheduler's own view (pools, nodes
and their room, pods bound and pending, claims in flight: what a consolidation simulates on),
and beside it each claim's life (when it was created and initialized, what it launched as, its
drift stamp, its last pod event, the last log position that touched it), the pods' disruption
facts, the PodDisruptionBudgets, the commands under way and the `DisruptionBlocked` already said.

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
from shared.events.envelope import RecordedEvent
from shared.policy.drift import DRIFT_HASH_VERSION, drift_hash
from shared.scheduling.values import PendingPod
from shared.scheduling.view import Projection as SchedulingView
from shared.scheduling.view import pending_pod

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
    node: str | None = None
    initialized_at: datetime | None = None
    deleting: bool = False
    last_pod_event: datetime | None = None
    touched: int = 0


@dataclass(slots=True)
class Pod:
    namespace: str
    name: str
    spec: dict[str, Any] = field(default_factory=dict)
    """The latest PodPending payload, PodBound's fields laid over it."""
    node: str | None = None
    started_at: datetime | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner_kind(self) -> str | None:
        kind = self.spec.get("owner_kind")
        return kind if isinstance(kind, str) else None

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.spec.get("annotations") or {}

    def pending(self) -> PendingPod:
        """The pod as a scheduling pass takes it: what a simulation moves elsewhere."""
        return pending_pod(self.spec, self.started_at or datetime.min)


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
    pods: dict[str, Pod] = field(default_factory=dict)
    on_node: dict[str, set[str]] = field(default_factory=dict)
    pdbs: dict[str, Pdb] = field(default_factory=dict)
    commands: dict[str, Command] = field(default_factory=dict)
    initialized: set[str] = field(default_factory=set)  # claims whose NodeClaimInitialized is in the log
    said: dict[tuple[str, str, str], datetime] = field(default_factory=dict)  # (pool or claim, reason, cause)
    position: int = 0

    def apply(self, event: RecordedEvent) -> None:
        self.position = max(self.position, event.position)
        self.view.apply((event,))
        step = _STEPS.get(event.type)
        if step is not None:
            step(self, event.data, event.occurred_at, event.position)

    def live_commands(self) -> list[Command]:
        return [c for c in self.commands.values() if not c.done]

    def pods_on(self, node: str | None) -> list[Pod]:
        if node is None:
            return []
        return [self.pods[k] for k in sorted(self.on_node.get(node, ())) if k in self.pods]

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


def _pool_applied(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    pool = p.view.pools.get(data["nodepool"])  # the scheduling view validated it
    if pool is not None:
        if p.specs.get(data["nodepool"]) != data["nodepool_object"]:
            p.applied_at[data["nodepool"]] = at
            p.stamps[data["nodepool"]] = Stamp(drift_hash(pool), DRIFT_HASH_VERSION)
        p.pools[data["nodepool"]] = pool
        p.specs[data["nodepool"]] = data["nodepool_object"]


def _pool_gone(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p.pools.pop(data["nodepool"], None)
    p.specs.pop(data["nodepool"], None)
    p.stamps.pop(data["nodepool"], None)


def _claim_created(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    pool = p.pools.get(data["nodepool"])
    template = pool.spec.template if pool is not None else None
    annotations = (template.metadata.annotations or {}) if template is not None and template.metadata else {}
    p.claims[data["nodeclaim"]] = Claim(
        nodepool=data["nodepool"],
        created_at=at,
        stamp=p.stamps.get(data["nodepool"], _UNSTAMPED),
        expire_after=template.spec.expire_after_timedelta if template is not None else None,
        do_not_disrupt=annotations.get(DO_NOT_DISRUPT_ANNOTATION),
        grace_period=template is not None and template.spec.termination_grace_period_timedelta is not None,
        replacement_for=data.get("replacement_for"),
        touched=position,
    )
    decision = p.commands.get(data.get("replacement_for") or "")
    if decision is not None and data["nodeclaim"] not in decision.created:
        decision.created.append(data["nodeclaim"])


def _claim_launched(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.launched, claim.touched = True, position
        claim.instance_type, claim.capacity_type = data.get("instance_type"), data.get("capacity_type")
        claim.zone = data.get("zone")
        claim.labels = dict(data.get("labels") or {})


def _claim_registered(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.node, claim.touched = data["node"], position
        p.node_claims[data["node"]] = data["nodeclaim"]


def _claim_initialized(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    claim = p.claims.get(data["nodeclaim"])
    p.initialized.add(data["nodeclaim"])
    if claim is not None and claim.initialized_at is None:
        claim.initialized_at, claim.touched = at, position


def _claim_deleting(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.deleting, claim.touched = True, position


def _claim_ended(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    claim = p.claims.pop(data["nodeclaim"], None)
    p.initialized.discard(data["nodeclaim"])
    if claim is not None and claim.node is not None and p.node_claims.get(claim.node) == data["nodeclaim"]:
        del p.node_claims[claim.node]
    for key in [k for k in p.said if k[0] == data["nodeclaim"]]:
        del p.said[key]
    _forget_finished(p)


def _forget_finished(p: Projection) -> None:
    """A completed command matters while its candidates drain (its replacements count as
    nominated); once they are gone, nothing reads it: a long run keeps only live commands."""
    for name in [n for n, c in p.commands.items() if c.completed and not any(k in p.claims for k in c.candidates)]:
        del p.commands[name]


def _node_registered(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    name = data.get("nodeclaim")
    claim = p.claims.get(name or "")
    if claim is not None and name is not None:
        claim.node = data["node"]
        claim.labels = {**claim.labels, **(data.get("labels") or {})}
        p.node_claims[data["node"]] = name
    p._touch(name, position)


def _node_changed(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p._touch_node(data["node"], position)


def _node_deleted(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p._touch_node(data["node"], position)
    p.node_claims.pop(data["node"], None)
    for key in p.on_node.pop(data["node"], set()):
        pod = p.pods.get(key)
        if pod is not None:
            pod.node = None


def _pod(p: Projection, data: Mapping[str, Any]) -> Pod:
    key = f"{data['namespace']}/{data['name']}"
    pod = p.pods.get(key)
    uid = data.get("uid")
    if pod is None or (uid and pod.spec.get("uid") and pod.spec.get("uid") != uid):
        pod = p.pods[key] = Pod(data["namespace"], data["name"])
    return pod


def _pod_pending(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    pod = _pod(p, data)
    pod.spec = dict(data)


def _pod_bound(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    pod = _pod(p, data)
    for key in ("uid", "requests", "labels", "owner_kind", "affinity", "annotations", "tolerations", "priority"):
        if data.get(key):
            pod.spec[key] = data[key]
    pod.spec.setdefault("namespace", data["namespace"])
    pod.spec.setdefault("name", data["name"])
    if pod.node is not None:
        p.on_node.get(pod.node, set()).discard(pod.key)
    pod.node, pod.started_at = data["node"], at
    p.on_node.setdefault(data["node"], set()).add(pod.key)
    p._touch_node(data["node"], position, None if pod.owner_kind == "DaemonSet" else at)


def _pod_gone(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    key = f"{data['namespace']}/{data['name']}"
    pod = p.pods.pop(key, None)
    if pod is not None and pod.node is not None:
        p.on_node.get(pod.node, set()).discard(key)
        p._touch_node(pod.node, position, None if pod.owner_kind == "DaemonSet" else at)


def _pod_evicted(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p._touch_node(data.get("node"), position, at)


def _pdb_applied(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    key = f"{data['namespace']}/{data['name']}"
    p.pdbs[key] = Pdb(
        data["namespace"],
        data["name"],
        LabelSelector.model_validate(data.get("selector") or {}),
        data.get("min_available"),
        data.get("max_unavailable"),
    )


def _pdb_deleted(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p.pdbs.pop(f"{data['namespace']}/{data['name']}", None)


def _decided(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p.commands[data["decision_id"]] = Command(
        decision_id=data["decision_id"],
        nodepool=data["nodepool"],
        reason=data["reason"],
        candidates=list(data["candidates"]),
        replacements=list(data.get("replacements") or ()),
        decided_at=at,
        observed=int(data.get("observed_position") or 0),
        consolidation_type=data.get("consolidation_type") or "",
        forceful=bool(data.get("forceful")),
        savings=data.get("savings"),
    )


def _validated(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    command = p.commands.get(data["decision_id"])
    if command is not None:
        command.kept, command.version = list(data["kept"]), command.version + 1


def _cancelled(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p.commands.pop(data["decision_id"], None)  # nothing reads a cancelled command


def _completed(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    command = p.commands.get(data["decision_id"])
    if command is not None:
        command.completed, command.version = True, command.version + 1
        _forget_finished(p)


def _blocked(p: Projection, data: Mapping[str, Any], at: datetime, position: int) -> None:
    p.said[(data.get("nodeclaim") or data["nodepool"], data["reason"], data.get("cause") or "")] = at


_STEPS = {
    "NodePoolApplied": _pool_applied,
    "NodePoolDeleted": _pool_gone,
    "NodePoolRejected": _pool_gone,
    "NodeClaimCreated": _claim_created,
    "NodeClaimLaunched": _claim_launched,
    "NodeClaimLaunchFailed": _claim_ended,
    "NodeClaimRegistered": _claim_registered,
    "NodeClaimInitialized": _claim_initialized,
    "NodeClaimDeletionRequested": _claim_deleting,
    "NodeClaimTerminated": _claim_ended,
    "NodeRegistered": _node_registered,
    "NodeInitialized": _node_changed,
    "NodeDeleted": _node_deleted,
    "PodPending": _pod_pending,
    "PodBound": _pod_bound,
    "PodDeleted": _pod_gone,
    "PodEvicted": _pod_evicted,
    "PodDisruptionBudgetApplied": _pdb_applied,
    "PodDisruptionBudgetDeleted": _pdb_deleted,
    "DisruptionDecided": _decided,
    "DisruptionValidated": _validated,
    "DisruptionCancelled": _cancelled,
    "DisruptionCompleted": _completed,
    "DisruptionBlocked": _blocked,
}
PROJECTED = frozenset(_STEPS) | frozenset({"DaemonSetApplied", "DaemonSetDeleted", "NodeInitialized"})
"""The events the projection reads (its own and the scheduling view's)."""
