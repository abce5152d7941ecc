"""The servers a CLI command talks to: the database (NODEWRIGHT_DATABASE_URL's, else the embedded
one, or with `--run NAME` one run's own log on that server, `shared.runtime.runs`) and the bus.

A command never hangs on a server that does not answer: before its work it connects once, for at
most NODEWRIGHT_CONNECT_TIMEOUT seconds, and gives up with exit 2 and a message naming the
server and the setting (a refused connection at once). Nothing it prints holds a password.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import pydantic
import typer

from shared.config import setting_error
from shared.crashes import one_line
from shared.redaction import location, redact
from shared.runtime import loop

if TYPE_CHECKING:
    from shared.bus.connection import BusSettings
    from shared.config import Settings
    from shared.runtime.bus import LocalBus

T = TypeVar("T")

RunOption = Annotated[
    str | None,
    typer.Option("--run", help="a run's own log (`nodewright runs` lists them; `latest` is the newest)"),
]
TIMEOUT_SETTING = "NODEWRIGHT_CONNECT_TIMEOUT"


class Unreachable(RuntimeError):
    """A server that refused, or did not answer in time: the command exits 2 and says which."""


def settings_or_exit() -> Settings:
    """The settings, or exit 2 naming each variable that is wrong (never its value)."""
    from shared.config import settings

    try:
        return settings()
    except pydantic.ValidationError as exc:
        typer.echo(f"error: {redact(setting_error(exc))}", err=True)
        raise typer.Exit(2) from None


def with_database(work: Callable[[str], Awaitable[T]], run: str | None = None) -> T:
    """Run `work(url)` against the configured or embedded server's database, or run `run`'s;
    exit 2 on a database that cannot be reached, is not migrated, or a run that is not there."""
    import asyncpg
    import nats.errors
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from shared.runtime import runs
    from shared.runtime.postgres import local_database_url

    config = settings_or_exit()
    try:
        with local_database_url(config) as url:
            loop.run(database_answers(url, config.connect_timeout))
            if run is not None:
                url = loop.run(runs.resolve(url, run))
            return loop.run(work(url))
    except (OSError, RuntimeError, ValueError, ArgumentError, SQLAlchemyError, asyncpg.PostgresError) as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
    except nats.errors.Error as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
    except pydantic.ValidationError as exc:
        typer.echo(f"error: {redact(setting_error(exc))}", err=True)
        raise typer.Exit(2) from None


def with_bus(work: Callable[[LocalBus], T]) -> T:
    """Run `work` on NODEWRIGHT_NATS_URL, else on an embedded nats-server; exit 2 when the bus
    cannot be reached within NODEWRIGHT_CONNECT_TIMEOUT or refuses this identity."""
    import nats.errors

    from shared.deployment import BadDeployment
    from shared.runtime.bus import local_bus

    config = settings_or_exit()
    try:
        with local_bus(config) as bus:
            loop.run(bus_answers(bus.acting_as("cli"), "cli", config.connect_timeout))
            return work(bus)
    except typer.Exit:
        raise
    except (OSError, RuntimeError, BadDeployment, nats.errors.Error, pydantic.ValidationError) as exc:
        typer.echo(f"error: {redact(str(exc)) or type(exc).__name__}", err=True)
        raise typer.Exit(2) from None


async def database_answers(url: str, timeout: float) -> None:
    """Connect once and close; `Unreachable` when PostgreSQL refuses or is silent for `timeout`
    seconds, or will not take the login."""
    import asyncpg

    from shared.config import driver_params

    server = f"PostgreSQL at {location(url)} (NODEWRIGHT_DATABASE_URL)"
    try:
        async with asyncio.timeout(timeout):
            conn = await asyncpg.connect(**{**driver_params(url), "timeout": timeout})
    except TimeoutError:
        raise Unreachable(f"{server} did not answer within {timeout:g} s ({TIMEOUT_SETTING})") from None
    except (OSError, asyncpg.InterfaceError) as exc:
        raise Unreachable(f"cannot reach {server}: {one_line(exc)}") from None
    except asyncpg.PostgresError as exc:
        raise Unreachable(f"{server} refused the connection: {one_line(exc)}") from None
    await conn.close()


async def bus_answers(bus: BusSettings, service: str, timeout: float) -> None:
    """Connect once as `service` and close; `Unreachable` when no NATS server accepts within
    `timeout` seconds (a refusal: at its second try), or none takes the login."""
    import nats
    import nats.errors

    errors: list[Exception] = []

    async def noted(error: Exception) -> None:
        errors.append(error)

    options: dict[str, Any] = {
        **bus.nats_options(service, persistent=False),
        "max_reconnect_attempts": 1,  # nats-py's 0 is "for ever" on a first connection
        "connect_timeout": timeout,
        "error_cb": noted,
    }
    server = f"NATS at {', '.join(location(u) for u in options['servers'])} (NODEWRIGHT_NATS_URL)"
    try:
        async with asyncio.timeout(timeout):
            nc = await nats.connect(**options)
    except TimeoutError:
        last = f": {one_line(errors[-1])}" if errors else ""
        raise Unreachable(f"{server} did not answer within {timeout:g} s ({TIMEOUT_SETTING}){last}") from None
    except (OSError, nats.errors.Error) as exc:
        raise Unreachable(f"cannot reach {server}: {one_line(errors[-1] if errors else exc)}") from None
    await nc.close()


def reach_configured(config: Settings, bus: BusSettings) -> None:
    """Before `up` starts anything: the servers the settings name answer (embedded ones are
    waited for as they start)."""
    if config.database_url:
        loop.run(database_answers(config.database_url, config.connect_timeout))
    if config.nats_url:
        loop.run(bus_answers(bus, "cli", config.connect_timeout))
