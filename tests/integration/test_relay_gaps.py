"""A gap in the positions settles by transaction ids: never while its writer may still commit,
even when that writer took its id after the writer of the later, committed position."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from shared.store.eventstore import EventStore
from shared.store.gaps import GapWatch
from tests.factories import insert_applied


async def test_a_gap_whose_writer_is_younger_than_the_committed_position_is_not_lost(store: EventStore):
    """The later position's writer took its id first, so the gap's writer runs at or above the
    `xmax` of any snapshot taken now: a horizon from `xmax` would call the gap lost at once."""
    watch = GapWatch(store)
    async with store.driver_connection() as early, store.driver_connection() as slow:
        first, second = early.transaction(), slow.transaction()
        await first.start()
        await early.fetchval("SELECT pg_current_xact_id()")
        await second.start()
        await slow.fetchval("SELECT pg_current_xact_id()")
        gap = await insert_applied(slow, "slow")
        after = await insert_applied(early, "early")
        await first.commit()
        assert after > gap
        assert not await watch.lost(gap)
        assert not await watch.lost(gap)  # asked again: still running
        await second.rollback()
    assert await eventually(lambda: watch.lost(gap))


async def eventually(check: Callable[[], Awaitable[bool]]) -> bool:
    """Transaction ids are the server's: a transaction of another database, as old as the gap's
    writer, also holds the horizon back for a moment."""
    for _ in range(500):
        if await check():
            return True
        await asyncio.sleep(0.01)
    return False
