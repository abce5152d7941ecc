"""The leader lock fences reservations: a replica that lost the lock cannot reserve, and a new
leader plans only after every reservation its predecessor had in flight has ended, and waits for
no other transaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from shared.store.eventstore import EventStore, NotLeader, StoreError
from shared.store.fence import Fence, companion_key
from shared.store.leader import LeaderLock
from tests.factories import T0, applied, created, new

KEY = 0x6E77_7465_7374  # "nwtest"
HIGH_BIT_KEY = -0x1234_5678_9ABC  # negative: its halves must be split as PostgreSQL stores them


async def seed(store: EventStore, *events) -> None:
    for event in events:
        await store.append(event.stream_id, None, [new(event)])


@pytest.fixture
async def locks(store: EventStore) -> AsyncIterator[list[LeaderLock]]:
    made: list[LeaderLock] = []
    yield made
    for lock in made:
        await lock.release()


def lock_on(store: EventStore, locks: list[LeaderLock], key: int = KEY) -> LeaderLock:
    lock = LeaderLock(store, key)
    locks.append(lock)
    return lock


async def reserve(store: EventStore, name: str, fence: Fence) -> list[int]:
    return await store.reserve_launch([created(name, "p")], occurred_at=T0, producer="scheduler", fence=fence)


async def state(store: EventStore) -> tuple[int, tuple[int, int, int, int | None]]:
    pool = (await store.counters("p"))["p"]
    return await store.head_position(), (pool.nodes, pool.in_flight, pool.version, pool.last_position)


@asynccontextmanager
async def reservation_in_flight(store: EventStore, key: int = KEY) -> AsyncIterator[None]:
    """An open transaction holding the companion key shared, as a fenced reservation of `key`
    does from before its check until it ends; it ends (rolls back) on leaving the block."""
    async with store.driver_connection() as raw, raw.transaction():
        await raw.fetchval("SELECT pg_current_xact_id()")
        await raw.execute("SELECT pg_advisory_xact_lock_shared($1::bigint)", companion_key(key))
        yield


async def wait_for_waiters(store: EventStore, count: int, key: int = KEY) -> None:
    """Until `count` sessions wait for the companion key of `key`."""
    companion = companion_key(key) & 0xFFFF_FFFF_FFFF_FFFF
    async with store.driver_connection() as raw:
        for _ in range(500):
            waiting = await raw.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::bigint::oid"
                " AND objid = $2::bigint::oid AND objsubid = 1 AND NOT granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                companion >> 32,
                companion & 0xFFFF_FFFF,
            )
            if waiting >= count:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} sessions wait for the companion of {key}")


async def wait_until_unlocked(store: EventStore, pid: int) -> None:
    """A terminated backend lets its locks go when it has exited, a moment after the signal."""
    async with store.driver_connection() as raw:
        for _ in range(500):
            if not await raw.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1", pid):
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"backend {pid} still holds its advisory lock")


@pytest.mark.parametrize("key", [KEY, HIGH_BIT_KEY])
async def test_the_leaders_fenced_reservation_is_granted(store: EventStore, locks: list[LeaderLock], key: int):
    await seed(store, applied("p", {"nodes": "5"}))
    lock = lock_on(store, locks, key)
    assert await lock.try_acquire()
    assert await lock.held()
    assert lock.fence.key == key
    (position,) = await reserve(store, "a", lock.fence)
    assert [e.position for e in await store.read_stream("nodeclaim-a")] == [position]
    assert (await store.counters("p"))["p"].nodes == 1


@pytest.mark.parametrize("how", ["released", "connection killed"])
async def test_a_former_leader_cannot_reserve(store: EventStore, locks: list[LeaderLock], how: str):
    await seed(store, applied("p", {"nodes": "5"}))
    lock = lock_on(store, locks)
    assert await lock.try_acquire()
    fence = lock.fence
    await reserve(store, "a", fence)
    if how == "released":
        await lock.release()
    else:  # the lock's connection dies while the process goes on
        async with store.driver_connection() as raw:
            assert await raw.fetchval("SELECT pg_terminate_backend($1)", fence.pid)
        await wait_until_unlocked(store, fence.pid)
    assert not await lock.held()
    assert lock.fence == fence  # kept, so a late reservation is refused rather than unfenced
    before = await state(store)
    with pytest.raises(NotLeader) as refused:
        await reserve(store, "b", fence)
    assert f"advisory lock {KEY}" in str(refused.value)
    assert f"pid {fence.pid}" in str(refused.value)
    assert await state(store) == before
    assert await store.stream_version("nodeclaim-b") == 0
    with pytest.raises(NotLeader):  # nor may it pass off the same reservation again
        await reserve(store, "a", fence)


async def test_a_fence_names_the_backend_not_only_its_pid(store: EventStore, locks: list[LeaderLock]):
    """A pid is reused by later backends: the fence also names a nonce lock only its session holds."""
    await seed(store, applied("p", {"nodes": "5"}))
    lock = lock_on(store, locks)
    assert await lock.try_acquire()
    earlier = Fence(KEY, lock.fence.pid, lock.fence.nonce + 1)
    before = await state(store)
    with pytest.raises(NotLeader):
        await reserve(store, "a", earlier)
    assert await state(store) == before
    with pytest.raises(NotLeader):  # nor another key held by the same backend
        await reserve(store, "a", Fence(KEY + 1, lock.fence.pid, lock.fence.nonce))
    await reserve(store, "a", lock.fence)


async def test_unfenced_and_never_acquired(store: EventStore, locks: list[LeaderLock]):
    await seed(store, applied("p", {"nodes": "5"}))
    lock = lock_on(store, locks)
    with pytest.raises(StoreError, match="never acquired"):
        lock.fence  # noqa: B018
    assert not await lock.held()
    await store.reserve_launch([created("a", "p")], occurred_at=T0, producer="scheduler")
    assert (await store.counters("p"))["p"].nodes == 1


@pytest.mark.parametrize("how", ["released", "connection killed"])
async def test_one_leader_at_a_time(store: EventStore, locks: list[LeaderLock], how: str):
    await seed(store, applied("p", {"nodes": "5"}))
    first, second = lock_on(store, locks), lock_on(store, locks)
    assert await first.try_acquire()
    assert not await second.try_acquire()
    assert not await second.try_acquire()
    assert await first.try_acquire()  # already its own
    if how == "released":
        await first.release()
    else:
        async with store.driver_connection() as raw:
            await raw.fetchval("SELECT pg_terminate_backend($1)", first.fence.pid)
        await wait_until_unlocked(store, first.fence.pid)
    assert await second.try_acquire()
    assert not await first.try_acquire()
    assert second.fence.pid != first.fence.pid
    await reserve(store, "a", second.fence)
    with pytest.raises(NotLeader):
        await reserve(store, "b", first.fence)
    assert (await store.counters("p"))["p"].nodes == 1


async def test_acquiring_waits_for_fenced_reservations_in_flight(store: EventStore, locks: list[LeaderLock]):
    leader, rival = lock_on(store, locks), lock_on(store, locks)
    async with reservation_in_flight(store):
        acquiring = asyncio.create_task(leader.try_acquire())
        await asyncio.sleep(0.5)
        assert not acquiring.done()
        assert not await rival.try_acquire()  # the lock is taken first, then the wait
    assert await asyncio.wait_for(acquiring, timeout=10)
    assert await leader.held()


@pytest.mark.parametrize("other", ["transaction with an id", "reservation under another key"])
async def test_no_other_transaction_holds_up_a_new_leader(store: EventStore, locks: list[LeaderLock], other: str):
    """An idle session in a transaction, a long migration: neither delays a takeover."""
    lock = lock_on(store, locks)
    async with store.driver_connection() as raw, raw.transaction():
        await raw.fetchval("SELECT pg_current_xact_id()")  # a writer: it has its id
        if other == "reservation under another key":
            await raw.execute("SELECT pg_advisory_xact_lock_shared($1::bigint)", companion_key(HIGH_BIT_KEY))
        assert await asyncio.wait_for(lock.try_acquire(), timeout=5)
        assert await lock.held()


async def test_a_transaction_that_writes_nothing_does_not_hold_up_a_new_leader(
    store: EventStore, locks: list[LeaderLock]
):
    """Such as an audit's long snapshot: it has no transaction id and cannot reserve."""
    lock = lock_on(store, locks)
    async with store.exported_snapshot():
        assert await asyncio.wait_for(lock.try_acquire(), timeout=10)


