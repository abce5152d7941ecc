"""A consolidation's simulation (upstream's `SimulateScheduling`,
`pkg/controllers/disruption/helpers.go`): where the candidates' pods would go if the candidates were
gone, by the scheduling core itself (`shared.scheduling.packing.schedule`), not a copy of it.
Pending pods compete for the room in the scheduler's own queue order, as they would; claims the pass
makes only for them are not the candidates' to answer for.

Nodes still inside their consolidateAfter window are left out of the simulation altogether
(upstream lets pending pods, but not candidate pods, use them): stricter, never looser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from shared.api.nodepool import NODES_RESOURCE
from shared.scheduling.offerings import DaemonSetPods, InstanceOption, Option, UnavailableOfferings
from shared.scheduling.packing import option_table, schedule
from shared.scheduling.rules import MinValuesPolicy
from shared.scheduling.topology import Running
from shared.scheduling.values import NodeCapacity, PendingPod, PlannedClaim, PoolTemplate


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a simulation sees besides the candidates."""

    nodes: tuple[NodeCapacity, ...]
    """Every node and claim in flight with its free room, the candidates' own included."""
    pools: tuple[PoolTemplate, ...]
    catalog: tuple[InstanceOption, ...]
    daemonsets: tuple[DaemonSetPods, ...] = ()
    pending: tuple[PendingPod, ...] = ()
    running: tuple[Running, ...] = ()
    unavailable: UnavailableOfferings | None = None
    now: datetime | None = None
    waiting: frozenset[str] = frozenset()
    """Nodes inside their consolidateAfter window."""
    options: Mapping[str, list[Option]] | None = None
    """Each pool's launchable options (`prepared`): computed once for all of a pass's simulations."""
    running_anti_affinity: bool | None = None
    """Whether a running pod has required anti-affinity of its own (`prepared`)."""
    pool_catalogs: Mapping[str, tuple[InstanceOption, ...]] = field(default_factory=dict)
    static_pools: tuple[PoolTemplate, ...] = ()
    """The static pools a drifted node of theirs is replaced in (`static_drift`): never planned
    into by a simulation, whose `pools` leave them out."""
    min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT
    """The scheduler's (NODEWRIGHT_MIN_VALUES_POLICY): a replacement is planned as a launch is."""
    """A pool's own catalog where its node class changes allocatable (`packing.option_table`)."""

    def prepared(self) -> ClusterView:
        """This view with its pools' options computed: the costly part of a simulation of a few
        pods, the same for every simulation of a pass."""
        if self.options is not None:
            return self
        table = option_table(
            self.pools,
            self.catalog,
            daemonsets=self.daemonsets,
            unavailable=self.unavailable,
            now=self.now,
            pool_catalogs=self.pool_catalogs,
        )
        anti = any(len(r) > 3 and r[3] for r in self.running)  # type: ignore[misc]
        return replace(self, options=table, running_anti_affinity=anti)


@dataclass(frozen=True, slots=True)
class Move:
    """A candidate as the simulation moves it: its node, and the pods that need a place; its pool
    and the capacity it holds there, which a replacement in that pool may use (`room`)."""

    nodeclaim: str
    node: str
    pods: tuple[PendingPod, ...]
    nodepool: str = ""
    capacity: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Movable:
    """A consolidation candidate: where its pods would go from, and what it costs now."""

    move: Move
    nodepool: str
    price: float
    capacity_type: str
    instance_type: str
    disruption: float = 1.0
    """Its disruption cost as Balanced weighs it (`balanced.node_disruption_cost`): known for the
    nodes of a Balanced pool; the per-node cost alone elsewhere, where nothing weighs it."""

    @property
    def nodeclaim(self) -> str:
        return self.move.nodeclaim


