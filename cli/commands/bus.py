"""`nodewright relay`, `asyncapi` and the `bus` group (`setup`): the deployment's streams made,
the outbox published, and the bus's contract printed."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from cli import bus as on_bus
from cli.database import settings_or_exit, with_bus, with_database
from shared.runtime import loop

bus_app = typer.Typer(help="The bus: the deployment's streams and consumers.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command()(relay)
    app.add_typer(bus_app, name="bus")
    bus_app.command("setup")(bus_setup)
    app.command()(asyncapi)


def relay(
    once: Annotated[bool, typer.Option("--once", help="publish what is there, then stop")] = False,
    port: Annotated[int | None, typer.Option("--port", help="serve /healthz, /readyz and /metrics here")] = None,
) -> None:
    """Run the outbox relay: committed events onto the deployment's stream (`--once`: publish
    what is committed now, then stop)."""
    if not once:  # the service itself, in this process
        os.execv(sys.executable, [sys.executable, "-m", "services.relay", *(["--port", str(port)] if port else [])])
    count = with_bus(lambda bus: with_database(lambda url: on_bus.relay_once(url, bus.acting_as("relay"))))
    typer.echo(f"published {count} events")


def bus_setup(
    replicas: Annotated[
        int | None, typer.Option("--replicas", min=1, max=5, help="copies of each message (NODEWRIGHT_STREAM_REPLICAS)")
    ] = None,
) -> None:
    """Make the deployment's streams and its work consumers, as its setup user (or an admin):
    once per deployment before its services start, and again after an upgrade, as `migrate` does
    the schema. No service may make them itself. Exit 2 when it cannot."""
    from shared.bus.setup import set_up

    config = settings_or_exit()
    made = with_bus(
        lambda bus: loop.run(
            set_up(
                bus.acting_as("setup"),
                replicas=replicas or config.stream_replicas,
                ack_wait=config.termination_ack_wait,
            )
        )
    )
    typer.echo(f"streams {', '.join(made.streams)}; pull consumers {', '.join(made.consumers)}: set up")


def asyncapi(
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json")] = "yaml",
) -> None:
    """Print the AsyncAPI document of the bus (faststream's, from the event contracts)."""
    from shared.bus.asyncapi import render
    from shared.bus.names import BusNames
    from shared.config import settings

    if output not in ("yaml", "json"):
        typer.echo(f"error: --output must be yaml or json, not {output!r}", err=True)
        raise typer.Exit(2)
    typer.echo(render(BusNames(settings().deployment), json=output == "json"), nl=False)
