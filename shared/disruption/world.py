"""What one disruption pass weighs (upstream's state the `pkg/controllers/disruption` methods read):
the pools' rules, the claims, the cluster, and the questions every method asks of them.

The caller (the disruption service) builds a `World` from its projection and the live counters;
the pass (`passes`), its methods and the re-check read it, with time a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shared.disruption.balanced import PoolTotals
from shared.disruption.candidates import Blocked, Candidate, NodeState, candidate
from shared.disruption.consolidatable import consolidatable_at
from shared.disruption.pdbs import Pdb
from shared.disruption.repair import Condition, RepairPolicy
from shared.disruption.simulation import ClusterView, Movable
from shared.policy.limits import NodeLimit
from shared.policy.overlimit import ClaimFacts


@dataclass(frozen=True, slots=True)
class PoolRules:
    name: str
    consolidate_after: timedelta | None
    """None: Never (no emptiness, no consolidation)."""
    when_empty: bool
    """consolidationPolicy WhenEmpty: a node with pods is never consolidated."""
    nodes: int
    """The nodes its budgets count (initialized, not terminated)."""
    allowed: Mapping[str, int | None]
    remaining: Mapping[str, int | None]
    """Per reason, what its budgets allow now, and what is left after those disrupting."""
    node_limit: NodeLimit
    busy: bool = False
    """A graceful command of this pool is under way: over-limit removal waits for it."""
    balanced: PoolTotals | None = None
    """consolidationPolicy Balanced: what its nodes cost and would cost to disrupt, against which
    its consolidation moves are scored (`balanced`); None for the other policies."""
    replicas: int | None = None
    """A static pool's `spec.replicas` (None: a dynamic pool). Consolidation ignores a static
    pool; with the `StaticCapacity` gate on, its surplus is scaled down (`static`)."""


@dataclass(frozen=True, slots=True)
class Node:
    """A claim as a pass weighs it."""

    state: NodeState
    facts: ClaimFacts
    """Its creation, expiry and pods, for the cost order and the over-limit order."""
    initialized_at: datetime | None = None
    last_pod_event: datetime | None = None
    movable: Movable | None = None
    """Its pods and price, once its node and instance are known."""
    drift: str | None = None
    drifted_since: datetime | None = None
    conditions: tuple[Condition, ...] = ()
    """Its node's conditions that are not healthy (node repair)."""


@dataclass(frozen=True, slots=True)
class World:
    now: datetime
    pools: Mapping[str, PoolRules]
    nodes: Sequence[Node]
    cluster: ClusterView
    pdbs: Sequence[Pdb] = ()
    pdb_allowed: Mapping[str, int] = field(default_factory=dict)
    spot_to_spot: bool = False
    repair_policies: tuple[RepairPolicy, ...] = ()
    """The cloud provider's repair policies when the `NodeRepair` gate is on (else none)."""
    static_capacity: bool = False
    """The `StaticCapacity` gate: static pools are scaled down to their replicas."""
    validating: bool = False
    """A graceful command awaits its re-check. Upstream's controller waits out the validation
    period inside its reconcile, so no other graceful command is computed meanwhile; one computed
    here would plan around the first's candidates and each re-check would cancel the other."""


def candidates_of(world: World, *, eventual: bool) -> tuple[list[Candidate], list[Blocked]]:
    """The candidates of a disruption class (eventual: drift's, which a blocking PDB or
    do-not-disrupt pod does not stop), in the world's order, and the nodes blocked, with why."""
    found: list[Candidate] = []
    blocked: list[Blocked] = []
    for node in world.nodes:
        verdict = candidate(
            node.state,
            pools=world.pools.keys(),
            pdbs=world.pdbs,
            allowed=world.pdb_allowed,
            now=world.now,
            eventual=eventual,
        )
        if isinstance(verdict, Candidate):
            found.append(verdict)
        elif isinstance(verdict, Blocked):
            blocked.append(verdict)
    return found, blocked


def with_waiting(world: World) -> ClusterView:
    """The cluster without the nodes inside their consolidateAfter window (`simulation`)."""
    waiting = set()
    for node in world.nodes:
        at = consolidatable_from(world, node)
        if node.state.node is not None and at is not None and world.now < at:
            waiting.add(node.state.node)
    return replace(world.cluster, waiting=frozenset(waiting))


def consolidatable_from(world: World, node: Node) -> datetime | None:
    """When the node is `Consolidatable` under its pool's consolidateAfter (None: Never, no pool,
    or a static pool, whose consolidateAfter upstream ignores: it is never consolidated)."""
    rules = world.pools.get(node.state.nodepool)
    if rules is None or rules.replicas is not None:
        return None
    return consolidatable_at(rules.consolidate_after, node.initialized_at or world.now, node.last_pod_event)


def is_consolidatable(world: World, node: Node) -> bool:
    at = consolidatable_from(world, node)
    return at is not None and world.now >= at


def replaceable(world: World, pool: str, replacements: int) -> bool:
    """Whether the pool's node hard limit lets `replacements` launch before its candidates go."""
    rules = world.pools.get(pool)
    return rules is not None and not rules.node_limit.blocks_replacements(replacements)
