"""The database a CLI command reads: NODEWRIGHT_DATABASE_URL's, else the embedded one, or with
`--run NAME` one run's own log on that server (`shared.runtime.runs`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import pydantic
import typer

from shared.redaction import redact
from shared.runtime import loop

T = TypeVar("T")

RunOption = Annotated[
    str | None,
    typer.Option("--run", help="a run's own log (`nodewright runs` lists them; `latest` is the newest)"),
]


def with_database(work: Callable[[str], Awaitable[T]], run: str | None = None) -> T:
    """Run `work(url)` against the configured or embedded server's database, or run `run`'s;
    exit 2 on a database that cannot be reached, is not migrated, or a run that is not there."""
    import asyncpg
    import nats.errors
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from shared.config import settings
    from shared.runtime import runs
    from shared.runtime.servers import local_database_url

    try:
        with local_database_url(settings()) as url:
            if run is not None:
                url = loop.run(runs.resolve(url, run))
            return loop.run(work(url))
    except (OSError, RuntimeError, ValueError, ArgumentError, SQLAlchemyError, asyncpg.PostgresError) as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
    except (nats.errors.Error, pydantic.ValidationError) as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
