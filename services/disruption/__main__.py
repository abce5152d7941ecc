"""`python -m services.disruption --port N`: disruption, as `nodewright up` starts it. It reads the
instance types and prices from the cloud (the sim's, over NATS) and writes Events and NodeClaim
status through the Kubernetes API (`shared.runtime.process.serve_connected`). Spot-to-spot
consolidation, node repair and static scale-down follow `NODEWRIGHT_FEATURE_GATES`
(`SpotToSpotConsolidation=true`, `NodeRepair=true`, `StaticCapacity=true`; all off by default,
as upstream's); every known gate is recorded in the log (`FeatureGatesObserved`) when it leads."""

from __future__ import annotations

from typing import Annotated

import typer

from services.disruption.service import DisruptionService
from shared.config import NODE_REPAIR, SPOT_TO_SPOT_CONSOLIDATION, STATIC_CAPACITY
from shared.runtime import logs
from shared.runtime.process import serve_connected
from shared.scheduling.rules import MinValuesPolicy


def main(
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    serve_connected(
        "disruption",
        lambda store, world, bus, config: DisruptionService(
            store,
            world.cloud,
            config.clock(),
            bus,
            port=port,
            cluster=world.cluster,
            nodeclasses=config.cloud == "aws",
            spot_to_spot=config.gates[SPOT_TO_SPOT_CONSOLIDATION],
            node_repair=config.gates[NODE_REPAIR],
            static_capacity=config.gates[STATIC_CAPACITY],
            gates=config.gates,
            min_values_policy=MinValuesPolicy(config.min_values_policy),
        ),
        plans=True,
    )


if __name__ == "__main__":
    typer.run(main)
