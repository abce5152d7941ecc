"""Real PostgreSQL and NATS for integration tests.

Each server comes from, in order: an explicit URL (`NODEWRIGHT_TEST_DATABASE_URL`,
`NODEWRIGHT_TEST_NATS_URL`), testcontainers when a Docker engine answers, else the embedded
servers of `shared.runtime.postgres` and `shared.runtime.servers`, so `pytest tests/integration`
runs on a bare machine.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import pytest
from nats.js import JetStreamContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from shared.bus.connection import BusSettings
from shared.bus.identity import Identity, generate, server_config, user_name
from shared.bus.names import BusNames
from shared.config import async_database_url
from shared.runtime.postgres import EmbeddedPostgres
from shared.runtime.servers import EmbeddedNats, docker_available
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


TEST_DEPLOYMENTS = ("default", "blue", "green")
"""The deployments the session's embedded nats-server has users for."""


@dataclass
class SessionBus:
    """The session's NATS server: `url` as an admin the tests use to look and to set up (every
    permission), and each service's own identity where the server is ours (`acting_as`)."""

    url: str
    identities: dict[str, Identity] | None = None

    def acting_as(self, service: str, deployment: str = "default") -> BusSettings:
        names = BusNames(deployment)
        if self.identities is None:
            return BusSettings(self.url, names)
        identity = self.identities[user_name(names, service)]
        return BusSettings(self.plain_url, names).acting_as(identity)

    @property
    def plain_url(self) -> str:
        """The URL without the admin's credentials."""
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))


def secured_nats(data_dir: Path, deployments: tuple[str, ...] = TEST_DEPLOYMENTS) -> tuple[EmbeddedNats, SessionBus]:
    """An embedded nats-server with a user per service of each deployment, and an admin."""
    names = [BusNames(d) for d in deployments]
    identities = generate(names)
    admin = Identity("admin", secrets.token_urlsafe(16))
    everything = {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}
    config = server_config(
        names,
        identities,
        extra_users=[{"user": admin.user, "password": admin.password, "permissions": everything}],
    )
    server = EmbeddedNats(data_dir, config=config, probe={"user": admin.user, "password": admin.password})
    return server, SessionBus("", identities)


@pytest.fixture(scope="session")
def session_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionBus]:
    """A JetStream-enabled server shared by the session: an explicit one (open, its URL as given),
    a container, else an embedded one with a user per service."""
    explicit = os.environ.get("NODEWRIGHT_TEST_NATS_URL", "").strip()
    if explicit:
        yield SessionBus(explicit)
    elif docker_available():
        from testcontainers.community.nats import NatsContainer

        with NatsContainer(NATS_IMAGE, jetstream=True) as container:
            yield SessionBus(container.nats_uri())
    else:
        server, bus = secured_nats(tmp_path_factory.mktemp("embedded-nats"))
        with server:
            probe = server.probe or {}
            bus.url = f"nats://{probe['user']}:{probe['password']}@{server.host}:{server.port}"
            yield bus


@pytest.fixture(scope="session")
def nats_server_url(session_bus: SessionBus) -> str:
    """nats:// URL of the session's server, as an admin (every permission)."""
    return session_bus.url


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
    """A JetStream context (as the admin) with an empty stream for the default deployment (the
    server is shared by the session)."""
    import nats
    from nats.js.errors import NotFoundError

    from shared.bus.streams import ensure_stream

    client = await nats.connect(nats_server_url)
    js = client.jetstream()
    with suppress(NotFoundError):
        await js.delete_stream(BusNames().stream)
    await ensure_stream(js, BusNames())
    yield js
    await client.close()


@pytest.fixture
async def bus(session_bus: SessionBus) -> AsyncIterator[BusSettings]:
    """A deployment of the test's own on the session's server (as the admin), so nothing another
    test left on the bus is seen, set up as `nodewright bus setup` would; its streams are deleted
    afterwards. On an open server (a given URL, a container) it is marked insecure, as a user
    would have to."""
    import nats
    from nats.js.errors import NotFoundError

    from shared.bus.setup import provision

    nats_server_url = session_bus.url
    names = BusNames(f"t{secrets.token_hex(4)}")
    settings = BusSettings(nats_server_url, names, insecure=session_bus.identities is None)
    client = await nats.connect(nats_server_url)
    try:
        await provision(client.jetstream(), names)
    finally:
        await client.close()
    yield settings
    client = await nats.connect(nats_server_url)
    try:
        for stream in (settings.names.stream, settings.names.sim_journal_stream):
            with suppress(NotFoundError):
                await client.jetstream().delete_stream(stream)
    finally:
        await client.close()
