"""NodeOverlays in the watcher, while the `NodeOverlay` gate is on: their facts and their status.

Facts: a valid overlay's spec is recorded (`NodeOverlayApplied`) each time it changes, and its end
(`NodeOverlayDeleted`) when it goes or stops being valid, so the scheduler, disruption and the
what-if fold the same overlays from the log. With the gate off nothing is recorded, and a list
takes back every overlay the log still holds in force: upstream ignores overlays then.

Status (upstream's NodeOverlay controller): every overlay is resolved against every NodePool's
catalog (`shared.scheduling.overlays`) whenever an overlay or a pool changes, and at least every
`REFRESH` seconds as the cloud's prices move; each overlay's `ValidationSucceeded` (False with
`RuntimeValidation` or `Conflict`) and `Ready` are written through the status subresource.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.watcher.documents import desired_spec
from services.watcher.facts import Fact, fact_id
from services.watcher.pool_status import status_condition
from shared.api.nodeoverlay import VALIDATION_SUCCEEDED, NodeOverlay
from shared.api.nodeoverlay_validation import validate_overlay
from shared.api.nodepool import NodePool
from shared.api.validation import validate_nodepool
from shared.events import contracts as c
from shared.ports.cluster import DELETED, NODEOVERLAY, NODEPOOL, Snapshot, WatchEvent
from shared.scheduling.overlays import CONFLICT, CONFLICT_MESSAGE, RUNTIME_VALIDATION, Resolution

OVERLAY_FACTS = (c.NodeOverlayApplied.TYPE, c.NodeOverlayDeleted.TYPE)
"""The overlay facts the watcher reads back from the log when it starts."""
REFRESH = 300.0
"""Seconds between resolutions with nothing changed: the catalog's own refresh."""


@dataclass(slots=True)
class _Known:
    version: int
    desired: dict[str, Any] | None
    valid: bool


@dataclass(slots=True)
class Overlays:
    """What the log holds of each overlay (`known`), and what the cluster holds now: the overlays
    (`documents`) and the valid NodePools (`pools`) the status controller resolves."""

    enabled: bool
    known: dict[str, _Known] = field(default_factory=dict)
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    pools: dict[str, NodePool] = field(default_factory=dict)
    dirty: bool = True

    def remember(self, events: Iterable[c.Event]) -> None:
        for event in events:
            if isinstance(event, c.NodeOverlayApplied):
                document = event.nodeoverlay_object
                self.known[event.nodeoverlay] = _Known(event.resource_version or 0, desired_spec(document), True)
            elif isinstance(event, c.NodeOverlayDeleted):
                self.known.pop(event.nodeoverlay, None)

    def resync(self, snapshot: Snapshot) -> list[Fact]:
        """A full list: the pools and overlays as they are now, and the ends of the overlays the
        log holds in force that are gone (all of them, with the gate off)."""
        self.documents.clear()
        self.pools.clear()
        out: list[Fact] = []
        present: set[str] = set()
        for event in snapshot.objects:
            if event.kind == NODEOVERLAY and self.enabled:
                present.add(event.key)
            out.extend(self.observe(event))
        for gone in [k for k in self.known if k not in present]:
            out.extend(self.observe(WatchEvent(snapshot.resource_version, NODEOVERLAY, DELETED, gone, {})))
        self.dirty = True
        return out

    def observe(self, event: WatchEvent) -> list[Fact]:
        if event.kind == NODEPOOL:
            self._pool(event)
            return []
        if event.kind != NODEOVERLAY or not (self.enabled or event.action == DELETED):
            return []
        self.dirty = True
        known = self.known.get(event.key)
        if event.action == DELETED:
            self.documents.pop(event.key, None)
            self.known.pop(event.key, None)
            return self._ended(event.key, known)
        self.documents[event.key] = event.object
        desired = desired_spec(event.object)
        if known is not None and known.desired == desired:
            return []  # a status write (our own), not a new spec
        result = validate_overlay(event.object)
        if result.overlay is None or result.name != event.key:
            self.known[event.key] = _Known(event.resource_version, desired, False)
            return self._ended(event.key, known)
        self.known[event.key] = _Known(event.resource_version, desired, True)
        applied = c.NodeOverlayApplied(
            nodeoverlay=event.key, nodeoverlay_object=event.object, resource_version=event.resource_version
        )
        return [Fact(applied, fact_id(applied.TYPE, event.key, event.resource_version))]

    @staticmethod
    def _ended(key: str, known: _Known | None) -> list[Fact]:
        if known is None or not known.valid:
            return []  # never in force: nothing to take back
        deleted = c.NodeOverlayDeleted(nodeoverlay=key)
        return [Fact(deleted, fact_id(deleted.TYPE, key, known.version))]

    def _pool(self, event: WatchEvent) -> None:
        self.dirty = True
        pool = None if event.action == DELETED else validate_nodepool(event.object).nodepool
        if pool is None:
            self.pools.pop(event.key, None)
        else:
            self.pools[event.key] = pool

    def in_force(self) -> dict[str, NodeOverlay]:
        """The overlays now in the cluster that pass admission, by name."""
        out = {}
        for name, document in self.documents.items():
            overlay = validate_overlay(document).overlay
            if overlay is not None and overlay.name == name:
                out[name] = overlay
        return out


def conditions(
    name: str, resolution: Resolution, now: datetime, previous: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """An overlay's `ValidationSucceeded` and `Ready` after a resolution, as upstream's
    controller sets them; a condition whose status is unchanged keeps its transition time."""
    if name in resolution.invalid:
        failed: tuple[str, str] | None = (RUNTIME_VALIDATION, resolution.invalid[name])
    elif name in resolution.conflicting:
        failed = (CONFLICT, CONFLICT_MESSAGE)
    else:
        failed = None
    if failed is None:
        validation = status_condition(VALIDATION_SUCCEEDED, True, VALIDATION_SUCCEEDED, "", now)
        ready = status_condition("Ready", True, "Ready", "", now)
    else:
        validation = status_condition(VALIDATION_SUCCEEDED, False, *failed, now)
        ready = status_condition("Ready", False, "UnhealthyDependents", f"{VALIDATION_SUCCEEDED}=False", now)
    since = {c.get("type"): c for c in previous}
    out = [validation, ready]
    for condition in out:
        old = since.get(condition["type"])
        if old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
            condition["lastTransitionTime"] = old["lastTransitionTime"]
    return out
