"""What a disruption pass depends on, so the offline runner passes only when it moved.

A pass is a pure function of the disruption projection and the store's counters (both folds of
the log), the catalog (fixed in the sim) and `now`. `now` enters through three timed inputs:
each budget's schedule window (open or shut), each node's Consolidatable instant (its pool's
consolidateAfter after its last pod event), each claim's expiry, and, with node repair on, the
instant an unhealthy node's toleration runs out. So a pass is owed when the
log grew, a budget window opened or shut, or the earliest of those instants after the last
pass came: between them a pass would find, block and say exactly what the last one did. The
live service passes on its 10 s poll regardless; the results are the same, only the work is not
(the runner's `every_pass` keeps the old way, to hold the two against each other).
"""

from __future__ import annotations

from datetime import datetime

from services.disruption.service import DisruptionService
from services.disruption.world import build
from services.whatif.memory import MemoryStore
from shared.disruption.expiration import Expiring, next_expiry
from shared.disruption.repair import unhealthy
from shared.disruption.world import consolidatable_from
from shared.policy.budgets import DisruptionBudgets
from shared.policy.schedule import epoch

Key = tuple[int, tuple[tuple[str, tuple[bool, ...]], ...]]


class PassInputs:
    def __init__(self, service: DisruptionService, store: MemoryStore) -> None:
        self.service, self.store = service, store
        self.wake: datetime | None = None
        """The earliest Consolidatable instant, expiry or repair after the last pass."""

    def key(self, now: datetime) -> Key:
        """The log's length and, per pool, which of its scheduled budgets are open at `now`."""
        t = epoch(now)
        windows = tuple(
            (
                name,
                tuple(
                    b.schedule.is_active(t)
                    for b in DisruptionBudgets.of(pool).budgets
                    if b.schedule is not None and b.schedule_error is None
                ),
            )
            for name, pool in sorted(self.service.projection.pools.items())
        )
        return len(self.store.log), windows

    def due(self, now: datetime) -> bool:
        return self.wake is not None and now >= self.wake

    def passed(self, now: datetime) -> None:
        """After a pass at `now`: the next instant a node becomes Consolidatable, a claim
        expires or an unhealthy node is due for repair, read from the world the pass itself saw."""
        world = build(
            self.service.projection,
            self.store.pools,
            self.service.loaded,
            now,
            spot_to_spot=self.service.spot_to_spot,
            static_capacity=self.service.static_capacity,
            repair_policies=self.service.repair_policies,
        )
        later = [at for node in world.nodes if (at := consolidatable_from(world, node)) is not None and at > now]
        expiring = [
            Expiring(n.facts.name, n.facts.created_at, n.facts.expire_after, n.facts.deleting or n.state.deleting)
            for n in world.nodes
        ]
        expiry = next_expiry(expiring, now)
        if expiry is not None:
            later.append(expiry)
        for node in world.nodes:
            evidence = unhealthy(node.conditions, world.repair_policies)
            if evidence is not None and evidence.due > now:
                later.append(evidence.due)
        self.wake = min(later, default=None)
