"""`python -m services.relay --port N`: the outbox relay, as `nodewright up` starts it."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from services.relay.service import RelayService
from shared import crashes
from shared.bus.connection import BusSettings
from shared.config import settings
from shared.runtime import logs
from shared.runtime.process import serve
from shared.store.eventstore import EventStore


def main(
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    config = settings()
    if not config.database_url or not config.nats_url:
        crashes.give_up("the relay needs NODEWRIGHT_DATABASE_URL and NODEWRIGHT_NATS_URL", 2)
    bus = BusSettings.from_settings(config)
    database_url = config.database_url

    async def run(stopping: asyncio.Event) -> None:
        store = EventStore.connect(database_url, pool_size=2)
        try:
            await RelayService(store, bus, port=port).run(stopping)
        finally:
            await store.close()

    serve(run, "relay")


if __name__ == "__main__":
    typer.run(main)
