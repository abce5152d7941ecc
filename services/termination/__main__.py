"""`python -m services.termination --port N`: termination, as `nodewright up` starts it. It drains
through the Kubernetes API and deletes through the cloud (the sim's, over NATS)."""

from __future__ import annotations

from typing import Annotated

import typer

from services.termination.service import TerminationService
from shared.runtime import logs
from shared.runtime.process import serve_connected


def main(
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    serve_connected(
        "termination",
        lambda store, world, bus, config: TerminationService(
            store, world.cloud, world.cluster, config.clock(), bus, port=port, ack_wait=config.termination_ack_wait
        ),
    )


if __name__ == "__main__":
    typer.run(main)
