"""The recorded log replayed to one instant, into the folds a disruption pass reads: the
disruption service's own projection (`services.disruption.projection`), the store's counters as
the audit folds them (`shared.policy.audit`), and the sim's catalog as the what-if rebuilds it.
`Instant.world()` is then the `World` the live service would have built from them
(`services.disruption.world.build`): the pure pass and its methods can be asked about it.

This is the offline runner's cheaper sibling: `Runner` plays a scenario step by step through the
services; an instant only folds a recorded prefix, so `explain --at` costs one pass over the log,
not a re-simulation of the day.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from services.disruption.projection import Projection
from services.disruption.world import build
from services.sim.views import instance_type_view
from services.whatif.catalog import catalog_for
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


@dataclass
class Instant:
    """The folds at `at`, made of the log's events up to `position`."""

    at: datetime
    position: int
    projection: Projection
    counters: dict[str, PoolCounters]
    loaded: Loaded

    def world(self) -> World:
        return build(self.projection, self.counters, self.loaded, self.at)


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
