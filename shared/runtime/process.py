"""Running one service as an OS process: stop cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Protocol

from shared.adapters.sim import SimClient
from shared.bus.connection import BusSettings
from shared.config import Settings, settings
from shared.runtime import loop
from shared.runtime.outages import OUTAGES, Backoff, unless_stopping
from shared.store.eventstore import EventStore

log = logging.getLogger("nodewright")


def serve(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `main(stopping)` until it returns; a signal sets `stopping` so it can finish its work."""

    async def run() -> None:
        stopping = asyncio.Event()
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stopping.set)
        await main(stopping)

    loop.run(run())


class Service(Protocol):
    async def run(self, stopping: asyncio.Event) -> None: ...


def serve_connected(name: str, build: Callable[[EventStore, SimClient, BusSettings, Settings], Service]) -> None:
    """Run a service that needs the event store and the cluster and cloud (the sim's adapter, the
    only one so far), as its own NATS identity, closing both when it stops. A bus not there yet
    is waited for. With NODEWRIGHT_SIGNING_KEY, every event it appends is signed."""
    config = settings()
    database_url = config.database_url
    if not database_url or not config.nats_url:
        log.error("the %s needs NODEWRIGHT_DATABASE_URL and NODEWRIGHT_NATS_URL", name)
        sys.exit(1)
    bus = BusSettings.from_settings(config)

    async def run(stopping: asyncio.Event) -> None:
        store = EventStore.connect(database_url, pool_size=4, signing_key=config.signing_key_bytes())
        sim = await _sim_client(bus, name, stopping)
        if sim is None:
            await store.close()
            return
        try:
            await build(store, sim, bus, config).run(stopping)
        finally:
            await sim.close()
            await store.close()

    serve(run)


async def _sim_client(bus: BusSettings, name: str, stopping: asyncio.Event) -> SimClient | None:
    backoff = Backoff()
    while not stopping.is_set():
        try:
            return await unless_stopping(SimClient.connect(bus, name), stopping)
        except OUTAGES as exc:
            log.warning("%s: NATS not reachable yet (%r); trying again", name, exc)
            await backoff.wait(stopping)
    return None
