"""The sim's cloud: the `CloudProvider` port over NATS request/reply, until a real provider.

The cluster is reached through the Kubernetes API (`shared.adapters.kube`), which the sim serves;
only the cloud is still asked over NATS. A client speaks as one service (its caller): each request
goes to `<deployment>.sim.<caller>.<request>` (`BusNames.sim_request`), with the reply expected in
that service's own inbox, so the sim knows who asks and answers only what
`shared.bus.topology.SIM_CALLERS` lets it ask.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from nats.aio.client import Client

from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.disruption.repair import AWS_REPAIR_POLICIES, RepairPolicy
from shared.ports.cloud import (
    CloudError,
    InstanceNotFound,
    InstanceView,
    InsufficientCapacityError,
    LaunchSpec,
    NoCompatibleInstanceTypes,
)

INSTANCE_TYPES = "cloud.instance-types"
CREATE = "cloud.create"
DELETE = "cloud.delete"
LIST = "cloud.list"
"""Requests, each on `<deployment>.sim.<caller>.<request>` (`BusNames.sim_request`)."""

ERRORS: dict[str, type[Exception]] = {
    "InsufficientCapacity": InsufficientCapacityError,
    "NoCompatibleOffering": NoCompatibleInstanceTypes,
    "InstanceNotFound": InstanceNotFound,
    "CloudError": CloudError,
}


class SimError(RuntimeError):
    """The sim answered with an error this client does not know."""


class SimClient:
    """The cloud, for one NATS connection, speaking as `caller` (a service's name). The sim
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

    # --- CloudProvider ---------------------------------------------------------------------------

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        """The sim's classes change nothing of a type: one answer for every pool."""
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

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """The sim declares the AWS provider's, as upstream's kwok provider declares a provider's."""
        return AWS_REPAIR_POLICIES
