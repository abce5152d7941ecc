"""What the scheduler knows of the world: the scheduling view (`shared.scheduling.view`, which
disruption's projection embeds too) and what the scheduler alone keeps: the lifecycle steps the
watcher's node facts imply and the log does not hold yet, the claims whose node was deleted, and
the claims termination is carrying out.

Pure: `apply` takes recorded events in position order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from shared.events import contracts as c
from shared.events.decode import Step, dispatch, handled
from shared.events.envelope import RecordedEvent
from shared.projections.cluster import STEPS as CLUSTER_STEPS
from shared.scheduling.view import VIEW_STEPS, ClaimInFlight, SchedulingView, pending_pod

__all__ = ["PROJECTED", "ClaimInFlight", "Owed", "Projection", "pending_pod"]


@dataclass(frozen=True, slots=True)
class Owed:
    """A lifecycle step the watcher's node facts imply and the log does not hold yet: the claim's
    NodeClaimRegistered or NodeClaimInitialized, caused by its node's fact."""

    type: str
    nodeclaim: str
    nodepool: str
    node: str
    occurred_at: datetime
    causation_id: str


@dataclass(slots=True)
class Projection(SchedulingView):
    orphans: set[str] = field(default_factory=set)  # claims whose node was deleted: is their instance gone too?
    deleting: set[str] = field(default_factory=set)  # claims termination is carrying out: theirs alone
    owed: dict[tuple[str, str], Owed] = field(default_factory=dict)  # (claim, step type) -> the step

    def __post_init__(self) -> None:
        self.cluster.keep_facts = False  # the scheduler reads where pods run, not their facts

    def take(self, recorded: RecordedEvent) -> None:
        """The scheduler's own step first (a deleted node's claim is read before the view drops
        the node), then the view's."""
        dispatch(self, _STEPS, recorded)
        SchedulingView.take(self, recorded)

    def leaving(self) -> set[str]:
        """The claims termination is carrying out: pods evicted from them must go elsewhere."""
        return self.deleting

    def orphaned(self) -> list[str]:
        """Claims whose node was deleted: if their instance is gone as well (a spot reclaim, a
        deletion outside nodewright), nothing will ever terminate them but a garbage collection.
        A claim whose deletion was asked for is termination's: it is terminated once, by it."""
        return sorted(self.orphans - self.deleting)

    def unlaunched(self) -> list[str]:
        """Claims created and not launched yet: a pass's own, the replacements a disruption
        ordered, or one whose launch a previous leader began and never recorded. Not one being
        deleted: its instance would outlive it."""
        return [name for name, claim in self.claims.items() if not claim.launched and name not in self.deleting]


def _owe(p: Projection, e: c.NodeRegistered | c.NodeInitialized, r: RecordedEvent) -> None:
    """The claim step a node fact implies, for a claim this projection holds; the step's own
    event settles it (`_settled`), as does the claim's end."""
    name = e.nodeclaim
    claim = p.claims.get(name or "")
    if claim is None or name is None:
        return
    kind = _OWING[type(e)]
    if (kind == c.NodeClaimRegistered.TYPE and claim.recorded_registered) or (
        kind == c.NodeClaimInitialized.TYPE and claim.recorded_initialized
    ):
        return
    p.owed[(name, kind)] = Owed(kind, name, claim.nodepool, e.node, r.occurred_at, str(r.event_id))


def _settled(p: Projection, e: c.NodeClaimRegistered | c.NodeClaimInitialized, r: RecordedEvent) -> None:
    p.owed.pop((e.nodeclaim, e.TYPE), None)


def _node_deleted(p: Projection, e: c.NodeDeleted, r: RecordedEvent) -> None:
    node = p.nodes.get(e.node)
    name = e.nodeclaim or (node.nodeclaim if node else None)
    if name in p.claims:
        p.orphans.add(name)


def _claim_deleting(p: Projection, e: c.NodeClaimDeletionRequested, r: RecordedEvent) -> None:
    if e.nodeclaim in p.claims:
        p.deleting.add(e.nodeclaim)


def _claim_ended(p: Projection, e: c.NodeClaimLaunchFailed | c.NodeClaimTerminated, r: RecordedEvent) -> None:
    p.orphans.discard(e.nodeclaim)
    p.deleting.discard(e.nodeclaim)
    for kind in _OWING.values():
        p.owed.pop((e.nodeclaim, kind), None)


_OWING: Mapping[type[c.Event], str] = {
    c.NodeRegistered: c.NodeClaimRegistered.TYPE,
    c.NodeInitialized: c.NodeClaimInitialized.TYPE,
}
"""The watcher's node facts, and the claim step each implies."""

_STEPS: Mapping[type[c.Event], Step[Projection]] = {
    c.NodeRegistered: _owe,
    c.NodeInitialized: _owe,
    c.NodeClaimRegistered: _settled,
    c.NodeClaimInitialized: _settled,
    c.NodeDeleted: _node_deleted,
    c.NodeClaimDeletionRequested: _claim_deleting,
    c.NodeClaimLaunchFailed: _claim_ended,
    c.NodeClaimTerminated: _claim_ended,
}

PROJECTED = handled(CLUSTER_STEPS) | handled(VIEW_STEPS) | handled(_STEPS)
"""The events the projection reads: their payloads must keep their contracts."""
