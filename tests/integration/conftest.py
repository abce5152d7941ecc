"""Real PostgreSQL and NATS for integration tests.

Each server comes from, in order: an explicit URL (`NODEWRIGHT_TEST_DATABASE_URL`,
`NODEWRIGHT_TEST_NATS_URL`), testcontainers when a Docker engine answers, else the embedded
servers of `shared.runtime.servers`, so `pytest tests/integration` runs on a bare machine.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import pytest
from nats.js import JetStreamContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from shared.config import async_database_url
from shared.runtime.servers import EmbeddedNats, EmbeddedPostgres, docker_available
from shared.store.eventstore import EventStore

POSTGRES_IMAGE = "postgres:17-alpine"
NATS_IMAGE = "nats:2-alpine"


@pytest.fixture(scope="session")
def database_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """asyncpg URL of the admin database `postgres` on a server where tests may create databases."""
    explicit = os.environ.get("NODEWRIGHT_TEST_DATABASE_URL", "").strip()
    if explicit:
        yield async_database_url(explicit)
    elif docker_available():
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer(
            POSTGRES_IMAGE, username="postgres", password="postgres", dbname="postgres", driver="asyncpg"
        ) as container:
            yield container.get_connection_url()
    else:
        with EmbeddedPostgres(tmp_path_factory.mktemp("embedded-postgres") / "data") as server:
            yield server.url


@pytest.fixture(scope="session")
def nats_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nats:// URL of a JetStream-enabled server shared by the session."""
    explicit = os.environ.get("NODEWRIGHT_TEST_NATS_URL", "").strip()
    if explicit:
        yield explicit
    elif docker_available():
        from testcontainers.community.nats import NatsContainer

        with NatsContainer(NATS_IMAGE, jetstream=True) as container:
            yield container.nats_uri()
    else:
        with EmbeddedNats(tmp_path_factory.mktemp("embedded-nats")) as server:
            yield server.url


def _admin_engine(server_url: str) -> AsyncEngine:
    # AUTOCOMMIT: CREATE/DROP DATABASE cannot run inside a transaction block.
    return create_async_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)


@asynccontextmanager
async def _temporary_database(server_url: str) -> AsyncIterator[str]:
    name = f"nw_test_{secrets.token_hex(8)}"
    engine = _admin_engine(server_url)
    try:
        async with engine.connect() as connection:
            await connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
        finally:
            async with engine.connect() as connection:
                await connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await engine.dispose()


@pytest.fixture
def temporary_database(database_server_url: str) -> Callable[[], AbstractAsyncContextManager[str]]:
    """`async with temporary_database() as url:` a new empty database, dropped when the block ends."""
    return lambda: _temporary_database(database_server_url)


@pytest.fixture
async def fresh_database_url(database_server_url: str) -> AsyncIterator[str]:
    """asyncpg URL of a new empty database `nw_test_<hex>`, dropped after the test."""
    async with _temporary_database(database_server_url) as url:
        yield url


class EmbeddedNatsFactory(Protocol):
    def __call__(self, data_dir: Path | None = None, port: int | None = None) -> EmbeddedNats: ...


@pytest.fixture
def embedded_nats_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNatsFactory]:
    """Start an EmbeddedNats the test owns (to kill or restart); each in its own tmp dir unless given one."""
    started: list[EmbeddedNats] = []

    def start(data_dir: Path | None = None, port: int | None = None) -> EmbeddedNats:
        server = EmbeddedNats(data_dir or tmp_path_factory.mktemp("nats"), port)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
async def migrated_url(fresh_database_url: str) -> str:
    """A fresh database at the newest migration."""
    from shared.store.migrate import upgrade

    await upgrade(fresh_database_url)
    return fresh_database_url


@pytest.fixture
async def store(migrated_url: str) -> AsyncIterator[EventStore]:
    store = EventStore.connect(migrated_url, pool_size=20)
    yield store
    await store.close()


@pytest.fixture
async def jetstream(nats_server_url: str) -> AsyncIterator[JetStreamContext]:
    """A JetStream context with an empty NODEWRIGHT stream (the server is shared by the session)."""
    import nats
    from nats.js.errors import NotFoundError

    from shared.bus.streams import STREAM, ensure_stream

    client = await nats.connect(nats_server_url)
    js = client.jetstream()
    with suppress(NotFoundError):
        await js.delete_stream(STREAM)
    await ensure_stream(js)
    yield js
    await client.close()
