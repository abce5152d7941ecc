"""`python -m services.scheduler --port N`: the scheduler, as `nodewright up` starts it. The
cloud it launches on is NODEWRIGHT_CLOUD's (the sim's over NATS, or EC2, where a pool launches
only once its EC2NodeClass is Ready); the cluster (NodeClaims, Events) is reached through the
Kubernetes API (`shared.runtime.process.serve_connected`)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Annotated

import typer

from services.scheduler.service import SchedulerService
from shared import crashes
from shared.config import STATIC_CAPACITY
from shared.ports.queue import MessageQueue
from shared.runtime import logs
from shared.runtime.process import serve_connected
from shared.scheduling.rules import MinValuesPolicy


def main(
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    queue = _interruption_queue()
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
            queue=queue,
            nodeclasses=config.cloud == "aws",
            min_values_policy=MinValuesPolicy(config.min_values_policy),
            static_capacity=config.gates[STATIC_CAPACITY],
        ),
        plans=True,
    )


def _interruption_queue() -> MessageQueue | None:
    """The queue NODEWRIGHT_INTERRUPTION_QUEUE names, if any: only then is the AWS SDK loaded."""
    if not os.environ.get("NODEWRIGHT_INTERRUPTION_QUEUE", "").strip():
        return None
    from shared.adapters.aws.queue import SqsQueue

    try:
        return SqsQueue.from_env()
    except ValueError as exc:
        crashes.give_up(f"the scheduler cannot watch the interruption queue: {exc}", 1)


if __name__ == "__main__":
    typer.run(main)