async def test_giving_up_the_wait_releases_the_lock(store: EventStore, locks: list[LeaderLock]):
    leader, rival = lock_on(store, locks), lock_on(store, locks)
    async with reservation_in_flight(store):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(leader.try_acquire(), timeout=0.3)
        assert not await leader.held()
        rivalling = asyncio.create_task(rival.try_acquire())
        await asyncio.sleep(0.2)
        assert not rivalling.done()  # it got the lock, and waits for the same reservation
    assert await asyncio.wait_for(rivalling, timeout=10)


async def test_a_reservation_in_flight_at_the_takeover_is_seen_by_the_new_leader(
    store: EventStore, migrated_url: str, locks: list[LeaderLock], monkeypatch: pytest.MonkeyPatch
):
    """The former leader passed its fence check, then lost the lock before committing: the new
    leader's acquisition ends only after that commit, so its first read of the log has it."""
    from shared.store import fence as fences

    await seed(store, applied("p", {"nodes": "5"}))
    gate, checked = asyncio.Event(), asyncio.Event()
    check = fences.fence_holds

    async def check_and_hold(raw, fence):
        held = await check(raw, fence)
        checked.set()
        await gate.wait()
        return held

    monkeypatch.setattr(fences, "fence_holds", check_and_hold)
    former_store = EventStore.connect(migrated_url)
    try:
        former, successor = lock_on(former_store, locks), lock_on(store, locks)
        assert await former.try_acquire()
        in_flight = asyncio.create_task(reserve(former_store, "late", former.fence))
        await asyncio.wait_for(checked.wait(), timeout=10)
        async with store.driver_connection() as raw:
            await raw.fetchval("SELECT pg_terminate_backend($1)", former.fence.pid)
        taking_over = asyncio.create_task(successor.try_acquire())
        await asyncio.sleep(0.5)
        assert not taking_over.done()
        gate.set()
        await asyncio.wait_for(in_flight, timeout=10)
        assert await asyncio.wait_for(taking_over, timeout=10)
        assert await store.stream_version("nodeclaim-late") == 1
        with pytest.raises(NotLeader):
            await reserve(former_store, "later", former.fence)
    finally:
        gate.set()
        await former_store.close()


