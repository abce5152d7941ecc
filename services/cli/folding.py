"""The database's log folded for `audit` and `replay --at`, split over processes by NodePool.

Counters never cross pools, so each partition of the pools folds on its own core: forked workers,
each with its own connection, read only their pools' events (`events.nodepool`). `Replay.joined`
puts the parts together, unless they may have touched each other's claims (possible only in a
log that is already wrong); then one sequential fold gives the exact answer.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from shared.policy.audit import Partition, Replay, split_pools
from shared.policy.counters import TIMED_EVENTS
from shared.runtime import loop
from shared.store.eventstore import EventStore


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


async def fold_log(
    store: EventStore,
    url: str,
    sizes: dict[str, int],
    *,
    until: datetime | None = None,
    explain: str | None = None,
    workers: int | None = None,
    snapshot: str | None = None,
) -> Replay:
    """The replay of the whole log. `sizes` (events per pool, e.g. the counter rows' versions)
    balances the partitions; `workers` defaults to the cores this process may use; with
    `snapshot` (`EventStore.exported_snapshot`), every process reads the log as of that instant."""
    partitions = split_pools(sizes, workers or available_cores())
    reads = _reads(until, explain, snapshot)
    with _no_collector():
        if len(partitions) > 1:
            joined = await _fold_split(store, url, partitions, reads, explain)
            if joined is not None:
                return joined
        return await _fold(store.log_entries(**reads), Replay(explain=explain))


def _reads(until: datetime | None, explain: str | None, snapshot: str | None) -> dict[str, Any]:
    """`until` applied by PostgreSQL; decision times decoded only where a rule or the story reads them."""
    return {"until": until, "timed": None if explain else TIMED_EVENTS, "snapshot": snapshot}


async def _fold_split(
    store: EventStore, url: str, partitions: list[Partition], reads: dict[str, Any], explain: str | None
) -> Replay | None:
    context = multiprocessing.get_context("fork")  # the workers inherit the loaded code: no imports to wait for
    workers = ProcessPoolExecutor(len(partitions) - 1, mp_context=context)
    uncounted = asyncio.ensure_future(store.uncounted(reads["until"], snapshot=reads["snapshot"]))
    try:
        running = asyncio.get_running_loop()
        others = [
            running.run_in_executor(workers, _fold_partition, url, partition, reads, explain)
            for partition in partitions[1:]
        ]
        mine = await _fold(
            store.log_entries(partition=partitions[0], **reads), Replay(explain=explain, mentioned=set())
        )
        parts: list[tuple[Replay, Sequence[str]]] = [(mine, list(mine.claims)), *await asyncio.gather(*others)]
        tally = await uncounted  # counted by PostgreSQL meanwhile
    except BaseException:
        uncounted.cancel()
        workers.shutdown(wait=False, cancel_futures=True)  # never block the loop on the others
        raise
    workers.shutdown()
    return Replay.joined([part for part, _ in parts], [claims for _, claims in parts], tally)


def _fold_partition(
    url: str, partition: Partition, reads: dict[str, Any], explain: str | None
) -> tuple[Replay, list[str]]:
    """A worker's share: its fold without what cannot or need not cross a process boundary."""

    async def fold() -> tuple[Replay, list[str]]:
        store = EventStore.connect(url, pool_size=1)
        try:
            replay = await _fold(
                store.log_entries(partition=partition, **reads), Replay(explain=explain, mentioned=set())
            )
        finally:
            await store.close()
        return replay.detached(), list(replay.claims)

    return loop.run(fold())


async def _fold(pages: AsyncIterator[Sequence[Sequence[Any]]], replay: Replay) -> Replay:
    # fetch the next page while this one is folded: PostgreSQL works on another core meanwhile
    upcoming = asyncio.ensure_future(anext(pages, None))
    while (page := await upcoming) is not None:
        upcoming = asyncio.ensure_future(anext(pages, None))
        replay.feed(page)
    return replay


@contextmanager
def _no_collector() -> Iterator[None]:
    """The fold makes millions of objects and no cycles: collections only cost time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
