"""The failures a service rides out by waiting: a server restarting or out of reach.

Anything else is a bug or a refusal, and is handled where it happens. One tuple, so every shell
agrees on what "wait and try again" means.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

import asyncpg
import nats.errors

OUTAGES: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.TooManyConnectionsError,
    nats.errors.Error,
)


T = TypeVar("T")


def is_outage(exc: BaseException) -> bool:
    return isinstance(exc, OUTAGES)


class Backoff:
    """Waits that double from `first` to `most` seconds; `reset` after a success."""

    def __init__(self, first: float = 0.25, most: float = 5.0) -> None:
        self.first, self.most = first, most
        self.next = first

    def reset(self) -> None:
        self.next = self.first

    async def wait(self, stopping: asyncio.Event | None = None) -> None:
        seconds, self.next = self.next, min(self.next * 2, self.most)
        if stopping is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), seconds)


async def unless_stopping(work: Awaitable[T], stopping: asyncio.Event | None) -> T | None:
    """`work`'s result, or None when `stopping` is set first (`work` is then cancelled). A NATS
    connection that retries for ever while the server is out of reach never returns by itself:
    without this, SIGTERM would wait for the server."""
    if stopping is None:
        return await work
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, *OUTAGES):
                await task
    return None if task.cancelled() else task.result()
