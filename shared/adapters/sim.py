"""The sim's side of the `Cluster` and `CloudProvider` ports, over NATS request/reply.

A client speaks as one service (its caller): each request goes to `<deployment>.sim.<caller>.<request>`
(`BusNames.sim_request`), with the reply expected in that service's own inbox, so the sim knows
who asks and answers only what `shared.bus.topology.SIM_CALLERS` lets it ask. The sim announces
each new resource version on `<deployment>.sim.watch` (`shared.bus.names`). `watch`
asks for the changes after the version it has seen whenever an announcement comes, and at least
every half second, so a lost announcement only delays it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from nats.aio.client import Client

from shared.api.core import Taint, TaintEffect
from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.ports.cloud import (
    CloudError,
    InstanceNotFound,
    InstanceView,
    InsufficientCapacityError,
    LaunchSpec,
    NoCompatibleInstanceTypes,
)
from shared.ports.cluster import ClusterError, EvictionRefused, Gone, KubeEvent, NotFound, Snapshot, WatchEvent

SNAPSHOT = "cluster.snapshot"
CHANGES = "cluster.changes"
TAINT = "cluster.taint"
UNTAINT = "cluster.untaint"
LABEL_NODE = "cluster.label-node"
ANNOTATE_NODECLAIM = "cluster.annotate-nodeclaim"
EVICT = "cluster.evict"
DELETE_POD = "cluster.delete-pod"
DELETE_NODE = "cluster.delete-node"
NODEPOOL_CONDITION = "cluster.nodepool-condition"
EVENT = "cluster.event"
INSTANCE_TYPES = "cloud.instance-types"
CREATE = "cloud.create"
DELETE = "cloud.delete"
LIST = "cloud.list"
"""Requests, each on `<deployment>.sim.<caller>.<request>` (`BusNames.sim_request`)."""

ERRORS: dict[str, type[Exception]] = {
    "EvictionRefused": EvictionRefused,
    "Gone": Gone,
    "NotFound": NotFound,
    "ClusterError": ClusterError,
    "InsufficientCapacity": InsufficientCapacityError,
    "NoCompatibleOffering": NoCompatibleInstanceTypes,
    "InstanceNotFound": InstanceNotFound,
    "CloudError": CloudError,
}
POLL_SECONDS = 0.5
PAGE = 500
"""Objects or changes per reply: a page stays far below NATS' 1 MB message limit."""


class SimError(RuntimeError):
    """The sim answered with an error this client does not know."""


class SimClient:
    """Both ports, for one NATS connection, speaking as `caller` (a service's name). The sim
    answers only a reply inbox of the caller's own (`BusNames.inbox`), which `connect` gives the
    connection; a connection made otherwise must have that inbox prefix too."""

    def __init__(self, nc: Client, caller: str, names: BusNames | None = None, timeout: float = 5.0) -> None:
        self.nc = nc
        self.caller = caller
        self.names = names or BusNames()
        self.timeout = timeout

    @classmethod
    async def connect(cls, bus: BusSettings | str, service: str) -> SimClient:
        """As `service`: its NATS identity decides which of the sim's requests it may send, and
        the sim answers only those, sent from its inbox."""
        bus = BusSettings.of(bus)
        return cls(await bus.connect(service), service, bus.names)

    async def close(self) -> None:
        await self.nc.drain()

    async def call(self, subject: str, payload: dict[str, Any] | None = None) -> Any:
        reply = await self.nc.request(
            self.names.sim_request(self.caller, subject), orjson.dumps(payload or {}), timeout=self.timeout
        )
        body = orjson.loads(reply.data)
        if isinstance(body, dict) and "error" in body:
            error = body["error"]
            raise ERRORS.get(error.get("type"), SimError)(error.get("message", "the sim refused"))
        return body

    # --- Cluster ---------------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """A list, page by page, of one snapshot the sim keeps until the last page is read."""
        body = await self.call(SNAPSHOT, {"limit": PAGE})
        objects = [WatchEvent.from_dict(o) for o in body["objects"]]
        while body.get("continue"):
            body = await self.call(SNAPSHOT, {"continue": body["continue"], "limit": PAGE})
            objects.extend(WatchEvent.from_dict(o) for o in body["objects"])
        return Snapshot(body["resourceVersion"], objects)

    async def changes(self, after: int) -> list[WatchEvent]:
        """Every change after `after`, a page at a time; Gone when the sim no longer keeps them."""
        out: list[WatchEvent] = []
        while True:
            page = [WatchEvent.from_dict(c) for c in await self.call(CHANGES, {"after": after, "limit": PAGE})]
            out.extend(page)
            if len(page) < PAGE:
                return out
            after = page[-1].resource_version

    async def watch(self, after: int) -> AsyncIterator[WatchEvent]:
        announced = asyncio.Event()

        async def on_announce(_msg: Any) -> None:
            announced.set()

        subscription = await self.nc.subscribe(self.names.sim_watch, cb=on_announce)
        try:
            while True:
                announced.clear()
                for change in await self.changes(after):
                    after = change.resource_version
                    yield change
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(announced.wait(), POLL_SECONDS)
        finally:
            await subscription.unsubscribe()

    async def taint(self, node: str, taint: Taint) -> None:
        await self.call(TAINT, {"node": node, "taint": taint.to_dict()})

    async def untaint(self, node: str, key: str, effect: TaintEffect | None = None) -> None:
        await self.call(UNTAINT, {"node": node, "key": key, "effect": effect.value if effect else None})

    async def label_node(self, node: str, labels: dict[str, str]) -> None:
        await self.call(LABEL_NODE, {"node": node, "labels": labels})

    async def annotate_nodeclaim(self, nodeclaim: str, nodepool: str, annotations: dict[str, str]) -> None:
        await self.call(ANNOTATE_NODECLAIM, {"nodeclaim": nodeclaim, "nodepool": nodepool, "annotations": annotations})

    async def evict(self, pod: str) -> None:
        await self.call(EVICT, {"pod": pod})

    async def delete_pod(self, pod: str, *, grace_seconds: int | None = None) -> None:
        await self.call(DELETE_POD, {"pod": pod, "gracePeriodSeconds": grace_seconds})

    async def delete_node(self, node: str) -> None:
        await self.call(DELETE_NODE, {"node": node})

    async def set_nodepool_condition(self, nodepool: str, condition: dict[str, Any]) -> None:
        await self.call(NODEPOOL_CONDITION, {"nodepool": nodepool, "condition": condition})

    async def record_event(self, event: KubeEvent) -> None:
        await self.call(EVENT, event.to_dict())

    # --- CloudProvider ---------------------------------------------------------------------------

    async def instance_types(self) -> list[dict[str, Any]]:
        return list(await self.call(INSTANCE_TYPES))

    async def create(self, spec: LaunchSpec) -> InstanceView:
        try:
            return dict(await self.call(CREATE, spec))
        except SimError as exc:  # a request the sim could not read: the cloud refuses it
            raise CloudError(str(exc)) from exc

    async def delete(self, provider_id: str) -> InstanceView:
        return dict(await self.call(DELETE, {"providerID": provider_id}))

    async def list(self) -> list[InstanceView]:
        return list(await self.call(LIST))
