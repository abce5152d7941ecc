"""A leader's ledger against a real PostgreSQL: its writes are fenced by the lock it leads by,
`appended` follows every position its own appends reached, `reach` asks the projection for
exactly that, and the lock is checked no more often than its cadence."""

from __future__ import annotations

import pytest

from shared.runtime.ledger import Ledger
from shared.store.eventstore import EventStore, NotLeader, unit
from shared.store.leader import LeaderLock
from tests.factories import T0, applied, created, new

KEY = 0x6E77_6C65_6467  # "nwledg"


class Projection:
    """What the ledger asks of a projection consumer: the positions it was told to reach."""

    def __init__(self) -> None:
        self.reached: list[int] = []

    async def reach(self, position: int) -> None:
        self.reached.append(position)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def leading(store: EventStore):
    lock = LeaderLock(store, KEY)
    assert await lock.try_acquire()
    projection, clock = Projection(), Clock()
    ledger = Ledger(store, lock, projection, producer="scheduler", check_every=2.0, monotonic=clock)  # type: ignore[arg-type]
    yield ledger, lock, projection, clock
    await lock.release()


async def test_appends_move_appended_and_reach_asks_for_it(store: EventStore, leading):
    ledger, _, projection, _ = leading
    pool = applied("p")
    await store.append(pool.stream_id, None, [new(pool)])
    launched = await ledger.reserve_launch([created("c1", "p")], occurred_at=T0)
    assert ledger.appended == max(launched) == await store.head_position()
    other = applied("q")
    (result,) = await ledger.append_units([unit(other.stream_id, None, [new(other)])])
    assert ledger.appended == max(result) > max(launched)
    await ledger.reach()
    await ledger.take_over()
    assert projection.reached == [ledger.appended, await store.head_position()]


async def test_a_refused_unit_moves_nothing(store: EventStore, leading):
    ledger, *_ = leading
    pool = applied("p")
    before = ledger.appended
    (refused,) = await ledger.append_units([unit(pool.stream_id, 7, [new(pool)])])  # the stream is not at 7
    assert isinstance(refused, BaseException) and ledger.appended == before


async def test_a_ledger_whose_lock_was_lost_can_write_nothing_fenced(store: EventStore, leading):
    ledger, lock, _, clock = leading
    pool = applied("p")
    await store.append(pool.stream_id, None, [new(pool)])
    await lock.release()
    head = await store.head_position()
    with pytest.raises(NotLeader):
        await ledger.reserve_launch([created("c1", "p")], occurred_at=T0)
    other = applied("q")
    with pytest.raises(NotLeader):
        await ledger.append_units([unit(other.stream_id, None, [new(other)])])
    assert await store.head_position() == head
    await ledger.check()  # within the cadence: not asked yet
    clock.now += 2.0
    with pytest.raises(NotLeader):
        await ledger.check()
