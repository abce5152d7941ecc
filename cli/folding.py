"""The database's log folded for `audit` and `replay --at`, split over processes by NodePool.

Counters never cross pools, so each partition of the pools folds on its own core: forked workers,
each with its own connection, read only their pools' events (`events.nodepool`). `Replay.joined`
puts the parts together, unless they may have touched each other's claims (possible only in a
log that is already wrong); then one sequential fold gives the exact answer.

An audit also checks the hash chain on the rows each part reads (`shared.policy.chain.LogChain`):
no second pass over the log. The events no part folds are read for the chain alone, meanwhile.
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
from shared.policy.chain import ChainPart, ChainSpec, LogChain
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
    chain: ChainSpec | None = None,
) -> tuple[Replay, list[ChainPart]]:
    """The replay of the whole log and, given `chain`, what each part found of the hash chain.
    `sizes` (events per pool, e.g. the counter rows' versions) balances the partitions; `workers`
    defaults to the cores this process may use; with `snapshot` (`EventStore.exported_snapshot`),
    every process reads the log as of that instant."""
    partitions = split_pools(sizes, workers or available_cores())
    reads = _reads(until, explain, snapshot, chain)
    with _no_collector():
        if len(partitions) > 1:
            joined = await _fold_split(store, url, partitions, reads, explain, chain)
            if joined is not None:
                return joined
        checking = chain.start() if chain is not None else None
        replay = await _fold(store.log_entries(**reads), Replay(explain=explain), checking)
        return replay, [checking.part()] if checking is not None else []


def _reads(
    until: datetime | None, explain: str | None, snapshot: str | None, chain: ChainSpec | None
) -> dict[str, Any]:
    """`until` applied by PostgreSQL; decision times decoded only where a rule or the story reads
    them; the chain's columns for an audit, the signatures when it has the key."""
    return {
        "until": until,
        "timed": None if explain else TIMED_EVENTS,
        "snapshot": snapshot,
        "chain": chain is not None,
        "signed": chain is not None and chain.signer is not None,
    }


async def _fold_split(
    store: EventStore,
    url: str,
    partitions: list[Partition],
    reads: dict[str, Any],
    explain: str | None,
    chain: ChainSpec | None,
) -> tuple[Replay, list[ChainPart]] | None:
    context = multiprocessing.get_context("fork")  # the workers inherit the loaded code: no imports to wait for
    workers = ProcessPoolExecutor(len(partitions) - 1, mp_context=context)
    if chain is None:
        uncounted = asyncio.ensure_future(_uncounted(store, reads))
    else:
        uncounted = asyncio.ensure_future(_unfolded(store, reads["snapshot"], chain))
    try:
        running = asyncio.get_running_loop()
        others = [
            running.run_in_executor(workers, _fold_partition, url, partition, reads, explain, chain)
            for partition in partitions[1:]
        ]
        checking = chain.start() if chain is not None else None
        mine = await _fold(
            store.log_entries(partition=partitions[0], **reads), Replay(explain=explain, mentioned=set()), checking
        )
        parts: list[tuple[Replay, Sequence[str], ChainPart | None]] = [
            (mine, list(mine.claims), checking.part() if checking is not None else None),
            *await asyncio.gather(*others),
        ]
        tally, rest = await uncounted  # counted meanwhile (and, for an audit, checked)
    except BaseException:
        uncounted.cancel()
        workers.shutdown(wait=False, cancel_futures=True)  # never block the loop on the others
        raise
    workers.shutdown()
    joined = Replay.joined([part for part, _, _ in parts], [claims for _, claims, _ in parts], tally)
    if joined is None:
        return None
    found = [found for _, _, found in parts if found is not None]
    return joined, [*found, rest] if rest is not None else found


async def _uncounted(store: EventStore, reads: dict[str, Any]) -> tuple[tuple[int, int], ChainPart | None]:
    """The events no part folds, counted by PostgreSQL."""
    return await store.uncounted(reads["until"], snapshot=reads["snapshot"]), None


async def _unfolded(
    store: EventStore, snapshot: str | None, chain: ChainSpec
) -> tuple[tuple[int, int], ChainPart | None]:
    """The events no part folds, counted and their chain checked (an audit has no `until`)."""
    checking = chain.start()
    count = last = 0
    async for page in store.unfolded(snapshot=snapshot, signed=chain.signer is not None):
        checking.feed(page)
        count += len(page)
        last = page[-1][0]
    return (count, last), checking.part()


def _fold_partition(
    url: str, partition: Partition, reads: dict[str, Any], explain: str | None, chain: ChainSpec | None
) -> tuple[Replay, list[str], ChainPart | None]:
    """A worker's share: its fold without what cannot or need not cross a process boundary."""

    async def fold() -> tuple[Replay, list[str], ChainPart | None]:
        store = EventStore.connect(url, pool_size=1)
        checking = chain.start() if chain is not None else None
        try:
            replay = await _fold(
                store.log_entries(partition=partition, **reads), Replay(explain=explain, mentioned=set()), checking
            )
        finally:
            await store.close()
        return replay.detached(), list(replay.claims), checking.part() if checking is not None else None

    return loop.run(fold())


async def _fold(pages: AsyncIterator[Sequence[Sequence[Any]]], replay: Replay, chain: LogChain | None) -> Replay:
    # fetch the next page while this one is folded: PostgreSQL works on another core meanwhile
    upcoming = asyncio.ensure_future(anext(pages, None))
    while (page := await upcoming) is not None:
        upcoming = asyncio.ensure_future(anext(pages, None))
        replay.feed(page)
        if chain is not None:
            chain.feed(page)
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