async def test_a_former_leaders_reservation_during_the_takeover_waits_and_is_refused(
    store: EventStore, locks: list[LeaderLock]
):
    """It asks for the companion key shared while the new leader waits for it exclusively: it
    queues behind, and checks the leader lock only once the new leader holds both."""
    await seed(store, applied("p", {"nodes": "5"}))
    former, successor = lock_on(store, locks), lock_on(store, locks)
    assert await former.try_acquire()
    async with reservation_in_flight(store):
        await former.release()
        taking_over = asyncio.create_task(successor.try_acquire())
        await wait_for_waiters(store, 1)
        late = asyncio.create_task(reserve(store, "late", former.fence))
        await wait_for_waiters(store, 2)
        await asyncio.sleep(0.2)
        assert not late.done()
        assert not taking_over.done()
    assert await asyncio.wait_for(taking_over, timeout=10)
    with pytest.raises(NotLeader):
        await asyncio.wait_for(late, timeout=10)
    assert await store.stream_version("nodeclaim-late") == 0


async def test_a_lock_connection_that_breaks_is_not_held(store: EventStore, locks: list[LeaderLock]):
    lock = lock_on(store, locks)
    assert await lock.try_acquire()
    async with store.driver_connection() as raw:
        await raw.fetchval("SELECT pg_terminate_backend($1)", lock.fence.pid)
    for _ in range(100):
        if not await lock.held():
            break
        await asyncio.sleep(0.01)
    assert not await lock.held()
    await lock.release()  # a broken connection closes quietly
    assert await lock.try_acquire()


@pytest.mark.parametrize("key", [KEY, HIGH_BIT_KEY, 0, -1, 2**63 - 1, -(2**63)])
def test_a_companion_key_is_another_signed_64_bit_key(key: int):
    companion = companion_key(key)
    assert -(2**63) <= companion < 2**63
    assert companion != key
    assert companion_key(companion) == key  # so no two leader keys share one
    assert Fence(key, 1, 0).companion == LeaderLock(None, key).companion == companion  # type: ignore[arg-type]


def test_a_key_is_a_signed_64_bit_integer():
    with pytest.raises(ValueError, match="64-bit"):
        LeaderLock(None, 2**63)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="64-bit"):
        LeaderLock(None, -(2**63) - 1)  # type: ignore[arg-type]


async def test_a_database_out_of_reach_is_the_callers_to_see(
    store: EventStore, locks: list[LeaderLock], monkeypatch: pytest.MonkeyPatch
):
    """A database out of reach is the caller's to see; the half-made session is closed."""
    lock = lock_on(store, locks)

    async def unreachable() -> asyncpg.Connection:
        raise OSError("connection refused")

    monkeypatch.setattr(store, "session_connection", unreachable)
    with pytest.raises(OSError):
        await lock.try_acquire()
    assert not await lock.held()
