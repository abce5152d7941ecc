"""The servers integration tests stand on: a database per test, JetStream, and a NATS that can crash."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import nats
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from tests.integration.conftest import EmbeddedNatsFactory


async def _scalar(url: str, sql: str, **params: object) -> object:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return (await connection.execute(text(sql), params)).scalar_one()
    finally:
        await engine.dispose()


async def _database_exists(server_url: str, name: str) -> bool:
    return bool(await _scalar(server_url, "select count(*) from pg_database where datname = :name", name=name))


async def test_fresh_database_answers_and_is_empty(fresh_database_url: str) -> None:
    assert await _scalar(fresh_database_url, "select 1") == 1
    name = await _scalar(fresh_database_url, "select current_database()")
    assert isinstance(name, str)
    assert name.startswith("nw_test_")
    tables = await _scalar(
        fresh_database_url, "select count(*) from information_schema.tables where table_schema = 'public'"
    )
    assert tables == 0


async def test_temporary_database_is_dropped_afterwards(
    database_server_url: str, temporary_database: Callable[[], AbstractAsyncContextManager[str]]
) -> None:
    async with temporary_database() as url:
        name = make_url(url).database
        assert name is not None
        assert await _database_exists(database_server_url, name)
        # An open session must not keep the database alive: the drop forces it out.
        engine = create_async_engine(url, poolclass=NullPool)
        connection = await engine.connect()
    assert not await _database_exists(database_server_url, name)
    await connection.invalidate()
    await engine.dispose()


async def test_jetstream_answers_account_info(nats_server_url: str) -> None:
    """JetStream is on and counts what it holds: a stream added shows in the account's info."""
    client = await nats.connect(nats_server_url, allow_reconnect=False)
    name = f"ACCOUNT_INFO_{secrets.token_hex(4).upper()}"
    try:
        js = client.jetstream()
        before = await js.account_info()
        await js.add_stream(name=name, subjects=[f"account-info.{name}"])
        try:
            after = await js.account_info()
        finally:
            await js.delete_stream(name)
    finally:
        await client.close()
    assert after.streams == before.streams + 1


async def test_killed_embedded_nats_refuses_connections(embedded_nats_factory: EmbeddedNatsFactory) -> None:
    server = embedded_nats_factory()
    address = urlsplit(server.url)
    assert address.hostname is not None
    assert address.port is not None
    _, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.close()
    await writer.wait_closed()

    server.kill()

    assert not server.running
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(address.hostname, address.port)


async def test_embedded_nats_restarts_after_a_kill_with_its_streams(embedded_nats_factory: EmbeddedNatsFactory) -> None:
    server = embedded_nats_factory()
    url = server.url
    client = await nats.connect(url, allow_reconnect=False)
    jetstream = client.jetstream()
    await jetstream.add_stream(name="crash", subjects=["crash.>"])
    await jetstream.publish("crash.before", b"kept")
    await client.close()

    server.kill()
    server.start()

    assert server.url == url
    client = await nats.connect(url, allow_reconnect=False)
    try:
        info = await client.jetstream().stream_info("crash")
    finally:
        await client.close()
    assert info.state.messages == 1
