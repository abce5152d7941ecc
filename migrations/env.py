"""Alembic environment, async: the URL comes from the caller or `NODEWRIGHT_DATABASE_URL`."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from shared.config import async_database_url, settings
from shared.store.schema import metadata

config = context.config


def _url() -> str:
    url = config.attributes.get("url") or settings().database_url
    if not url:
        raise SystemExit("no database: set NODEWRIGHT_DATABASE_URL or run `nodewright migrate`")
    return async_database_url(url)


def _run(connection: Connection) -> None:
    # Once migration 0005 made the owner role here, what later migrations create is owned by it.
    owner = connection.exec_driver_sql(
        "SELECT pg_has_role(current_user, oid, 'MEMBER') AND has_schema_privilege(oid, 'public', 'CREATE')"
        " FROM pg_roles WHERE rolname = 'nodewright_owner'"
    ).scalar()
    if owner:
        connection.exec_driver_sql("SET ROLE nodewright_owner")
    context.configure(connection=connection, target_metadata=metadata, compare_server_default=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async())
