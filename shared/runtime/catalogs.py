"""The cloud's instance types as the scheduling core takes them, for the scheduler's passes and
disruption's simulations alike: the catalog, and per node class the catalog its settings make
(an EC2NodeClass's `kubelet.maxPods` or reservations change every type's allocatable), each asked
again once it is `refresh` old, so refreshed spot prices and a changed class reach the passes.
The age is the process's own (monotonic, real) time, as upstream's cache's: an accelerated
simulated clock must not turn a refresh into one every fraction of a second.

Upstream's provisioner asks `GetInstanceTypes(nodePool)` on every pass and its provider caches
the answer per node class for five minutes (`InstanceTypesAndZonesTTL`); this keeps the decoded
answer for as long, since decoding a thousand types costs a pass more than it plans.

A failed refresh keeps the answer already known and is tried again `retry` later. A class never
answered leaves its pools nothing to launch (said in the log), rather than the default figures,
which would plan more pods onto a node than its kubelet admits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.api.nodeoverlay import NodeOverlay
from shared.api.nodepool import NodePool
from shared.ports.cloud import CloudError, CloudProvider
from shared.scheduling.claims import instance_option
from shared.scheduling.nodeclasses import class_of
from shared.scheduling.offerings import InstanceOption
from shared.scheduling.overlays import PoolLabels, Resolution, resolve
from shared.scheduling.view import SchedulingView

log = logging.getLogger("nodewright.catalogs")

REFRESH = 300.0
"""Seconds: upstream's `InstanceTypesAndZonesTTL`."""
RETRY = 30.0


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a pass plans with: the default catalog, and the pools that launch from their own."""

    catalog: Sequence[InstanceOption] = ()
    pools: Mapping[str, Sequence[InstanceOption]] = field(default_factory=dict)


def overlaid(loaded: Loaded, view: SchedulingView) -> Loaded:
    """The catalogs with the view's NodeOverlays applied (`shared.scheduling.overlays`): each pool
    an overlay changes plans with a catalog of its own. The one place both services, and the
    what-if, turn the cloud's answer into what a pass plans with."""
    if not view.overlays:
        return loaded
    resolved = resolution(loaded, view.pools, view.overlays.values())
    return Loaded(loaded.catalog, {**loaded.pools, **resolved.catalogs})


def resolution(loaded: Loaded, pools: Mapping[str, NodePool], overlays: Iterable[NodeOverlay]) -> Resolution:
    """The overlays against every pool's catalog (its class's, else the default one): what
    `overlaid` applies, and what the watcher's NodeOverlay status reports."""
    labels = [PoolLabels(name, pool.spec.template.labels) for name, pool in sorted(pools.items())]
    catalogs = {p.name: loaded.pools.get(p.name) or loaded.catalog for p in labels}
    return resolve(overlays, labels, catalogs)


@dataclass(slots=True)
class _Answer:
    options: list[InstanceOption] | None = None
    at: float | None = None
    tried_at: float | None = None

    def due(self, now: float, refresh: float, retry: float) -> bool:
        if self.tried_at is not None and self.tried_at != self.at and now - self.tried_at < retry:
            return False  # failed lately: not asked again at once
        return self.at is None or now - self.at >= refresh


@dataclass
class Catalogs:
    cloud: CloudProvider
    refresh: float = REFRESH
    retry: float = RETRY
    monotonic: Callable[[], float] = time.monotonic
    _default: _Answer = field(default_factory=_Answer)
    _classes: dict[str, _Answer] = field(default_factory=dict)

    @property
    def catalog(self) -> list[InstanceOption]:
        """The last default catalog (empty before the first answer)."""
        return self._default.options or []

    async def load(self, view: SchedulingView | None = None) -> Loaded:
        """The default catalog and, on a cloud that resolves node classes (`view.gated`), the
        catalogs of the classes of the pools a pass may launch in (those not left out as not
        ready, whose classes may not even exist)."""
        pools: dict[str, NodePool] = {}
        if view is not None and view.gated:
            unready = view.unready()
            pools = {name: pool for name, pool in view.pools.items() if name not in unready}
        now = self.monotonic()
        loaded = Loaded(await self._of_default(now), await self._for_pools(pools, now))
        return overlaid(loaded, view) if view is not None else loaded

    async def _of_default(self, now: float) -> list[InstanceOption]:
        """Asked again once stale. The first ask's failure is the caller's `CloudError`; a later
        one keeps the catalog known."""
        answer = self._default
        if answer.due(now, self.refresh, self.retry):
            answer.tried_at = now
            try:
                raw = await self.cloud.instance_types()
            except CloudError as exc:
                if answer.options is None:
                    raise
                log.warning("instance types not refreshed, keeping the %d known: %s", len(answer.options), exc)
            else:
                answer.options, answer.at = [instance_option(t) for t in raw], now
        return answer.options or []

    async def _for_pools(self, pools: Mapping[str, NodePool], now: float) -> dict[str, list[InstanceOption]]:
        """Each pool on an EC2NodeClass with its class's catalog (the sim's pools, on classes
        of other kinds, launch from the default one and are not named)."""
        classes = {name: nodeclass for name, pool in pools.items() if (nodeclass := class_of(pool)) is not None}
        known = {nodeclass: await self._of_class(nodeclass, now) for nodeclass in sorted(set(classes.values()))}
        for gone in self._classes.keys() - known.keys():
            del self._classes[gone]
        return {pool: known[nodeclass] for pool, nodeclass in classes.items()}

    async def _of_class(self, nodeclass: str, now: float) -> list[InstanceOption]:
        answer = self._classes.setdefault(nodeclass, _Answer())
        if answer.due(now, self.refresh, self.retry):
            answer.tried_at = now
            try:
                raw = await self.cloud.instance_types(nodeclass)
            except CloudError as exc:
                kept = f"keeping the {len(answer.options)} known" if answer.options is not None else "none known yet"
                log.warning("instance types for EC2NodeClass %s not refreshed, %s: %s", nodeclass, kept, exc)
            else:
                answer.options, answer.at = [instance_option(t) for t in raw], now
        return answer.options or []
