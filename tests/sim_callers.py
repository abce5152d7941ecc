"""A sim cloud client for tests that stand in for every service at once (a test asks the sim's
cloud what a scheduler or a termination would): the sim answers a request only from a service
allowed to send it, replying to that service's inbox (`services.sim.service`). So each request
goes from the first service `shared.bus.topology` lets send it, over a connection of that
service's own whose inbox prefix is the service's; nothing is asked as a caller it is not."""

from __future__ import annotations

from typing import Any

from shared.adapters.sim import SimClient
from shared.bus.connection import BusSettings
from shared.bus.setup import provision
from shared.bus.topology import SIM_CALLERS, callers_of


class AnyCaller(SimClient):
    """One SimClient per service of SIM_CALLERS; `call` picks, per request, the first allowed."""

    def __init__(self, clients: dict[str, SimClient], timeout: float = 5.0) -> None:
        first = next(iter(clients.values()))  # `call` speaks through each caller's own client
        super().__init__(first.nc, first.caller, first.names, timeout)
        self.clients = clients

    @classmethod
    async def connect(cls, bus: BusSettings | str, service: str | None = None) -> AnyCaller:
        """A connection per caller as whoever `bus` names (a test server's admin), each with that
        caller's inbox prefix (`BusSettings.nats_options`). `service` must be None: every caller
        speaks for itself here."""
        if service is not None:
            raise TypeError("AnyCaller speaks as every caller; connect a SimClient to speak as one")
        clients: dict[str, SimClient] = {}
        try:
            for caller in SIM_CALLERS:
                clients[caller] = await SimClient.connect(bus, caller)
        except BaseException:
            for client in clients.values():
                await client.close()
            raise
        return cls(clients)

    async def call(self, subject: str, payload: dict[str, Any] | None = None) -> Any:
        callers = callers_of(subject)
        if not callers:
            raise ValueError(f"no service may send the sim {subject!r} (shared.bus.topology.SIM_CALLERS)")
        client = self.clients[callers[0]]
        client.timeout = self.timeout
        return await client.call(subject, payload)

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()


async def provisioned(bus: BusSettings | str) -> None:
    """The deployment's streams and work consumers, as `nodewright bus setup` makes them
    (`shared.bus.setup`), made as whoever `bus` names (a test server's admin): no service makes
    them, so a test that starts services on a deployment of its own sets it up first."""
    bus = BusSettings.of(bus)
    nc = await bus.connect("setup", persistent=False)
    try:
        await provision(nc.jetstream(), bus.names)
    finally:
        await nc.close()
