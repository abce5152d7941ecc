"""The recorded log replayed to one instant, into the folds a disruption pass reads: the
disruption service's own projection (`services.disruption.projection`), the store's counters as
the audit folds them (`shared.policy.audit`), and the sim's catalog as the what-if rebuilds it.
`Instant.world(gates)` is then the `World` the live service would have built from them
(`services.disruption.world.build`) under the same feature gates: the pure pass and its methods
can be asked about it.

This is the offline runner's cheaper sibling: `Runner` plays a scenario step by step through the
services; an instant only folds a recorded prefix, so `explain --at` costs one pass over the log,
not a re-simulation of the day.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from services.disruption.projection import Projection
from services.disruption.world import build
from services.sim.views import instance_type_view
from services.whatif.catalog import catalog_for
from shared.config import NODE_REPAIR, SPOT_TO_SPOT_CONSOLIDATION, STATIC_CAPACITY, gates_now
from shared.disruption.repair import AWS_REPAIR_POLICIES
from shared.disruption.world import World
from shared.events.envelope import RecordedEvent
from shared.policy.audit import LogEntry, Replay
from shared.policy.counters import PoolCounters
from shared.runtime.catalogs import Loaded, overlaid
from shared.scheduling.claims import instance_option
from shared.whatif.sim import UNKNOWN, SimSettings


def recorded_catalog(events: Iterable[RecordedEvent], sim: SimSettings = UNKNOWN) -> Loaded:
    """The sim's catalog as the what-if rebuilds it (`catalog.catalog_for`) at the run's seed:
    `sim`'s (the log does not record it; unknown, 0: prices may differ from the record's by the
    seed's draw, which `docs/explain.md` says), the run's size and zones when known, else the
    smallest that holds every instance type the log names, in the zones it launched in."""
    types: set[str] = set()
    zones: set[str] = set()
    for e in events:
        if e.type == "NodeClaimCreated":
            types.update(o["name"] for o in e.data.get("instance_types") or [])
        elif e.type == "NodeClaimLaunched":
            types.add(e.data["instance_type"])
            if e.data.get("zone"):
                zones.add(e.data["zone"])
    return Loaded([instance_option(instance_type_view(t)) for t in catalog_for(types, zones, sim)])


@dataclass(frozen=True, slots=True)
class Gates:
    """The feature gates a disruption pass is built under, as the disruption service takes them
    (`services.disruption.__main__`): spot-to-spot consolidation, node repair and the static
    scale-down change what the same pure pass decides, so explain must read them too."""

    spot_to_spot: bool = False
    node_repair: bool = False
    static_capacity: bool = False

    @classmethod
    def of(cls, gates: Mapping[str, bool]) -> Gates:
        """From `shared.config`'s gate map (`feature_gates`, `gates_now`)."""
        return cls(
            spot_to_spot=gates.get(SPOT_TO_SPOT_CONSOLIDATION, False),
            node_repair=gates.get(NODE_REPAIR, False),
            static_capacity=gates.get(STATIC_CAPACITY, False),
        )

    @classmethod
    def now(cls) -> Gates:
        """`NODEWRIGHT_FEATURE_GATES` as every process reads it (a bad value: ValueError)."""
        return cls.of(gates_now())

    def named(self) -> dict[str, bool]:
        """By upstream's names, as `shared.config`'s gate map."""
        return {
            SPOT_TO_SPOT_CONSOLIDATION: self.spot_to_spot,
            NODE_REPAIR: self.node_repair,
            STATIC_CAPACITY: self.static_capacity,
        }

    def on(self) -> list[str]:
        """The gates on, by upstream's names, for the answer to say what it weighed."""
        return [name for name, value in self.named().items() if value]


OFF = Gates()
"""Every gate at upstream's default (off)."""


@dataclass
class Instant:
    """The folds at `at`, made of the log's events up to `position`."""

    at: datetime
    position: int
    projection: Projection
    counters: dict[str, PoolCounters]
    loaded: Loaded

    def world(self, gates: Gates = OFF) -> World:
        """The service's world under `gates`. Node repair asks the cloud's policies
        (`CloudProvider.repair_policies`): the catalog here is the sim's, and the sim's providers
        (`shared.adapters.sim`, `services.sim.inprocess`) declare AWS's, as the AWS provider does."""
        return build(
            self.projection,
            self.counters,
            self.loaded,
            self.at,
            spot_to_spot=gates.spot_to_spot,
            repair_policies=AWS_REPAIR_POLICIES if gates.node_repair else (),
            static_capacity=gates.static_capacity,
        )


def instant(events: Sequence[RecordedEvent], at: datetime, loaded: Loaded, *, through: int | None = None) -> Instant:
    """The events that occurred by `at` (with `through`, only those at or before that log
    position: what a recorded pass observed), in log order, folded as the disruption service
    and the store fold them."""
    chosen = [e for e in events if e.occurred_at <= at and (through is None or e.position <= through)]
    projection = Projection()
    for event in chosen:
        projection.apply(event)
    folded = Replay()
    folded.feed(LogEntry(e.position, e.stream_id, e.type, e.data, e.occurred_at) for e in chosen)
    position = chosen[-1].position if chosen else 0
    return Instant(at, position, projection, folded.pools, overlaid(loaded, projection.view))  # as the service did
