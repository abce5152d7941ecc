"""Gaps in the log's positions: still being written, or lost for good.

Positions come from a sequence, and concurrent transactions commit in any order, so a reader
can see position 11 while 10 is still uncommitted (or will never commit: its transaction rolled
back). A reader that must not skip anything, the outbox relay, waits at the first gap.

The gap settles by PostgreSQL's transaction ids. Every append takes its transaction id before
it draws a position (`eventstore`), so when a reader sees a committed position above the gap,
the gap's writer already had an id, below any id assigned afterwards. The reader draws one such
id, its horizon (`xid_horizon`); once the oldest running transaction (`xmin`) is at or past it,
the writer has ended: the position is either visible now or never will be.

A snapshot's `xmax` is no horizon: it is one past the newest *completed* id, and a transaction
that took its id after that one completed runs at or above it, outside the snapshot's `xmin`.
"""

from __future__ import annotations

import asyncpg

from shared.store.eventstore import EventStore

_HORIZON = "SELECT pg_current_xact_id()::text::bigint"
_SETTLED = (
    "SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::bigint::text::xid8,"
    " EXISTS (SELECT 1 FROM events WHERE position = $2)"
)


async def xid_horizon(raw: asyncpg.Connection) -> int:
    """A transaction id above every one assigned so far: a fresh one, committed at once (so
    call it outside a transaction). Costs one id, which only a gap in the log spends."""
    return int(await raw.fetchval(_HORIZON))


class GapWatch:
    """Tracks the first missing position a reader is waiting on."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.position: int | None = None
        self._horizon = 0

    async def lost(self, position: int) -> bool:
        """Whether `position`, missing below a committed one, will never appear. False while
        its writer may still commit (ask again later) or once it has appeared (read again)."""
        async with self.store.driver_connection() as raw:
            if self.position != position:
                self.position, self._horizon = position, await xid_horizon(raw)
            settled, present = await raw.fetchrow(_SETTLED, self._horizon, position)
        if not settled:
            return False
        self.position = None
        return not present
