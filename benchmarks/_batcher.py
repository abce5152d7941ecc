"""Micro-batching for the store benchmarks: many concurrent appends, few transactions.

No service needs it (each batches what it has: the watcher a watch's changes, the scheduler its
lifecycle steps, with `EventStore.append_units`), so it lives beside the benchmark that drives
the store as a busy deployment would.

Callers await `append_unit` as if alone; the batcher gathers whatever arrives while the previous
transaction is in flight (up to `max_batch` units) and commits them together. Each unit keeps
its own result: a refused reservation fails alone.

Flushers share the work by NodePool: a unit goes to the flusher that owns its (first) pool, or
its stream when it counts in none. Two flushers then never wait on each other's counter-row
locks, so one checks its batch while another's commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import Sequence

from shared.events.envelope import NewEvent
from shared.policy.counters import counted_pool
from shared.store.eventstore import Append, EventStore, Unit, unit


class AppendBatcher:
    def __init__(self, store: EventStore, *, max_batch: int = 500, flushers: int = 2) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queues: list[asyncio.Queue[tuple[Unit, asyncio.Future[list[int]]]]] = [
            asyncio.Queue() for _ in range(flushers)
        ]
        self._tasks = [asyncio.create_task(self._flush_forever(q)) for q in self._queues]
        self.transactions = 0
        self._owners: dict[str, int] = {}  # pool -> its flusher

    async def append(self, stream_id: str, expected_version: int | None, events: Sequence[NewEvent]) -> list[int]:
        return await self.append_unit(unit(stream_id, expected_version, events))

    async def append_unit(self, appends: Sequence[Append]) -> list[int]:
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queues[self._owner(appends)].put_nowait((appends, future))
        return await future

    def _owner(self, appends: Sequence[Append]) -> int:
        pools = [p for a in appends for e in a.events if (p := counted_pool(e.type, e.data))]
        if not pools:
            return zlib.crc32(appends[0].stream_id.encode()) % len(self._queues)
        key = min(pools)
        owner = self._owners.get(key)
        if owner is None:
            owner = self._owners[key] = zlib.crc32(key.encode()) % len(self._queues)
        return owner

    async def _flush_forever(self, queue: asyncio.Queue[tuple[Unit, asyncio.Future[list[int]]]]) -> None:
        while True:
            first = await queue.get()
            batch = [first]
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            try:
                results = await self.store.append_units([u for u, _ in batch])
            except Exception as exc:  # the transaction failed as a whole: every caller hears why
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.transactions += 1
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
