"""The log is append-only by rule (migration 0005): a writer login cannot change or remove an
event, a reader login cannot write, even the owner needs the maintenance setting, positions come
from the sequence, and the fenced leader lock works with replicas on different logins."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from shared.store.eventstore import EventStore, NotLeader
from shared.store.leader import LeaderLock
from tests.factories import T0, applied, created, new

KEY = 0x6E77_726F_6C65  # "nwrole"


def as_login(url: str, login: str) -> str:
    return make_url(url).set(drivername="postgresql", username=login, password=None).render_as_string(False)


@pytest.fixture
async def logins(migrated_url: str) -> AsyncIterator[dict[str, str]]:
    """Two writer logins and a reader login (server-wide roles, made and dropped per test)."""
    suffix = uuid.uuid4().hex[:8]
    made = {
        f"w1_{suffix}": "nodewright_writer",
        f"w2_{suffix}": "nodewright_writer",
        f"r_{suffix}": "nodewright_reader",
    }
    raw = await asyncpg.connect(make_url(migrated_url).set(drivername="postgresql").render_as_string(False))
    try:
        for login, group in made.items():
            await raw.execute(f"CREATE ROLE {login} LOGIN IN ROLE {group}")
        yield {
            "w1": as_login(migrated_url, f"w1_{suffix}"),
            "w2": as_login(migrated_url, f"w2_{suffix}"),
            "r": as_login(migrated_url, f"r_{suffix}"),
        }
    finally:
        for login in made:
            await raw.execute(f"DROP ROLE IF EXISTS {login}")
        await raw.close()


async def _seed(store: EventStore) -> None:
    event = applied("p", {"nodes": "5"})
    await store.append(event.stream_id, None, [new(event)])
    claim = created("a", "p")
    await store.append(claim.stream_id, None, [new(claim)])


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET data = '{}'::jsonb WHERE position = 1",
        "DELETE FROM events WHERE position = 1",
        "TRUNCATE events",
    ],
)
async def test_a_writer_may_append_but_never_change_or_remove_an_event(store, logins, statement):
    writer = EventStore.connect(logins["w1"], pool_size=1)
    try:
        await _seed(writer)
        async with writer.driver_connection() as raw:
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
                await raw.execute(statement)
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match=r"permission denied"):
                async with raw.transaction():  # the maintenance setting grants nothing
                    await raw.execute("SET LOCAL nodewright.maintenance = on")
                    await raw.execute(statement)
    finally:
        await writer.close()
    assert await store.head_position() == 2


@pytest.mark.parametrize(
    ("statement", "refused"),
    [
        ("UPDATE events SET data = '{}'::jsonb WHERE position = 1", "UPDATE refused"),
        ("DELETE FROM events WHERE position = 2", "DELETE refused"),
        ("TRUNCATE events", "TRUNCATE refused"),
    ],
)
async def test_even_the_owner_needs_the_maintenance_setting(store, statement, refused):
    await _seed(store)
    async with store.driver_connection() as raw:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"events are append-only: {refused}"):
            await raw.execute(statement)
        assert await raw.fetchval("SELECT count(*) FROM events") == 2
        async with raw.transaction():
            await raw.execute("SET LOCAL nodewright.maintenance = on")
            await raw.execute(statement)


async def test_a_position_cannot_be_chosen(store):
    async with store.driver_connection() as raw:
        with pytest.raises(asyncpg.GeneratedAlwaysError):
            await raw.execute(
                "INSERT INTO events (position, event_id, stream_id, version, type, data, occurred_at)"
                " VALUES (99, gen_random_uuid(), 'x-1', 1, 'NodePoolDeleted', '{}', now())"
            )


async def test_a_reader_reads_and_writes_nothing(store, logins):
    await _seed(store)
    reader = await asyncpg.connect(logins["r"])
    try:
        assert await reader.fetchval("SELECT count(*) FROM events") == 2
        for statement in (
            "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at)"
            " VALUES (gen_random_uuid(), 'x-1', 1, 'NodePoolDeleted', '{}', now())",
            "UPDATE nodepool_counters SET nodes = 0",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await reader.execute(statement)
    finally:
        await reader.close()


async def test_the_fence_holds_across_logins(store, logins):
    """Two replicas on two writer logins: the fence check reads only `pg_locks`, which PostgreSQL
    shows to every role (a backend's start time it hides from other roles)."""
    await _seed(store)
    one, two = EventStore.connect(logins["w1"], pool_size=1), EventStore.connect(logins["w2"], pool_size=1)
    first, second = LeaderLock(one, KEY), LeaderLock(two, KEY)
    try:
        assert await first.try_acquire()
        assert not await second.try_acquire()
        await two.reserve_launch([created("b", "p")], occurred_at=T0, producer="scheduler", fence=first.fence)
        await first.release()
        assert await second.try_acquire()
        with pytest.raises(NotLeader):
            await one.reserve_launch([created("c", "p")], occurred_at=T0, producer="scheduler", fence=first.fence)
        await one.reserve_launch([created("c", "p")], occurred_at=T0, producer="scheduler", fence=second.fence)
    finally:
        await first.release()
        await second.release()
        await one.close()
        await two.close()
    assert (await store.counters("p"))["p"].nodes == 3
