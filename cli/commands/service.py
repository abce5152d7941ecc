"""`nodewright service NAME`: run one service, as a container's command does.

`nodewright up` starts each service as `python -m services.NAME`; a container (the image's one
entry point, `nodewright`) chooses its service by this command instead. Each subcommand takes the
module's own options and replaces this process with it (no import: the services never import each
other, nor does the CLI import them), so the service is the container's process 1 and gets its
signals. The settings are read first, so a bad one (an address to listen on, a URL) is said in one
line naming its variable, and the container exits 2 instead of crash-looping on a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import pydantic
import typer

service_app = typer.Typer(
    help="Run one service in this process: its /healthz and /readyz on --port, /metrics beside them"
    " (or at NODEWRIGHT_METRICS_ADDRESS's port).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(service_app, name="service")


PortOption = Annotated[
    int, typer.Option("--port", min=0, max=65535, help="health and readiness port (0: any free one)")
]


def _exec(name: str, *args: str) -> NoReturn:
    from shared.config import settings

    try:
        settings()
    except pydantic.ValidationError as exc:
        for error in exc.errors():
            typer.echo(f"error: {_said(error)}", err=True)
        raise typer.Exit(2) from None
    os.execv(sys.executable, [sys.executable, "-m", f"services.{name}", *args])


def _said(error: dict[str, object]) -> str:
    """A settings error, naming its environment variable."""
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    location = error.get("loc") or ()
    field = str(location[0]) if isinstance(location, tuple) and location else ""
    variable = f"NODEWRIGHT_{field.upper()}"
    return message if not field or variable in message else f"{variable}: {message}"


@service_app.command("relay")
def relay(port: PortOption = 0) -> None:
    """The outbox relay: committed events onto the deployment's stream (one leads, others stand by)."""
    _exec("relay", "--port", str(port))


@service_app.command("watcher")
def watcher(port: PortOption = 0) -> None:
    """The watcher: the cluster's pods, nodes and NodePools as facts in the log."""
    _exec("watcher", "--port", str(port))


@service_app.command("scheduler")
def scheduler(port: PortOption = 0) -> None:
    """The scheduler: launches NodeClaims for pending pods within the pools' limits."""
    _exec("scheduler", "--port", str(port))


@service_app.command("disruption")
def disruption(port: PortOption = 0) -> None:
    """Disruption: expiration, drift, emptiness, consolidation, over-limit, within the budgets."""
    _exec("disruption", "--port", str(port))


@service_app.command("termination")
def termination(port: PortOption = 0) -> None:
    """Termination: drains and ends every NodeClaim whose deletion was asked for."""
    _exec("termination", "--port", str(port))


@service_app.command("sim")
def sim(
    scenario: Annotated[Path, typer.Option("--scenario", help="the Scenario file to play")],
    port: PortOption = 0,
) -> None:
    """The simulated cloud and cluster, playing a scenario on the clock."""
    _exec("sim", "--scenario", str(scenario), "--port", str(port))
