"""A consolidation's simulation (upstream's `SimulateScheduling`,
`pkg/controllers/disruption/helpers.go`): where the candidates' pods would go if the candidates were
gone, by the scheduling core itself (`shared.scheduling.packing.schedule`), not a copy of it.
Pending pods compete for the room in the scheduler's own queue order, as they would; claims the pass
makes only for them are not the candidates' to answer for.

Nodes still inside their consolidateAfter window are left out of the simulation altogether
(upstream lets pending pods, but not candidate pods, use them): stricter, never looser.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from shared.scheduling.offerings import DaemonSetPods, InstanceOption, Option, UnavailableOfferings
from shared.scheduling.packing import option_table, schedule
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

    def prepared(self) -> ClusterView:
        """This view with its pools' options computed: the costly part of a simulation of a few
        pods, the same for every simulation of a pass."""
        if self.options is not None:
            return self
        table = option_table(
            self.pools, self.catalog, daemonsets=self.daemonsets, unavailable=self.unavailable, now=self.now
        )
        anti = any(len(r) > 3 and r[3] for r in self.running)  # type: ignore[misc]
        return replace(self, options=table, running_anti_affinity=anti)


@dataclass(frozen=True, slots=True)
class Move:
    """A candidate as the simulation moves it: its node, and the pods that need a place."""

    nodeclaim: str
    node: str
    pods: tuple[PendingPod, ...]


@dataclass(frozen=True, slots=True)
class Movable:
    """A consolidation candidate: where its pods would go from, and what it costs now."""

    move: Move
    nodepool: str
    price: float
    capacity_type: str
    instance_type: str

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

    def elsewhere(self, nodepools: Collection[str]) -> str | None:
        """The first pool, not one of `nodepools`, that a new claim would be launched in. A
        decision and its replacements are counted in the candidates' pool (`pool.replacing`), so
        a command whose replacement the scheduler would put in another pool could never launch."""
        return next((c.nodepool for c in self.new_claims if c.nodepool not in nodepools), None)

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
        cluster.pools,
        cluster.catalog,
        daemonsets=cluster.daemonsets,
        unavailable=cluster.unavailable,
        now=cluster.now,
        running=running,
        options=cluster.options,
    )
    initialized = {n.name: n.initialized for n in nodes}
    starting = sorted({node for key, node in plan.placed.items() if key in moved and not initialized.get(node, True)})
    unplaced = {k: v for k, v in plan.unplaced.items() if k in moved}
    landed = set(plan.placed).union(*(c.pods for c in plan.claims))
    for key in sorted(moved - landed - unplaced.keys()):  # a pod the pass leaves to others: nowhere to go
        unplaced[key] = "no existing node holds it and it may not go to a new NodeClaim"
    return Simulation(tuple(c for c in plan.claims if moved.intersection(c.pods)), unplaced, tuple(starting))


def _topology_matters(pods: Sequence[PendingPod], cluster: ClusterView) -> bool:
    """Whether a pod has spread or (anti-)affinity rules, or a running pod has anti-affinity:
    only then do the running pods take part (counting them is most of a small simulation)."""
    if cluster.running_anti_affinity is not False:
        return True
    return any(p.topology.spread or p.topology.affinity or p.topology.anti_affinity for p in pods)
