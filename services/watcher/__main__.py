"""`python -m services.watcher --port N`: the watcher, as `nodewright up` starts it. The cluster
it watches is reached through the Kubernetes API (`shared.runtime.process.serve_connected`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.watcher.nodeclasses import Resolver
from services.watcher.service import WatcherService
from shared.config import NODE_OVERLAY, Settings
from shared.runtime import logs
from shared.runtime.process import aws_configuration, serve_connected


def main(
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    serve_connected(
        "watcher",
        lambda store, world, bus, config: WatcherService(
            store,
            world.cluster,
            config.clock(),
            bus,
            port=port,
            resolver=_resolver(config, world.cluster),
            overlays=config.gates[NODE_OVERLAY],
            cloud=world.cloud,
        ),
    )


def _resolver(config: Settings, cluster: Any) -> Resolver | None:
    """With NODEWRIGHT_CLOUD=aws, the EC2NodeClass controller's resolver (AWS's standard
    configuration, as the provider reads it); none with the sim's cloud."""
    if config.cloud != "aws":
        return None
    from shared.adapters.aws.resolver import VersionedResolver

    aws, clients = aws_configuration("watcher")
    return VersionedResolver(
        clients, cluster=config.cluster_name or "", region=aws.region, version=cluster.server_version
    )


if __name__ == "__main__":
    typer.run(main)
