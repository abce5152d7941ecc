"""The event store in memory, for the offline runner: one process, one writer, no database.

It is the real `EventStore` with only its transaction swapped: every append is planned by the
store's own pure `plan` (`shared.store.plan`, the limit, budget and node-limit checks the
audit replays), against the counters this object keeps, and each event written is handed at
once, in position order, to the projections that follow the log (`follow`). So a reservation
the services would refuse is refused here for the same reason, and nothing waits on a bus.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any

from shared.events.envelope import RecordedEvent
from shared.policy.counters import ClaimState, PoolCounters
from shared.store.eventstore import EventStore
from shared.store.fence import Fence
from shared.store.plan import Result, TooOld, plan
from shared.store.snapshot import Snapshot, Source, needs
from shared.store.units import Unit

FENCE = Fence(key=0, pid=0, nonce=0)
"""The one writer's fence: nobody else can lead in a process of one."""


class MemoryStore(EventStore):
    def __init__(self) -> None:
        super().__init__("postgresql://memory/whatif")
        self.log: list[RecordedEvent] = []
        self.pools: dict[str, PoolCounters] = {}
        self.claims: dict[str, ClaimState] = {}
        self.heads: dict[str, int] = {}
        self.ids: dict[uuid.UUID, int] = {}
        self.followers: list[Callable[[RecordedEvent], None]] = []

    def follow(self, apply: Callable[[RecordedEvent], None]) -> None:
        """`apply` sees every event appended from now on, in position order."""
        self.followers.append(apply)

    def driver_connection(self) -> AbstractAsyncContextManager[Any]:
        return _no_connection()

    async def close(self) -> None:
        return None

    async def head_position(self) -> int:
        return len(self.log)

    async def counters(self, nodepool: str | None = None, *, snapshot: str | None = None) -> dict[str, PoolCounters]:
        names = sorted(self.pools) if nodepool is None else [nodepool]
        return {n: self.pools[n].copy() for n in names if n in self.pools}

    async def _append_units(self, units: Sequence[Unit], fence: Fence | None) -> list[Result]:
        need = needs(units)
        for name in need.pools:
            self.pools.setdefault(name, PoolCounters(name))
        stored = {i: self.ids[i] for i in need.event_ids if i in self.ids}
        snapshot = Snapshot(Source.READ, self.pools, self.claims, self.heads, stored)
        planned = plan(units, snapshot)
        if isinstance(planned, TooOld):  # only a memory snapshot is ever too old
            raise AssertionError(planned.reason)
        positions: dict[uuid.UUID, int] = {}
        written: list[RecordedEvent] = []
        for row in planned.rows:
            position = len(self.log) + len(written) + 1
            positions[row.event.event_id] = position
            written.append(_recorded(row.event, row.version, row.data, position))
        self.pools.update(planned.pools)
        self.claims.update(planned.claims)
        self.heads.update(planned.heads)
        for event in written:
            self.log.append(event)
            self.ids[event.event_id] = event.position
            for apply in self.followers:
                apply(event)
        return planned.outcomes(positions)


def _recorded(event: Any, version: int, data: dict[str, Any], position: int) -> RecordedEvent:
    at: datetime = event.occurred_at
    return RecordedEvent(
        position=position,
        event_id=event.event_id,
        stream_id=event.stream_id,
        version=version,
        type=event.type,
        schema_version=event.schema_version,
        data=data,
        metadata=event.metadata,
        occurred_at=at,
        recorded_at=at,
    )


@asynccontextmanager
async def _no_connection() -> AsyncIterator[Any]:
    raise RuntimeError("the offline runner's store has no database: nothing may read it through a connection")
    yield  # pragma: no cover
