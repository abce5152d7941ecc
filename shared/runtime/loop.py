"""The event loop every nodewright process runs on.

uvloop where it is installed (Linux and macOS): the store's micro-batched appends spend about a
fifth of their client time in the loop and its transports, and uvloop roughly halves that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

try:
    import uvloop
except ImportError:  # pragma: no cover - Windows
    uvloop = None


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion and return its result.

    The result travels beside the main task, not as its result: on the way out, Python 3.11's
    `asyncio.Runner` formats the SIGINT handler it installed, which holds the main task, and so
    the task's result with it, in full. For an audit of a million events (a replay holding
    every claim) that cost seconds, twice."""
    result: list[T] = []

    async def main_task() -> None:
        result.append(await main)

    if uvloop is None:  # pragma: no cover
        asyncio.run(main_task())
    else:
        uvloop.run(main_task())
    return result[0]