@dataclass(frozen=True, slots=True)
class Simulation:
    new_claims: tuple[PlannedClaim, ...]
    """The claims the candidates' pods need (each holds at least one of them)."""
    unplaced: Mapping[str, str] = field(default_factory=dict)
    """Candidate pods that fit nowhere, with the scheduler's reason."""
    uninitialized: tuple[str, ...] = ()
    """Nodes not initialized yet that the plan put candidate pods on."""

    @property
    def valid(self) -> bool:
        return not self.unplaced and not self.uninitialized

    @property
    def pools(self) -> tuple[str, ...]:
        """The pool of each new claim: a replacement goes wherever the scheduler put it."""
        return tuple(c.nodepool for c in self.new_claims)

    def why_not(self) -> str | None:
        if self.unplaced:
            key, reason = next(iter(sorted(self.unplaced.items())))
            return f"pod {key} would not schedule: {reason}"
        if self.uninitialized:
            return f"would schedule against uninitialized nodeclaim/{self.uninitialized[0]}"
        return None


def simulate(moves: Sequence[Move], cluster: ClusterView) -> Simulation:
    leaving = {m.node for m in moves}
    nodes = [n for n in cluster.nodes if n.name not in leaving and n.name not in cluster.waiting]
    moved = {p.key for m in moves for p in m.pods}
    pods = [*cluster.pending, *(p for m in moves for p in m.pods)]
    running: list[Running] = []
    if _topology_matters(pods, cluster):  # else the running pods cannot change where one goes
        running = [r for r in cluster.running if r[2] not in leaving]
    plan = schedule(
        pods,
        nodes,
        room(cluster.pools, moves),
        cluster.catalog,
        daemonsets=cluster.daemonsets,
        unavailable=cluster.unavailable,
        now=cluster.now,
        running=running,
        options=cluster.options,
        pool_catalogs=cluster.pool_catalogs,
        min_values_policy=cluster.min_values_policy,
    )
    initialized = {n.name: n.initialized for n in nodes}
    starting = sorted({node for key, node in plan.placed.items() if key in moved and not initialized.get(node, True)})
    unplaced = {k: v for k, v in plan.unplaced.items() if k in moved}
    landed = set(plan.placed).union(*(c.pods for c in plan.claims))
    for key in sorted(moved - landed - unplaced.keys()):  # a pod the pass leaves to others: nowhere to go
        unplaced[key] = "no existing node holds it and it may not go to a new NodeClaim"
    return Simulation(tuple(c for c in plan.claims if moved.intersection(c.pods)), unplaced, tuple(starting))


def room(pools: Sequence[PoolTemplate], moves: Sequence[Move]) -> Sequence[PoolTemplate]:
    """The pools with what their limits leave a replacement (upstream's scheduler leaves the
    candidates out of each pool's usage): the candidates' capacity back in their own pools, and
    no node limit there (the node hard limit is asked of the command, `world.replaceable`, as the
    store asks it of the decision). Another pool's limits stay whole: the store reserves a
    replacement there exactly as a launch."""
    freed: dict[str, dict[str, Decimal]] = {}
    for move in moves:
        if move.nodepool:
            into = freed.setdefault(move.nodepool, {})
            for name, value in move.capacity.items():
                into[name] = into.get(name, _ZERO) + value
    if not freed or all(p.remaining is None for p in pools if p.name in freed):
        return pools
    out = []
    for pool in pools:
        back = freed.get(pool.name)
        if back is None or pool.remaining is None:
            out.append(pool)
            continue
        left = {k: v + back.get(k, _ZERO) for k, v in pool.remaining.items() if k != NODES_RESOURCE}
        out.append(replace(pool, remaining=left))
    return out


_ZERO = Decimal(0)


def _topology_matters(pods: Sequence[PendingPod], cluster: ClusterView) -> bool:
    """Whether a pod has spread or (anti-)affinity rules, or a running pod has anti-affinity:
    only then do the running pods take part (counting them is most of a small simulation)."""
    if cluster.running_anti_affinity is not False:
        return True
    return any(
        p.topology.spread or p.topology.affinity or p.topology.anti_affinity or p.preferences is not None for p in pods
    )
