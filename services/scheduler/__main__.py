"""`python -m services.scheduler --port N`: the scheduler, as `nodewright up` starts it. The
cloud it launches on is the sim's, over NATS; the cluster (NodeClaims, Events) is reached through
the Kubernetes API (`shared.runtime.process.serve_connected`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from services.scheduler.service import SchedulerService
from shared.runtime import logs
from shared.runtime.process import serve_connected


def main(
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    serve_connected(
        "scheduler",
        lambda store, world, bus, config: SchedulerService(
            store,
            world.cloud,
            config.clock(),
            bus,
            port=port,
            idle=timedelta(seconds=config.batch_idle_duration),
            longest=timedelta(seconds=config.batch_max_duration),
            cluster=world.cluster,
            timeout=timedelta(seconds=config.scheduling_timeout),
        ),
    )


if __name__ == "__main__":
    typer.run(main)
