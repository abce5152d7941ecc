"""`python -m services.scheduler --port N`: the scheduler, as `nodewright up` starts it. The
cloud it launches on is the sim's, over NATS (the only `CloudProvider` adapter so far)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Annotated

import typer

from services.scheduler.service import SchedulerService
from shared.adapters.sim import SimClient
from shared.config import settings
from shared.runtime.process import serve
from shared.store.eventstore import EventStore


def main(port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0) -> None:
    config = settings()
    if not config.nats_url or not config.database_url:
        typer.echo("error: NODEWRIGHT_DATABASE_URL and NODEWRIGHT_NATS_URL must be set", err=True)
        raise typer.Exit(2)
    nats_url, database_url = config.nats_url, config.database_url

    async def run(stopping: asyncio.Event) -> None:
        store = EventStore.connect(database_url, pool_size=4)
        cloud = await SimClient.connect(nats_url)
        try:
            service = SchedulerService(
                store,
                cloud,
                config.clock(),
                nats_url,
                port=port,
                idle=timedelta(seconds=config.batch_idle_duration),
                longest=timedelta(seconds=config.batch_max_duration),
            )
            await service.run(stopping)
        finally:
            await cloud.close()
            await store.close()

    serve(run)


if __name__ == "__main__":
    typer.run(main)
