"""A leader's ledger: what one leading replica appends and how far its projection must come.

The scheduler and disruption lead by an advisory lock (`shared.store.leader`); every write they
make while leading goes through this one object, which their helpers receive instead of the
whole service: the fenced appends and reservations (refused with `NotLeader` once the lock is
lost), `appended` (the last position its own appends reached), `reach` (the projection holds
them before the next decision), `take_over` (a new leader's projection reaches the log's head)
and the lock's check cadence (`check`: a leader with nothing to do still steps down soon).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from shared.bus.projection import ProjectionConsumer
from shared.events.contracts import DisruptionDecided, NodeClaimCreated
from shared.events.envelope import NewEvent
from shared.store.errors import NotLeader
from shared.store.eventstore import EventStore
from shared.store.fence import Fence
from shared.store.leader import LeaderLock
from shared.store.plan import Result
from shared.store.units import Unit

LOCK_CHECK_SECONDS = 2.0
"""How often a leader asks PostgreSQL whether it still holds the lock, whatever it is doing."""


class Ledger:
    def __init__(
        self,
        store: EventStore,
        lock: LeaderLock,
        consumer: ProjectionConsumer,
        *,
        producer: str,
        check_every: float = LOCK_CHECK_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.lock, self.consumer, self.producer = store, lock, consumer, producer
        self.check_every, self.monotonic = check_every, monotonic
        self.appended = 0
        """The last position this leader's own appends reached."""
        self._checked = monotonic()

    @property
    def fence(self) -> Fence:
        return self.lock.fence

    def wrote(self, positions: Iterable[int]) -> None:
        """Positions an append returned: the projection must reach them (`reach`)."""
        self.appended = max(self.appended, *positions, 0)

    async def take_over(self) -> None:
        """A new leader plans on a projection holding every append of the leaders before it:
        the lock waited for those in flight, so the log's head covers them."""
        self._checked = self.monotonic()
        await self.consumer.reach(await self.store.head_position())

    async def reach(self) -> None:
        """Once every one of this leader's own appends is in its projection."""
        await self.consumer.reach(self.appended)

    async def check(self) -> None:
        """`NotLeader` when the lock is lost; asks at most every `check_every` seconds."""
        if self.monotonic() < self._checked + self.check_every:
            return
        self._checked = self.monotonic()
        if not await self.lock.held():
            raise NotLeader(self.lock.fence)

    # --- writes ----------------------------------------------------------------------------------

    async def append_unit(self, appends: Unit) -> list[int]:
        """All or nothing, fenced."""
        positions = await self.store.append_unit(appends, fence=self.fence)
        self.wrote(positions)
        return positions

    async def append_units(self, units: Sequence[Unit], *, fenced: bool = True) -> list[Result]:
        """One transaction; each unit its positions or its own error. Unfenced for the facts a
        step implies whoever records them (ids of their own make them once in the log)."""
        results = await self.store.append_units(units, fence=self.fence if fenced else None)
        for result in results:
            if not isinstance(result, BaseException) and result:
                self.wrote(result)
        return results

    async def append(self, stream_id: str, expected_version: int | None, events: Sequence[NewEvent]) -> list[int]:
        """One stream, unfenced: the facts a step implies, whoever records them (ids of their
        own make them once in the log)."""
        positions = await self.store.append(stream_id, expected_version, events)
        self.wrote(positions)
        return positions

    async def reserve_launch(self, claims: Sequence[NodeClaimCreated], *, occurred_at: datetime) -> list[int]:
        positions = await self.store.reserve_launch(
            claims, occurred_at=occurred_at, producer=self.producer, fence=self.fence
        )
        self.wrote(positions)
        return positions

    async def reserve_disruption(
        self, decided: DisruptionDecided, *, occurred_at: datetime, parts: Sequence[DisruptionDecided] = ()
    ) -> list[int]:
        positions = await self.store.reserve_disruption(
            decided, occurred_at=occurred_at, producer=self.producer, fence=self.fence, parts=parts
        )
        self.wrote(positions)
        return positions
