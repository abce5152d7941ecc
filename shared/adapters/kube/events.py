"""Kubernetes Events (core/v1) as client-go's recorder writes them.

Each Event first goes through client-go's correlator (`shared.kube.correlator`: similar Events
aggregated, an object's flood dropped). The first of an (object, reason, message) is created as
`<object name>.<nanoseconds in hex>` in the object's namespace (`default` for a cluster-scoped
object); each repeat PATCHes that Event's `count` and `lastTimestamp`, as client-go's
EventCorrelator does, so `kubectl describe` shows `x12 over 3m` rather than twelve lines. The
cache of what was recorded is bounded (client-go keeps 4096); an Event gone from the server
meanwhile is created again.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.adapters.kube.api import MERGE_PATCH, KubeApi
from shared.adapters.kube.informer import KINDS
from shared.clock import Clock, SystemClock
from shared.kube.correlator import Correlator
from shared.ports.cluster import KubeEvent, NotFound

CACHED = 4096
SOURCE = "karpenter"
"""The component Events come from, as upstream's recorder names it (`kubectl describe`'s From)."""
API_VERSIONS = {kind.name: kind.api_version for kind in KINDS}


@dataclass(slots=True)
class _Recorded:
    namespace: str
    name: str
    count: int


@dataclass(slots=True)
class _Writing:
    """The lock of one (object, reason, message) and how many callers hold or wait for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    callers: int = 0


class EventRecorder:
    def __init__(self, api: KubeApi, clock: Clock | None = None) -> None:
        self.api = api
        self.clock = clock or SystemClock()
        self._recorded: OrderedDict[tuple[str, str, str, str], _Recorded] = OrderedDict()
        self._writing: dict[tuple[str, str, str, str], _Writing] = {}
        self.correlator = Correlator()

    async def record(self, event: KubeEvent) -> None:
        """One write at a time per (object, reason, message): repeats recorded at once count up
        one Event rather than each creating its own."""
        correlated = self.correlator.correlate(event, self.clock.now())
        if correlated is None:
            return  # client-go's spam filter: too many about this object lately
        event, same = correlated.event, correlated.key
        writing = self._writing.setdefault(same, _Writing())
        writing.callers += 1
        try:
            async with writing.lock:
                await self._record(event, same)
        finally:
            writing.callers -= 1
            if not writing.callers:
                del self._writing[same]

    async def _record(self, event: KubeEvent, same: tuple[str, str, str, str]) -> None:
        now = _rfc3339(self.clock.now())
        known = self._recorded.get(same)
        if known is not None:
            self._recorded.move_to_end(same)
            path = f"/api/v1/namespaces/{known.namespace}/events/{known.name}"
            try:
                await self.api.call(
                    "PATCH",
                    path,
                    body={"count": known.count + 1, "lastTimestamp": now, "message": event.message},
                    content_type=MERGE_PATCH,
                )
                known.count += 1
                return
            except NotFound:
                del self._recorded[same]  # expired on the server: created anew below
        namespace, _, name = event.key.rpartition("/")
        event_namespace = namespace or "default"
        event_name = f"{name}.{time.time_ns():x}"
        involved: dict[str, Any] = {"kind": event.kind, "name": name, "apiVersion": API_VERSIONS.get(event.kind, "v1")}
        if namespace:
            involved["namespace"] = namespace
        if event.uid:
            involved["uid"] = event.uid
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": event_namespace},
            "involvedObject": involved,
            "type": event.type,
            "reason": event.reason,
            "message": event.message,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": SOURCE},
            "reportingComponent": SOURCE,
        }
        await self.api.call("POST", f"/api/v1/namespaces/{event_namespace}/events", body=body)
        self._recorded[same] = _Recorded(event_namespace, event_name, 1)
        while len(self._recorded) > CACHED:
            self._recorded.popitem(last=False)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
