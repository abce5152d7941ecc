"""The failures a service rides out by waiting: a server restarting or out of reach.

Anything else is a bug or a refusal, and is handled where it happens. One tuple, so every shell
agrees on what "wait and try again" means.
"""

from __future__ import annotations

import asyncio
import contextlib

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
