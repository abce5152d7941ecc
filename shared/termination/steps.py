"""What a claim's termination does next (upstream's `pkg/controllers/node/termination/`), one step per pass:

1. a claim whose node never registered, or is gone, skips the drain;
2. `Taint`: taint the node `karpenter.sh/disrupted:NoSchedule` and record the drain's start
   (with the termination time, when the pool has a terminationGracePeriod);
3. `Drain`: this pass's evictions (the first non-empty tier only; do-not-disrupt pods wait) and
   the pods the grace period deletes now (any tier, PDBs and do-not-disrupt bypassed);
4. once nothing drainable is left and at least `MIN_DRAIN` has passed: `DeleteInstance` until
   the cloud no longer has it, then `DeleteNode`, then `Finish` (NodeClaimTerminated).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.termination.pods import DrainPod, do_not_disrupt, drainable, forced_at, granted_seconds, tier

MIN_DRAIN = timedelta(seconds=5)
"""Upstream's minimum drain time: a node is never drained in less, whatever its pods."""


IMMEDIATE_REASONS = frozenset({"Unhealthy"})
"""Reasons whose termination time is the request itself: node repair sets upstream's
termination timestamp to now, so pods are deleted at once, PDBs and do-not-disrupt aside."""


def termination_grace(reason: str, pool_grace: timedelta | None) -> timedelta | None:
    """The termination grace period a deletion for `reason` gets: none left for node repair, the
    pool's terminationGracePeriod otherwise."""
    return timedelta(0) if reason in IMMEDIATE_REASONS else pool_grace


@dataclass(frozen=True, slots=True)
class Termination:
    """A claim being terminated, as the log tells it."""

    nodeclaim: str
    nodepool: str
    requested_at: datetime
    reason: str = "Manual"
    node: str | None = None
    """The claim's registered node (None: it never registered)."""
    node_gone: bool = False
    grace_period: timedelta | None = None
    """The pool's terminationGracePeriod (None: pods are waited for as long as it takes)."""
    draining_since: datetime | None = None
    instance_gone: bool = False
    """The cloud said the instance is gone (or it never launched)."""

    @property
    def termination_time(self) -> datetime | None:
        return self.requested_at + self.grace_period if self.grace_period is not None else None

    @property
    def eviction_reason(self) -> str:
        """What `Evicted` says: the disruption reason, or `Forceful Termination` (no disruption
        asked for it, as upstream calls a plain deletion)."""
        return self.reason if self.reason not in ("", "Manual") else "Forceful Termination"


@dataclass(frozen=True, slots=True)
class Taint:
    """Taint the node and record NodeClaimDraining."""


@dataclass(frozen=True, slots=True)
class Drain:
    force: tuple[tuple[DrainPod, int], ...]
    """Pods the termination grace period deletes now, with the grace period each is granted."""
    evict: tuple[DrainPod, ...]
    """This pass's tier, less the pods that must wait."""
    waiting: tuple[DrainPod, ...]
    """Pods of this tier that are do-not-disrupt."""
    tier: int | None
    remaining: int
    """Drainable pods on the node, every tier."""

    @property
    def idle(self) -> bool:
        """Nothing to do this pass but wait (the minimum drain time, or pods that wait)."""
        return not self.force and not self.evict


@dataclass(frozen=True, slots=True)
class DeleteInstance:
    pass


@dataclass(frozen=True, slots=True)
class DeleteNode:
    pass


@dataclass(frozen=True, slots=True)
class Finish:
    pass


Step = Taint | Drain | DeleteInstance | DeleteNode | Finish


def next_step(t: Termination, pods: Sequence[DrainPod], now: datetime) -> Step:
    """A node that never registered, is gone, or whose instance is gone is not drained."""
    drains = t.node is not None and not t.node_gone and not t.instance_gone
    if drains and t.draining_since is None:
        return Taint()
    if drains:
        plan = drain(t, pods, now)
        if plan.remaining or now < t.draining_since + MIN_DRAIN:  # type: ignore[operator]
            return plan
    if not t.instance_gone:
        return DeleteInstance()
    if t.node is not None and not t.node_gone:
        return DeleteNode()
    return Finish()


def drain(t: Termination, pods: Sequence[DrainPod], now: datetime) -> Drain:
    """This pass of the drain: pods past their forced deletion time go whatever their tier; of
    the rest, the first non-empty tier is evicted, do-not-disrupt pods waiting."""
    left = [p for p in pods if drainable(p, now)]
    deadline = t.termination_time
    force: list[tuple[DrainPod, int]] = []
    if deadline is not None:
        force = [(p, granted_seconds(deadline, now)) for p in left if now > forced_at(p, deadline)]
    forced = {p.key for p, _ in force}
    rest = [p for p in left if p.key not in forced]
    first = min((tier(p) for p in rest), default=None)
    this_tier = [p for p in rest if tier(p) == first]
    waiting = tuple(p for p in this_tier if do_not_disrupt(p, now))
    evict = tuple(p for p in this_tier if not do_not_disrupt(p, now))
    return Drain(tuple(force), evict, waiting, first, len(left))


def waiting_message(remaining: int) -> str:
    return f"Failed to drain node, {remaining} pods are waiting to be evicted"


def forced_message(termination_time: datetime, granted: int, pod: DrainPod) -> str:
    return (
        f"Deleting the pod to accommodate the terminationTime {termination_time.isoformat()} of the node. "
        f"The pod was granted {granted} seconds of grace-period of its {pod.grace_seconds} "
        "terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt annotation."
    )


PDB_REFUSED = "Failed to drain node, evicting pod violates a PDB"
MULTIPLE_PDBS = "Failed to drain node, eviction does not support multiple PDBs"


def expiring_message(termination_time: datetime) -> str:
    return f"All pods will be deleted by {termination_time.isoformat()}"
