"""A disruption method (upstream's `Method` interface, `pkg/controllers/disruption/types.go`): which
candidates it would disrupt (`should_disrupt`), the commands it makes of them within their pools'
budgets (`compute_commands`), its budget reason, its disruption class and its consolidation type.

The graceful pass (`passes.graceful`) asks the methods in upstream's order and stops at the first
that yields a command, as upstream's `controller.go` does. A `Round` is what they share within one
pass: the world, its candidates per class and the cluster as the simulations see it, each made once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shared.api.nodepool import DisruptionReason
from shared.disruption.balanced import PoolTotals, Score
from shared.disruption.candidates import Blocked, Candidate
from shared.disruption.command import Command
from shared.disruption.order import by_disruption_cost
from shared.disruption.repair import Evidence
from shared.disruption.simulation import ClusterView
from shared.disruption.world import Node, World, candidates_of, is_consolidatable, replaceable, with_waiting
from shared.events.contracts import FORCEFUL_REASONS
from shared.scheduling.values import PlannedClaim

GRACEFUL = "graceful"
"""Upstream's `GracefulDisruptionClass`: blocking PDBs and do-not-disrupt pods stop it."""
EVENTUAL = "eventual"
"""Upstream's `EventualDisruptionClass` (drift): they do not."""


@dataclass(frozen=True, slots=True)
class Found:
    """A command, with what the decision needs to record and a replace needs to launch."""

    command: Command
    nodepool: str
    consolidation_type: str = ""
    savings: float | None = None
    new_claims: tuple[PlannedClaim, ...] = ()
    unhealthy: Evidence | None = None
    """Node repair's evidence (reason Unhealthy)."""
    scores: Mapping[str, Score] = field(default_factory=dict)
    """A consolidation's score in each Balanced pool of its candidates (`balanced`)."""

    @property
    def forceful(self) -> bool:
        return self.command.reason in FORCEFUL_REASONS


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a method made of its candidates: its commands (none: the next method is asked), the
    candidates it found blocked, and the pools whose node hard limit refused a replacement."""

    found: tuple[Found, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    limited: tuple[str, ...] = ()
    unconsolidatable: Mapping[str, str] = field(default_factory=dict)
    """NodeClaim -> why the method keeps it (upstream's `Unconsolidatable` message)."""


class Round:
    """One pass's world as its methods share it; each part made once, when first asked for."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.nodes = {n.state.nodeclaim: n for n in world.nodes}
        self._classes: dict[str, tuple[list[Candidate], list[Blocked]]] = {}
        self._cluster: ClusterView | None = None
        self.balanced: Mapping[str, PoolTotals] = {
            name: rules.balanced for name, rules in world.pools.items() if rules.balanced is not None
        }
        """The Balanced pools' totals, which consolidation scores their moves against."""

    def candidates(self, disruption_class: str) -> list[Candidate]:
        """The class's candidates, in the world's order."""
        return self._of(disruption_class)[0]

    def blocked(self, disruption_class: str) -> list[Blocked]:
        """The nodes the class may not disrupt, with why (`DisruptionBlocked`)."""
        return self._of(disruption_class)[1]

    def _of(self, disruption_class: str) -> tuple[list[Candidate], list[Blocked]]:
        if disruption_class not in self._classes:
            self._classes[disruption_class] = candidates_of(self.world, eventual=disruption_class == EVENTUAL)
        return self._classes[disruption_class]

    @property
    def cluster(self) -> ClusterView:
        """The cluster the simulations place pods on: without nodes still in consolidateAfter."""
        if self._cluster is None:
            self._cluster = with_waiting(self.world)
        return self._cluster

    def node(self, candidate: Candidate) -> Node:
        return self.nodes[candidate.nodeclaim]

    def consolidatable(self, candidate: Candidate) -> bool:
        return is_consolidatable(self.world, self.node(candidate))

    def cheapest_first(self, chosen: Sequence[Candidate]) -> list[Candidate]:
        """The candidates cheapest to disrupt first (upstream's `sortCandidates`; ties by name)."""
        rank = {
            name: i for i, name in enumerate(by_disruption_cost([self.node(c).facts for c in chosen], self.world.now))
        }
        return sorted(chosen, key=lambda c: rank[c.nodeclaim])

    def replaceable(self, pool: str, replacements: int) -> bool:
        return replaceable(self.world, pool, replacements)


class Method(Protocol):
    """One way to disrupt (upstream's `Method`): Emptiness, Drift, multi- and single-node
    consolidation."""

    @property
    def reason(self) -> DisruptionReason:
        """The budget reason its commands count against and its metrics are labelled with."""
        ...

    @property
    def disruption_class(self) -> str:
        """`GRACEFUL` or `EVENTUAL`: which nodes are candidates for it at all."""
        ...

    @property
    def consolidation_type(self) -> str:
        """`empty`, `multi`, `single`, or "" for a method that does not consolidate."""
        ...

    def should_disrupt(self, round_: Round, candidate: Candidate) -> bool:
        """Whether the candidate is one this method would disrupt (its eligible nodes)."""
        ...

    def compute_commands(
        self, round_: Round, budgets: Mapping[str, int | None], chosen: Sequence[Candidate]
    ) -> Outcome:
        """Its commands for the chosen candidates, within `budgets` (per pool, what its reason's
        budget has left; None: unbounded; a pool not listed has none)."""
        ...
