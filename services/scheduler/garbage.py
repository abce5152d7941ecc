"""NodeClaim garbage collection, as upstream's `pkg/controllers/nodeclaim/garbagecollection`: a
claim whose node was deleted and whose instance the cloud no longer runs (a spot reclaim, a
deletion outside nodewright) is recorded `NodeClaimTerminated`, so it stops counting against its
pool's limits and budgets. One whose instance still runs is looked at again later.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from services.scheduler.lifecycle import record
from services.scheduler.projection import Projection
from shared.events import contracts as c
from shared.ports.cloud import CloudProvider
from shared.runtime.ledger import Ledger
from shared.runtime.nodeclaims import NodeClaimWriter

INSTANCE_GONE = "InstanceTerminated"
GARBAGE_EVERY = timedelta(minutes=2)
"""How often claims whose instance was still running are looked at again (upstream's period)."""


class GarbageCollection:
    def __init__(
        self, ledger: Ledger, projection: Projection, cloud: CloudProvider, objects: NodeClaimWriter, now: datetime
    ) -> None:
        self.ledger, self.projection, self.cloud, self.objects = ledger, projection, cloud, objects
        self.looked_at: set[str] = set()  # orphaned claims already looked at
        self.after = now

    def due(self, now: datetime) -> bool:
        """At once for a claim whose node just went; again every GARBAGE_EVERY for those whose
        instance was still running then."""
        orphaned = self.projection.orphaned()
        return any(name not in self.looked_at for name in orphaned) or (bool(orphaned) and now >= self.after)

    async def collect(self, now: datetime) -> list[str]:
        """The names of the claims ended."""
        running = {i.get("nodeclaim") for i in await self.cloud.list()}
        self.after = now + GARBAGE_EVERY
        ended = []
        for name in self.projection.orphaned():
            self.looked_at.add(name)
            if name not in running:
                self.projection.orphans.discard(name)  # recorded, or refused (logged): either way not asked again
                pool = self.projection.claims[name].nodepool
                gone = c.NodeClaimTerminated(nodeclaim=name, nodepool=pool, reason=INSTANCE_GONE)
                await record(self.ledger, gone, now)
                ended.append(name)
        await self.ledger.reach()
        self.looked_at.intersection_update(self.projection.orphaned())
        self.objects.release(ended)  # ended here, not by termination: their objects go too
        return ended
