"""EventStore on a real PostgreSQL: migrations, appends, concurrency, idempotency, reads."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from shared.events.envelope import NewEvent
from shared.policy.counters import InvalidTransition, LimitExceeded
from shared.store.eventstore import NO_STREAM, Append, ConcurrencyConflict, DuplicateMismatch, EventStore
from shared.store.migrate import head_revision, upgrade
from shared.store.schema import metadata
from tests.factories import T0, applied, created, launched, new


async def test_migrations_create_the_schema_and_a_second_run_changes_nothing(fresh_database_url):
    assert await upgrade(fresh_database_url) == (None, head_revision())
    assert await upgrade(fresh_database_url) == (head_revision(), head_revision())
    engine = create_async_engine(fresh_database_url)
    async with engine.connect() as conn:
        diff = await conn.run_sync(lambda sync: compare_metadata(MigrationContext.configure(sync), metadata))
        names = set(await conn.scalars(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")))
    await engine.dispose()
    assert diff == []
    assert {"events", "nodepool_counters", "consumer_checkpoints", "outbox_checkpoint", "alembic_version"} <= names


async def test_append_and_read_back(store: EventStore):
    pool = applied("p", {"nodes": "5"})
    first = await store.append(pool.stream_id, NO_STREAM, [new(pool)])
    second = await store.append(pool.stream_id, 1, [new(pool), new(pool)])
    assert second == [first[0] + 1, first[0] + 2]
    events = await store.read_stream(pool.stream_id)
    assert [e.version for e in events] == [1, 2, 3]
    assert events[0].type == "NodePoolApplied"
    assert events[0].occurred_at == T0
    assert events[0].metadata.producer == "test"
    assert events[0].recorded_at.tzinfo is not None  # the database's wall time, not the decision's clock
    assert events[0].data["nodepool_object"]["metadata"]["name"] == "p"


async def test_optimistic_concurrency_conflict_is_typed_and_writes_nothing(store: EventStore):
    pool = applied("p")
    await store.append(pool.stream_id, NO_STREAM, [new(pool)])
    with pytest.raises(ConcurrencyConflict) as caught:
        await store.append(pool.stream_id, 0, [new(pool)])
    assert (caught.value.expected, caught.value.actual) == (0, 1)
    with pytest.raises(ConcurrencyConflict):
        await store.append(pool.stream_id, 5, [new(pool)])
    assert len(await store.read_stream(pool.stream_id)) == 1


async def test_racing_writers_on_one_stream_one_wins_each_version(store: EventStore):
    pool = applied("p")
    await store.append(pool.stream_id, NO_STREAM, [new(pool)])
    results = await asyncio.gather(
        *(store.append(pool.stream_id, 1, [new(pool)]) for _ in range(10)), return_exceptions=True
    )
    assert sum(isinstance(r, list) for r in results) == 1
    assert all(isinstance(r, ConcurrencyConflict) for r in results if not isinstance(r, list))


async def test_reappending_the_same_event_ids_returns_the_original_positions(store: EventStore):
    pool = applied("p")
    events = [new(pool), new(pool)]
    positions = await store.append(pool.stream_id, NO_STREAM, events)
    assert await store.append(pool.stream_id, NO_STREAM, events) == positions
    assert await store.append(pool.stream_id, None, events) == positions
    assert len(await store.read_stream(pool.stream_id)) == 2
    with pytest.raises(DuplicateMismatch):
        await store.append(pool.stream_id, None, [events[0], new(pool)])
    assert len(await store.read_stream(pool.stream_id)) == 2


async def test_concurrent_redeliveries_append_once(store: EventStore):
    pool = applied("p")
    event = new(pool)
    results = await asyncio.gather(*(store.append(pool.stream_id, None, [event]) for _ in range(8)))
    assert len({tuple(r) for r in results}) == 1
    assert len(await store.read_stream(pool.stream_id)) == 1


async def test_an_append_of_no_events_checks_the_version_and_writes_nothing(store: EventStore):
    """A unit with no events only checks its stream's version; it shares its batch with a
    redelivered unit, which still gets its stored positions back."""
    pool = applied("p")
    event = new(pool)
    (position,) = await store.append(pool.stream_id, NO_STREAM, [event])
    results = await store.append_units(
        [[Append(pool.stream_id, 1, [])], [Append(pool.stream_id, None, [event])], [Append("thing-x", 3, [])]]
    )
    assert results[:2] == [[], [position]]
    assert isinstance(results[2], ConcurrencyConflict)
    assert await store.head_position() == position


async def test_a_unit_is_all_or_nothing_and_a_refused_one_changes_nothing(store: EventStore):
    pool = applied("p", {"nodes": "2"})
    await store.append(pool.stream_id, NO_STREAM, [new(pool)])
    before = (await store.counters("p"))["p"]
    claims = [created(f"c{i}", "p") for i in range(3)]
    with pytest.raises(LimitExceeded) as caught:
        await store.reserve_launch(claims, occurred_at=T0, producer="test")
    assert caught.value.numbers["exceeded"] == {"nodes": ["3", "2"]}
    assert await store.head_position() == 1
    assert (await store.counters("p"))["p"] == before
    # a unit whose second stream conflicts leaves its first stream unwritten too
    c0 = created("c0", "p")
    unit = [Append(c0.stream_id, NO_STREAM, [new(c0)]), Append(pool.stream_id, 0, [new(pool)])]
    with pytest.raises(ConcurrencyConflict):
        await store.append_unit(unit)
    assert await store.read_stream(c0.stream_id) == []
    assert (await store.counters("p"))["p"] == before


async def test_lifecycle_events_for_unknown_claims_are_refused(store: EventStore):
    pool = applied("p")
    await store.append(pool.stream_id, NO_STREAM, [new(pool)])
    ghost = launched("ghost", "p")
    with pytest.raises(InvalidTransition, match="never created"):
        await store.append(ghost.stream_id, None, [new(ghost)])


async def test_read_all_pages_in_position_order(store: EventStore):
    pool = applied("p")
    await store.append(pool.stream_id, NO_STREAM, [new(pool) for _ in range(25)])
    other = applied("q")
    await store.append(other.stream_id, NO_STREAM, [new(other) for _ in range(5)])
    pages = [page async for page in store.read_all(batch_size=7)]
    assert [len(p) for p in pages] == [7, 7, 7, 7, 2]
    positions = [e.position for p in pages for e in p]
    assert positions == sorted(positions) and len(set(positions)) == 30
    assert [e.position for p in [p async for p in store.read_all(28, batch_size=7)] for e in p] == [29, 30]


async def test_batched_units_fail_alone(store: EventStore):
    """Units grouped in one transaction keep their own outcome."""
    pool = applied("p", {"nodes": "1"})
    await store.append(pool.stream_id, NO_STREAM, [new(pool)])
    a, b = created("a", "p"), created("b", "p")
    stray = applied("q")
    results = await store.append_units(
        [
            [Append(a.stream_id, NO_STREAM, [new(a)])],
            [Append(b.stream_id, NO_STREAM, [new(b)])],
            [Append(stray.stream_id, NO_STREAM, [new(stray, event_id=uuid.uuid4())])],
        ]
    )
    assert isinstance(results[0], list)
    assert isinstance(results[1], LimitExceeded)
    assert isinstance(results[2], list)
    assert (await store.counters("p"))["p"].nodes == 1


def test_new_event_needs_an_aware_time():
    from datetime import datetime

    with pytest.raises(ValueError, match="timezone"):
        NewEvent.of(applied("p"), occurred_at=datetime(2026, 1, 1), producer="t")
