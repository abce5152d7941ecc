"""NodeClaim garbage collection, as upstream's `pkg/controllers/nodeclaim/garbagecollection`: a
claim whose node was deleted and whose instance the cloud no longer runs (a spot reclaim, a
deletion outside nodewright) is recorded `NodeClaimTerminated`, so it stops counting against its
pool's limits and budgets. One whose instance still runs is looked at again later.

The other way round, as upstream's instance garbage collection (aws/karpenter-provider-aws
`pkg/controllers/nodeclaim/garbagecollection`): an instance the cloud lists for this cluster
whose NodeClaim the log does not hold (a launch whose outcome was lost, a claim that failed after
the fleet launched), or that is not the instance the log holds for its claim, is terminated once
it was launched more than `LEAK_GRACE` ago, so a launch still being recorded is never taken for
a leak.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from services.scheduler.lifecycle import record
from services.scheduler.projection import Projection
from shared.events import contracts as c
from shared.ports.cloud import CloudError, CloudProvider, CloudUnreachable, InstanceNotFound, InstanceView
from shared.runtime.ledger import Ledger
from shared.runtime.nodeclaims import NodeClaimWriter

INSTANCE_GONE = "InstanceTerminated"
GARBAGE_EVERY = timedelta(minutes=2)
"""How often claims whose instance was still running, and the cloud's instances, are looked at
again (upstream's period)."""
LEAK_GRACE = timedelta(seconds=30)
"""Upstream's: an instance without a NodeClaim younger than this may be a launch in flight."""
log = logging.getLogger("nodewright.scheduler.garbage")


def leaked(instances: Iterable[InstanceView], claims: Mapping[str, str | None], now: datetime) -> list[InstanceView]:
    """The instances that are no claim's and were launched at least LEAK_GRACE before `now` (an
    instance without a launch time is young). `claims`: each held claim's instance (None before
    its launch is recorded, when whatever instance is tagged with it may be its launch in flight).
    A second instance tagged with a launched claim is a leak too, as upstream matches instances
    to claims by provider id."""
    out = []
    for instance in instances:
        name = instance.get("nodeclaim")
        if name in claims and claims[name] in (None, instance.get("providerID")):
            continue
        launched = _instant(instance.get("launchedAt"))
        if launched is not None and now - launched >= LEAK_GRACE:
            out.append(instance)
    return out


def _instant(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


class GarbageCollection:
    def __init__(
        self, ledger: Ledger, projection: Projection, cloud: CloudProvider, objects: NodeClaimWriter, now: datetime
    ) -> None:
        self.ledger, self.projection, self.cloud, self.objects = ledger, projection, cloud, objects
        self.looked_at: set[str] = set()  # orphaned claims already looked at
        self.after = now

    def due(self, now: datetime) -> bool:
        """At once for a claim whose node just went; every GARBAGE_EVERY for the rest (claims
        whose instance was still running, instances without a claim)."""
        orphaned = self.projection.orphaned()
        return any(name not in self.looked_at for name in orphaned) or now >= self.after

    async def collect(self, now: datetime) -> list[str]:
        """The names of the claims ended; leaked instances are terminated on the way. A cloud
        that refuses the list (not an outage, which the caller rides out) is asked again later."""
        try:
            instances = await self.cloud.list()
        except CloudUnreachable:
            raise
        except CloudError as exc:
            log.warning("garbage collection could not list the cloud's instances: %s", exc)
            self.after = now + GARBAGE_EVERY
            return []
        running = {i.get("nodeclaim") for i in instances}
        self.after = now + GARBAGE_EVERY
        await self.terminate_leaked(instances, now)
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

    async def terminate_leaked(self, instances: Iterable[InstanceView], now: datetime) -> list[str]:
        """Terminate the leaked instances; their provider ids. One the cloud refuses is logged
        and tried again at the next collection."""
        ended = []
        held = {name: claim.provider_id for name, claim in self.projection.claims.items()}
        for instance in leaked(instances, held, now):
            provider_id = str(instance.get("providerID"))
            try:
                await self.cloud.delete(provider_id)
            except InstanceNotFound:
                continue
            except CloudError as exc:
                log.warning("leaked instance %s not terminated: %s", provider_id, exc)
                continue
            log.info("terminated leaked instance %s (nodeclaim %r not held)", provider_id, instance.get("nodeclaim"))
            ended.append(provider_id)
        return ended
