"""One replica leads, the others wait to take over: the loop the scheduler and disruption share.

A replica tries the leader lock once a second; holding it, it takes over (its projection reaches
the log's head, so it holds every reservation of the leaders before it) and follows until the
lock is lost (`NotLeader`, from a check or a fenced append) or a server is out of reach (it then
stands down, so a replica that can reach both may lead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import structlog
from prometheus_client import Gauge

from shared.bus.projection import ProjectionConsumer
from shared.outages import OUTAGES
from shared.store.errors import NotLeader, StoreError
from shared.store.leader import LeaderLock

TICK_SECONDS = 0.05
"""The longest a leader's loop sleeps without a change: its timers are on the (possibly
accelerated) clock. A change to the projection wakes it at once."""


async def lead(
    lock: LeaderLock,
    gauge: Gauge,
    stopping: asyncio.Event,
    take_over: Callable[[], Awaitable[None]],
    follow: Callable[[asyncio.Event], Awaitable[None]],
    log: logging.Logger | structlog.stdlib.BoundLogger,
) -> None:
    """Lead whenever the lock is ours, until `stopping`; the lock is released on the way out."""
    try:
        while not stopping.is_set():
            try:
                leading = await lock.try_acquire()
            except (StoreError, *OUTAGES) as exc:
                log.warning("leader lock out of reach (%r)", exc)
                leading = False
            gauge.set(1 if leading else 0)
            if leading:
                try:
                    await take_over()
                    await follow(stopping)
                except NotLeader as exc:  # the lock was lost, or the store refused a fenced append
                    log.warning("%s: following again", exc)
                except OUTAGES as exc:
                    log.warning("a server is out of reach (%r): standing down for now", exc)
                    await lock.release()
                gauge.set(0)
            await wait(stopping, 1.0)
    finally:
        gauge.set(0)
        await lock.release()


async def quiet(consumer: ProjectionConsumer, stopping: asyncio.Event) -> None:
    """Until the projection changes, `stopping`, or the next look at the timers."""
    consumer.changed.clear()
    waits = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(consumer.changed.wait())]
    try:
        await asyncio.wait(waits, timeout=TICK_SECONDS, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def wait(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
