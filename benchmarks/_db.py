"""A throwaway, migrated database for a benchmark run: NODEWRIGHT_DATABASE_URL's server, else an
embedded PostgreSQL in a temporary directory."""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from shared.config import settings
from shared.runtime.postgres import EmbeddedPostgres
from shared.store.migrate import upgrade


async def _admin(url: str, statement: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(text(statement))
    await engine.dispose()


@contextmanager
def bench_database() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        admin = settings().database_url
        if admin is None:
            server = EmbeddedPostgres(Path(tmp) / "pg").start()
            admin = server.url
        name = f"nw_bench_{secrets.token_hex(4)}"
        asyncio.run(_admin(admin, f'CREATE DATABASE "{name}"'))
        url = make_url(admin).set(database=name).render_as_string(hide_password=False)
        try:
            asyncio.run(upgrade(url))
            where = make_url(admin)
            print(f"database: {'embedded PostgreSQL' if server else where.host or where.query.get('host')} ({name})")
            yield url
        finally:
            asyncio.run(_admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            if server:
                server.stop()
