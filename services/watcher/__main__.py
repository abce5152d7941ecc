"""`python -m services.watcher --port N`: the watcher, as `nodewright up` starts it. The cluster
it watches is reached through the Kubernetes API (`shared.runtime.process.serve_connected`)."""

from __future__ import annotations

from typing import Annotated

import typer

from services.watcher.service import WatcherService
from shared.runtime import logs
from shared.runtime.process import serve_connected


def main(
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    serve_connected(
        "watcher",
        lambda store, world, bus, config: WatcherService(store, world.cluster, config.clock(), bus, port=port),
    )


if __name__ == "__main__":
    typer.run(main)
