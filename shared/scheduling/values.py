"""The values a scheduling pass reads and makes: pending pods, node capacity, NodePool templates,
the claims it plans and the plan itself, and the bound that stops it.

Kept apart from the pass (`packing`) so the modules it is built from (`rules`, `existing`,
`candidates`) and its callers name these types without importing the algorithm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from shared.api.core import Taint, Toleration
from shared.scheduling.fitting import Fitting
from shared.scheduling.offerings import Option
from shared.scheduling.preferences import Preferences
from shared.scheduling.requirements import Requirements
from shared.scheduling.rules import min_values_met
from shared.scheduling.topology import PodTopology

MAX_INSTANCE_TYPES = 60


@dataclass(frozen=True, slots=True)
class PendingPod:
    key: str
    requests: Mapping[str, Decimal]
    requirements: Requirements = field(default_factory=Requirements)
    tolerations: tuple[Toleration, ...] = ()
    created_at: datetime | None = None
    uid: str = ""
    daemonset: bool = False
    topology: PodTopology = field(default_factory=PodTopology)
    preferences: Preferences | None = None  # its soft terms in force (`preferences.relax`); None: none
    avoid_prefer_no_schedule: bool = False  # PreferNoSchedule taints keep it off until relaxed


@dataclass(slots=True)
class NodeCapacity:
    """An existing or in-flight node: what it offers and what it has left. `taints` are those
    that block scheduling: leave out the startup taints of a node still starting."""

    name: str
    labels: Mapping[str, str]
    taints: Sequence[Taint]
    free: dict[str, Decimal]
    initialized: bool = True

    def copy(self) -> NodeCapacity:
        """A copy whose room a pass may take: `dataclasses.replace` costs three times as much, and
        a consolidation's simulation copies every node of the cluster."""
        return NodeCapacity(self.name, self.labels, self.taints, dict(self.free), self.initialized)


@dataclass(frozen=True, slots=True)
class PoolTemplate:
    """A Ready NodePool as a pass sees it; `remaining` is what its limits leave (None: no limits)."""

    name: str
    requirements: Requirements
    weight: int = 0
    taints: tuple[Taint, ...] = ()
    remaining: Mapping[str, Decimal] | None = None


@dataclass(slots=True)
class PlannedClaim:
    id: str
    nodepool: str
    requirements: Requirements
    options: list[Option]
    pods: list[str]
    used: dict[str, Decimal]
    largest: dict[str, Decimal] = field(default_factory=dict)  # per resource, the most any option has
    zone_set: frozenset[str] = frozenset()  # the zones its options offer
    taints: tuple[Taint, ...] = ()  # its pool's: every pod on it must tolerate them
    min_values_relaxed: bool = False  # BestEffort lowered a minValues its options could not meet

    def narrowed(self, options: list[Option], fitting: Fitting) -> None:
        """New options (after a requirement narrowed them), and what is derived from them."""
        self.options = options
        self.largest, self.zone_set = fitting.derived(options)

    def holds(self, used: Mapping[str, Decimal]) -> bool:
        """Whether some option has room for `used` (the largest ones are looked at first)."""
        return any(o.holds(used) for o in reversed(self.options))

    def settle(self) -> None:
        """At the end of the pass: the cheapest options that hold every pod of the claim, the
        instance types the NodeClaim will name: at most MAX_INSTANCE_TYPES, unless more are
        needed to keep every minValues (as upstream's truncation does)."""
        kept: list[Option] = []
        for option in self.options:
            if option.holds(self.used):
                kept.append(option)
                if len(kept) >= MAX_INSTANCE_TYPES and min_values_met(self.requirements, kept, self.used):
                    break
        self.options = kept
        self.zone_set = frozenset(offer.zone for o in kept for offer in o.offers)

    @property
    def instance_types(self) -> list[str]:
        """The types the NodeClaim names (`settle` chose them: the cheapest, minValues kept)."""
        return [o.instance.name for o in self.options]

    def capacity_types(self) -> list[str]:
        return sorted({offer.capacity_type for o in self.options for offer in o.offers})

    def zones(self) -> list[str]:
        return sorted(self.zone_set)


@dataclass(slots=True)
class Plan:
    placed: dict[str, str] = field(default_factory=dict)  # pod -> existing node
    claims: list[PlannedClaim] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)  # pod -> why, in upstream's words
    ignored: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # not looked at: the pass hit its bound

    @property
    def timed_out(self) -> bool:
        return bool(self.deferred)


@dataclass(frozen=True, slots=True)
class Bound:
    """When a pass stops, asked before each pod after the first: once `clock()` reaches
    `deadline` (the caller's clock and deadline: the core reads no clock of its own), or after
    `pods` pods."""

    deadline: float | None = None
    clock: Callable[[], float] | None = None
    pods: int | None = None

    def over(self, position: int) -> bool:
        if self.pods is not None and position >= self.pods:
            return True
        return self.deadline is not None and self.clock is not None and self.clock() >= self.deadline
