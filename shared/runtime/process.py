"""Running one service as an OS process: stop cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

from shared.runtime import loop


def serve(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `main(stopping)` until it returns; a signal sets `stopping` so it can finish its work."""

    async def run() -> None:
        stopping = asyncio.Event()
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stopping.set)
        await main(stopping)

    loop.run(run())
