"""What termination knows of the world, folded from the log: each claim (its pool, instance,
node, deletion request and drain), each pool's terminationGracePeriod, the pods on each node
with what the drain rules read of them, and the evictions already recorded. Which pod runs where
and the live nodes are the shared cluster fold's (`shared.projections.cluster`).

Pure: `apply` takes recorded events in position order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.api.duration import parse_duration
from shared.events import contracts as c
from shared.events.decode import Step, dispatch, handled
from shared.events.envelope import RecordedEvent
from shared.projections.cluster import STEPS as CLUSTER_STEPS
from shared.projections.cluster import Cluster, PodState
from shared.termination.pods import DEFAULT_GRACE_SECONDS, DrainPod, tolerations_of
from shared.termination.steps import Termination, termination_grace


@dataclass(slots=True)
class Claim:
    nodepool: str
    provider_id: str | None = None
    capacity_type: str | None = None
    zone: str | None = None
    node: str | None = None
    registered_at: datetime | None = None
    """When its node registered: the start of the node's lifetime (`karpenter_nodes_lifetime_duration_seconds`)."""
    launch_failed: bool = False
    requested_at: datetime | None = None
    reason: str = "Manual"
    decision_id: str | None = None
    draining_since: datetime | None = None
    terminated: bool = False


def drain_view(pod: PodState) -> DrainPod:
    """The pod as the drain rules read it: its PodPending's facts, with those of each PodBound
    since laid over them (one recorded before PodBound carried its annotations keeps PodPending's)."""
    facts: c.PodPending | c.PodBound | None = pod.pending
    for bound in pod.bound:
        if "annotations" in bound.model_fields_set:
            facts = bound
    grace = facts.termination_grace_period_seconds if facts is not None else None
    return DrainPod(
        pod.key,
        uid=pod.uid,
        owner_kind=pod.owner_kind,
        priority_class=facts.priority_class_name if facts is not None else None,
        annotations=dict(facts.annotations) if facts is not None else {},
        tolerations=tolerations_of(list(facts.tolerations) if facts is not None else []),
        grace_seconds=grace if isinstance(grace, int) else DEFAULT_GRACE_SECONDS,
        started_at=pod.started_at,
    )


@dataclass(slots=True)
class Projection:
    cluster: Cluster = field(default_factory=Cluster)
    claims: dict[str, Claim] = field(default_factory=dict)
    grace: dict[str, timedelta | None] = field(default_factory=dict)  # pool -> terminationGracePeriod
    attempts: dict[tuple[str, str], int] = field(default_factory=dict)  # (claim, pod) -> evictions asked
    position: int = 0

    def apply(self, event: RecordedEvent) -> None:
        self.position = max(self.position, event.position)
        self.cluster.apply(event)
        dispatch(self, _STEPS, event)

    @property
    def nodes(self) -> dict[str, str | None]:
        """Live node -> its claim."""
        return self.cluster.nodes

    def termination(self, name: str) -> Termination | None:
        """The claim's termination as the log tells it; None before its deletion is known."""
        claim = self.claims.get(name)
        if claim is None or claim.requested_at is None:
            return None
        node = claim.node or next((n for n, c in self.nodes.items() if c == name), None)
        return Termination(
            nodeclaim=name,
            nodepool=claim.nodepool,
            requested_at=claim.requested_at,
            reason=claim.reason,
            node=node,
            node_gone=node is not None and node not in self.nodes,
            grace_period=termination_grace(claim.reason, self.grace.get(claim.nodepool)),
            draining_since=claim.draining_since,
            instance_gone=claim.launch_failed,
        )

    def pods_on(self, node: str | None) -> list[DrainPod]:
        if node is None:
            return []
        return [drain_view(pod) for pod in self.cluster.pods_on(node)]


def grace_period(nodepool_object: Mapping[str, Any]) -> timedelta | None:
    """The pool's `spec.template.spec.terminationGracePeriod` (None: unset, or `Never`)."""
    raw = ((nodepool_object.get("spec") or {}).get("template") or {}).get("spec", {}).get("terminationGracePeriod")
    if not isinstance(raw, str) or raw == "Never":
        return None
    try:
        return parse_duration(raw)
    except ValueError:
        return None


def _pool_applied(p: Projection, e: c.NodePoolApplied, r: RecordedEvent) -> None:
    p.grace[e.nodepool] = grace_period(e.nodepool_object)


def _claim_created(p: Projection, e: c.NodeClaimCreated, r: RecordedEvent) -> None:
    p.claims.setdefault(e.nodeclaim, Claim(e.nodepool))


def _claim_launched(p: Projection, e: c.NodeClaimLaunched, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.provider_id, claim.capacity_type, claim.zone = e.provider_id, e.capacity_type, e.zone


def _claim_failed(p: Projection, e: c.NodeClaimLaunchFailed, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.launch_failed = True


def _claim_registered(p: Projection, e: c.NodeClaimRegistered, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.node = e.node
        claim.registered_at = claim.registered_at or r.occurred_at


def _deletion(p: Projection, e: c.NodeClaimDeletionRequested, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None and claim.requested_at is None:
        claim.requested_at, claim.reason = r.occurred_at, e.reason or "Manual"
        claim.decision_id = e.decision_id


def _draining(p: Projection, e: c.NodeClaimDraining, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None and claim.draining_since is None:
        claim.draining_since = r.occurred_at


def _claim_terminated(p: Projection, e: c.NodeClaimTerminated, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.terminated = True


def _pod_evicted(p: Projection, e: c.PodEvicted, r: RecordedEvent) -> None:
    if e.nodeclaim:
        key = (e.nodeclaim, f"{e.namespace}/{e.name}")
        p.attempts[key] = max(p.attempts.get(key, 0), e.attempt or 1)


_STEPS: Mapping[type[c.Event], Step[Projection]] = {
    c.NodePoolApplied: _pool_applied,
    c.NodeClaimCreated: _claim_created,
    c.NodeClaimLaunched: _claim_launched,
    c.NodeClaimLaunchFailed: _claim_failed,
    c.NodeClaimRegistered: _claim_registered,
    c.NodeClaimDeletionRequested: _deletion,
    c.NodeClaimDraining: _draining,
    c.NodeClaimTerminated: _claim_terminated,
    c.PodEvicted: _pod_evicted,
}
PROJECTED = handled(CLUSTER_STEPS) | handled(_STEPS)
"""The events the projection reads (its own and the cluster fold's)."""
